"""Shallow mode (``deep_metrics=False``): every query searched only to depth K = max(ks, curve_max_k, return_neighbors).

Checked against the deep mode on the same data (bitwise, every key both produce), against the independent numpy
oracle, for the search depth it asks for, and for the absence of the depth-R keys from outputs and schema.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tests.oracles.numpy_retrieval as oracle
from beyondlabels.functional import (  # noqa: E402
    ClassGains,
    aggregate_retrieval,
    embedding_retrieval_metrics,
    retrieval_output_schema,
    retrieval_per_query,
)
from beyondlabels.functional.retrieval import sample_queries  # noqa: E402
from tests.oracles.outputs import assert_same_outputs, flat
from tests.oracles.retrieval_data import clustered, clustered_without_ties

# The kernel modules' namespaces, taken from the functions themselves: under --doctest-modules a module may be
# imported twice, and patching another copy would test nothing. PER_QUERY holds the join budget, SEARCH the search
# the chunks come from, VALUES the exact first-rank fallback.
PER_QUERY = embedding_retrieval_metrics.__globals__["retrieval_per_query"].__globals__
SEARCH = PER_QUERY["_searched_chunks"].__globals__
VALUES = PER_QUERY["_put_chunk"].__globals__

# The outputs only deep mode produces (scalars, per-query vectors, standard errors).
DEEP_ONLY = {
    "r_precision",
    "map@r",
    "macro_r_precision",
    "macro_map@r",
    "mean_first_relevant_rank",
    "median_first_relevant_rank",
    "per_query/r_precision",
    "per_query/map@r",
    "per_query/first_relevant_rank",
    "r_precision_se",
    "map@r_se",
    "mean_first_relevant_rank_se",
}


@pytest.fixture(scope="module")
def gallery():
    """Large classes (R up to ~60, far deeper than k) with two lone queries: deep and shallow depths differ."""
    sizes = [60, 45, 30, 20, 12, 6, 3, 2, 1, 1]
    emb, labels = clustered_without_ties(sum(sizes), 16, len(sizes), seed=4, noise=2.0, sizes=sizes)
    return emb, labels


def _gains(classes: int) -> ClassGains:
    rng = np.random.default_rng(7)
    m = rng.uniform(0.0, 0.8, size=(classes, classes))
    m = (m + m.T) / 2
    np.fill_diagonal(m, 1.0)
    depth = rng.integers(0, 4, size=(classes, classes)).astype(float)
    return ClassGains(m, list(range(classes)), name="tree", mistake_stats={"depth": (depth + depth.T) / 2})


def assert_shallow_equals_deep(shallow: dict, deep: dict) -> None:
    """Bitwise equal on every key both produce; the deep-only keys are absent from shallow mode."""
    fs, fd = flat(shallow), flat(deep)
    assert not set(fs) & DEEP_ONLY
    assert set(fd) - set(fs) == set(fd) & DEEP_ONLY
    assert_same_outputs(shallow, deep, ignore=DEEP_ONLY)


@pytest.mark.parametrize(
    "kw",
    [
        {"ks": (1,)},
        {"ks": (1, 5, 10)},
        {"ks": (3, 7), "curve_max_k": 12, "return_neighbors": 4},
        {"ks": (2, 5), "return_neighbors": 15, "chunk_size": 7},
        {"ks": (1, 5, 10), "precision": "bf16"},
        {"ks": (1, 5), "max_queries": 40, "query_seed": 3},
        {"ks": (1, 10), "max_queries": 500},  # the sample is the whole pool
    ],
)
def test_shallow_equals_deep_bitwise(gallery, kw):
    emb, labels = gallery
    ids = torch.randperm(len(labels), generator=torch.Generator().manual_seed(2)) * 3 + 11
    graded = [_gains(10)]
    deep = embedding_retrieval_metrics(emb, labels, ids, graded=graded, **kw)
    shallow = embedding_retrieval_metrics(emb, labels, ids, graded=graded, deep_metrics=False, **kw)
    assert_shallow_equals_deep(shallow, deep)


def test_shallow_equals_deep_for_a_separate_query_set_with_exclusion():
    emb, labels = clustered_without_ties(120, 12, 4, seed=10, noise=1.5)
    ids = torch.arange(120) + 1000
    q = torch.arange(0, 120, 3)
    queries, q_labels, q_ids = (
        emb[q] + 0.05 * torch.randn(len(q), 12, generator=torch.Generator().manual_seed(1)),
        labels[q],
        ids[q],
    )
    kw = {
        "ks": (1, 5),
        "query_embeddings": queries,
        "query_labels": q_labels,
        "query_ids": q_ids,
        "return_neighbors": 3,
    }
    deep = embedding_retrieval_metrics(emb, labels, ids, **kw)
    shallow = embedding_retrieval_metrics(emb, labels, ids, deep_metrics=False, **kw)
    assert_shallow_equals_deep(shallow, deep)


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("sampled", [False, True])
def test_shares_concatenate_to_the_single_call(gallery, count, sampled):
    """Distributed evaluation: the shares of a shallow search aggregate to the single shallow (and deep) call."""
    emb, labels = gallery
    ids = torch.arange(len(labels)) + 7
    rows = sample_queries(ids, 50, seed=1) if sampled else None
    kw = {"ks": (1, 5), "curve_max_k": 8, "graded": [_gains(10)], "query_rows": rows, "chunk_size": 16}
    parts = [retrieval_per_query(emb, labels, ids, share=(i, count), deep_metrics=False, **kw) for i in range(count)]
    joined = {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
    agg = {
        "ks": (1, 5),
        "curve_max_k": 8,
        "graded": ["tree"],
        "query_ids": ids,
        "query_pool": len(ids) if sampled else None,
    }
    got = aggregate_retrieval(joined, labels, deep_metrics=False, **agg)
    single = aggregate_retrieval(
        retrieval_per_query(emb, labels, ids, deep_metrics=False, **kw), labels, deep_metrics=False, **agg
    )
    deep = aggregate_retrieval(retrieval_per_query(emb, labels, ids, **kw), labels, **agg)
    assert_same_outputs(got, single)
    assert_shallow_equals_deep(got, deep)


def test_matches_the_numpy_oracle(gallery):
    emb, labels = gallery
    ks = (1, 3, 5, 10)
    ours = embedding_retrieval_metrics(emb, labels, ks=ks, curve_max_k=12, deep_metrics=False)
    ref = oracle.retrieval_metrics(emb.numpy(), labels.numpy(), ks=ks, curve_max_k=12)
    assert (
        int(ours["num_queries"]) == ref["num_queries"] and int(ours["num_lone_queries"]) == ref["num_lone_queries"] == 2
    )
    for key in [f"{m}@{k}" for m in ("precision", "recall", "hit", "macro_precision") for k in ks]:
        assert float(ours[key]) == pytest.approx(ref[key], rel=1e-12, abs=1e-12), key
    np.testing.assert_allclose(ours["precision_curve"].numpy(), ref["precision_curve"], rtol=1e-12, atol=1e-12)


def test_the_search_goes_only_to_depth_k(gallery, monkeypatch):
    emb, labels = gallery
    seen = []
    search = SEARCH["search_space"]

    def spy(space, depth, *args):
        seen.append(int(depth.max()) if isinstance(depth, torch.Tensor) else int(depth))
        return search(space, depth, *args)

    monkeypatch.setitem(SEARCH, "search_space", spy)
    embedding_retrieval_metrics(emb, labels, ks=(1, 5), curve_max_k=9, deep_metrics=False)
    embedding_retrieval_metrics(emb, labels, ks=(1, 5), return_neighbors=11, deep_metrics=False)
    embedding_retrieval_metrics(emb, labels, ks=(1, 5))
    assert seen == [9, 11, 59]  # deep mode: the largest R (60 - 1)


def test_no_full_row_fallback_in_shallow_mode(monkeypatch):
    """first_relevant_rank's exact fallback (a full row of products) must not run: the key is absent instead."""
    rng = np.random.default_rng(0)
    emb = torch.tensor(rng.normal(size=(40, 6)), dtype=torch.float32)
    emb[1] = -emb[0]  # query 0's only relevant item is its farthest one
    labels = torch.tensor([0, 0] + [1 + i % 19 for i in range(38)])

    def forbidden(*args, **kwargs):
        raise AssertionError("full-row fallback called in shallow mode")

    monkeypatch.setitem(VALUES, "_first_relevant_rank_full", forbidden)
    out = embedding_retrieval_metrics(emb, labels, ks=(1, 2), deep_metrics=False)
    with pytest.raises(AssertionError, match="full-row fallback"):  # deep mode needs it here: the patch is live
        embedding_retrieval_metrics(emb, labels, ks=(1, 2))
    assert "first_relevant_rank" not in out["per_query"] and float(out["hit@2"]) < 1.0


