"""The exact search against faiss's exact inner-product index (``IndexFlatIP``) on unit rows: the same neighbours and
scores, for leave-one-out search (every path: running top lists, candidate search, shallow and deep), a separate
query set and the low-precision fast modes.

faiss ranks equal scores in no stated order, so neighbours are compared only where the score gap to the next rank
exceeds fp32 rounding of a 32-dimensional dot product; scores are compared everywhere.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from beyondlabels.functional.search import search_neighbors

faiss = pytest.importorskip("faiss", reason="faiss-cpu (a test extra) is the search oracle of this file")

D = 32
GAP = 1e-5  # larger than any fp32 rounding difference of a 32-term dot product of unit rows


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _faiss_search(gallery: np.ndarray, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    index = faiss.IndexFlatIP(gallery.shape[1])
    index.add(gallery)
    return index.search(queries, depth)


def _ours(
    gallery: np.ndarray, depth: int, queries: np.ndarray | None = None, **options
) -> tuple[np.ndarray, np.ndarray]:
    q = None if queries is None else torch.from_numpy(queries)
    chunks = list(search_neighbors(torch.from_numpy(gallery), depth, queries=q, **options))
    n = (gallery if queries is None else queries).shape[0]
    scores, indices = np.zeros((n, depth), np.float32), np.zeros((n, depth), np.int64)
    for c in chunks:
        scores[c.rows.numpy()] = c.scores[:, :depth].numpy()
        indices[c.rows.numpy()] = c.indices[:, :depth].numpy()
    return scores, indices


def _assert_same_neighbours(ours: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray]) -> None:
    """``ref`` holds one rank more than ``ours``: the gap of the last compared rank to the next one is known."""
    (s, i), (rs, ri) = ours, ref
    depth = s.shape[1]
    np.testing.assert_allclose(s, rs[:, :depth], rtol=0, atol=2e-6)
    gaps = np.abs(np.diff(rs, axis=1)) > GAP  # [n, depth]: rank j against rank j + 1
    separated = gaps.copy()  # rank j is well separated from ranks j - 1 and j + 1
    separated[:, 1:] &= gaps[:, :-1]
    rs, ri = rs[:, :depth], ri[:, :depth]
    assert separated.mean() > 0.9, "the data must mostly separate ranks for the comparison to mean anything"
    np.testing.assert_array_equal(i[separated], ri[separated])


@pytest.mark.parametrize(
    ("n", "depth", "chunk_size"),
    [(300, 5, 64), (600, 70, 1024), (2000, 100, 256)],  # shallow running lists; candidate search (64 <= depth <= N/8)
)
def test_leave_one_out_equals_faiss(n, depth, chunk_size):
    rng = np.random.default_rng(n)
    g = _unit(rng.standard_normal((n, D)))
    # faiss includes the query itself (score 1) first: search two deeper (one for the gap after the last) and drop it
    ref_s, ref_i = _faiss_search(g, g, depth + 2)
    own = ref_i[:, 0] == np.arange(n)
    assert own.all()
    _assert_same_neighbours(_ours(g, depth, chunk_size=chunk_size), (ref_s[:, 1:], ref_i[:, 1:]))


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_separate_queries_equal_faiss_in_every_precision(precision):
    rng = np.random.default_rng(7)
    g, q = _unit(rng.standard_normal((1500, D))), _unit(rng.standard_normal((200, D)))
    _assert_same_neighbours(_ours(g, 20, q, precision=precision, chunk_size=64), _faiss_search(g, q, 21))
