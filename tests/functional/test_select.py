"""The CPU selection steps (numpy, split by rows over threads) against the torch expressions they stand for."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from beyondlabels._internal import memory
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


def reaching_oracle(x, row_bound, col_bound):
    """Flat positions by a plain loop over the entries (numpy scalars compare IEEE-wise: -0.0 >= 0.0 holds)."""
    a = x.numpy()
    by_row = [i * a.shape[1] + j for i in range(a.shape[0]) for j in range(a.shape[1]) if a[i, j] >= row_bound[i]]
    by_col = [i * a.shape[1] + j for i in range(a.shape[0]) for j in range(a.shape[1]) if a[i, j] >= col_bound[j]]
    return torch.tensor(by_row, dtype=torch.int64), torch.tensor(by_col, dtype=torch.int64)


@pytest.mark.parametrize("shape", [(3, 5), (37, 29)])
@pytest.mark.parametrize(
    "tile_bytes", [4 * 5, 4 * 29 * 4, 1 << 20], ids=["one-row-tiles", "four-row-tiles", "one-tile"]
)
def test_flat_reaching_finds_the_entries_at_or_above_each_bound(monkeypatch, threads, shape, tile_bytes):
    monkeypatch.setattr(_select, "_TILE_BYTES", tile_bytes)
    monkeypatch.setattr(_select, "_MIN_PARALLEL_ELEMENTS", 1)  # split even small matrices over the threads
    x = tied_scores(shape, 0)
    x[0, 0] = float("-inf")  # the excluded self of the search
    row_bound, col_bound = x[:, -1].clone(), x[-1].clone()
    row_bound[1] = torch.finfo(torch.float32).min  # every finite entry of the row reaches it
    want_rows, want_cols = reaching_oracle(x, row_bound, col_bound)

    def check(reaching, want):
        positions, values = reaching
        assert positions.dtype == torch.int64 and values.dtype == torch.float32
        assert torch.equal(positions, want)
        # Bitwise, so that -0.0 and 0.0 are told apart.
        assert torch.equal(values.view(torch.int32), x.reshape(-1)[want].view(torch.int32))

    by_row, by_col = _select.flat_reaching(x, row_bound, col_bound)
    check(by_row, want_rows)
    check(by_col, want_cols)
    only_rows = _select.flat_reaching(x, row_bound, None)
    check(only_rows[0], want_rows)
    assert only_rows[1] is None
    check(_select.flat_reaching(x, None, col_bound)[1], want_cols)
    # A non-contiguous matrix goes through torch, with the same answer.
    by_row_t, by_col_t = _select.flat_reaching(x.T.contiguous().T, row_bound, col_bound)
    check(by_row_t, want_rows)
    check(by_col_t, want_cols)


@pytest.mark.parametrize("rows", [4, 0], ids=["no-entry-reaching", "no-rows"])
def test_flat_reaching_with_nothing_found(rows):
    x = torch.zeros(rows, 6)
    for positions, values in _select.flat_reaching(x, torch.ones(rows), torch.ones(6)):
        assert positions.numel() == values.numel() == 0
        assert positions.dtype == torch.int64 and values.dtype == torch.float32


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


@pytest.mark.parametrize("path", ["numpy", "torch"])
def test_ragged_rows_and_put_ragged_against_a_loop(path, monkeypatch):
    """`ragged_rows` (the first ``counts[r]`` entries of each row of a strided view, row after row) and `put_ragged`
    (values written to ``out[r, start[r]:start[r] + counts[r]]``) against plain loops, on the numpy path and on the
    torch expression other devices take."""
    if path == "torch":
        monkeypatch.setattr(_select, "_on_cpu", lambda *tensors: False)
    g = torch.Generator().manual_seed(11)
    base = distinct_keys((40, 30), 6)
    view = base[:, :17]  # strided rows, as the candidate buffers' partial lists are
    counts = torch.randint(0, 18, (40,), generator=g)
    counts[:3] = torch.tensor([0, 17, 0])
    got = _select.ragged_rows(view, counts)
    expected = [int(view[r, j]) for r in range(40) for j in range(int(counts[r]))]
    assert got.tolist() == expected
    out = torch.full((40, 25), -1, dtype=torch.int64)
    start = torch.randint(0, 8, (40,), generator=g)
    _select.put_ragged(out, start, counts, got)
    loop = torch.full((40, 25), -1, dtype=torch.int64)
    values = iter(expected)
    for r in range(40):
        for j in range(int(start[r]), int(start[r] + counts[r])):
            loop[r, j] = next(values)
    assert torch.equal(out, loop)
    empty = torch.zeros(0, dtype=torch.int64)
    assert _select.ragged_rows(view[:0], empty).numel() == 0


CHILD = """
import json, os, sys, threading
os.sched_setaffinity(0, {cpus})
import numpy as np, torch
from beyondlabels.functional import _select
torch.set_num_threads({torch_threads})
scores = np.random.default_rng(7).random((600, 400), dtype=np.float32)
got = _select.flat_reaching(torch.from_numpy(scores), torch.full((600,), 0.5), None)[0][0].numpy()
workers = [t.name for t in threading.enumerate() if t.name.startswith("beyondlabels-select")]
print(json.dumps([_select.usable_cpus(), _select.worker_threads(), len(_select._row_slices(600, 240_000)), len(workers),
                  bool(np.array_equal(got, np.flatnonzero(scores >= np.float32(0.5))))]))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