@pytest.mark.parametrize("sampled", [False, True])
def test_schema_and_outputs_leave_out_the_depth_r_keys(gallery, sampled):
    emb, labels = gallery
    graded = [_gains(10)]
    out = embedding_retrieval_metrics(
        emb, labels, ks=(1, 5), graded=graded, deep_metrics=False, max_queries=30 if sampled else None
    )
    schema = retrieval_output_schema(
        (1, 5), ["tree"], sampled=sampled, mistake_stats={"tree": ["depth"]}, deep_metrics=False
    )
    assert set(out) - {"per_query"} == set(schema)
    assert set(out["per_query"]) == set(schema.per_query)
    assert not (set(schema) | {f"per_query/{k}" for k in schema.per_query}) & DEEP_ONLY
    deep_schema = retrieval_output_schema((1, 5), ["tree"], sampled=sampled, mistake_stats={"tree": ["depth"]})
    assert set(deep_schema) - set(schema) == {k for k in DEEP_ONLY if not k.startswith("per_query/")} & set(deep_schema)
    assert {k: v for k, v in deep_schema.items() if k in schema} == dict(schema.items())


@pytest.mark.parametrize("value", ["false", 0, 1, None, np.bool_(False)])
def test_bad_deep_metrics_is_a_clear_error(gallery, value):
    emb, labels = gallery
    with pytest.raises(ValueError, match="`deep_metrics` must be True or False"):
        embedding_retrieval_metrics(emb, labels, ks=(1,), deep_metrics=value)
    with pytest.raises(ValueError, match="`deep_metrics`"):
        retrieval_per_query(emb, labels, ks=(1,), deep_metrics=value)
    with pytest.raises(ValueError, match="`deep_metrics`"):
        retrieval_output_schema((1,), deep_metrics=value)


