"""The CPU selection steps (numpy, split by rows over threads) against the torch expressions they stand for."""

from __future__ import annotations

import multiprocessing as mp
import platform

import numpy as np
import pytest
import torch

from beyondlabels.functional import _select

# 600 x 400 = 240,000 elements: above the parallel threshold, so two threads split the rows.
SHAPES = [(3, 5), (600, 400)]


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def tied_scores(shape, seed):
    """fp32 scores with many exact ties (values on a coarse grid) and both signed zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-20, 21, shape, generator=g).to(torch.float32) / 8
    x[x == 0] = torch.where(torch.rand(int((x == 0).sum()), generator=g) < 0.5, -0.0, 0.0)
    return x


def distinct_keys(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(shape[0] * shape[1], generator=g).view(shape).to(torch.int64) * 7919 - 2**40


@pytest.mark.parametrize("shape", SHAPES)
def test_comparison_masks_equal_torch(threads, shape):
    x = tied_scores(shape, 0)
    rows, cols = x[:, 0].clone(), x[0].clone()
    out = torch.empty(shape, dtype=torch.bool)
    assert torch.equal(_select.ge_rows(x, rows, out), torch.ge(x, rows.unsqueeze(1)))
    assert torch.equal(_select.ge_cols(x, cols, out), torch.ge(x, cols.unsqueeze(0)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("density", [0.0, 0.03, 1.0])
def test_flat_nonzero_equals_torch(threads, shape, density):
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(1)) < density
    got = _select.flat_nonzero(mask)
    assert got.dtype == torch.int64
    assert torch.equal(got, torch.nonzero(mask.reshape(-1)).flatten())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("make", [distinct_keys, tied_scores], ids=["int64-keys", "tied-fp32"])
def test_row_sorts_equal_torch(threads, shape, make):
    x = make(shape, 2)
    expected = torch.sort(x, dim=1, descending=True).values
    copy = x.clone()
    got = _select.sort_rows_descending(x)
    assert torch.equal(got, expected)  # -0.0 and 0.0 compare equal, as they do in the search
    assert torch.equal(x, copy)  # the input is left alone
    in_place = _select.sort_rows_descending(x, in_place=True)
    assert in_place.data_ptr() == x.data_ptr() and torch.equal(x, expected)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("k", [1, 3])
def test_top_rows_is_the_torch_top_set(threads, shape, k):
    keys = distinct_keys(shape, 3)
    got = torch.sort(_select.top_rows(keys, k), dim=1).values
    expected = torch.sort(torch.topk(keys, k, dim=1).values, dim=1).values
    assert torch.equal(got, expected)
    scores = tied_scores(shape, 4)  # with ties: the same multiset of values
    got = torch.sort(_select.top_rows(scores, k), dim=1).values
    assert torch.equal(got, torch.sort(torch.topk(scores, k, dim=1).values, dim=1).values)
    assert torch.equal(_select.top_rows(keys, shape[1]), keys)


@pytest.mark.parametrize("n_groups", [7, 40_000])  # int16 radix path and the general path
def test_stable_group_order_equals_a_stable_torch_sort(n_groups):
    groups = torch.randint(0, n_groups, (50_000,), generator=torch.Generator().manual_seed(5))
    assert torch.equal(_select.stable_group_order(groups, n_groups), torch.sort(groups, stable=True).indices)


def test_concurrently_runs_every_task_and_restores_the_thread_count(threads):
    done = []
    record = lambda: done.append(torch.get_num_threads())  # noqa: E731
    _select.concurrently([record, record], torch.device("cpu"))
    assert done == [max(1, threads // 2)] * 2  # the threads are split between the tasks meanwhile
    assert torch.get_num_threads() == threads

    def boom():
        raise RuntimeError("task failed")

    with pytest.raises(RuntimeError, match="task failed"):
        _select.concurrently([lambda: None, boom], torch.device("cpu"))
    assert torch.get_num_threads() == threads


def _nonzero_in_child(queue):
    # numpy only around the call: torch's own OpenMP regions are not safe in a forked child whatever this module does.
    torch.set_num_threads(2)
    mask = np.random.default_rng(6).random((600, 400)) < 0.1
    got = _select.flat_nonzero(torch.from_numpy(mask)).numpy()
    queue.put(bool(np.array_equal(got, np.flatnonzero(mask))))


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs the fork start method")
def test_a_forked_child_gets_its_own_thread_pool():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _select.flat_nonzero(torch.ones(600, 400, dtype=torch.bool))  # the parent's pool now has threads
        ctx = mp.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_nonzero_in_child, args=(queue,))
        child.start()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            pytest.fail("the forked child hung on the inherited thread pool")
        assert child.exitcode == 0 and queue.get(timeout=5) is True
    finally:
        torch.set_num_threads(before)


def test_release_free_memory_uses_malloc_trim_on_glibc():
    if platform.libc_ver()[0] == "glibc":
        assert _select._malloc_trim is not None  # the trim the search relies on for its memory bound
    _select.release_free_memory(torch.device("cpu"))
    _select.release_free_memory(torch.device("meta"))  # nothing to do off the CPU
