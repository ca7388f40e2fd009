"""Leave-one-out search split between processes by slices of the symmetric blocks (an `exchange` between shares):
the rows of every share against a brute-force full sort and the single search, bit for bit, and every score
computed by one process only. The processes are threads here, meeting through an in-memory exchange."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import beyondlabels.functional._leave_one_out as kernel
import beyondlabels.functional._pair_shares as pairs
from beyondlabels.functional import aggregate_retrieval, embedding_retrieval_metrics, retrieval_per_query
from beyondlabels.functional.search import search_neighbors
from tests.functional.test_search_deep import collect, full_sort, planted
from tests.oracles.outputs import assert_same_outputs
from tests.oracles.retrieval_data import clustered


class _Hub:
    """What `world` threads pass each other: every call is a rendezvous of all of them."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=60)
        self.slots: list = [None] * world

    def swap(self, rank: int, value):
        self.slots[rank] = value
        self.barrier.wait()
        every = list(self.slots)
        self.barrier.wait()
        return every


class _ThreadExchange:
    def __init__(self, hub: _Hub, rank: int) -> None:
        self.hub, self.rank, self.world = hub, rank, hub.world

    def all_gather(self, value):
        return [v.clone() for v in self.hub.swap(self.rank, value)]

    def all_to_all(self, parts, shapes):
        every = self.hub.swap(self.rank, parts)
        got = [every[k][self.rank].clone() for k in range(self.world)]
        assert [tuple(g.shape) for g in got] == [tuple(s) for s in shapes]
        return got


def in_threads(world: int, work):
    """``work(rank, exchange)`` in ``world`` threads at once, results in rank order."""
    hub = _Hub(world)
    with ThreadPoolExecutor(world) as pool:
        futures = [pool.submit(work, rank, _ThreadExchange(hub, rank)) for rank in range(world)]
        return [f.result() for f in futures]


@pytest.fixture(scope="module")
def ties():
    g = planted(1500, 12, 6, seed=3, copies=200)
    return g, full_sort(g)


def _assert_rows_equal(g, depth, oracle, world, **kw):
    o_scores, o_idx = oracle
    found = in_threads(world, lambda r, ex: collect(g, depth, share=(r, world), exchange=ex, **kw))
    seen = set()
    for scores, indices in found:
        assert not seen & set(indices)
        seen |= set(indices)
        for row in indices:
            d = int(depth[row])
            np.testing.assert_array_equal(indices[row][:d].numpy(), o_idx[row, :d], err_msg=f"row {row}")
            np.testing.assert_array_equal(scores[row][:d].numpy().view(np.int32), o_scores[row, :d].view(np.int32))
    assert seen == set(range(g.shape[0]))


@pytest.mark.parametrize("lo, group", [(0, 256), (10, 256), (10, 4)])
def test_owners_merge_ragged_lists_as_numpy_sorts_them(lo, group, monkeypatch):
    """The owners' merge (`_merged`): only the keys a row holds cross, not the padding of its part (a process's
    part for an owner is the rows' counts, then their keys; the owner's own lists do not cross), and each owner's
    rows are the top ``depth`` of the union of every process's lists in descending order, ``_LOWEST_KEY`` after
    them, as numpy sorts them (the union laid out in one group of rows, or in groups of 4 rows, each as wide as its
    fullest row)."""
    monkeypatch.setattr(pairs, "_UNION_ROWS", group)
    world, rows_n, width, depth = 3, 50, 40, 25
    rng = np.random.default_rng(lo)
    # Every process's lists of the same rows: keys unique across processes (each pair is scored by one process),
    # some rows empty, some full, the rest in between.
    unique = rng.choice(2**40, world * rows_n * width, replace=False) - 2**39
    keys = torch.from_numpy(unique.reshape(world, rows_n, width))
    held = torch.from_numpy(rng.integers(0, width + 1, (world, rows_n)))
    held[:, :3], held[0, 3:6] = 0, width
    keys[torch.arange(width) >= held.unsqueeze(-1)] = kernel._LOWEST_KEY
    # Each owner's rows in runs, as the candidate search's owners hold a slice of every block (one run of a single
    # row among them); owner 2 owns none, as a process whose slices are empty (`_run_owners` leaves them out).
    owned = [[(lo, lo + 10), (lo + 25, lo + 38), (lo + 49, lo + 50)], [(lo + 10, lo + 25), (lo + 38, lo + 49)], []]
    sent: dict[tuple[int, int], int] = {}

    class Recording(_ThreadExchange):
        def all_to_all(self, parts, shapes):
            for k, part in enumerate(parts):
                sent[self.rank, k] = part.numel()
            return super().all_to_all(parts, shapes)

    hub = _Hub(world)
    with ThreadPoolExecutor(world) as pool:
        futures = [
            pool.submit(pairs._merged, Recording(hub, r), [keys[r].clone(), held[r]], lo, owned, depth)
            for r in range(world)
        ]
        merged = [f.result() for f in futures]
    for owner in range(world):
        rows = [row - lo for a, b in owned[owner] for row in range(a, b)]
        expected = np.full((len(rows), depth), kernel._LOWEST_KEY, dtype=np.int64)
        for i, row in enumerate(rows):
            union = np.concatenate([keys[p, row, : held[p, row]].numpy() for p in range(world)])
            top = -np.sort(-union)[:depth]
            expected[i, : top.size] = top
        np.testing.assert_array_equal(merged[owner].numpy(), expected, err_msg=f"owner {owner}")
        for p in range(world):  # an owner's own lists stay where they are
            assert sent[p, owner] == (0 if p == owner else len(rows) + int(held[p, rows].sum())), (p, owner)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_candidate_shares_equal_the_full_sort(ties, world, monkeypatch):
    g, oracle = ties
    depth = torch.randint(64, 180, (g.shape[0],), generator=torch.Generator().manual_seed(world))
    merged = []
    real = pairs._candidate_search

    def spying(*args, **kw):
        merged.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(pairs, "_candidate_search", spying)
    _assert_rows_equal(g, depth, oracle, world, chunk_size=100)
    assert merged, "the candidate search by slices was not used"


