"""The convergence rule (functional.convergence) against a numpy reading of its definitions, and its stated rates:
false alarms on flat curves within a binomial bound of ``alpha`` at every noise level (where the rule without the
corrections exceeds it), and detection of a real decline."""

from __future__ import annotations

import copy
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from beyondlabels.functional.convergence import ConvergenceRule, noise_df, noise_scale, sign_flip_bound

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracles"))
from convergence_oracle import paired_p, series_run, tail  # noqa: E402

NOISE = np.random.default_rng(0).normal(0, 0.01, size=80)
RISING_THEN_FLAT = [0.2 + 0.02 * min(i, 15) + NOISE[i] for i in range(40)]
RISING_THEN_FALLING = [0.2 + 0.02 * i + NOISE[i] for i in range(20)] + [0.6 - 0.02 * i + NOISE[20 + i] for i in range(20)]
FLAT_THEN_FALLING = [0.5 + NOISE[i] for i in range(50)] + [0.5 - 0.01 * i + NOISE[50 + i] for i in range(30)]
# dyadic levels: window means are exact, so equal means are exact ties (the first best window wins); a constant
# curve has a zero noise scale (the statistic is then +-inf)
STEPS = [0.25] * 8 + [0.75] * 8 + [0.5] * 8 + [0.75] * 8 + [0.25] * 8
CONSTANT = [0.5] * 12


def _compare_series(curve, settings):
    rule = ConvergenceRule(**settings)
    got = rule.series_tests(curve)
    oracle_settings = {k: v for k, v in settings.items() if k in ("mode", "min_delta", "max_looks", "noise", "noise_estimate")}
    expected = series_run(curve, settings["window"], alpha=settings.get("alpha", 0.05), **oracle_settings)
    assert got["downturn"].shape == (1, len(expected))
    for name in ("downturn_p", "plateau_p", "noise", "best", "best_index", "candidates", "downturn", "plateau"):
        want = [look[name] for look in expected]
        assert got[name][0].tolist() == pytest.approx(want, rel=1e-9, abs=1e-12), name
    return got, expected


CASES = [
    (RISING_THEN_FLAT, {"window": 5}),
    (RISING_THEN_FALLING, {"window": 5}),
    (RISING_THEN_FALLING, {"window": 3, "alpha": 0.2, "min_delta": 0.01}),
    ([-v for v in RISING_THEN_FALLING], {"window": 5, "mode": "min"}),
    (FLAT_THEN_FALLING, {"window": 10}),
    (FLAT_THEN_FALLING, {"window": 10, "noise": 0.01}),
    (FLAT_THEN_FALLING, {"window": 10, "max_looks": 40}),
    (STEPS, {"window": 4, "min_delta": 0.25, "noise": 0.05}),
    (CONSTANT, {"window": 3}),
    (FLAT_THEN_FALLING, {"window": 10, "noise_estimate": "windows"}),
    (RISING_THEN_FALLING, {"window": 3, "noise_estimate": "windows", "alpha": 0.2}),
    ([0.5 + 0.01 * (-1) ** i + 0.001 * NOISE[i] for i in range(30)], {"window": 5, "noise_estimate": "windows"}),
]
IDS = ["rising-flat", "rising-falling", "rising-falling-w3", "rising-falling-min", "flat-falling", "known-noise",
       "few-looks", "steps", "constant", "windows-scale", "windows-scale-w3", "windows-scale-zigzag"]  # fmt: skip


@pytest.mark.parametrize(("curve", "settings"), CASES, ids=IDS)
def test_every_look_matches_the_numpy_rule(curve, settings):
    _compare_series(curve, settings)


