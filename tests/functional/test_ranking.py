"""Ranking metrics over qrels against trec_eval (pytrec-eval-terrier), a hand computation of exponential-gain nDCG,
the worked fusion example, and the rules for unjudged documents."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import pytrec_eval
import torch

from beyondlabels.functional.ranking import (
    fuse_term_scores,
    judge_run,
    query_code,
    ranking_metrics,
    ranking_output_schema,
    term_satisfaction,
)

KS = (1, 3, 5, 10, 20)


def _collection(seed: int, num_queries: int = 40, ties: bool = False):
    """Random graded qrels with unjudged documents, and a scored run over a larger document set."""
    rng = random.Random(seed)
    qrels, run = {}, {}
    for q in range(num_queries):
        qid = f"q{q}" if q % 3 else str(100 + q)
        docs = [f"d{rng.randrange(400)}" for _ in range(rng.randrange(5, 60))]
        docs = list(dict.fromkeys(docs))
        judgements = {}
        for doc in docs:
            u = rng.random()
            if u < 0.35:
                continue  # not in the qrels at all
            judgements[doc] = None if u < 0.45 else rng.choice([0, 0, 0, 1, 1, 2, 3])
        if q % 7 == 0:  # qrels documents the run never retrieves
            judgements[f"extra{q}"] = rng.choice([1, 2])
        qrels[qid] = judgements
        scores = {}
        for doc in docs:
            scores[doc] = round(rng.random(), 1) if ties else rng.random()
        run[qid] = scores
    return qrels, run


def _trec(qrels, run, measures, judged_only=False):
    clean = {q: {d: int(g) for d, g in j.items() if g is not None} for q, j in qrels.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(clean, measures, judged_docs_only_flag=judged_only)
    return evaluator.evaluate(run)


def _ours(qrels, run, ks=KS):
    judged = judge_run(run, qrels)
    out = ranking_metrics(judged.ranked, judged.num_retrieved, judged.pool, ks=ks, query_ids=judged.query_ids)
    return judged, out


@pytest.mark.parametrize("ties", [False, True])
def test_precision_ndcg_linear_and_r_precision_match_trec_eval(ties):
    qrels, run = _collection(seed=3, ties=ties)
    judged, out = _ours(qrels, run)
    cuts = ",".join(str(k) for k in KS)
    reference = _trec(qrels, run, {f"P.{cuts}", f"ndcg_cut.{cuts}", "Rprec"})
    pq = out["per_query"]
    compared = 0
    for i, query in enumerate(judged.queries):
        if pq["num_relevant"][i] == 0:  # lone queries: NaN here, left out of the means
            assert math.isnan(pq["precision@5"][i]) and math.isnan(pq["r_precision"][i])
            continue
        compared += 1
        ref = reference[query]
        for k in KS:
            assert pq[f"precision@{k}"][i].item() == pytest.approx(ref[f"P_{k}"], abs=1e-12), (query, k)
            assert pq[f"ndcg_linear@{k}"][i].item() == pytest.approx(ref[f"ndcg_cut_{k}"], abs=1e-12), (query, k)
        assert pq["r_precision"][i].item() == pytest.approx(ref["Rprec"], abs=1e-12), query
    assert compared >= 30
    # means over the non-lone queries
    kept = [q for i, q in enumerate(judged.queries) if pq["num_relevant"][i] > 0]
    assert out["precision@10"].item() == pytest.approx(np.mean([reference[q]["P_10"] for q in kept]))
    assert out["num_queries"].item() == len(kept)


def test_condensed_precision_matches_trec_eval_judged_docs_only():
    qrels, run = _collection(seed=8)
    judged, out = _ours(qrels, run)
    reference = _trec(qrels, run, {"P." + ",".join(str(k) for k in KS)}, judged_only=True)
    pq = out["per_query"]
    for i, query in enumerate(judged.queries):
        if pq["num_relevant"][i] == 0:
            continue
        for k in KS:
            assert pq[f"condensed_precision@{k}"][i].item() == pytest.approx(reference[query][f"P_{k}"], abs=1e-12), (
                query,
                k,
            )


def _dcg_by_hand(gains):
    return sum(g / math.log2(rank + 1) for rank, g in enumerate(gains, start=1))


def test_exponential_gain_ndcg_by_hand():
    # ranking: grades 3, unjudged, 0, 2, 1 ; qrels also hold an unretrieved grade-3 document and a grade-1 one
    run = {"7": ["a", "b", "c", "d", "e"]}
    qrels = {"7": {"a": 3, "b": None, "c": 0, "d": 2, "e": 1, "f": 3, "g": 1}}
    _, out = _ours(qrels, run, ks=(3, 5))
    dcg5 = (2**3 - 1) / 1 + 0 + 0 + (2**2 - 1) / math.log2(5) + (2**1 - 1) / math.log2(6)
    idcg5 = 7 / 1 + 7 / math.log2(3) + 3 / 2 + 1 / math.log2(5) + 1 / math.log2(6)
    assert out["ndcg@5"].item() == pytest.approx(dcg5 / idcg5, abs=1e-12)
    dcg3, idcg3 = 7.0, 7 + 7 / math.log2(3) + 3 / 2
    assert out["ndcg@3"].item() == pytest.approx(dcg3 / idcg3, abs=1e-12)
    assert out["ndcg_linear@5"].item() == pytest.approx(
        _dcg_by_hand([3, 0, 0, 2, 1]) / _dcg_by_hand([3, 3, 2, 1, 1]), abs=1e-12
    )
    # judged-only precision and coverage: top 3 = 3, unjudged, 0 -> 1 relevant of 2 judged
    assert out["judged_precision@3"].item() == 0.5 and out["judged@3"].item() == 2
    assert out["coverage@3"].item() == pytest.approx(2 / 3)
    assert out["precision@3"].item() == pytest.approx(1 / 3)
    # the condensed top 3 is a, c, d (grades 3, 0, 2): two relevant; the condensed top 5 holds a, c, d, e
    assert out["condensed_precision@3"].item() == pytest.approx(2 / 3)
    assert out["condensed_precision@5"].item() == pytest.approx(3 / 5)
    assert out["num_unjudged"].item() == 1
    assert out["r_precision"].item() == pytest.approx(3 / 5)  # R = 5 (a, d, e, f, g); top 5 holds a, d, e


def test_queries_with_no_judged_document_in_the_top_k_are_left_out_and_counted():
    run = {"1": ["x", "y", "a"], "2": ["a", "b"]}
    qrels = {"1": {"a": 1, "x": None}, "2": {"a": 1, "b": 0}}
    _, out = _ours(qrels, run, ks=(2,))
    pq = out["per_query"]
    assert math.isnan(pq["judged_precision@2"][0]) and pq["judged_precision@2"][1] == 0.5
    assert out["judged_precision@2"].item() == 0.5 and out["num_unjudged_top@2"].item() == 1
    assert out["coverage@2"].item() == pytest.approx(0.5)  # 0/2 and 2/2


def test_unjudged_never_count_as_non_relevant_in_judged_only_metrics():
    qrels = {"1": {"a": 1, "b": 0}}
    base = ranking_metrics(*_args(judge_run({"1": ["a", "b"]}, qrels)), ks=(2,))
    padded = ranking_metrics(*_args(judge_run({"1": ["u1", "a", "u2", "b"]}, qrels)), ks=(4,))
    assert base["judged_precision@2"].item() == padded["judged_precision@4"].item() == 0.5
    assert padded["precision@4"].item() == 0.25  # plain precision counts them as non-relevant


def _args(judged):
    return judged.ranked, judged.num_retrieved, judged.pool


def test_outputs_follow_the_schema_and_query_ids():
    qrels, run = _collection(seed=1, num_queries=6)
    judged, out = _ours(qrels, run, ks=(5,))
    schema = ranking_output_schema((5,))
    assert set(out) - {"per_query"} == set(schema)
    assert set(out["per_query"]) == set(schema.per_query)
    assert out["per_query"]["query_id"].tolist() == [query_code(q) for q in judged.queries]
    assert query_code("100") == 100


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match=r"^qrels: query '1', document 'a' has grade 0\.5; grades are ints"):
        judge_run({"1": ["a"]}, {"1": {"a": 0.5}})
    with pytest.raises(ValueError, match=r"^run: query '1' lists document 'a' twice"):
        judge_run({"1": ["a", "a"]}, {"1": {"a": 1}})
    with pytest.raises(
        ValueError,
        match=r"^no query is in both the run \(2 queries, e\.g\. \['1', '3'\]\) and the qrels \(1, e\.g\. \['2'\]\)",
    ):
        judge_run({"1": ["a"], "3": ["b"]}, {"2": {"a": 1}})
    with pytest.raises(ValueError, match=r"^`relevance_level` must be a positive int .*got 0\.$"):
        ranking_metrics(torch.zeros(1, 1), torch.tensor([1]), torch.zeros(1, 1), relevance_level=0)


def test_term_fusion_worked_example():
    scores, weights = torch.tensor([1.00, 0.00]), torch.tensor([0.8, 1.0])
    arithmetic = fuse_term_scores(scores, weights).item() * 100
    geometric = fuse_term_scores(scores, weights, method="geometric").item() * 100
    assert round(arithmetic, 1) == 44.4
    # the formula exp((0.8 ln 1 + 1.0 ln 1e-3) / 1.8) = 2.15..., not the 0.5 the source text printed
    assert round(geometric, 1) == 2.2
    assert geometric == pytest.approx(100 * math.exp((0.8 * math.log(1.0) + 1.0 * math.log(1e-3)) / 1.8))
    assert term_satisfaction(scores).item() == 0.5
    assert term_satisfaction(torch.tensor([0.15, 0.149])).item() == 0.5  # the threshold itself satisfies
