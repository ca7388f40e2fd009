"""Deep leave-one-out search (thresholds and candidate lists) against a brute-force full sort."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import beyondlabels.functional._leave_one_out as kernel  # noqa: E402
from beyondlabels.functional.search import normalize_rows, search_neighbors  # noqa: E402
from tests.oracles.retrieval_data import clustered


def full_sort(g: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Every row of ``g @ g.T`` (self excluded) fully ordered by descending fp32 score, then ascending index."""
    s = (g @ g.T).numpy()
    np.fill_diagonal(s, -np.inf)
    cols = np.arange(s.shape[1])
    order = np.stack([np.lexsort((cols, -row)) for row in s])[:, :-1]  # the last one is the row itself
    return np.take_along_axis(s, order, axis=1), order


def planted(n: int, d: int, classes: int, seed: int, copies: int, noise: float = 1.5) -> torch.Tensor:
    """Clustered rows where ``copies`` rows repeat earlier ones exactly (exact ties at every depth), normalised."""
    emb, _ = clustered(n, d, classes, seed=seed, noise=noise)
    rng = np.random.default_rng(seed)
    dst = torch.tensor(rng.choice(n, size=copies, replace=False))
    src = torch.tensor(rng.integers(0, n, size=copies))
    emb[dst] = emb[src]
    return normalize_rows(emb)


def collect(g, depth, **kw) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    scores, indices = {}, {}
    for chunk in search_neighbors(g, depth, normalized=True, **kw):
        for j, r in enumerate(chunk.rows.tolist()):
            assert r not in indices
            scores[r], indices[r] = chunk.scores[j], chunk.indices[j]
    return scores, indices


def assert_equals_oracle(g, depth, oracle, **kw) -> None:
    o_scores, o_idx = oracle
    depths = depth if isinstance(depth, torch.Tensor) else torch.full((g.shape[0],), depth)
    scores, indices = collect(g, depth, **kw)
    assert sorted(indices) == list(range(g.shape[0]))
    for r in range(g.shape[0]):
        d = int(depths[r])
        assert indices[r].shape[0] >= d
        np.testing.assert_array_equal(indices[r][:d].numpy(), o_idx[r, :d], err_msg=f"row {r}")
        # bitwise: compare the fp32 bit patterns
        np.testing.assert_array_equal(scores[r][:d].numpy().view(np.int32), o_scores[r, :d].view(np.int32))


@pytest.fixture
def spy(monkeypatch):
    """Counts the calls of the candidate search, to make sure a test exercises it."""
    calls = []
    real = kernel._leave_one_out_candidates

    def counting(*args, **kw):
        calls.append(args[3:5])
        yield from real(*args, **kw)

    monkeypatch.setattr(kernel, "_leave_one_out_candidates", counting)
    return calls


@pytest.fixture(scope="module")
def ties():
    g = planted(2400, 12, 6, seed=3, copies=300)
    return g, full_sort(g)


@pytest.mark.parametrize("chunk_size", [64, 500, 4096])
def test_candidate_search_equals_the_full_sort_with_planted_ties(ties, spy, chunk_size):
    g, oracle = ties
    n = g.shape[0]
    # one depth per query, many of them at or next to a run of exactly tied scores
    depth = torch.randint(1, n // kernel._CANDIDATE_DEPTH_RATIO, (n,), generator=torch.Generator().manual_seed(1))
    assert_equals_oracle(g, depth, oracle, chunk_size=chunk_size)
    assert spy


def test_ties_straddle_the_cut_of_every_row(spy):
    # 9 directions over 2000 rows: each row has hundreds of exactly tied scores, so the cut at any depth falls
    # inside a run of ties and the bound of each row is tied with hundreds of items.
    rng = np.random.default_rng(6)
    base = torch.tensor(rng.normal(size=(9, 8)), dtype=torch.float32)
    g = normalize_rows(base[torch.tensor(rng.integers(0, 9, size=2000))])
    oracle = full_sort(g)
    for depth in (1, 37, 249):
        assert_equals_oracle(g, depth, oracle, chunk_size=256)
    assert spy


def test_deep_depths_relative_to_the_gallery(spy):
    g = planted(1600, 16, 2, seed=5, copies=100, noise=2.0)
    oracle = full_sort(g)
    deepest = 1600 // kernel._CANDIDATE_DEPTH_RATIO
    assert_equals_oracle(g, deepest, oracle, chunk_size=128)
    assert spy
    spy.clear()
    assert_equals_oracle(g, 1599, oracle, chunk_size=128)  # too deep for candidates: the running top lists
    assert not spy


def test_rows_whose_bound_is_too_high_are_searched_again(ties, spy, monkeypatch):
    g, oracle = ties
    real = kernel._sampled_bounds
    searched = []
    real_chunk = kernel.search_chunk

    def too_high(g_, need, block, lo, hi, sq=None):
        bound = real(g_, need, block, lo, hi, sq)
        bound[::3] = 2.0  # above every cosine: no item survives, the row must be searched again
        bound[1::3] += 0.05  # a guess that is often above the row's depth-th score
        return bound

    def counting_chunk(gal, q, excl, depth, ws=None):
        searched.append(q.shape[0])
        return real_chunk(gal, q, excl, depth, ws)

    monkeypatch.setattr(kernel, "_sampled_bounds", too_high)
    monkeypatch.setattr(kernel, "search_chunk", counting_chunk)
    assert_equals_oracle(g, 150, oracle, chunk_size=300)
    assert spy
    assert sum(searched) >= g.shape[0] // 3


def test_compaction_at_every_block_and_a_tiny_sample(ties, spy, monkeypatch):
    g, oracle = ties
    monkeypatch.setattr(kernel, "_candidate_cap", lambda depth, rows=0: depth)  # every overflow compacts the row
    monkeypatch.setattr(kernel, "_CANDIDATE_STRIDE", 400)  # 6 sampled columns: most rows start from no bound
    monkeypatch.setattr(kernel, "_COMPACTION_ROWS", 7)  # compactions in many small slices of rows
    assert_equals_oracle(g, 200, oracle, chunk_size=256)
    assert spy


def test_runs_of_blocks_under_a_small_buffer_budget(ties, spy, monkeypatch):
    g, oracle = ties
    monkeypatch.setattr(kernel, "_BUFFER_BYTES", 150 * 400 * 8)
    assert_equals_oracle(g, 150, oracle, chunk_size=100)
    assert len(spy) > 3


@pytest.mark.parametrize("count", [2, 3, 5])
def test_shares_give_bitwise_the_whole_search(ties, spy, count):
    g, oracle = ties
    n = g.shape[0]
    depth = torch.randint(1, 250, (n,), generator=torch.Generator().manual_seed(2))
    whole_scores, whole_idx = collect(g, depth, chunk_size=100)
    seen = set()
    for i in range(count):
        scores, indices = collect(g, depth, chunk_size=100, share=(i, count))
        assert not seen & set(indices)
        seen |= set(indices)
        for r in indices:
            d = int(depth[r])
            assert torch.equal(indices[r][:d], whole_idx[r][:d])
            assert torch.equal(scores[r][:d].view(torch.int32), whole_scores[r][:d].view(torch.int32))
    assert seen == set(range(n))
    assert len(spy) > count
