"""Mismatch analysis: percentile ranks against scipy, statistics against numpy, the Monte Carlo null against a plain
loop and its analytic mean (real class frequencies), the p-value floor, Spearman against scipy, class cosines
against the N^2 computation, validation."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats as sps

from beyondlabels.functional import (
    class_mean_cosine,
    class_pair_spearman,
    frequency_null,
    mismatch_analysis,
    mismatch_output_schema,
    mismatch_pair_table,
    percentile_ranks,
)

COUNTS_FILE = Path(__file__).resolve().parents[1] / "data" / "architecture_style_counts.json"


def random_similarity(c: int, seed: int, grid: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.random((c, c))
    if grid:
        m = np.round(m * grid) / grid  # ties in the pair distribution
    m = (m + m.T) / 2
    np.fill_diagonal(m, 1.0)
    return m


def random_queries(n: int, c: int, seed: int, error: float = 0.4, freq=None):
    rng = np.random.default_rng(seed)
    q = rng.choice(c, size=n, p=freq)
    r = np.where(rng.random(n) < error, rng.integers(0, c, size=n), q)
    return q, r


@pytest.mark.parametrize("kind", ["weak", "strict", "mean", "rank"])
def test_percentile_ranks_match_scipy(kind):
    rng = np.random.default_rng(0)
    reference = np.round(rng.random(40) * 8) / 8  # many ties
    values = np.concatenate([reference[:10], rng.random(10), [-1.0, 2.0]])
    ours = percentile_ranks(values, reference, kind=kind).numpy()
    ref = np.array([sps.percentileofscore(reference, v, kind=kind) for v in values])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)


def test_statistics_match_a_numpy_oracle():
    c = 9
    m = random_similarity(c, 1, grid=10)
    q, r = random_queries(400, c, 2)
    out = mismatch_analysis(torch.tensor(q), torch.tensor(r), m, num_trials=50, seed=1)
    wrong = q != r
    sims = m[q[wrong], r[wrong]]
    pairs = m[np.triu_indices(c, 1)]
    assert out["num_queries"] == 400 and out["num_mismatches"] == wrong.sum()
    assert out["mismatch_rate"] == pytest.approx(wrong.mean())
    assert out["mean_similarity"] == pytest.approx(sims.mean(), abs=1e-12)
    assert out["median_similarity"] == pytest.approx(np.median(sims), abs=1e-12)
    assert out["p75_similarity"] == pytest.approx(np.percentile(sims, 75), abs=1e-12)
    assert out["p90_similarity"] == pytest.approx(np.percentile(sims, 90), abs=1e-12)
    assert out["max_similarity"] == sims.max()
    ranks = [sps.percentileofscore(pairs, s, kind="weak") for s in sims]
    assert out["mean_percentile_rank"] == pytest.approx(np.mean(ranks), abs=1e-10)
    for key, level in (("share_top25", 75), ("share_top10", 90), ("share_top5", 95)):
        assert out[key] == pytest.approx(np.mean(sims >= np.percentile(pairs, level)), abs=1e-12), key
    directed = Counter(zip(q[wrong].tolist(), r[wrong].tolist(), strict=True))
    assert out["num_distinct_pairs"] == len(directed)
    assert out["top5_pair_share"] == pytest.approx(sum(n for _, n in directed.most_common(5)) / wrong.sum())
    per = out["per_query"]
    assert torch.equal(per["mismatch"].bool(), torch.tensor(wrong))
    np.testing.assert_array_equal(per["similarity"].numpy()[wrong], sims)
    assert per["similarity"][~torch.tensor(wrong)].isnan().all()
    scalars = {k for k, v in out.items() if k not in ("per_query", "null")}
    assert scalars == set(mismatch_output_schema().scalar_keys())
    assert set(per) == set(mismatch_output_schema().per_query)


def loop_null(q, m, freq, trials, rng):
    """Plain-loop reference of the frequency-aware null (numpy draws, one mismatch at a time)."""
    out = np.empty(trials)
    classes = np.arange(len(freq))
    for t in range(trials):
        total = 0.0
        for qi in q:
            w = np.where(classes == qi, 0.0, freq)
            total += m[qi, rng.choice(classes, p=w / w.sum())]
        out[t] = total / len(q)
    return out


def analytic_null_mean(q, m, freq):
    vals = []
    for qi in q:
        w = np.array(freq, dtype=float)
        w[qi] = 0.0
        vals.append((w * m[qi]).sum() / w.sum())
    return float(np.mean(vals))


def test_null_matches_a_plain_loop_reference_in_distribution():
    c = 5
    m = random_similarity(c, 3)
    freq = np.array([10.0, 3.0, 0.0, 5.0, 1.0])  # a class of zero frequency is never drawn
    q = np.array([0, 0, 1, 3, 4, 4, 2])
    ours = frequency_null(torch.tensor(q), m, torch.tensor(freq), num_trials=20_000, seed=5).numpy()
    ref = loop_null(q, m, freq, 3000, np.random.default_rng(0))
    se = ref.std() / np.sqrt(len(ref))
    assert abs(ours.mean() - ref.mean()) < 5 * se
    assert ours.std() == pytest.approx(ref.std(), rel=0.06)
    assert ours.mean() == pytest.approx(analytic_null_mean(q, m, freq), abs=5 * ours.std() / np.sqrt(len(ours)))
    # the values a trial can take: every draw avoids the zero-frequency class
    never = frequency_null(torch.tensor([0]), m, torch.tensor(freq), num_trials=2000, seed=1).numpy()
    assert set(np.round(never, 12)) <= {round(m[0, j], 12) for j in (1, 3, 4)}


def test_null_with_two_classes_is_exact():
    m = [[1.0, 0.3], [0.3, 1.0]]
    null = frequency_null(torch.tensor([0, 1, 1]), m, torch.tensor([4.0, 1.0]), num_trials=7)
    assert null.tolist() == [pytest.approx(0.3, abs=1e-15)] * 7


def _real_counts():
    counts = json.loads(COUNTS_FILE.read_text())["kept_counts"]
    assert len(counts) == 23 and sum(counts.values()) == 9315
    return np.array(list(counts.values()), dtype=float)


def test_null_mean_matches_its_analytic_value_with_real_class_frequencies():
    freq = _real_counts()
    c = len(freq)
    m = random_similarity(c, 7)
    rng = np.random.default_rng(3)
    q = rng.choice(c, size=2465, p=freq / freq.sum())  # the paper's number of mismatches
    r = (q + rng.integers(1, c, size=q.size)) % c  # every query a mismatch
    out = mismatch_analysis(torch.tensor(q), torch.tensor(r), m, counts=freq, num_trials=2000, seed=42)
    expected = analytic_null_mean(q, m, freq)
    assert out["null_mean"] == pytest.approx(expected, abs=5 * out["null_std"] / np.sqrt(2000))
    assert out["null_ci95_low"] < expected < out["null_ci95_high"]
    # the null's spread is that of a mean over 2465 draws: about the per-draw sd / sqrt(2465)
    per_draw_var = []
    for qi in q[:300]:
        w = freq.copy()
        w[qi] = 0
        p = w / w.sum()
        mu = (p * m[qi]).sum()
        per_draw_var.append((p * (m[qi] - mu) ** 2).sum())
    assert out["null_std"] == pytest.approx(np.sqrt(np.mean(per_draw_var) / q.size), rel=0.15)


def test_null_mean_follows_very_uneven_frequencies_themselves():
    """Counts spanning five orders of magnitude, with the most frequent classes the least similar: the null mean is
    the frequency-weighted one, far (in null standard errors) from the mean under any flattening of the counts
    (``sqrt(f)``, uniform)."""
    freq = np.array([20000.0, 5000.0, 800.0, 120.0, 30.0, 6.0, 2.0, 1.0])
    c = len(freq)
    m = np.fromfunction(lambda a, b: 0.1 + 0.8 * (a + b) / (2 * (c - 1)), (c, c))  # similarity grows with rarity
    np.fill_diagonal(m, 1.0)
    rng = np.random.default_rng(11)
    q = rng.integers(0, c, size=400)
    r = (q + rng.integers(1, c, size=q.size)) % c
    out = mismatch_analysis(torch.tensor(q), torch.tensor(r), m, counts=freq, num_trials=4000, seed=8)
    expected = analytic_null_mean(q, m, freq)
    standard_error = out["null_std"] / np.sqrt(4000)
    assert out["null_mean"] == pytest.approx(expected, abs=5 * standard_error)
    for flattened in (np.sqrt(freq), np.ones(c)):
        assert abs(analytic_null_mean(q, m, flattened) - expected) > 100 * standard_error


def test_p_value_floor_when_no_trial_reaches_the_observation():
    m = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 0.1], [0.1, 0.1, 1.0]])
    q = np.zeros(60, dtype=int)
    r = np.ones(60, dtype=int)  # every mismatch at the most similar pair
    out = mismatch_analysis(torch.tensor(q), torch.tensor(r), m, counts=[1, 1, 1], num_trials=999, seed=0)
    assert out["null_max"] < out["mean_similarity"]
    assert out["p_value"] == 1 / 1000
    # an observation every trial reaches: p = 1
    out = mismatch_analysis(torch.tensor(q), torch.tensor(np.full(60, 2)), m, counts=[1, 1, 1], num_trials=99, seed=0)
    assert out["p_value"] == 1.0


def test_null_is_seeded():
    m = random_similarity(6, 1)
    q = torch.tensor([0, 1, 2, 3, 4, 5, 0, 1])
    f = torch.ones(6)
    a = frequency_null(q, m, f, num_trials=300, seed=3)
    assert torch.equal(a, frequency_null(q, m, f, num_trials=300, seed=3))
    assert not torch.equal(a, frequency_null(q, m, f, num_trials=300, seed=4))


def test_class_mean_cosine_equals_the_n_squared_mean():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6))
    lab = rng.integers(0, 5, size=40)
    lab[lab == 3] = 4  # class 3 has no sample
    cos, n = class_mean_cosine(torch.tensor(x), torch.tensor(lab), 5)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    for a in range(5):
        for b in range(5):
            pairs = [u[i] @ u[j] for i in range(40) for j in range(40) if lab[i] == a and lab[j] == b]
            if pairs:
                assert float(cos[a, b]) == pytest.approx(np.mean(pairs), abs=1e-12)
            else:
                assert torch.isnan(cos[a, b])
    assert n.tolist() == np.bincount(lab, minlength=5).tolist()


def test_spearman_on_class_pairs_matches_scipy():
    c = 8
    m = random_similarity(c, 2)
    rng = np.random.default_rng(1)
    lab = rng.integers(0, c, size=100)
    lab[lab == 5] = 0  # a class without embeddings drops out of the pairs
    x = rng.normal(size=(c, 4))[lab] + rng.normal(size=(100, 4))
    out = class_pair_spearman(m, torch.tensor(x), torch.tensor(lab))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = u @ u.T  # the class-pair value: the mean cosine over all pairs of their embeddings
    present = [k for k in range(c) if k != 5]
    a = [m[i, j] for i in present for j in present if i < j]
    b = [cos[lab == i][:, lab == j].mean() for i in present for j in present if i < j]
    assert np.diff(np.sort(b)).min() > 1e-6  # no near tie: the ranks do not depend on rounding
    ref = sps.spearmanr(a, b)
    assert out["spearman_pairs"] == 21
    assert out["spearman_rho"] == pytest.approx(ref.statistic, abs=1e-12)
    assert out["spearman_p"] == pytest.approx(ref.pvalue, rel=1e-6)
    full = mismatch_analysis(
        torch.tensor(lab),
        torch.tensor(lab[::-1].copy()),
        m,
        num_trials=10,
        embeddings=torch.tensor(x),
        embedding_classes=torch.tensor(lab),
    )
    assert full["spearman_rho"] == out["spearman_rho"]
    assert set(mismatch_output_schema(spearman=True).scalar_keys()) == {
        k for k in full if k not in ("per_query", "null")
    }


def test_no_mismatch_gives_nan_statistics_and_zero_counts():
    out = mismatch_analysis(torch.tensor([0, 1]), torch.tensor([0, 1]), [[1.0, 0.5], [0.5, 1.0]], num_trials=10)
    assert out["num_mismatches"] == 0 and out["num_distinct_pairs"] == 0
    for key in ("mean_similarity", "mean_percentile_rank", "share_top25", "null_mean", "p_value"):
        assert np.isnan(out[key]), key


def test_pair_table_counts_directed_pairs():
    m = [[1.0, 0.4, 0.2], [0.4, 1.0, 0.6], [0.2, 0.6, 1.0]]
    rows = mismatch_pair_table(torch.tensor([0, 0, 1, 2, 2, 2]), torch.tensor([1, 1, 0, 1, 1, 2]), m, ["a", "b", "c"])
    assert [(r["query"], r["retrieved"], r["count"]) for r in rows] == [("a", "b", 2), ("c", "b", 2), ("b", "a", 1)]
    assert rows[1]["similarity"] == 0.6 and rows[0]["share"] == 0.4


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"query_classes": torch.tensor([0, 5])}, r"`query_classes` holds class indices outside 0..2"),
        ({"retrieved_classes": torch.tensor([0.0, 1.0])}, r"`retrieved_classes` must be a 1-D integer tensor"),
        ({"retrieved_classes": torch.tensor([0])}, "one entry per query"),
        ({"similarity": [[1.0, 0.5]]}, r"`similarity` must be a square"),
        ({"similarity": [[1.0, float("nan")], [0.5, 1.0]]}, "NaN"),
        ({"counts": [1, 2]}, r"`counts` must hold 3"),
        ({"counts": [1, 0, 0]}, "no other class has a positive frequency"),
        ({"num_trials": 0}, r"^`num_trials` must be a positive int, got 0\.$"),
        ({"seed": 1.5}, r"`seed` must be an int"),
        ({"percentile_kind": "loose"}, r"`percentile_kind` must be one of"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    args = {
        "query_classes": torch.tensor([0, 1]),
        "retrieved_classes": torch.tensor([1, 2]),
        "similarity": [[1.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 1.0]],
    }
    args.update(kwargs)
    q, r, m = args.pop("query_classes"), args.pop("retrieved_classes"), args.pop("similarity")
    with pytest.raises(ValueError, match=match):
        mismatch_analysis(q, r, m, **args)
