"""Retrieval under ``distance="euclidean"`` and ``distance="dot"``: pytorch-metric-learning's AccuracyCalculator (its
default: faiss IndexFlatL2 on the raw embeddings) and a float64 numpy oracle as references, the tie rule, the
numerical care of the Euclidean search (offsets, far clusters, huge and tiny norms, against the fp32 expansion that
fails there), and results that do not depend on chunks, shares or the fast mode.

AccuracyCalculator's protocol and ours: ``get_accuracy(x, labels)`` without a reference set is leave-one-out
(``ref_includes_query``: each query's own row is removed from its neighbours, by index); labels with no other member
are "lone" and left out of every mean (ours: ``num_lone_queries``); ``k=None`` searches every other item, so
R-precision and MAP@R use each query's full R (ours: ``deep_metrics=True``, the default); ``avg_of_avgs=False`` is
the mean over queries (our plain keys) and ``avg_of_avgs=True`` the mean of the per-label means (our ``macro_`` keys).
faiss orders equal distances by ascending index, as we do, so even exact ties give equal numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tests.oracles.numpy_retrieval as oracle
from beyondlabels.functional import embedding_retrieval_metrics, retrieval_per_query, search_neighbors
from beyondlabels.metrics import EmbeddingRetrieval

PML_KEYS = {"precision@1": "precision_at_1", "r_precision": "r_precision", "map@r": "mean_average_precision_at_r"}


def _clusters(seed: int, n: int = 240, d: int = 12, classes: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    """Uneven clusters whose rows have very different norms (so cosine and Euclidean rank differently), with two
    singleton labels (lone queries)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    labels[:2] = torch.tensor([classes, classes + 1])
    centres = 2.0 * torch.randn(classes + 2, d, generator=g)
    emb = centres[labels] + 1.3 * torch.randn(n, d, generator=g)
    return emb * (0.2 + 3.0 * torch.rand(n, 1, generator=g)), labels