@pytest.mark.parametrize(("curve", "settings"), CASES, ids=IDS)
def test_one_value_at_a_time_matches_every_look(curve, settings):
    """observe() gives, after each value, the series rule's look at that value, and an event where a flag starts."""
    rule = ConvergenceRule(**settings, rounds=50)
    state = rule.new_state()
    outs = [rule.observe(state, step, float(v)) for step, v in enumerate(curve)]
    w = settings["window"]
    oracle_settings = {k: v for k, v in settings.items() if k in ("mode", "min_delta", "max_looks", "noise", "noise_estimate")}
    expected = series_run(curve, w, alpha=settings.get("alpha", 0.05), **oracle_settings)
    assert all(math.isnan(o["downturn_p"]) and o["downturn"] == 0.0 for o in outs[: 2 * w - 1])
    max_looks = settings.get("max_looks", 1000)
    for i, (out, look) in enumerate(zip(outs[2 * w - 1 :], expected)):
        if i < max_looks:
            assert out["downturn_p"] == pytest.approx(look["downturn_p"], rel=1e-9, abs=1e-12)
            assert out["plateau_p"] == pytest.approx(look["plateau_p"], rel=1e-9, abs=1e-12)
        assert (out["downturn"], out["plateau"]) == (look["downturn"], look["plateau"])
        assert out["spent"] == pytest.approx(min(i + 1, max_looks) * settings.get("alpha", 0.05) / max_looks)
    flags = {e: [0.0] * (2 * w - 1) + [look[e] for look in expected] for e in ("plateau", "downturn")}
    starts = sorted((i, e) for e, f in flags.items() for i in range(len(f)) if f[i] == 1.0 and (i == 0 or f[i - 1] == 0.0))
    starts.sort(key=lambda start: (start[0], ("plateau", "downturn").index(start[1])))  # one step: plateau first
    assert [(e["step"], e["event"]) for e in state["events"]] == starts
    for event in state["events"]:
        if event["event"] == "downturn":
            look = expected[event["step"] - (2 * w - 1)]
            assert event["best_mean"] == pytest.approx(look["best"], abs=1e-12)
            assert event["best_step"] == look["best_index"] + w - 1 and event["test"] == "series"


def test_no_look_before_two_windows():
    for t in range(0, 2 * 3):
        out = ConvergenceRule(window=3).series_tests(0.5 + 0.01 * np.arange(t, dtype=float))
        assert all(v.shape == (1, 0) for v in out.values())


def test_the_curves_reach_every_branch():
    """The comparisons above mean something only if the curves show each flag both ways, ties and zero scales."""
    falling = series_run(FLAT_THEN_FALLING, 10)
    assert any(look["downturn"] for look in falling) and not falling[0]["downturn"]
    assert any(look["plateau"] for look in series_run(RISING_THEN_FALLING, 5))
    few = series_run(FLAT_THEN_FALLING, 10, max_looks=40)
    assert any(look["downturn_p"] <= 0.05 for look in few[40:]) and not any(look["downturn"] for look in few[40:])
    steps = series_run(STEPS, 4, min_delta=0.25, noise=0.05)
    assert steps[-1]["best_index"] == 8  # the first of the windows at 0.75 (also 24)
    assert any(look["downturn"] for look in steps) and any(look["plateau"] for look in steps)
    plain, windows = series_run(FLAT_THEN_FALLING, 10), series_run(FLAT_THEN_FALLING, 10, noise_estimate="windows")
    assert all(b["noise"] > a["noise"] for a, b in zip(plain, windows))  # the windows scale wins here
    zigzag = [0.5 + 0.01 * (-1) ** i for i in range(30)]  # large successive differences, equal window means
    assert series_run(zigzag, 10) == series_run(zigzag, 10, noise_estimate="windows")
    constant = series_run(CONSTANT, 3)
    assert constant[0]["noise"] == 0.0 and constant[0]["downturn_p"] == 1.0 and constant[0]["plateau_p"] == 1.0


def test_the_values_are_shift_and_scale_free():
    """Shifting and scaling the values (and min_delta, noise with them) leaves every p-value as it was."""
    curve = np.asarray(FLAT_THEN_FALLING)
    base = ConvergenceRule(window=10, min_delta=0.002).series_tests(curve)
    moved = ConvergenceRule(window=10, min_delta=0.002 * 7.0).series_tests(3.0 + 7.0 * curve)
    for name in ("downturn_p", "plateau_p"):
        assert moved[name][0].tolist() == pytest.approx(base[name][0].tolist(), rel=1e-9, abs=1e-15)


