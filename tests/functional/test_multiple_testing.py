"""Holm–Bonferroni against statsmodels and a worked example; the paired randomization test against scipy's exact
permutation test and a loop over every sign assignment; the family-wise error rate of the corrected decisions by
simulation."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import scipy.stats
from statsmodels.stats.multitest import multipletests

from beyondlabels.functional.multiple_testing import (
    benjamini_hochberg,
    holm_adjust,
    paired_randomization_test,
)


def test_holm_matches_statsmodels():
    rng = np.random.default_rng(0)
    for m in (1, 2, 5, 19, 40):
        p = rng.uniform(0, 0.2, m) ** 2
        p[: m // 3] = p[0]  # ties
        expected = multipletests(p, method="holm")[1]
        np.testing.assert_allclose(holm_adjust(p), expected, rtol=0, atol=1e-15)


def test_holm_worked_example_and_nan():
    # m = 4, sorted 0.005, 0.01, 0.03, 0.04: 4·0.005 = 0.02, 3·0.01 = 0.03, 2·0.03 = 0.06, max(0.06, 1·0.04) = 0.06
    np.testing.assert_allclose(holm_adjust([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02], rtol=0, atol=1e-15)
    # a test not made (NaN) is not counted in m
    np.testing.assert_allclose(holm_adjust([0.01, np.nan, 0.04]), [0.02, np.nan, 0.04], rtol=0, atol=1e-15)
    assert holm_adjust([0.6, 0.7]).tolist() == [1.0, 1.0]
    assert np.isnan(holm_adjust([np.nan])).all() and holm_adjust([]).size == 0


def test_holm_refuses_bad_input():
    with pytest.raises(ValueError, match=r"pvalues.*\[0, 1\]"):
        holm_adjust([0.2, 1.5])
    with pytest.raises(ValueError, match="1-D"):
        holm_adjust([[0.1, 0.2]])


def _loop_pvalue(d: np.ndarray) -> float:
    """Every sign assignment, one at a time."""
    observed = abs(d.mean())
    hits = 0
    for signs in itertools.product((1.0, -1.0), repeat=len(d)):
        hits += abs(np.mean(np.array(signs) * d)) >= observed - 1e-12
    return hits / 2 ** len(d)


SMALL = [
    [0.3, 0.1, 0.2, 0.25, 0.15, 0.05],
    [0.2, -0.1, 0.05, 0.0, 0.1],
    [0.5, -0.5, 0.5, -0.5, 0.25, 0.0, 0.0],  # ties and zeros
    [1.0, 0.0, 1.0, 1.0, -1.0, 1.0, 0.0, 1.0, 1.0, 1.0],  # per-query recall differences
    [0.01, -0.02, 0.03, 0.04, -0.01, 0.02, 0.05, 0.0, 0.01, -0.03, 0.02, 0.06],
]


@pytest.mark.parametrize("d", SMALL)
def test_exact_randomization_matches_scipy_and_a_loop(d):
    d = np.asarray(d)
    a = np.linspace(0.2, 0.8, len(d))
    b = a + d
    ref = scipy.stats.permutation_test(
        (b, a), lambda x, y: np.mean(x - y), permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    ).pvalue
    got = paired_randomization_test(d)  # 2^n <= 9999: every assignment
    assert got == pytest.approx(ref, rel=1e-12, abs=0)
    assert got == pytest.approx(_loop_pvalue(d), rel=1e-12, abs=0)


def test_monte_carlo_randomization_is_near_the_exact_value_and_never_zero():
    rng = np.random.default_rng(3)
    d = rng.normal(0.15, 1.0, 16)  # 65,536 assignments
    exact = paired_randomization_test(d, rounds=2**16)
    assert exact == pytest.approx(_loop_pvalue(d), rel=1e-12)
    rounds = 20_000
    mc = paired_randomization_test(d, rounds=rounds, seed=5)
    assert mc * (rounds + 1) == pytest.approx(round(mc * (rounds + 1)), abs=1e-6)  # (b + 1) / (B + 1)
    assert abs(mc - exact) < 4 * np.sqrt(exact * (1 - exact) / rounds) + 1 / rounds
    # an effect no random assignment reaches: the +1 correction keeps p above 0
    assert paired_randomization_test(np.full(30, 0.2), rounds=499, seed=0) == 1 / 500
    # the same seed gives the same p
    assert paired_randomization_test(d, rounds=999, seed=1) == paired_randomization_test(d, rounds=999, seed=1)


def test_rows_are_tested_as_one_by_one():
    rng = np.random.default_rng(4)
    for n, rounds in ((8, 999), (30, 999)):  # exact, then Monte Carlo
        d = rng.normal(0.1, 1.0, (5, n))
        rows = paired_randomization_test(d, rounds=rounds, seed=2)
        assert rows.tolist() == [paired_randomization_test(r, rounds=rounds, seed=2) for r in d]


def test_nan_is_left_out_and_bad_input_is_refused():
    d = np.array([0.3, np.nan, 0.1, 0.2, 0.25, 0.15, 0.05])
    assert paired_randomization_test(d) == paired_randomization_test(d[~np.isnan(d)])
    assert np.isnan(paired_randomization_test([np.nan]))
    with pytest.raises(ValueError, match="rounds"):
        paired_randomization_test([0.1, 0.2], rounds=0)
    with pytest.raises(ValueError, match="NaN"):
        paired_randomization_test(np.array([[0.1, np.nan]]))
    with pytest.raises(ValueError, match="1-D .* or 2-D"):
        paired_randomization_test(np.zeros((2, 2, 2)))


def _false_better_share(n_sweeps: int, adjust: bool, level: float = 0.05) -> tuple[float, float]:
    """Sweeps of 20 settings × 3 seeds × 50 queries, every setting drawn from one distribution, two metrics each;
    every setting against the first on both: the share of sweeps with any "better" (all of them false), and the
    seconds the tests took."""
    groups, seeds, queries, metrics = 20, 3, 50, 2
    rng = np.random.default_rng(2024)
    difficulty = rng.uniform(0.2, 0.8, (n_sweeps, 1, 1, metrics, queries))
    values = difficulty + rng.normal(0.0, 0.15, (n_sweeps, groups, seeds, metrics, queries))
    # per query: the paired differences to the baseline setting (group 0), averaged over the shared seeds
    d = (values[:, 1:] - values[:, :1]).mean(axis=2)  # [sweeps, 19, metrics, queries]
    start = time.perf_counter()
    p = paired_randomization_test(d.reshape(-1, queries), rounds=999, seed=7).reshape(n_sweeps, -1)
    seconds = time.perf_counter() - start
    adjusted = np.stack([holm_adjust(row) for row in p]) if adjust else p
    better = (adjusted < level) & (d.mean(axis=-1).reshape(n_sweeps, -1) > 0)
    return float(better.any(axis=1).mean()), seconds


def test_holm_keeps_the_family_wise_error_rate_of_a_sweep():
    n_sweeps, level = 200, 0.05
    corrected, seconds = _false_better_share(n_sweeps, adjust=True, level=level)
    uncorrected, _ = _false_better_share(n_sweeps, adjust=False, level=level)
    # at or under the level: no more false-"better" sweeps than a rate of `level` gives with probability 0.999
    bound = scipy.stats.binom.ppf(0.999, n_sweeps, level) / n_sweeps
    assert corrected <= bound, (corrected, bound)
    # without the correction the same decisions fail: 38 tests at 0.05 give a false "better" in most sweeps
    assert uncorrected > 3 * bound, uncorrected  # 0.40 of the sweeps
    assert seconds < 20


def test_benjamini_hochberg_matches_statsmodels():
    rng = np.random.default_rng(4)
    for m in (1, 2, 7, 30, 100):
        p = rng.uniform(0, 0.3, m) ** 2
        p[: m // 4] = p[0]  # ties
        np.testing.assert_allclose(benjamini_hochberg(p), multipletests(p, method="fdr_bh")[1], rtol=0, atol=1e-15)


def test_benjamini_hochberg_worked_example_and_nan():
    # m = 3, sorted 0.01, 0.03, 0.04: 3·0.01/1 = 0.03, 3·0.03/2 = 0.045, 3·0.04/3 = 0.04 -> min from the right
    np.testing.assert_allclose(benjamini_hochberg([0.04, 0.01, 0.03]), [0.04, 0.03, 0.04], rtol=0, atol=1e-15)
    np.testing.assert_allclose(benjamini_hochberg([0.01, np.nan, 0.04]), [0.02, np.nan, 0.04], rtol=0, atol=1e-15)
    assert benjamini_hochberg([]).size == 0
    with pytest.raises(ValueError, match=r"pvalues.*\[0, 1\]"):
        benjamini_hochberg([0.5, 1.5])
