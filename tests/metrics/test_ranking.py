"""GradedRanking: against trec_eval (pytrec-eval-terrier) on score/grade rows, split updates and forward, validation,
and a two-process gloo run equal to one process."""

from __future__ import annotations

import math
import random

import pytest
import pytrec_eval
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from beyondlabels.metrics import GradedRanking
from tests.ddp import gloo_store, init_gloo

KS = (1, 5, 10)
WIDTH = 30


def _rows(num_queries: int = 48, seed: int = 0):
    """Score/grade rows (NaN = unjudged, -inf = not retrieved) and the same data as trec_eval dicts."""
    rng = random.Random(seed)
    scores = torch.full((num_queries, WIDTH), float("-inf"), dtype=torch.float64)
    grades = torch.full((num_queries, WIDTH), float("nan"), dtype=torch.float64)
    qrels, run = {}, {}
    for q in range(num_queries):
        qid = str(1000 + q)
        qrels[qid], run[qid] = {}, {}
        n = rng.randrange(3, WIDTH)
        for j in range(WIDTH):
            doc = f"d{j:02d}"
            u = rng.random()
            grade = None if u < 0.3 else rng.choice([0, 0, 1, 2, 3])
            if j < n:
                score = rng.random()
                scores[q, j] = score
                run[qid][doc] = score
            elif grade is None:
                continue
            if grade is not None:
                grades[q, j] = grade
                qrels[qid][doc] = grade
    ids = torch.arange(num_queries) + 1000
    return scores, grades, ids, qrels, run


def test_matches_trec_eval_per_query():
    scores, grades, ids, qrels, run = _rows()
    metric = GradedRanking(ks=KS)
    metric.update(scores, grades, ids)
    out = metric.compute()
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"P.1,5,10", "ndcg_cut.1,5,10", "Rprec"}).evaluate(run)
    condensed = pytrec_eval.RelevanceEvaluator(qrels, {"P.1,5,10"}, judged_docs_only_flag=True).evaluate(run)
    pq = out["per_query"]
    compared = 0
    for i, qid in enumerate(pq["query_id"].tolist()):
        if pq["num_relevant"][i] == 0:
            continue
        compared += 1
        ref = reference[str(qid)]
        for k in KS:
            assert pq[f"precision@{k}"][i].item() == pytest.approx(ref[f"P_{k}"], abs=1e-12)
            assert pq[f"ndcg_linear@{k}"][i].item() == pytest.approx(ref[f"ndcg_cut_{k}"], abs=1e-12)
            assert pq[f"condensed_precision@{k}"][i].item() == pytest.approx(condensed[str(qid)][f"P_{k}"], abs=1e-12)
        assert pq["r_precision"][i].item() == pytest.approx(ref["Rprec"], abs=1e-12)
    assert compared > 35


def _flat(out):
    items = {}
    for key, value in out.items():
        if isinstance(value, dict):
            items.update({f"{key}/{k}": v for k, v in value.items()})
        else:
            items[key] = value
    return items


def assert_same(a, b):
    fa, fb = _flat(a), _flat(b)
    assert fa.keys() == fb.keys()
    for key in fa:
        if key == "num_duplicates":
            continue
        x, y = fa[key], fb[key]
        assert x.shape == y.shape, key
        assert torch.equal(torch.isnan(x), torch.isnan(y)) and torch.equal(x.nan_to_num(0.0), y.nan_to_num(0.0)), key


def test_split_updates_forward_and_order_agree_with_one_update():
    scores, grades, ids, _, _ = _rows(seed=2)
    one = GradedRanking(ks=KS)
    one.update(scores, grades, ids)
    ref = one.compute()
    split = GradedRanking(ks=KS)
    perm = torch.randperm(len(ids), generator=torch.Generator().manual_seed(0))
    for s in range(0, len(ids), 7):
        part = perm[s : s + 7]
        assert split(scores[part], grades[part], ids[part]) is None  # no per-batch value
    assert_same(split.compute(), ref)
    assert set(ref) - {"per_query"} == set(one.output_schema())


def test_ties_go_to_the_earlier_column():
    metric = GradedRanking(ks=(1,))
    metric.update(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.0, 1.0]]))
    assert metric.compute()["precision@1"].item() == 0.0


@pytest.mark.parametrize(
    ("kwargs", "update", "match"),
    [
        ({"ks": (0,)}, None, "ks"),
        ({"relevance_level": 0}, None, "relevance_level"),
        ({}, (torch.tensor([[0.1, float("nan")]]), torch.tensor([[1.0, 0.0]])), "scores"),
        ({}, (torch.tensor([[0.1, 0.2]]), torch.tensor([[1.5, 0.0]])), "grades"),
        ({}, (torch.tensor([[0.1, 0.2]]), torch.tensor([[1.0]])), "grades"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, update, match):
    with pytest.raises(ValueError, match=match):
        metric = GradedRanking(**kwargs)
        metric.update(*update)


def _worker(rank, world, store, shards, out_path):
    init_gloo(rank, world, store)
    try:
        scores, grades, ids = shards[rank]
        metric = GradedRanking(ks=KS)
        for s in range(0, len(ids), 5):
            metric.update(scores[s : s + 5], grades[s : s + 5], ids[s : s + 5])
        torch.save(metric.compute(), f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gloo_equals_single_process(tmp_path):
    scores, grades, ids, _, _ = _rows(seed=4)
    perm = torch.randperm(len(ids), generator=torch.Generator().manual_seed(1))
    r0, r1 = perm[:25], torch.cat([perm[25:], perm[:1]])  # a sampler's repeat of one query
    shards = [(scores[r], grades[r], ids[r]) for r in (r0, r1)]
    single = GradedRanking(ks=KS)
    single.update(scores, grades, ids)
    ref = single.compute()
    mp.spawn(_worker, args=(2, gloo_store(tmp_path), shards, str(tmp_path / "out")), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(f"{tmp_path / 'out'}.{rank}")
        assert int(got["num_duplicates"]) == 1
        assert_same(got, ref)
        assert not math.isnan(got["ndcg@10"].item())