def test_noise_scale_and_its_degrees_of_freedom():
    """s^2 is the quadratic form x'Ax of the successive differences; for independent unit noise its variance is
    2 tr(A^2), which the chi-square with noise_df(n) degrees of freedom matches (2 / nu)."""
    x = np.asarray(NOISE[:20])
    assert noise_scale(x) == pytest.approx(math.sqrt(np.mean(np.diff(x) ** 2) / 2), rel=1e-12)
    for n in (5, 20, 150):
        diff = np.diff(np.eye(n), axis=0)  # [n-1, n]: rows e_(i+1) - e_i
        a = diff.T @ diff / (2 * (n - 1))
        assert np.trace(a) == pytest.approx(1.0)  # unbiased
        assert 2.0 / noise_df(n) == pytest.approx(2 * np.trace(a @ a), rel=1e-12)


def test_the_sign_flip_bound_covers_the_exact_tail():
    """Against every one of the 2^10 sign patterns of ten fixed magnitudes: P(sum eps|d| >= S) <= bound(S)."""
    magnitudes = np.random.default_rng(3).uniform(0.1, 1.0, size=10)
    sums = np.array([np.dot(signs, magnitudes) for signs in itertools.product([-1.0, 1.0], repeat=10)])
    for signs in itertools.product([-1.0, 1.0], repeat=10):
        d = np.asarray(signs) * magnitudes
        s = d.sum()
        exact = float(np.mean(sums >= s - 1e-12))
        assert exact <= sign_flip_bound(d) + 1e-12
    assert sign_flip_bound([0.5, -0.5]) == 1.0 and sign_flip_bound([]) == 1.0
    assert sign_flip_bound([1.0, float("nan"), 1.0]) == pytest.approx(math.exp(-4 / 4))


def _paired_runs(rule, evaluations, ids_of):
    state = rule.new_state()
    outs = [rule.observe(state, step, float(np.nanmean(values)), per_query=(ids_of(step), values)) for step, values in enumerate(evaluations)]
    return state, outs


@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("min_delta", [0.0, 0.02])
def test_the_paired_test_matches_the_numpy_rule(mode, min_delta):
    """Per-query values in a different query order at each evaluation, a query missing now and then, NaN values."""
    rng = np.random.default_rng(5)
    ability = rng.uniform(0.2, 0.8, size=400)
    drift = np.concatenate([np.zeros(10), -0.01 * np.arange(1, 21)]) * (1 if mode == "max" else -1)
    evaluations, orders = [], []
    for step in range(30):
        values = (rng.random(400) < np.clip(ability + drift[step], 0, 1)).astype(float)
        values[rng.integers(400)] = np.nan
        order = rng.permutation(400)[: 390 if step % 3 == 0 else 400]
        evaluations.append(values[order])
        orders.append(100 + order)
    rule = ConvergenceRule(window=3, mode=mode, min_delta=min_delta, rounds=20)
    state, outs = _paired_runs(rule, evaluations, lambda step: torch.as_tensor(orders[step]))
    sign = 1.0 if mode == "max" else -1.0
    scalars = [float(np.nanmean(values)) for values in evaluations]
    best, decided_by = None, set()
    for step, out in enumerate(outs):
        if best is None:
            assert math.isnan(out["downturn_p"]) and math.isnan(out["paired_p"]) and out["paired"] == 0.0
        else:
            paired = paired_p(orders[best], evaluations[best], orders[step], evaluations[step], mode, min_delta)
            assert out["paired_p"] == pytest.approx(paired, rel=1e-9, abs=1e-15)
            if step + 1 < 6:  # no look before 2w values: the paired confirmation alone decides nothing
                assert math.isnan(out["downturn_p"]) and out["downturn"] == 0.0 and out["paired"] == 0.0
            else:  # both must reject: the larger p-value decides
                series = series_run(scalars[: step + 1], 3, mode=mode, min_delta=min_delta)[-1]["downturn_p"]
                want = max(series, paired)
                assert out["downturn_p"] == pytest.approx(want, rel=1e-9, abs=1e-15)
                assert out["paired"] == (1.0 if paired > series else 0.0)
                assert out["downturn"] == (1.0 if want <= 0.05 else 0.0)
                if series != paired:
                    decided_by.add(out["paired"])
        if best is None or sign * scalars[step] > sign * scalars[best]:
            best = step
    assert state["best"]["step"] == best and state["looks"] == 30 - 6 + 1
    assert any(o["downturn"] == 1.0 for o in outs) and any(o["downturn"] == 0.0 for o in outs[1:])
    assert 0.0 in decided_by  # the series p-value decides somewhere (the paired one: the next test)


