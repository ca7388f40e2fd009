"""Ranking metrics on large but legal input: exponential-gain nDCG at grades of 1024 and more (2**g overflows a
float64) against an exact rational oracle, unchanged bit for bit at ordinary grades; a judged run evaluated in
groups of queries gives the dense table's numbers while no table is wider than the documents its queries rank."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
import torch

from beyondlabels.functional.ranking import (
    judge_run,
    ranking_metrics,
    ranking_per_query,
)


def _ndcg_oracle(ranked: list[int | None], pool: list[int], k: int) -> float:
    """trec_eval's ndcg_cut_k with gain 2**g - 1, in exact rationals (the discounts as the floats they are)."""

    def dcg(grades: list[int | None]) -> Fraction:
        total = Fraction(0)
        for i, g in enumerate(grades[:k]):
            if g is not None and g > 0:
                total += Fraction(2**g - 1) * Fraction(1.0 / math.log2(i + 2))
        return total

    return float(dcg(ranked) / dcg(sorted((g for g in pool if g > 0), reverse=True)))


@pytest.mark.parametrize(
    "ranked, pool",
    [
        ([1024, 1], [1024, 1]),
        ([1, 1024], [1024, 1]),
        ([None, 1, 2000], [2000, 1999, 1]),
        ([5000, 4999, 0], [5000, 4999, 4998]),
        ([3, 1100, None, 2], [1100, 3, 2, 0]),
    ],
)
def test_exponential_ndcg_at_grades_that_overflow_two_to_the_g_is_exact(ranked, pool):
    qrels = {"q": {f"p{i}": g for i, g in enumerate(pool)}}
    docs = []
    for g in ranked:
        match = (
            next((d for d, grade in qrels["q"].items() if grade == g and d not in docs), None)
            if g is not None
            else None
        )
        docs.append(match or f"unjudged{len(docs)}")
    judged = judge_run({"q": docs}, qrels)
    out = ranking_metrics(judged.ranked, judged.num_retrieved, judged.pool, ks=(3,))
    assert out["num_queries"] == 1 and not math.isnan(float(out["ndcg@3"]))
    assert float(out["ndcg@3"]) == pytest.approx(_ndcg_oracle(ranked, pool, 3), rel=1e-12)
    assert 0.0 <= float(out["ndcg@3"]) <= 1.0


def _unscaled_ndcg(ranked: torch.Tensor, num_retrieved: torch.Tensor, pool: torch.Tensor, k: int) -> list[float]:
    """The definition as written, before any scaling, in Python floats: the sum of (2**g - 1) / log2(i + 1) over
    the top k, from the top rank down, over the same sum of the ideal ranking; NaN without a positive ideal."""
    out = []
    for row, length, judged in zip(ranked.tolist(), num_retrieved.tolist(), pool.tolist()):
        ideal = sorted((g if g >= 0 else 0.0 for g in judged if g == g), reverse=True)
        gains = [g if (i < length and g == g and g >= 0) else 0.0 for i, g in enumerate(row)]

        def dcg(grades: list[float]) -> float:
            total = 0.0
            for i, g in enumerate(grades[:k]):
                total += (2.0**g - 1.0) * (1.0 / math.log2(i + 2))
            return total

        out.append(dcg(gains) / dcg(ideal) if dcg(ideal) > 0 else math.nan)
    return out


def test_ordinary_grades_give_the_unscaled_values_bit_for_bit():
    gen = torch.Generator().manual_seed(5)
    q, width = 300, 40
    ranked = torch.randint(-2, 6, (q, width), generator=gen).double()
    ranked[torch.rand(q, width, generator=gen) < 0.2] = float("nan")
    pool = torch.randint(-1, 6, (q, 25), generator=gen).double()
    pool[:, 0] = 1.0  # every query has a relevant document
    lengths = torch.randint(0, width + 1, (q,), generator=gen)
    for k in (1, 5, 10, 40):
        got = ranking_per_query(ranked, lengths, pool, ks=(k,))[f"ndcg@{k}"].tolist()
        expected = _unscaled_ndcg(ranked, lengths, pool, k)
        assert [math.isnan(v) for v in got] == [math.isnan(v) for v in expected]
        assert [v for v in got if v == v] == [v for v in expected if v == v]


def _random_run(seed: int, queries: int, long_query: int = 0) -> tuple[dict, dict]:
    rng = random.Random(seed)
    run, qrels = {}, {}
    for q in range(queries):
        n = long_query if (long_query and q == queries // 2) else rng.randint(0, 12)
        run[str(q)] = {f"d{d}": rng.choice([0.5, 1.0, rng.random()]) for d in range(n)}
        qrels[str(q)] = {f"d{d}": rng.choice([None, -1, 0, 0, 1, 2, 3]) for d in range(0, 2 * 12, 2)}
    return run, qrels


def test_judging_in_groups_gives_the_dense_tables_numbers_bit_for_bit():
    run, qrels = _random_run(3, 400, long_query=3000)
    judged = judge_run(run, qrels)
    ks = (1, 5, 10, 100)
    dense = ranking_metrics(judged.ranked, judged.num_retrieved, judged.pool, ks=ks, query_ids=judged.query_ids)
    for max_cells in (1, 64, 512, 1 << 20):
        grouped = judged.metrics(ks=ks, max_cells=max_cells)
        pairs = [(k, grouped[k], v) for k, v in dense.items() if k != "per_query"]
        pairs += [(k, grouped["per_query"][k], v) for k, v in dense["per_query"].items()]
        for key, got, expected in pairs:
            assert torch.equal(got.double().nan_to_num(-7.0), expected.double().nan_to_num(-7.0)), (max_cells, key)


def test_a_judged_run_holds_the_documents_it_ranks_not_a_padded_table():
    """One 3000-document ranking among 400 short ones: the judged run stores about the documents ranked, and no
    group it evaluates is wider than its own queries' rankings (at most max_cells cells, or one query's ranking)."""
    run, qrels = _random_run(4, 400, long_query=3000)
    judged = judge_run(run, qrels)
    ranked_documents = sum(len(v) for v in run.values())
    assert judged.grades.numel() == ranked_documents
    assert judged.num_retrieved.sum() == ranked_documents
    groups = list(judged.groups(max_cells=512))
    assert sorted(int(i) for rows, _, _, _ in groups for i in rows) == list(range(400))
    for rows, ranked, _, pool in groups:
        assert ranked.numel() <= max(512, 3000) and pool.numel() <= max(512, pool.shape[1])
        assert ranked.shape[0] == rows.numel()