def test_aggregating_shallow_rows_as_deep_is_refused(gallery):
    emb, labels = gallery
    rows = retrieval_per_query(emb, labels, ks=(1,), deep_metrics=False)
    with pytest.raises(ValueError, match="deep_metrics=False"):
        aggregate_retrieval(rows, labels, ks=(1,))


def test_lone_and_all_lone_galleries():
    emb, labels = clustered(30, 6, 3, seed=3)
    labels = labels.clone()
    labels[0], labels[1] = 100, 101  # two lone queries
    deep = embedding_retrieval_metrics(emb, labels, ks=(1, 3), return_neighbors=2)
    shallow = embedding_retrieval_metrics(emb, labels, ks=(1, 3), return_neighbors=2, deep_metrics=False)
    assert_shallow_equals_deep(shallow, deep)
    none = embedding_retrieval_metrics(emb[:3], torch.tensor([0, 1, 2]), ks=(1,), deep_metrics=False)
    assert int(none["num_queries"]) == 0 and torch.isnan(none["precision@1"])


@pytest.mark.parametrize("budget", [1, 50, 2**30])
def test_joining_the_search_chunks_changes_no_value(gallery, monkeypatch, budget):
    """Shallow mode joins the search's chunks for its metric code: any join budget gives the same bits."""
    emb, labels = gallery
    kw = {"ks": (1, 5), "graded": [_gains(10)], "return_neighbors": 6, "chunk_size": 16}
    reference = embedding_retrieval_metrics(emb, labels, deep_metrics=False, **kw)
    monkeypatch.setitem(PER_QUERY, "_SHALLOW_JOIN_ELEMENTS", budget)
    assert_same_outputs(embedding_retrieval_metrics(emb, labels, deep_metrics=False, **kw), reference)