def test_the_paired_confirmation_holds_back_a_series_downturn():
    """A worked example: the series falls, but the latest evaluation gives every query the value of the best one
    (``S = 0``, ``p_paired = 1``): the series rule alone rejects, the look does not flag."""
    base = np.where(np.arange(400) % 2 == 0, 0.6, 0.4)
    levels = [0.01 * (-1) ** e for e in range(20)] + [-0.05 * e for e in range(1, 9)]
    evaluations = [base + level for level in levels] + [base + levels[0]]  # the last: a copy of the best (the first)
    rule = ConvergenceRule(window=5, rounds=10)
    _, outs = _paired_runs(rule, evaluations, lambda step: None)
    series = series_run([float(np.mean(v)) for v in evaluations], 5)[-1]
    assert series["downturn"] == 1.0 and outs[-1]["paired_p"] == 1.0
    assert outs[-1]["downturn"] == 0.0 and outs[-1]["downturn_p"] == 1.0 and outs[-1]["paired"] == 1.0
    assert outs[-2]["downturn"] == 1.0 and outs[-2]["paired"] == 0.0  # one evaluation before: both reject


def test_bad_settings_are_clear_errors():
    for kwargs, match in [
        ({"window": 1}, r"^`window` must be an int >= 2 \(values per window\), got 1\.$"),
        ({"mode": "up"}, r"^`mode` must be 'max' \(higher is better\) or 'min', got 'up'\.$"),
        ({"min_delta": -0.1}, r"^`min_delta` must be a number >= 0, got -0\.1\.$"),
        ({"alpha": 0}, r"^`alpha` must be a false-alarm rate strictly between 0 and 1 \(e\.g\. 0\.05\), got 0\.$"),
        ({"alpha": 1.0}, r"^`alpha` must be a false-alarm rate strictly between 0 and 1 \(e\.g\. 0\.05\), got 1\.0\.$"),
        ({"max_looks": 0}, r"^`max_looks` must be a positive int \(the most evaluations a run tests, e\.g\. 1000\), got 0\.$"),
        ({"noise": 0.0}, r"^`noise` must be None \(estimated from the series\) or the noise sd, a number > 0, got 0\.0\.$"),
        ({"noise_estimate": "mad"}, r"^`noise_estimate` must be one of \['differences', 'windows'\], got 'mad'\.$"),
    ]:
        with pytest.raises(ValueError, match=match):
            ConvergenceRule(**kwargs)
    with pytest.raises(ValueError, match=r"^`value` must be a finite number \(the monitored metric\), got nan\.$"):
        ConvergenceRule().observe(ConvergenceRule().new_state(), 0, float("nan"))


