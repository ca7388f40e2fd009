"""functional/bootstrap.py, abtest.py, agreement.py and metrics/intervals.py against independent references:
scipy.stats.bootstrap (within Monte Carlo error), scipy.stats.ttest_rel, sklearn's cohen_kappa_score, scipy's
spearmanr / kendalltau, and the decision protocol's cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as sps
from sklearn.metrics import cohen_kappa_score

from beyondlabels.functional.abtest import (
    ab_test,
    paired_differences,
    paired_t_ci,
    sample_size,
)
from beyondlabels.functional.agreement import cohen_kappa, kendall_tau, spearman
from beyondlabels.functional.bootstrap import bootstrap_ci, bootstrap_difference_ci
from beyondlabels.metrics.intervals import (
    confidence_interval_keys,
    confidence_intervals,
    with_confidence_intervals,
)
from beyondlabels.schema import KeySpec, OutputSchema
from tests.oracles.bootstrap import numpy_percentile_bootstrap, resample_indices


@pytest.fixture(scope="module")
def skewed():
    rng = np.random.default_rng(4)
    return rng.exponential(0.2, size=60).clip(max=1.0)  # per-query values like AP: skewed, in [0, 1]


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_bootstrap_matches_scipy_within_monte_carlo_error(skewed, method):
    rounds = 100_000  # Monte Carlo error of a tail quantile about 0.009 se here (of the two sides compared 0.012 se)
    ours = bootstrap_ci(skewed, rounds=rounds, method=method, seed=3)
    ref = sps.bootstrap(
        (skewed,), np.mean, n_resamples=rounds, method="BCa" if method == "bca" else "percentile", random_state=7
    )
    # standard error of the bootstrap distribution, and the Monte Carlo error of its tail quantiles at 100,000 rounds
    se = float(np.std(skewed, ddof=1) / math.sqrt(len(skewed)))
    assert ours.estimate == pytest.approx(float(np.mean(skewed)))
    assert abs(ours.low - ref.confidence_interval.low) < 0.05 * se
    assert abs(ours.high - ref.confidence_interval.high) < 0.05 * se
    assert ours.width > 2 * se  # a real interval, not a point


def test_bca_differs_from_percentile_on_skewed_data(skewed):
    p = bootstrap_ci(skewed, rounds=4000, method="percentile")
    b = bootstrap_ci(skewed, rounds=4000, method="bca")
    assert b.high > p.high and b.low > p.low  # BCa shifts towards the long right tail


def test_bootstrap_is_seeded_and_drops_nan():
    values = torch.tensor([0.1, float("nan"), 0.5, 0.9, 0.3, 0.7])
    a, b = bootstrap_ci(values, rounds=500, seed=1), bootstrap_ci(values, rounds=500, seed=1)
    c = bootstrap_ci(values, rounds=500, seed=2)
    assert a == b and a != c and a.n == 5
    assert bootstrap_ci([0.4, 0.4, 0.4]).width == 0.0
    assert math.isnan(bootstrap_ci([float("nan")]).low)
    # chunking over rounds does not change the numbers
    import beyondlabels._internal.stats as st

    old, st.CHUNK_VALUES = st.CHUNK_VALUES, 7
    try:
        assert bootstrap_ci(values, rounds=500, seed=1) == a
    finally:
        st.CHUNK_VALUES = old


def test_paired_t_matches_scipy_ttest_rel():
    rng = np.random.default_rng(0)
    a = rng.uniform(size=30)
    b = a + rng.normal(0.03, 0.1, size=30)
    interval, statistic, pvalue = paired_t_ci(torch.tensor(b - a))
    ref = sps.ttest_rel(b, a)
    ci = ref.confidence_interval(0.95)
    assert statistic == pytest.approx(ref.statistic, rel=1e-10)
    assert pvalue == pytest.approx(ref.pvalue, rel=1e-8)
    assert (interval.low, interval.high) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_paired_bootstrap_matches_scipy_paired_resampling():
    rng = np.random.default_rng(1)
    a = rng.uniform(size=40)
    b = np.clip(a + rng.normal(0.05, 0.15, size=40), 0, 1)
    result = ab_test(a, b, rounds=20000)
    ref = sps.bootstrap(
        (a, b), lambda x, y: np.mean(y - x), paired=True, n_resamples=20000, method="percentile", random_state=0
    )
    se = float(np.std(b - a, ddof=1) / math.sqrt(40))
    assert abs(result.bootstrap.low - ref.confidence_interval.low) < 0.05 * se
    assert abs(result.bootstrap.high - ref.confidence_interval.high) < 0.05 * se


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_cohen_kappa_matches_sklearn(weights):
    rng = np.random.default_rng(2)
    a = rng.integers(0, 4, size=200)
    b = np.where(rng.uniform(size=200) < 0.6, a, rng.integers(0, 4, size=200))
    assert cohen_kappa(a, b, weights=weights) == pytest.approx(cohen_kappa_score(a, b, weights=weights), abs=1e-12)
    binary_a, binary_b = (a > 1).astype(int), (b > 1).astype(int)
    assert cohen_kappa(binary_a.tolist(), binary_b.tolist()) == pytest.approx(
        cohen_kappa_score(binary_a, binary_b), abs=1e-12
    )
    names = np.array(["bad", "ok", "good", "great"])
    assert cohen_kappa(list(names[a]), list(names[b])) == pytest.approx(
        cohen_kappa_score(names[a], names[b]), abs=1e-12
    )


def test_rank_correlations_match_scipy():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 8, size=50).astype(float)  # ties
    y = x + rng.normal(0, 3, size=50)
    ours, ref = spearman(x, y), sps.spearmanr(x, y)
    assert (ours.statistic, ours.pvalue) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-9)
    ours, ref = kendall_tau(x, np.round(y)), sps.kendalltau(x, np.round(y), method="asymptotic")
    assert (ours.statistic, ours.pvalue) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-9)
    assert kendall_tau(x, y, chunk_size=7) == kendall_tau(x, y)


# ---- the decision protocol -------------------------------------------------------------------------------------------


def test_seven_queries_give_no_conclusion():
    a = torch.linspace(0.1, 0.7, 7)
    result = ab_test(a, a + 0.3)
    assert result.decision == "no conclusion" and result.n == 7
    assert ab_test(torch.linspace(0.1, 0.7, 8), torch.linspace(0.1, 0.7, 8) + 0.3).decision == "better"


def test_interval_across_zero_cannot_distinguish():
    rng = np.random.default_rng(5)
    a = rng.uniform(size=30)
    b = a + rng.normal(0.0, 0.2, size=30)
    result = ab_test(a, b)
    assert result.interval.contains(0.0) and result.decision == "cannot distinguish"
    assert "no difference" not in result.reason


def test_lower_is_better_primary():
    a = torch.linspace(1, 20, 20)
    assert ab_test(a, a - 2, higher_is_better=False).decision == "better"
    assert ab_test(a, a + 2, higher_is_better=False).decision == "worse"


def test_guardrail_breach_rejects_even_a_better_primary():
    a = torch.linspace(0.2, 0.8, 20)
    ok = ab_test(a, a + 0.1, guardrails={"recall@10": (a, a - 0.019, True)})
    assert ok.decision == "better" and not ok.guardrails["recall@10"].breached
    bad = ab_test(a, a + 0.1, guardrails={"recall@10": (a, a - 0.021, True)})
    assert bad.decision == "reject" and bad.guardrails["recall@10"].worse_by == pytest.approx(0.021)
    lower = ab_test(a, a + 0.1, guardrails={"rank": (a, a + 0.05, False)})  # lower is better: an increase is worse
    assert lower.decision == "reject"


def test_bootstrap_and_t_disagree_and_the_wider_interval_decides():
    d = torch.tensor([0.01] * 7 + [0.3])  # one large gain: the bootstrap never goes below 0.01, t does
    result = ab_test(torch.zeros(8), d)
    assert not result.bootstrap.contains(0.0) and result.t.contains(0.0)
    assert result.disagree and result.interval == result.t and result.t.width > result.bootstrap.width
    assert result.decision == "cannot distinguish" and "wider" in result.reason


def test_queries_are_matched_by_id():
    a, b = torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.3, 0.1, 0.2])
    ids, diff, unmatched = paired_differences(a, b, [1, 2, 3], [3, 1, 2])
    assert ids.tolist() == [1, 2, 3] and diff.abs().max() < 1e-12 and unmatched == 0
    with pytest.raises(
        ValueError,
        match=(
            r"not hold the same queries: 2 query ids .*only in A, e\.g\. \[3\]; only in B, e\.g\. \[4\].*intersect=True"
        ),
    ):
        paired_differences(a, b, [1, 2, 3], [1, 2, 4])
    with pytest.raises(ValueError, match=r"^`ids_a` holds duplicate query ids"):
        paired_differences(a, b, [1, 1, 3], [1, 2, 3])
    _, diff, unmatched = paired_differences(a, b, [1, 2, 3], [1, 2, 4], intersect=True)
    assert unmatched == 2 and diff.numel() == 2


def test_sample_size_for_a_target_half_width():
    assert sample_size(0.18, 0.05) == 50
    assert sample_size(0.2, 0.04) == 97  # (1.95996 * 5)^2 = 96.04
    with pytest.raises(ValueError, match=r"^`half_width` must be > 0"):
        sample_size(0.18, 0.0)


def test_difference_of_two_windows():
    """Each window resampled on its own (``a`` stream 0, ``b`` stream 1 of the draw rule, seed 11 by default), the
    interval the percentile interval of the differences of the resampled means."""
    windows = {
        "rising": ([0.1, 0.12, 0.11, 0.13], [0.3, 0.32, 0.31, 0.29, 0.33]),
        "flat": ([0.3, 0.32, 0.31, 0.29], [0.31, 0.29, 0.3, 0.32]),
    }
    windows = {name: (np.array(a), np.array(b)) for name, (a, b) in windows.items()}  # float64 in, float64 compared
    for name, (a, b) in windows.items():
        got = bootstrap_difference_ci(a, b, rounds=500)
        index_a = resample_indices(len(a), 500, 11, stream=0)
        index_b = resample_indices(len(b), 500, 11, stream=1)
        differences = b[index_b].mean(axis=1) - a[index_a].mean(axis=1)
        low, high = np.quantile(differences, [0.025, 0.975])
        assert (got.low, got.high) == pytest.approx((low, high), abs=1e-12), name
        assert got.estimate == pytest.approx(np.mean(b) - np.mean(a), abs=1e-15) and got.n == 4, name
    assert bootstrap_difference_ci(*windows["rising"], rounds=500).low > 0
    assert bootstrap_difference_ci(*windows["flat"], rounds=500).contains(0.0)


def test_confidence_interval_keys_and_schema():
    schema = OutputSchema(
        {
            "p@1": KeySpec("scalar", True),
            "rank": KeySpec("scalar", False),
            "macro": KeySpec("scalar", True),
            "n": KeySpec("scalar", None, count=True),
        },
        {"p@1": KeySpec("per_query", True), "rank": KeySpec("per_query", False), "n": KeySpec("per_query", None)},
    )
    assert confidence_interval_keys(schema) == ["p@1", "rank"]
    with pytest.raises(
        ValueError, match=r"names \['macro'\], which have no per-query values; choose from \['p@1', 'rank'\]"
    ):
        confidence_interval_keys(schema, ["macro"])
    extended = with_confidence_intervals(schema, ["rank"])
    assert extended["rank_ci_low"].higher_is_better is False and extended["rank_ci_high"].kind == "scalar"
    ci = confidence_intervals({"rank": torch.tensor([1.0, 3.0, 2.0, 8.0])}, ["rank"], rounds=300)
    ref = numpy_percentile_bootstrap([1.0, 3.0, 2.0, 8.0], rounds=300, seed=11)  # the default seed
    assert (ci["rank_ci_low"], ci["rank_ci_high"]) == pytest.approx(ref, abs=1e-12)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: bootstrap_ci([1.0], rounds=0), r"^`rounds` must be a positive int .*got 0\.$"),
        (
            lambda: bootstrap_ci([1.0], confidence=95),
            r"^`confidence` must be a number strictly between 0 and 1 .*got 95\.$",
        ),
        (
            lambda: bootstrap_ci([1.0], method="normal"),
            r"^`method` must be one of \['percentile', 'bca'\], got 'normal'\.$",
        ),
        (lambda: bootstrap_ci([[1.0]]), r"^`values` must be a 1-D vector .*got shape \(1, 1\)"),
        (lambda: ab_test([1.0], [1.0], tolerance=-1), r"^`tolerance` must be a number >= 0 .*got -1\.$"),
        (
            lambda: ab_test([1.0], [1.0], higher_is_better="max"),
            r"^`higher_is_better` must be True .* or False .*got 'max'\.$",
        ),
        (lambda: cohen_kappa([1, 2], [1]), r"^`rater_a` and `rater_b` must label the same .*got 2 and 1 labels\.$"),
        (lambda: cohen_kappa([1.5], [1.5]), r"^`rater_a`: labels must be ints or strings, got the float 1\.5"),
    ],
)
def test_bad_arguments_are_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_grouped_intervals_equal_one_bootstrap_per_key():
    rng = np.random.default_rng(6)
    a = torch.tensor(rng.uniform(size=50))
    b = torch.tensor(rng.uniform(size=50))
    c = a.clone()
    c[::5] = float("nan")  # another set of queries
    per_query = {"a": a, "b": b, "c": c, "flat": torch.full((50,), 0.5)}
    ci = confidence_intervals(per_query, ["a", "b", "c", "flat"], rounds=700, seed=9)
    for key in ("a", "b", "c", "flat"):
        ref = numpy_percentile_bootstrap(per_query[key].numpy(), rounds=700, seed=9)
        assert (ci[f"{key}_ci_low"], ci[f"{key}_ci_high"]) == pytest.approx(ref, abs=1e-12), key


def test_large_evaluations_use_the_normal_interval_which_the_bootstrap_approaches():
    from scipy.stats import norm

    rng = np.random.default_rng(3)
    values = torch.tensor(rng.binomial(1, 0.3, size=30_000).astype(float))
    normal = confidence_intervals({"p": values}, ["p"], rounds=500, max_bootstrap_n=20_000)
    half = norm.ppf(0.975) * np.std(values.numpy(), ddof=1) / np.sqrt(30_000)
    assert normal["p_ci_low"] == pytest.approx(values.mean().item() - half, rel=1e-12)
    assert normal["p_ci_high"] == pytest.approx(values.mean().item() + half, rel=1e-12)
    boot = confidence_intervals({"p": values}, ["p"], rounds=500, max_bootstrap_n=10**9)
    width = normal["p_ci_high"] - normal["p_ci_low"]
    assert (
        abs(boot["p_ci_low"] - normal["p_ci_low"]) < 0.1 * width
        and abs(boot["p_ci_high"] - normal["p_ci_high"]) < 0.1 * width
    )


def test_python_floats_are_taken_as_doubles():
    """A list of Python floats is read in float64 (as numpy reads it), not through torch's float32 default."""
    values = [0.1 + 1e-9 * i for i in range(50)]
    exact = np.asarray(values, dtype=np.float64)
    from_list, from_array = bootstrap_ci(values, rounds=200, seed=3), bootstrap_ci(exact, rounds=200, seed=3)
    assert from_list.estimate == exact.mean() == from_array.estimate
    assert (from_list.low, from_list.high) == (from_array.low, from_array.high)
    assert bootstrap_ci([1, 2, 3, 4], rounds=50, seed=0).estimate == 2.5  # ints still allowed