def _grid(seed: int, n: int = 240) -> tuple[torch.Tensor, torch.Tensor]:
    """Small-integer rows: many exactly equal distances between items of different labels, exact duplicates, and
    a lone label."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randint(-2, 3, (n, 4), generator=g).float()
    labels = torch.randint(0, 6, (n,), generator=g)
    labels[0] = 99
    return emb, labels


DATASETS = {
    **{f"clusters-{s}": (lambda s=s: _clusters(s)) for s in range(3)},
    **{f"grid-{s}": (lambda s=s: _grid(s)) for s in range(3)},
}


@pytest.fixture(scope="module")
def pml_calculators():
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    include = tuple(PML_KEYS.values())
    return {avg: AccuracyCalculator(include=include, avg_of_avgs=avg, device=torch.device("cpu")) for avg in (0, 1)}


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_euclidean_equals_pytorch_metric_learning_default(name, pml_calculators):
    emb, labels = DATASETS[name]()
    ours = embedding_retrieval_metrics(emb, labels, ks=(1,), distance="euclidean")
    assert int(ours["num_lone_queries"]) >= 1
    for avg, prefix in ((0, ""), (1, "macro_")):
        ref = pml_calculators[avg].get_accuracy(emb, labels)  # the default: FaissKNN (IndexFlatL2), k=None
        for key, pml_key in PML_KEYS.items():
            assert float(ours[prefix + key]) == pytest.approx(ref[pml_key], abs=1e-12), (prefix + key, name)
    if name.startswith("clusters"):  # (the grid has zero rows, which have no cosine)
        cosine = embedding_retrieval_metrics(emb, labels, ks=(1,))
        assert float(cosine["map@r"]) != pytest.approx(float(ours["map@r"]), abs=1e-3)  # the distance matters


def test_ties_decide_the_grid_numbers():
    """On the grid data the tie rule changes the numbers: reversing the row order (so that ties fall the other way)
    changes them, so equality with AccuracyCalculator above checks the tie rule too."""
    emb, labels = _grid(0)
    forward = embedding_retrieval_metrics(emb, labels, ks=(1,), distance="euclidean")
    backward = embedding_retrieval_metrics(emb.flip(0), labels.flip(0), ks=(1,), distance="euclidean")
    assert float(forward["precision@1"]) != float(backward["precision@1"])


@pytest.mark.parametrize("distance", ["euclidean", "dot"])
@pytest.mark.parametrize("name", ["clusters-0", "grid-1"])
def test_matches_the_numpy_oracle(name, distance):
    emb, labels = DATASETS[name]()
    emb[5] = emb[9]  # an exact duplicate: equal scores under both distances
    ks = (1, 3, 10)
    ours = embedding_retrieval_metrics(emb, labels, ks=ks, curve_max_k=12, distance=distance, chunk_size=17)
    ref = oracle.retrieval_metrics(emb.numpy(), labels.numpy(), ks=ks, curve_max_k=12, distance=distance)
    _assert_matches(ours, ref, ks)


def _assert_matches(ours: dict, ref: dict, ks: tuple[int, ...]) -> None:
    assert int(ours["num_queries"]) == ref["num_queries"]
    assert int(ours["num_lone_queries"]) == ref["num_lone_queries"]
    keys = [f"{m}@{k}" for m in ("precision", "recall", "hit", "macro_precision") for k in ks]
    keys += ["r_precision", "map@r", "macro_r_precision", "macro_map@r", "mean_first_relevant_rank"]
    keys += ["median_first_relevant_rank"]
    for key in keys:
        assert float(ours[key]) == pytest.approx(ref[key], rel=1e-12, abs=1e-12), key
    np.testing.assert_allclose(ours["precision_curve"].numpy(), ref["precision_curve"], rtol=1e-12, atol=1e-12)


def test_first_relevant_rank_beyond_the_searched_depth_is_exact():
    """A query whose only relevant item is the farthest one: its rank comes from the exact full-row count."""
    emb, labels = _clusters(4, n=120)
    labels = torch.arange(120) % 40 + 2  # R = 2 for most queries: shallow lists
    emb[3] = emb[4] + 0.0  # an exact tie around query 3's relevant items
    labels[:2] = 0
    emb[1] = emb[0] + 1e3  # query 0's only relevant item is far from everything
    ours = embedding_retrieval_metrics(emb, labels, ks=(1,), distance="euclidean")
    ref = oracle.retrieval_metrics(emb.numpy(), labels.numpy(), ks=(1,), distance="euclidean")
    ranks = ours["per_query"]["first_relevant_rank"]
    np.testing.assert_array_equal(ranks[~ranks.isnan()].numpy(), ref["per_query_first_rank"])
    assert float(ranks[0]) == 119.0


def test_separate_queries_with_id_exclusion_and_a_query_sample():
    emb, labels = _clusters(5)
    ids = torch.arange(240) + 500
    queries = emb[:60] + 0.05
    ours = embedding_retrieval_metrics(
        emb,
        labels,
        ids,
        ks=(1, 5),
        distance="euclidean",
        query_embeddings=queries,
        query_labels=labels[:60],
        query_ids=ids[:60],
    )
    ref = oracle.retrieval_metrics(
        emb.numpy(),
        labels.numpy(),
        ks=(1, 5),
        query_embeddings=queries.numpy(),
        query_labels=labels[:60].numpy(),
        excluded=np.arange(60),
        distance="euclidean",
    )
    _assert_matches(ours, ref, (1, 5))
    sampled = embedding_retrieval_metrics(emb, labels, ids, ks=(1,), distance="euclidean", max_queries=50)
    full = embedding_retrieval_metrics(emb, labels, ids, ks=(1,), distance="euclidean")
    chosen = torch.isin(full["per_query"]["query_id"], sampled["per_query"]["query_id"])
    assert int(chosen.sum()) == 50
    assert torch.equal(
        sampled["per_query"]["map@r"].nan_to_num(-7.0), full["per_query"]["map@r"][chosen].nan_to_num(-7.0)
    )


# --------------------------------------------------------------------------------------------------------------------
# numerical care
# --------------------------------------------------------------------------------------------------------------------


def _hard(kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    n, d = 150, 8
    noise = torch.randn(n, d, generator=g, dtype=torch.float64)
    if kind == "offset":  # one cluster far from the origin: |x|^2 ~ 1e9, squared distances ~ 1e-3
        return (1e4 + 1e-2 * noise).float()
    if kind == "far clusters":  # two tight clusters 2e3 apart: centring on the mean does not help
        side = torch.where(torch.arange(n) % 2 == 0, 1e3, -1e3).to(torch.float64).unsqueeze(1)
        return (side + 1e-2 * noise).float()
    if kind == "huge":  # squares overflow fp32
        return (1e30 * noise).float()
    return (1e-30 * noise).float()  # "tiny": squares underflow fp32


def _neighbors(emb: torch.Tensor, depth: int, **options) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.empty(emb.shape[0], depth, dtype=torch.long)
    scores = torch.empty(emb.shape[0], depth)
    for chunk in search_neighbors(emb, depth, distance="euclidean", **options):
        idx[chunk.rows], scores[chunk.rows] = chunk.indices[:, :depth], chunk.scores[:, :depth]
    return idx, scores


def _oracle_neighbors(emb: torch.Tensor, depth: int) -> tuple[np.ndarray, np.ndarray]:
    x = emb.double().numpy()
    order, scores = [], []
    for q in range(len(x)):
        ranked, s = oracle.ranked_gallery(x[q], x, q, "euclidean")
        order.append(ranked[:depth])
        scores.append(s[:depth])
    return np.array(order), np.array(scores)


@pytest.mark.parametrize("kind", ["offset", "far clusters", "huge", "tiny"])
def test_euclidean_search_is_exact_where_the_fp32_expansion_fails(kind):
    emb = _hard(kind)
    depth = 30
    want_idx, want_scores = _oracle_neighbors(emb, depth)
    idx, scores = _neighbors(emb, depth)
    np.testing.assert_array_equal(idx.numpy(), want_idx)
    # minus the distance, to its stated error bound: relative, about (D + 2) * 2**-24 at most
    np.testing.assert_allclose(scores.numpy(), want_scores, rtol=(emb.shape[1] + 3) * 2.0**-24, atol=0)
    # The textbook fp32 computation |q|^2 + |g|^2 - 2 q.g (faiss's) ranks these rows wrongly or not at all.
    x = emb
    naive = (x * x).sum(1, keepdim=True) + (x * x).sum(1) - 2.0 * x @ x.T
    naive.fill_diagonal_(float("inf"))
    naive_idx = torch.sort(naive, dim=1, stable=True).indices[:, :depth]
    assert not torch.equal(naive_idx, torch.from_numpy(want_idx))


def test_equal_distances_tie_by_index_and_duplicates_tie_exactly():
    emb = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [1.0, 0.0], [3.0, 4.0]])
    (chunk,) = search_neighbors(emb, 6, distance="euclidean")
    assert chunk.indices[0].tolist() == [1, 2, 3, 4, 5, 6]  # four at distance 1 (and a duplicate): index order
    assert chunk.scores[0].tolist() == [-1.0, -1.0, -1.0, -1.0, -1.0, -5.0]
    assert chunk.indices[1].tolist()[:2] == [5, 0] and float(chunk.scores[1, 0]) == 0.0  # its duplicate first


# --------------------------------------------------------------------------------------------------------------------
# chunks, shares, fast mode
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("distance", ["euclidean", "dot"])
def test_results_do_not_depend_on_chunks_shares_or_the_fast_mode(distance):
    emb, labels = _clusters(6, n=300)
    emb[10] = emb[20]

    def in_query_order(values: dict) -> dict:
        order = torch.argsort(values["query_index"])
        return {key: value[order].nan_to_num(-7.0) for key, value in values.items()}

    base = in_query_order(retrieval_per_query(emb, labels, ks=(1, 5), distance=distance, return_neighbors=5))
    assert torch.equal(base["query_index"], torch.arange(300))
    for options in ({"chunk_size": 3}, {"chunk_size": 7}, {"precision": "bf16"}, {"precision": "fp16"}):
        other = in_query_order(
            retrieval_per_query(emb, labels, ks=(1, 5), distance=distance, return_neighbors=5, **options)
        )
        for key, value in base.items():
            assert torch.equal(value, other[key]), (key, options)  # scores and neighbours too, bitwise
    shares = [retrieval_per_query(emb, labels, ks=(1, 5), distance=distance, share=(i, 3)) for i in range(3)]
    joined = in_query_order({key: torch.cat([s[key] for s in shares]) for key in shares[0]})
    for key, value in joined.items():
        assert torch.equal(value, base[key]), key


def test_dot_scores_are_the_products_of_the_rows_as_given():
    emb, _ = _clusters(8, n=60)
    emb[3] = 0.0  # a zero row is allowed (its products are 0)
    big = emb * 2.0**50  # rows far past norm 1 are scaled internally; the scores come back exactly
    (small_chunk,) = search_neighbors(emb, 5, distance="dot")
    (big_chunk,) = search_neighbors(big, 5, distance="dot")
    assert torch.equal(small_chunk.indices, big_chunk.indices)
    assert torch.equal(big_chunk.scores, small_chunk.scores * 2.0**100)
    want = emb @ emb.T
    want.fill_diagonal_(float("-inf"))
    assert torch.allclose(small_chunk.scores, torch.topk(want, 5, dim=1).values, rtol=1e-6, atol=1e-5)


# --------------------------------------------------------------------------------------------------------------------
# the metric class and bad input
# --------------------------------------------------------------------------------------------------------------------


def test_metric_class_uses_the_distance_and_refuses_the_audit():
    emb, labels = _clusters(9, n=80)
    metric = EmbeddingRetrieval(ks=(1, 5), distance="euclidean", return_neighbors=2)
    for part in range(0, 80, 16):
        metric.update(emb[part : part + 16], labels[part : part + 16], torch.arange(part, part + 16))
    out = metric.compute()
    want = embedding_retrieval_metrics(emb, labels, ks=(1, 5), distance="euclidean", return_neighbors=2)
    assert float(out["map@r"]) == float(want["map@r"])
    assert bool((out["neighbors"]["scores"] <= 0).all())  # minus the distances
    with pytest.raises(ValueError, match="audit.*distance='cosine'"):
        EmbeddingRetrieval(audit=True, distance="euclidean")
    with pytest.raises(ValueError, match="`distance` must be one of"):
        EmbeddingRetrieval(distance="manhattan")


def test_bad_distance_arguments_are_named():
    emb = torch.randn(10, 3)
    with pytest.raises(ValueError, match="`distance` must be one of"):
        embedding_retrieval_metrics(emb, torch.arange(10) % 2, distance="l2")
    with pytest.raises(ValueError, match="normalized=True"):
        list(search_neighbors(emb, 2, distance="dot", normalized=True))
    bad = emb.clone()
    bad[4, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN or Inf.*rows \\[4\\]"):
        list(search_neighbors(bad, 2, distance="euclidean"))


@pytest.mark.parametrize("data", ["gauss", "grid"])
@pytest.mark.parametrize("depth", [10, 70])
def test_the_symmetric_coarse_pass_equals_the_search_by_rows(data, depth, monkeypatch):
    """Leave-one-out Euclidean searches take their coarse pass in symmetric blocks (running lists at depth 10, the
    candidate search at depth 70: 70 + 16 <= 800 / 8); rows whose candidates may lie deeper (the grid's many ties)
    are searched again by rows. Neighbours and scores equal the search by rows (the same rows as a separate query set
    excluding themselves), bitwise, and per share."""
    from beyondlabels.functional import _euclidean, _leave_one_out

    n = 800
    g = torch.Generator().manual_seed(11)
    emb = torch.randn(n, 16, generator=g) if data == "gauss" else torch.randint(-2, 3, (n, 5), generator=g).float()
    seen = {"candidates": 0, "again": 0}
    bounds, search = _leave_one_out._sampled_bounds, _euclidean.L2Gallery.search

    def counting_bounds(*args, **kwargs):
        seen["candidates"] += 1
        return bounds(*args, **kwargs)

    def counting_search(self, rows, *args):
        seen["again"] += rows.numel()
        return search(self, rows, *args)

    monkeypatch.setattr(_leave_one_out, "_sampled_bounds", counting_bounds)
    monkeypatch.setattr(_euclidean.L2Gallery, "search", counting_search)

    def gathered(**options) -> tuple[torch.Tensor, torch.Tensor]:
        idx, scores = torch.empty(n, depth, dtype=torch.long), torch.empty(n, depth)
        for chunk in search_neighbors(emb, depth, distance="euclidean", **options):
            idx[chunk.rows], scores[chunk.rows] = chunk.indices[:, :depth], chunk.scores[:, :depth]
        return idx, scores

    blocks = gathered()
    assert bool(seen["candidates"]) == (depth == 70)
    assert (seen["again"] > 0) == (data == "grid")  # only the ties need the second search
    by_rows = gathered(queries=emb, exclude=torch.arange(n))
    assert torch.equal(blocks[0], by_rows[0]) and torch.equal(blocks[1], by_rows[1])
    owner = torch.zeros(n, dtype=torch.long)
    for i in range(3):
        for chunk in search_neighbors(emb, depth, distance="euclidean", share=(i, 3)):
            owner[chunk.rows] = i
    for i in range(3):  # every row is in one share; the others leave it unset
        idx, scores = gathered(share=(i, 3))
        mine = owner == i
        assert torch.equal(idx[mine], blocks[0][mine]) and torch.equal(scores[mine], blocks[1][mine])


def test_euclidean_rows_whose_sampled_bound_is_too_high_are_searched_again(monkeypatch):
    """The candidate search's first bounds are a guess from a sample; rows it guesses too high are searched again
    over their whole coarse row (its Euclidean branch): the results still equal the search by rows."""
    from beyondlabels.functional import _leave_one_out as kernel

    emb = torch.randn(800, 16, generator=torch.Generator().manual_seed(5))  # depth 70 + 16 <= 800 / 8: candidates
    by_rows = list(search_neighbors(emb, 70, distance="euclidean", queries=emb, exclude=torch.arange(800)))
    real = kernel._sampled_bounds
    calls = []

    def too_high(g, need, block, lo, hi, sq=None):
        calls.append(sq is not None)
        bound = real(g, need, block, lo, hi, sq)
        bound[::3] = 1.0  # above every coarse score (minus a squared distance): no item reaches it
        return bound

    monkeypatch.setattr(kernel, "_sampled_bounds", too_high)
    blocks = list(search_neighbors(emb, 70, distance="euclidean"))
    assert calls and all(calls)  # the candidate search ran, on coarse Euclidean scores
    for got in (by_rows, blocks):
        order = torch.argsort(torch.cat([c.rows for c in got]))
        got[:] = [torch.cat([c.indices[:, :70] for c in got])[order], torch.cat([c.scores[:, :70] for c in got])[order]]
    assert torch.equal(blocks[0], by_rows[0]) and torch.equal(blocks[1], by_rows[1])


def test_a_chunk_gives_every_row_its_exact_top_at_the_chunks_depth():
    """Queries of different depths share chunks; each row of a chunk must hold its exact top at the chunk's depth
    (readers take prefixes, and the first relevant rank reads the whole row). Each centre here has one point at
    radius 0.5, then 60 at radii 2 + k * 4e-5 in shuffled order: too close for the coarse scores (far from the
    origin), far apart for the exact distances. A centre asks for depth 1 but shares a chunk of depth 40 with the
    shell points, and must get its 40 nearest in order of k."""
    g = torch.Generator().manual_seed(3)
    centres = 100.0 * torch.randn(5, 8, generator=g, dtype=torch.float64)
    rows, order = [centres], []
    for c in range(5):
        directions = torch.nn.functional.normalize(torch.randn(61, 8, generator=g, dtype=torch.float64), dim=1)
        radii = torch.cat([torch.tensor([0.5]), 2.0 + 4e-5 * torch.randperm(60, generator=g).double()])
        rows.append(centres[c] + radii.unsqueeze(1) * directions)
        order.append(torch.argsort(radii))
    emb = torch.cat(rows).float()
    depth = torch.cat([torch.ones(5, dtype=torch.long), torch.full((305,), 40)])

    for options in ({}, {"queries": emb, "exclude": torch.arange(310)}):  # the symmetric pass, the search by rows
        chunks = list(search_neighbors(emb, depth, distance="euclidean", chunk_size=64, **options))
        for chunk in chunks:
            for i, r in enumerate(chunk.rows.tolist()):
                if r < 5:
                    want = 5 + 61 * r + order[r][: chunk.depth]
                    assert chunk.depth == 40 and chunk.indices[i].tolist() == want.tolist(), (r, options.keys())


def test_normalized_unit_rows_give_the_values_of_the_raw_rows():
    from beyondlabels.functional.retrieval import retrieval_per_query
    from beyondlabels.functional.search import normalize_rows

    g = torch.Generator().manual_seed(3)
    emb = torch.randn(300, 12, generator=g) * torch.rand(300, 1, generator=g) * 50
    labels = torch.randint(0, 4, (300,), generator=g)
    raw = retrieval_per_query(emb, labels, ks=(1, 5), return_neighbors=4)
    unit = retrieval_per_query(normalize_rows(emb), labels, ks=(1, 5), return_neighbors=4, normalized=True)
    assert raw.keys() == unit.keys()
    assert all(torch.equal(raw[key].nan_to_num(-7.0), unit[key].nan_to_num(-7.0)) for key in raw)
    with pytest.raises(ValueError, match="normalized=True.*distance='dot'"):
        retrieval_per_query(emb, labels, distance="dot", normalized=True)
    with pytest.raises(ValueError, match="`embeddings` with `normalized=True` must be the fp32 unit rows.*float64"):
        retrieval_per_query(normalize_rows(emb).double(), labels, normalized=True)


def test_rows_past_the_first_block_are_named_when_not_finite():
    emb = torch.randn(20000, 3)
    emb[[5, 17000], 1] = float("inf")
    with pytest.raises(ValueError, match=r"`gallery` contains NaN or Inf values \(rows \[5, 17000\]"):
        list(search_neighbors(emb, 2))
    emb[5, 1] = 0.0
    with pytest.raises(ValueError, match=r"\(rows \[17000\]\.\.\.\)"):
        list(search_neighbors(emb, 2, distance="euclidean"))
    emb[8190:8200, 0] = float("nan")  # the first five, across two blocks of rows
    with pytest.raises(ValueError, match=r"\(rows \[8190, 8191, 8192, 8193, 8194\]\.\.\.\)"):
        list(search_neighbors(emb, 2))