@pytest.mark.parametrize("world", [2, 3])
def test_running_list_shares_equal_the_full_sort(ties, world):
    g, oracle = ties
    depth = torch.randint(1, 30, (g.shape[0],), generator=torch.Generator().manual_seed(7))
    _assert_rows_equal(g, depth, oracle, world, chunk_size=128)


def test_short_rows_and_runs_under_a_small_budget(ties, monkeypatch):
    """Bounds guessed too high (a negative margin) leave rows short after the merge, which are searched again; a
    small buffer budget cuts the rows into several runs, each merged on its own."""
    g, oracle = ties
    monkeypatch.setattr(kernel, "_CANDIDATE_SIGMAS", -2.0)
    monkeypatch.setattr(pairs, "_BUFFER_BYTES", 120 * 300 * 8)
    again = []
    real = pairs.searched_again

    def spying(gn, rows, d, sq=None):
        again.append(rows.numel())
        return real(gn, rows, d, sq)

    monkeypatch.setattr(pairs, "searched_again", spying)
    depth = torch.full((g.shape[0],), 100)
    _assert_rows_equal(g, depth, oracle, 3, chunk_size=100)
    assert sum(again) > 0


@pytest.mark.parametrize("world", [3, 5])
def test_each_process_owns_the_rows_it_multiplies(ties, world, monkeypatch):
    """In the candidate search a process merges and yields exactly the rows it multiplies as block rows (its slice of
    every block of each run: the rows whose items it mostly scores itself), and its own lists of them never cross:
    what it sends itself is empty. Several runs (a small budget); at W = 5 no block (384 rows, the last 348) divides
    evenly, so the slices' rounding must agree too."""
    g, oracle = ties
    monkeypatch.setattr(pairs, "_BUFFER_BYTES", 3 * 2 * 164 * 8 * 384)  # runs of one or two blocks of 384 rows
    multiplied: dict[int, set[int]] = {}
    to_self: dict[int, list[int]] = {}
    real_blocks = kernel._symmetric_blocks

    def blocks(*args, **kw):
        for item in real_blocks(*args, **kw):
            a, a_end, _, _, a_owned = item[:5]
            if a_owned:
                multiplied.setdefault(threading.get_ident(), set()).update(range(a, a_end))
            yield item

    class Recording(_ThreadExchange):
        def all_to_all(self, parts, shapes):
            to_self.setdefault(self.rank, []).append(parts[self.rank].numel())
            return super().all_to_all(parts, shapes)

    monkeypatch.setattr(kernel, "_symmetric_blocks", blocks)
    depth = torch.full((g.shape[0],), 100)
    hub = _Hub(world)

    def work(rank):
        _, indices = collect(g, depth, share=(rank, world), exchange=Recording(hub, rank), chunk_size=100)
        return threading.get_ident(), set(indices)

    with ThreadPoolExecutor(world) as pool:
        yielded = [f.result() for f in [pool.submit(work, r) for r in range(world)]]
    for rank, (thread, rows) in enumerate(yielded):
        assert rows == multiplied[thread], rank
        assert len(to_self[rank]) >= 2 and set(to_self[rank]) == {0}, rank  # one exchange per run, none to itself
    assert set().union(*(rows for _, rows in yielded)) == set(range(g.shape[0]))


