"""Every ranking measure against trec_eval (pytrec-eval-terrier) on generated runs and qrels: ties in scores, unjudged
and unlisted documents, negative grades (-1, -2), queries without relevant documents, queries in only one of the run
and the qrels, runs shorter than k; the kernel through judge_run and the GradedRanking class over the same data."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import pytrec_eval
import torch

from beyondlabels.functional.ranking import judge_run, ranking_metrics
from beyondlabels.metrics import GradedRanking

KS = (1, 5, 10)
CUTS = ",".join(str(k) for k in KS)
# our key -> trec_eval's per-query name, and the measures to ask pytrec_eval for
MEASURES = {f"P.{CUTS}", f"recall.{CUTS}", f"success.{CUTS}", f"ndcg_cut.{CUTS}", "map", "recip_rank", "bpref", "Rprec"}
PAIRS = [
    *((f"precision@{k}", f"P_{k}") for k in KS),
    *((f"recall@{k}", f"recall_{k}") for k in KS),
    *((f"success@{k}", f"success_{k}") for k in KS),
    *((f"ndcg_linear@{k}", f"ndcg_cut_{k}") for k in KS),
    ("map", "map"),
    ("recip_rank", "recip_rank"),
    ("bpref", "bpref"),
    ("r_precision", "Rprec"),
]
GRADES = [-2, -1, 0, 0, 0, 1, 1, 2, 3]


def _collection(seed: int, num_queries: int = 60):
    """Qrels ``{q: {doc: grade or None}}`` and a scored run, with every awkward case of the module docstring."""
    rng = random.Random(seed)
    qrels, run = {}, {}
    for q in range(num_queries):
        qid = str(500 + q) if q % 2 else f"t{q}"
        pool = list(dict.fromkeys(f"d{rng.randrange(300)}" for _ in range(rng.randrange(1, 40))))
        kind = q % 10
        judgements: dict[str, int | None] = {}
        for doc in pool:
            u = rng.random()
            if u < 0.25:
                continue  # retrieved but not in the qrels
            judgements[doc] = None if u < 0.35 else rng.choice(GRADES)
        for extra in range(rng.randrange(0, 4)):  # judged documents the run never retrieves
            judgements[f"x{q}-{extra}"] = rng.choice(GRADES)
        if kind == 1:  # no relevant document: only non-relevant and negative grades
            judgements = {d: (g if g is None or g < 1 else rng.choice([-2, -1, 0])) for d, g in judgements.items()}
        if q == 4:  # relevant documents and an empty ranking
            judgements["x4-relevant"] = 3
        if kind != 2:  # kind 2: in the run only
            qrels[qid] = judgements
        if kind == 3:  # in the qrels only
            continue
        docs = pool[: rng.randrange(1, 4)] if kind == 4 else pool  # runs shorter than k
        docs = [] if q == 4 else docs
        # ties: scores on a coarse grid, so documents of one score are ordered by id
        run[qid] = {d: round(rng.random(), 1) if seed % 2 == 0 else float(rng.randrange(4)) for d in docs}
    qrels["t0"] = {"d1": 1, "d2": -1}  # keep one fixed query in both
    run.setdefault("t0", {})["d2"] = 0.5
    return qrels, run


def _oracle_qrels(qrels):
    """The qrels as trec_eval reads them: ints only; a listed but unjudged document (None) is left out."""
    return {q: {d: int(g) for d, g in j.items() if g is not None} for q, j in qrels.items()}


def _trec(qrels, run, relevance_level=1, judged_only=False, measures=MEASURES):
    evaluator = pytrec_eval.RelevanceEvaluator(
        _oracle_qrels(qrels), measures, relevance_level=relevance_level, judged_docs_only_flag=judged_only
    )
    return evaluator.evaluate({q: docs for q, docs in run.items() if docs})


@pytest.mark.parametrize(("seed", "level"), [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2)])
def test_every_measure_equals_trec_eval(seed, level):
    qrels, run = _collection(seed)
    judged = judge_run(run, qrels)
    out = ranking_metrics(
        judged.ranked, judged.num_retrieved, judged.pool, ks=KS, relevance_level=level, query_ids=judged.query_ids
    )
    reference = _trec(qrels, run, level)
    condensed = _trec(qrels, run, level, judged_only=True, measures={f"P.{CUTS}"})
    pq = out["per_query"]
    assert set(judged.queries_without_qrels) == {q for q in run if q not in qrels}
    assert set(judged.queries_without_run) == {q for q in qrels if q not in run}
    compared, lone, empty = 0, 0, 0
    kept = []
    for i, query in enumerate(judged.queries):
        if pq["num_relevant"][i] == 0:
            lone += 1  # trec_eval reports 0 here (nDCG: its value); we report NaN and leave the query out of the means
            for key, _ in PAIRS:
                assert math.isnan(pq[key][i]), (query, key)
            if query in reference:
                assert all(reference[query][name] == 0.0 for _, name in PAIRS if not name.startswith("ndcg")), query
            continue
        kept.append(query)
        if not run[query]:
            empty += 1  # trec_eval skips a query with no retrieved document; every measure is 0 then
            assert all(pq[key][i].item() == 0.0 for key, _ in PAIRS), query
            continue
        compared += 1
        ref = reference[query]
        for key, name in PAIRS:
            assert pq[key][i].item() == pytest.approx(ref[name], abs=1e-12), (query, key)
        for k in KS:
            assert pq[f"condensed_precision@{k}"][i].item() == pytest.approx(condensed[query][f"P_{k}"], abs=1e-12), (
                query,
                k,
            )
    assert compared >= 25 and lone >= 3 and empty >= 1
    for key, name in PAIRS:  # means over the queries with a relevant document
        expected = np.mean([reference[q][name] if run[q] else 0.0 for q in kept])
        assert out[key].item() == pytest.approx(expected, abs=1e-12), key


def test_negative_grades_are_pooled_but_not_judged():
    # ranking: c (-1), d (-2), a (1), x (not in the qrels), b (0), e (2); R = 2 (a, e), N = 1 (b)
    qrels = {"1": {"a": 1, "b": 0, "c": -1, "d": -2, "e": 2}}
    run = {"1": {"c": 0.9, "d": 0.8, "a": 0.7, "x": 0.6, "b": 0.5, "e": 0.4}}
    judged = judge_run(run, qrels)
    out = ranking_metrics(judged.ranked, judged.num_retrieved, judged.pool, ks=(1, 2, 5))
    # by hand: precision counts -1 / -2 as non-relevant; the judged-only measures skip them
    assert out["precision@5"].item() == pytest.approx(1 / 5)
    assert out["condensed_precision@1"].item() == 1.0  # condensed list a, b, e
    assert out["condensed_precision@2"].item() == 0.5
    assert out["judged@5"].item() == 2 and out["num_unjudged"].item() == 3
    assert out["bpref"].item() == pytest.approx((1.0 + (1 - 1 / 1)) / 2)  # a: no judged non-relevant above; e: b above
    assert out["map"].item() == pytest.approx((1 / 3 + 2 / 6) / 2)
    assert out["recip_rank"].item() == pytest.approx(1 / 3)
    # nDCG: negative grades gain 0, as in trec_eval
    assert out["ndcg_linear@5"].item() == pytest.approx((1 / math.log2(4)) / (2 + 1 / math.log2(3)))  # e is at rank 6
    assert out["ndcg_linear@2"].item() == 0.0  # -1 and -2 at ranks 1 and 2 gain 0, not less
    ref = _trec(qrels, run, measures={"bpref", "map", "recip_rank", "P.5", "ndcg_cut.5"})["1"]
    assert (ref["bpref"], ref["map"], ref["recip_rank"], ref["P_5"]) == pytest.approx(
        (out["bpref"].item(), out["map"].item(), out["recip_rank"].item(), out["precision@5"].item()), abs=1e-12
    )
    assert ref["ndcg_cut_5"] == pytest.approx(out["ndcg_linear@5"].item(), abs=1e-12)


def _rows(qrels, run, queries):
    """Score and grade rows for GradedRanking: the run's documents and the judged ones, columns by id descending (so
    the class's ties, earlier column first, are trec_eval's); -inf = not retrieved, NaN = unjudged."""
    width = max(len(set(run[q]) | set(qrels[q])) for q in queries)
    scores = torch.full((len(queries), width), -math.inf, dtype=torch.float64)
    grades = torch.full((len(queries), width), math.nan, dtype=torch.float64)
    for i, q in enumerate(queries):
        for j, doc in enumerate(sorted(set(run[q]) | set(qrels[q]), reverse=True)):
            if doc in run[q]:
                scores[i, j] = run[q][doc]
            if qrels[q].get(doc) is not None:
                grades[i, j] = qrels[q][doc]
    return scores, grades


def test_ranking_audit_in_two_updates_equals_the_kernel_and_trec_eval():
    qrels, run = _collection(seed=6)
    judged = judge_run(run, qrels)
    kernel = ranking_metrics(judged.ranked, judged.num_retrieved, judged.pool, ks=KS, query_ids=judged.query_ids)
    scores, grades = _rows(qrels, run, judged.queries)
    assert bool((grades < 0).any())  # negative grades reach the class
    metric = GradedRanking(ks=KS)
    half = len(judged.queries) // 2
    metric.update(scores[:half], grades[:half], judged.query_ids[:half])
    metric.update(scores[half:], grades[half:], judged.query_ids[half:])
    out = metric.compute()
    order = torch.argsort(judged.query_ids)  # the class returns queries in id order
    assert out["per_query"]["query_id"].tolist() == judged.query_ids[order].tolist()
    reference = _trec(qrels, run)
    compared = 0
    for key in kernel:
        if key == "per_query":
            continue
        assert torch.equal(out[key].isnan(), kernel[key].isnan()), key
        assert out[key].nan_to_num(0.0).item() == pytest.approx(kernel[key].nan_to_num(0.0).item(), abs=1e-12), key
    for key, value in kernel["per_query"].items():
        mine = out["per_query"][key]
        assert torch.equal(mine.isnan(), value[order].isnan()), key
        assert torch.allclose(
            mine.nan_to_num(0.0).double(), value[order].nan_to_num(0.0).double(), rtol=0, atol=1e-12
        ), key
    for i, code in enumerate(out["per_query"]["query_id"].tolist()):
        query = judged.queries[judged.query_ids.tolist().index(code)]
        if out["per_query"]["num_relevant"][i] == 0 or not run[query]:
            continue
        compared += 1
        for key, name in PAIRS:
            assert out["per_query"][key][i].item() == pytest.approx(reference[query][name], abs=1e-12), (query, key)
    assert compared >= 25


def test_grades_that_are_not_ints_are_clear_errors():
    with pytest.raises(
        ValueError, match=r"^qrels: query '1', document 'a' has grade 1\.5; grades are ints \(negative: pooled"
    ):
        judge_run({"1": ["a"]}, {"1": {"a": 1.5}})
    with pytest.raises(ValueError, match=r"^qrels: query '1', document 'a' has grade 'x'; grades are ints"):
        judge_run({"1": ["a"]}, {"1": {"a": "x"}})
    with pytest.raises(ValueError, match=r"^`grades` must be ints \(negative: pooled but not judged"):
        GradedRanking(ks=(1,)).update(torch.tensor([[0.5, 0.2]]), torch.tensor([[-1.5, 1.0]]))
    with pytest.raises(ValueError, match=r"^grades must be finite numbers"):
        ranking_metrics(torch.tensor([[math.inf]]), torch.tensor([1]), torch.tensor([[1.0]]))