def test_per_query_values_that_cannot_be_paired_are_clear_errors_and_change_nothing():
    rule = ConvergenceRule(window=2, rounds=10)
    state = rule.new_state()
    rule.observe(state, 0, 0.5, per_query=([1, 2, 3], [1.0, 0.0, 1.0]))
    before = copy.deepcopy(state)
    with pytest.raises(ValueError, match=r"^`per_query` must hold one distinct query id per value, got 3 ids \(2 distinct\) for 3 values\.$"):
        rule.observe(state, 1, 0.5, per_query=([1, 1, 3], [1.0, 0.0, 1.0]))
    assert state == before
    positional = rule.new_state()
    rule.observe(positional, 0, 0.5, per_query=(None, [1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match=r"^`per_query` without query ids must keep the order and number of queries \(3 at the best evaluation, 2 now\); give the query ids to pair by id\.$"):
        rule.observe(positional, 1, 0.5, per_query=(None, [1.0, 0.0]))
    assert len(positional["series"]) == 1 and positional["best"]["step"] == 0


# ---- the stated rates, by simulation at fixed seeds ----------------------------------------------------------------

RUNS, LENGTH, ALPHA = 200, 150, 0.05
BOUND = int(stats.binom.ppf(0.999, RUNS, ALPHA))  # false alarms of a rule with rate <= alpha stay below this


def _uncorrected_downturns(values: np.ndarray, window: int) -> np.ndarray:
    """The same comparison with neither correction: best earlier window against the last, at level alpha per look
    (t reference), for every run ``values[r]``; True where a run is ever flagged."""
    flagged = np.zeros(values.shape[0], dtype=bool)
    kernel = np.ones(window) / window
    for n in range(2 * window, values.shape[1] + 1):
        seen = values[:, :n]
        means = np.stack([np.convolve(row, kernel, mode="valid") for row in seen])
        best, last = means[:, : n - 2 * window + 1].max(axis=1), means[:, n - window]
        s = np.sqrt((np.diff(seen, axis=1) ** 2).sum(axis=1) / (2 * (n - 1)))
        statistic = (best - last) / (s * np.sqrt(2 / window))
        flagged |= stats.t.sf(statistic, noise_df(n)) <= ALPHA
    return flagged


@pytest.mark.parametrize("sd", [0.01, 0.02, 0.05])
def test_flat_curves_are_flagged_within_the_stated_rate(sd):
    values = 0.5 + np.random.default_rng(int(sd * 1000)).normal(0, sd, size=(RUNS, LENGTH))
    flagged = ConvergenceRule().series_tests(values)["downturn"].amax(dim=1)
    assert int(flagged.sum()) <= BOUND
    assert int(_uncorrected_downturns(values, 10).sum()) > BOUND  # what the corrections are for


def _ar1(rho: float, sd: float, seed: int) -> np.ndarray:
    """Flat curves of stationary AR(1) noise of marginal sd ``sd`` and lag-1 correlation ``rho``."""
    shocks = np.random.default_rng(seed).normal(0, sd * math.sqrt(1 - rho**2), size=(RUNS, LENGTH))
    noise = np.zeros_like(shocks)
    noise[:, 0] = shocks[:, 0] / math.sqrt(1 - rho**2)
    for i in range(1, LENGTH):
        noise[:, i] = rho * noise[:, i - 1] + shocks[:, i]
    return 0.5 + noise


@pytest.mark.parametrize("rho", [0.3, 0.5])
def test_the_windows_scale_keeps_the_rate_on_autocorrelated_noise(rho):
    """AR(1) noise: the scale from successive differences alone flags too many flat runs, the windows scale does not."""
    values = _ar1(rho, 0.02, seed=31)
    windows = ConvergenceRule(noise_estimate="windows").series_tests(values)["downturn"].amax(dim=1)
    assert int(windows.sum()) <= BOUND
    differences = ConvergenceRule().series_tests(values)["downturn"].amax(dim=1)
    assert int(differences.sum()) > BOUND


def test_the_windows_scale_still_finds_a_decline():
    """A fall of 0.2 sd per evaluation after evaluation 60: flagged at 61..100 in at least 80% of runs."""
    sd, steps = 0.02, np.arange(LENGTH)
    mean = np.where(steps < 60, 0.5, 0.5 - 0.2 * sd * (steps - 60))
    values = mean + np.random.default_rng(10).normal(0, sd, size=(RUNS, LENGTH))
    flags = ConvergenceRule(noise_estimate="windows").series_tests(values)["downturn"].numpy().astype(bool)
    first = np.where(flags.any(axis=1), flags.argmax(axis=1) + 2 * 10 - 1, LENGTH)
    assert np.mean((first > 60) & (first <= 100)) >= 0.8


def test_a_still_improving_curve_is_called_flat_within_the_stated_rate():
    """Gaining exactly min_delta per window (the boundary of 'still improving'): a plateau in few runs."""
    window, min_delta, sd = 10, 0.02, 0.02
    trend = 0.3 + (min_delta / window) * np.arange(LENGTH)
    values = trend + np.random.default_rng(8).normal(0, sd, size=(RUNS, LENGTH))
    flagged = ConvergenceRule(window=window, min_delta=min_delta).series_tests(values)["plateau"].amax(dim=1)
    assert int(flagged.sum()) <= BOUND
    uncorrected = ConvergenceRule(window=window, min_delta=min_delta, alpha=ALPHA, max_looks=1).series_tests(values)
    assert int((uncorrected["plateau_p"] <= ALPHA).any(dim=1).sum()) > BOUND


def test_a_decline_is_found_within_40_evaluations():
    """A fall of 0.1 sd per evaluation after evaluation 60: flagged at evaluations 61..100 in at least 80% of runs."""
    sd = 0.02
    steps = np.arange(LENGTH)
    mean = np.where(steps < 60, 0.5, 0.5 - 0.1 * sd * (steps - 60))
    values = mean + np.random.default_rng(9).normal(0, sd, size=(RUNS, LENGTH))
    flags = ConvergenceRule().series_tests(values)["downturn"].numpy().astype(bool)
    first = np.where(flags.any(axis=1), flags.argmax(axis=1) + 2 * 10 - 1, LENGTH)  # evaluation index of the first flag
    assert np.mean((first > 60) & (first <= 100)) >= 0.8


@pytest.mark.parametrize("sd", [0.01, 0.02, 0.05])
def test_the_done_when_numbers(sd):
    """40 seeds of 150 flat evaluations at the defaults: at most 5% flagged."""
    flagged = 0
    for seed in range(40):
        values = 0.5 + np.random.default_rng(1000 + seed).normal(0, sd, size=LENGTH)
        rule, state = ConvergenceRule(rounds=10), None
        state = rule.new_state()
        flagged += any(rule.observe(state, step, float(v))["downturn"] for step, v in enumerate(values))
    assert flagged <= 2


def test_paired_false_alarms_on_a_flat_population_within_the_stated_rate():
    """Queries of varied difficulty answered afresh (Bernoulli hits) at every evaluation, the population P@1 flat:
    flagged in few runs; the paired confirmation alone (at alpha per look) would flag many."""
    runs, evaluations, queries = 100, 60, 200
    bound = int(stats.binom.ppf(0.999, runs, ALPHA))
    rng = np.random.default_rng(12)
    flagged = confirmation_alone = 0
    for _ in range(runs):
        ability = rng.beta(2, 2, size=queries)
        hits = (rng.random((evaluations, queries)) < ability).astype(float)
        rule = ConvergenceRule(rounds=10)
        _, outs = _paired_runs(rule, hits, lambda step: None)
        flagged += any(o["downturn"] for o in outs)
        confirmation_alone += any(o["paired_p"] <= ALPHA for o in outs)
    assert flagged <= bound
    assert confirmation_alone > bound


def test_model_level_noise_on_a_fixed_query_set_is_flagged_within_the_stated_rate():
    """A flat expected curve where each checkpoint is a bit better or worse on every query at once (sd 0.01) plus
    per-query noise (sd 0.05), the same 2000 queries at every evaluation: the best earlier evaluation's lead over
    the latest is real on these queries, so only the series rule can say the curve did not fall."""
    runs, evaluations, queries = 40, 60, 2000
    bound = int(stats.binom.ppf(0.999, runs, ALPHA))
    rng = np.random.default_rng(0)
    ability = rng.uniform(0.2, 0.8, size=queries)
    flagged = confirmation_alone = 0
    for _ in range(runs):
        shift = 0.01 * rng.standard_normal((evaluations, 1))
        values = np.clip(ability + shift + 0.05 * rng.standard_normal((evaluations, queries)), 0, 1)
        rule = ConvergenceRule(window=5, max_looks=100, rounds=10)
        _, outs = _paired_runs(rule, values, lambda step: None)
        flagged += any(o["downturn"] for o in outs)
        confirmation_alone += any(o["paired_p"] * (i * rule.max_looks) <= ALPHA for i, o in enumerate(outs) if i > 0)
    assert flagged <= bound
    assert confirmation_alone > bound  # even with the candidate and look factors, the paired test alone


def test_a_tail_reference():
    """The oracle's tails agree with scipy's distributions (a check of the oracle itself)."""
    assert tail(2.0, math.inf) == pytest.approx(stats.norm.sf(2.0), rel=1e-12)
    assert tail(2.0, 7.5) == pytest.approx(stats.t.sf(2.0, 7.5), rel=1e-12)