def test_candidate_buffers_fall_with_the_processes(ties, monkeypatch):
    """The processes of a split search share one process's buffer budget: each holds at most ``1 / W`` of it (the
    single search fills it), and the rows stay those of the full sort."""
    g, oracle = ties
    budget = 3 * 2 * 164 * 8 * 384  # two blocks of 384 rows per run at W = 3 (depth 100: 164 keys a row)
    monkeypatch.setattr(kernel, "_BUFFER_BYTES", budget)
    monkeypatch.setattr(pairs, "_BUFFER_BYTES", budget)
    held: dict[int, int] = {}

    class Recording(kernel.CandidateBuffers):
        def __init__(self, *args, **kw) -> None:
            super().__init__(*args, **kw)
            key = threading.get_ident()
            held[key] = max(held.get(key, 0), self.flat.numel() * 8)

    monkeypatch.setattr(kernel, "CandidateBuffers", Recording)
    monkeypatch.setattr(pairs, "CandidateBuffers", Recording)
    depth = torch.full((g.shape[0],), 100)
    _assert_rows_equal(g, depth, oracle, 1, chunk_size=100)
    (single,) = held.values()
    held.clear()
    _assert_rows_equal(g, depth, oracle, 3, chunk_size=100)
    assert len(held) == 3
    assert single > budget / 3
    assert max(held.values()) <= budget // 3 + 8
    assert max(held.values()) <= 0.4 * single


@pytest.mark.parametrize("depth", [8, 150])
def test_every_score_is_computed_once(depth, monkeypatch):
    """The slices of all processes multiply exactly the scores of the single search's symmetric blocks, and each
    process its 1/W of them."""
    emb, _ = clustered(2400, 8, 5, seed=1)
    counted: dict[int, int] = {}
    real = kernel._symmetric_blocks

    def counting(*args, **kw):
        for item in real(*args, **kw):
            key = threading.get_ident()
            counted[key] = counted.get(key, 0) + item[-1].numel()
            yield item

    monkeypatch.setattr(kernel, "_symmetric_blocks", counting)
    list(search_neighbors(emb, depth, chunk_size=128))
    (whole,) = counted.values()
    counted.clear()
    in_threads(4, lambda r, ex: list(search_neighbors(emb, depth, chunk_size=128, share=(r, 4), exchange=ex)))
    per_process = list(counted.values())
    assert len(per_process) == 4
    assert sum(per_process) == whole
    assert max(per_process) <= whole / 4 * 1.01


@pytest.mark.parametrize("distance", ["cosine", "euclidean", "dot"])
def test_retrieval_rows_of_the_shares_give_the_single_result(distance):
    emb, labels = clustered(1200, 16, 9, seed=4, noise=1.6)
    ids = torch.arange(1200) * 2 + 5
    kw = dict(ks=(1, 5, 10), chunk_size=100, return_neighbors=3, distance=distance)
    single = embedding_retrieval_metrics(emb, labels, ids, **kw)
    parts = in_threads(3, lambda r, ex: retrieval_per_query(emb, labels, ids, share=(r, 3), exchange=ex, **kw))
    joined = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    out = aggregate_retrieval(joined, labels, ks=kw["ks"], query_ids=ids)
    assert_same_outputs(out, single, distance)


@pytest.mark.parametrize("n", [2, 3, 5, 9, 70])
@pytest.mark.parametrize("world", [3, 4])
def test_more_processes_than_rows_or_blocks(n, world):
    """Tiny sets under many processes: shares and slices of blocks without rows give the single search's rows bit
    for bit (at this size BLAS may round a product of four dimensions otherwise than a full matrix product does, so
    the single search is the reference)."""
    g = planted(n, 4, 2, seed=n, copies=n // 3)
    depth = min(3, n - 1)
    scores, indices = collect(g, depth, chunk_size=4)
    found = in_threads(world, lambda r, ex: collect(g, depth, share=(r, world), exchange=ex, chunk_size=4))
    rows = {}
    for part_scores, part_indices in found:
        assert not set(rows) & set(part_indices)
        rows.update({r: (part_scores[r], part_indices[r]) for r in part_indices})
    assert sorted(rows) == list(range(n))
    for r, (s, i) in rows.items():
        assert torch.equal(i[:depth], indices[r][:depth]), r
        assert torch.equal(s[:depth].view(torch.int32), scores[r][:depth].view(torch.int32)), r