@pytest.mark.parametrize(
    ("cpus", "torch_threads", "expected"), [({0}, 2, 1), ({0, 1}, 1, 1), ({0, 1}, 2, 2), ({0, 1}, 8, 2)]
)
def test_threads_follow_the_affinity_and_torch_thread_count(cpus, torch_threads, expected):
    """A scheduler's CPU affinity (a SLURM job given 1 of the machine's cores) caps the threads, as does torch's count
    (a fresh process per case: the affinity is set before torch starts its threads)."""
    if not cpus <= os.sched_getaffinity(0):
        pytest.skip(f"this machine does not offer CPUs {sorted(cpus)}")
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(cpus=sorted(cpus), torch_threads=torch_threads)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    usable, workers, slices, pool_threads, correct = json.loads(done.stdout.strip().splitlines()[-1])
    assert (usable, workers, slices) == (len(cpus), expected, expected) and correct
    assert pool_threads == expected - 1  # the calling thread does one slice itself


def test_the_search_leaves_torch_thread_settings_alone(monkeypatch):
    """The deep leave-one-out search (candidate lists, both sides of every block) and the row-slice steps never set
    torch's thread counts, which every thread of a user's process shares."""
    from beyondlabels.functional import _leave_one_out, embedding_retrieval_metrics

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(("set_num_threads", n)))
    monkeypatch.setattr(torch, "set_num_interop_threads", lambda n: calls.append(("set_num_interop_threads", n)))
    candidate_search = _leave_one_out._leave_one_out_candidates
    runs = []

    def counted(*args, **kwargs):
        runs.append(1)
        yield from candidate_search(*args, **kwargs)

    monkeypatch.setattr(_leave_one_out, "_leave_one_out_candidates", counted)
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(4000) % 40  # R = 100 of 4,000: deep enough for the candidate search
    x = torch.nn.functional.normalize(torch.randn(4000, 16, generator=g) + labels[:, None].float(), dim=1)
    before = torch.get_num_threads()
    out = embedding_retrieval_metrics(x, labels, ks=(1,), chunk_size=512)
    assert runs and calls == [] and torch.get_num_threads() == before and 0 <= float(out["r_precision"]) <= 1


def test_library_code_never_sets_process_wide_thread_counts():
    root = Path(__file__).resolve().parents[2]
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("src", "callbacks")
        for path in sorted((root / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"set_num(_interop)?_threads\(", line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []


def _nonzero_in_child(queue):
    # numpy only around the call: torch's own OpenMP regions are not safe in a forked child whatever this module does.
    torch.set_num_threads(2)
    scores = np.random.default_rng(6).random((600, 400), dtype=np.float32)
    got = _select.flat_reaching(torch.from_numpy(scores), torch.full((600,), 0.9), None)[0][0].numpy()
    queue.put(bool(np.array_equal(got, np.flatnonzero(scores >= np.float32(0.9)))))


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs the fork start method")
def test_a_forked_child_gets_its_own_thread_pool():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _select.flat_reaching(torch.ones(600, 400), torch.zeros(600), None)  # the parent's pool now has threads
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
        assert memory._malloc_trim is not None  # the trim the search relies on for its memory bound
    memory.release_free_memory(torch.device("cpu"))
    memory.release_free_memory(torch.device("meta"))  # nothing to do off the CPU
