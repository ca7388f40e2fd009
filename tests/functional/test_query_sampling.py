"""max_queries: a fixed, seeded sample of queries searched against the whole gallery, with standard errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from beyondlabels.functional import (  # noqa: E402
    aggregate_retrieval,
    embedding_retrieval_metrics,
    retrieval_per_query,
)
from beyondlabels.functional.retrieval import retrieval_output_schema, sample_queries  # noqa: E402
from tests.oracles.outputs import assert_same_outputs
from tests.oracles.retrieval_data import clustered

KS = (1, 5)


@pytest.fixture(scope="module")
def data():
    emb, labels = clustered(600, 12, 8, seed=4, noise=1.6)
    ids = torch.randperm(600, generator=torch.Generator().manual_seed(2)) * 5 + 7
    return emb, labels, ids


def test_sampled_queries_get_exactly_their_full_search_values(data):
    emb, labels, ids = data
    full = embedding_retrieval_metrics(emb, labels, ids, ks=KS)
    sampled = embedding_retrieval_metrics(emb, labels, ids, ks=KS, max_queries=100, query_seed=3)
    chosen = sample_queries(ids, 100, seed=3)
    assert chosen.numel() == 100 and torch.equal(sampled["per_query"]["query_id"], ids[chosen])
    for key, value in sampled["per_query"].items():
        assert torch.equal(value.nan_to_num(-1.0), full["per_query"][key][chosen].nan_to_num(-1.0)), key
    assert int(sampled["num_query_pool"]) == 600
    assert int(sampled["num_queries"]) + int(sampled["num_lone_queries"]) == 100
    assert set(sampled) - {"per_query"} == set(retrieval_output_schema(KS, sampled=True))


def test_standard_errors_match_a_numpy_computation(data):
    emb, labels, ids = data
    out = embedding_retrieval_metrics(emb, labels, ids, ks=KS, max_queries=150, query_seed=1)
    ok = out["per_query"]["num_relevant"].numpy() > 0
    n = int(ok.sum())
    for key in ("precision@1", "r_precision", "map@r", "ndcg@5", "mean_first_relevant_rank"):
        values = out["per_query"][key.replace("mean_", "")].numpy()[ok]
        expected = np.std(values, ddof=1) / math.sqrt(n) * math.sqrt((600 - n) / (600 - 1))
        assert float(out[f"{key}_se"]) == pytest.approx(expected, rel=1e-12), key
    # the full-search mean lies within a few standard errors of the sample mean (fixed seeds: no flakiness)
    full = embedding_retrieval_metrics(emb, labels, ids, ks=KS)
    for key in ("precision@1", "r_precision", "map@r"):
        assert abs(float(out[key]) - float(full[key])) < 4 * float(out[f"{key}_se"]), key


def test_a_sample_as_large_as_the_pool_is_exact(data):
    emb, labels, ids = data
    full = embedding_retrieval_metrics(emb, labels, ids, ks=KS)
    whole = embedding_retrieval_metrics(emb, labels, ids, ks=KS, max_queries=10_000)
    se = {k: whole.pop(k) for k in list(whole) if k.endswith("_se")}
    assert all(float(v) == 0.0 for v in se.values()) and int(whole.pop("num_query_pool")) == 600
    assert_same_outputs(whole, full)


def test_the_sample_depends_on_ids_and_seed_only(data):
    _, _, ids = data
    chosen = set(ids[sample_queries(ids, 50, seed=9)].tolist())
    perm = torch.randperm(600, generator=torch.Generator().manual_seed(5))
    assert set(ids[perm][sample_queries(ids[perm], 50, seed=9)].tolist()) == chosen
    # gathered from two ranks in another order, with padding repeats dropped: the same ids
    assert set(ids[perm[:300]].tolist() + ids[perm[300:]].tolist()) == set(ids.tolist())
    assert set(ids[sample_queries(ids, 50, seed=10)].tolist()) != chosen
    # a larger sample of the same pool keeps the smaller one
    assert chosen <= set(ids[sample_queries(ids, 80, seed=9)].tolist())


def test_shares_of_a_sample_give_the_single_result(data):
    emb, labels, ids = data
    rows = sample_queries(ids, 120, seed=0)
    single = retrieval_per_query(emb, labels, ids, ks=KS, query_rows=rows, chunk_size=32)
    parts = [
        retrieval_per_query(emb, labels, ids, ks=KS, query_rows=rows, chunk_size=32, share=(i, 3)) for i in range(3)
    ]
    joined = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    assert_same_outputs(
        aggregate_retrieval(joined, labels, ks=KS, query_ids=ids, query_pool=600),
        aggregate_retrieval(single, labels, ks=KS, query_ids=ids, query_pool=600),
    )


@pytest.mark.parametrize(
    ("kwargs", "name"), [({"max_queries": 0}, "max_queries"), ({"max_queries": 5, "query_seed": 1.5}, "seed")]
)
def test_bad_sampling_arguments(data, kwargs, name):
    emb, labels, ids = data
    with pytest.raises(ValueError, match=name):
        embedding_retrieval_metrics(emb, labels, ids, ks=KS, **kwargs)
