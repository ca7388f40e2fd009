"""Convergence decisions: false alarms on flat curves and the delay to flag a decline, on the same simulated curves,
for the current rule (``beyondlabels.functional.convergence`` at its defaults: AR(1) noise, ``ar1``), the rule of
independent noise it replaced as the default (``noise_estimate="differences"``, ``independent``), its windows variant
(``windows``) and the rule before those (``earlier``).

    python benchmarks/bench_convergence.py            # 200 runs per setting, runs of up to 1000 evaluations
    python benchmarks/bench_convergence.py --quick    # 40 runs, up to 300 evaluations, fewer settings

Series (scalar values): independent normal noise of sd 0.01, 0.02, 0.05 around 0.5. False alarms: the share of flat
runs with a downturn flagged within the first 50, 150, 1000 evaluations. Correlated noise: flat curves of AR(1)
noise (marginal sd 0.02, lag-1 correlation 0, 0.3, 0.5, 0.8, 0.95) over 1000 evaluations, and the same curves
falling by 0.1 sd per evaluation from evaluation 900 on (and, over 300 evaluations, from 200 on; at lag-1 correlation
0.5 also from 100 on: a decline early in a run, with a short noise stretch before it): the share flagged
before the fall, within 60 evaluations of it, the median delay of those flagged after it, and the share of the
current rule's looks that were covered. Delay (independent noise): the mean falls by 0.05, 0.1, 0.2 sd per evaluation
after evaluation 60 (sd 0.02); the share of runs flagged at evaluations 61..100 ("within 40") and the median delay of
those flagged after 60. The reference distribution: one look's statistic for a fixed pair of windows (the first
against the last) on 4000 flat AR(1) curves of 300 evaluations, ``P(t_nu > T)`` against its nominal level, beside the
normal reference of the same scale (the fitted correlation's uncertainty left out). Outside the model: lag-1
correlation 0.99 (evaluations every few steps) and independent noise plus a slow AR(1) component (half the variance
each, correlation 0.9 and 0.98). The earlier rule is the monitor's rule before those, written out here at its
defaults (window 10, ``min_delta`` 0.01, 95% percentile bootstrap intervals of 2000 resamples drawn from one seeded
generator, the best earlier window's interval at the Bonferroni level over the non-overlapping windows, re-tested at
every evaluation; it flags exactly what the earlier callback's ``observe`` flagged); the others run at their defaults
(window 10, ``min_delta`` 0, ``alpha`` 0.05, ``max_looks`` 1000).

Paired (per-query values): ``--queries`` queries of varied difficulty (hit probability ~ Beta(2, 2)) answered
afresh at every evaluation (Bernoulli hits), so P@1 is flat; then the population P@1 falls by 0.1 / 0.2 sd (the sd
of P@1 on that many queries) per evaluation after evaluation 60. The current rule with per-query values (series rule
and paired confirmation must both reject: what the monitor does for a key with per-query values), its series rule
alone on the same P@1 values, the paired test alone as a test of its own (``p_paired`` times the ``k`` earlier
evaluations and ``max_looks``), the union of that and the series rule (each at half of a look's level; the rule
before the confirmation) and the earlier rule.

Model-level noise (per-query values): the same 2000 queries at every evaluation (values ``clip(mu_i + e_t + 0.05
z_ti, 0, 1)``, ``mu_i ~ U(0.2, 0.8)``), each checkpoint a bit better or worse on every query at once (``e_t`` of sd
0.01), the expected curve flat; window 5, ``max_looks`` 100, 60 evaluations. A paired test sees the best earlier
checkpoint's lead as real on these queries; the share of flat runs flagged by the same rules.

Cost: the seconds one ``observe`` takes at the 1000th evaluation, per rule (what the monitor adds to an evaluation).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from beyondlabels.functional.convergence import ConvergenceRule

# ---- the earlier rule (window 10, min_delta 0.01, 95% bootstrap; every run at once) --------------------------------


def _indices(window: int, rounds: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The resample indices the earlier rule drew for two windows of ``window`` values: one CPU generator seeded with
    ``seed`` at each interval, first the earlier window's ``[rounds, window]`` indices, then the later one's."""
    generator = torch.Generator().manual_seed(seed)
    first = torch.randint(window, (rounds, window), generator=generator).numpy()
    second = torch.randint(window, (rounds, window), generator=generator).numpy()
    return first, second


def _difference_interval(a: np.ndarray, b: np.ndarray, index: tuple[np.ndarray, np.ndarray], confidence: float):
    """Percentile interval of mean(b) - mean(a) per run: ``a``, ``b`` ``[runs, w]``, each resampled on its own."""
    means = b[:, index[1]].mean(axis=2) - a[:, index[0]].mean(axis=2)  # [runs, rounds]
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2], axis=1)
    return low, high


def earlier_rule(
    values: np.ndarray,
    window: int = 10,
    min_delta: float = 0.01,
    rounds: int = 2000,
    confidence: float = 0.95,
    seed: int = 11,
) -> np.ndarray:
    """Downturn flags ``[runs, t]`` of the earlier rule (mode max) after each value."""
    runs, t = values.shape
    index = _indices(window, rounds, seed)
    flags = np.zeros((runs, t), dtype=bool)
    kernel = np.ones(window) / window
    means_all = np.stack([np.convolve(row, kernel, mode="valid") for row in values])  # m_j = mean(v[j:j+w])
    rows = np.arange(runs)
    for n in range(2 * window, t + 1):
        last = values[:, n - window : n]
        earlier_count = n - window
        candidates = means_all[:, : earlier_count - window + 1]
        best = candidates.argmax(axis=1)  # the first of equal means
        best_windows = values[rows[:, None], best[:, None] + np.arange(window)]
        m = max(1, earlier_count // window)
        level = 1.0 - (1.0 - confidence) / m
        _, high = _difference_interval(best_windows, last, index, level)
        flags[:, n - 1] = high < -min_delta
    return flags


# ---- the current rule ----------------------------------------------------------------------------------------------


def current_rule(values: np.ndarray, rule: ConvergenceRule) -> np.ndarray:
    """Downturn flags ``[runs, t]`` of the series rule after each value (0 before the first look)."""
    tests = rule.series_tests(values)["downturn"].numpy().astype(bool)
    flags = np.zeros(values.shape, dtype=bool)
    flags[:, 2 * rule.window - 1 :] = tests
    return flags


def _first(flags: np.ndarray) -> np.ndarray:
    return np.where(flags.any(axis=1), flags.argmax(axis=1), flags.shape[1])


def _delay(flags: np.ndarray, start: int = 60, horizon: int = 40) -> tuple[float, float, float]:
    """(share flagged before ``start``, share first flagged at start+1 .. start+horizon, median delay after start)."""
    first = _first(flags)
    early = float(np.mean(first <= start))
    within = float(np.mean((first > start) & (first <= start + horizon)))
    late = first[(first > start) & (first < flags.shape[1])] - start
    return early, within, float(np.median(late)) if late.size else float("nan")


def _ar1(rho: float, sd: float, runs: int, length: int, seed: int) -> np.ndarray:
    """Flat curves around 0.5 of stationary AR(1) noise, marginal sd ``sd``, lag-1 correlation ``rho``."""
    shocks = np.random.default_rng(seed).normal(0, sd * np.sqrt(1 - rho**2), size=(runs, length))
    noise = np.zeros_like(shocks)
    noise[:, 0] = shocks[:, 0] / np.sqrt(1 - rho**2)
    for i in range(1, length):
        noise[:, i] = rho * noise[:, i - 1] + shocks[:, i]
    return 0.5 + noise


def _two_scale(slow: float, runs: int, length: int, white_seed: int, slow_seed: int) -> np.ndarray:
    """Flat curves around 0.5 of independent noise plus a slow AR(1) component of lag-1 correlation ``slow``, half
    the variance each (marginal sd 0.02)."""
    white = np.random.default_rng(white_seed).normal(0, 0.02 * np.sqrt(0.5), size=(runs, length))
    return white + _ar1(slow, 0.02 * np.sqrt(0.5), runs, length, seed=slow_seed)


RULES = {
    "ar1": ConvergenceRule(),
    "independent": ConvergenceRule(noise_estimate="differences"),
    "windows": ConvergenceRule(noise_estimate="windows"),
}


def series_tables(runs: int, lengths: list[int], sds: list[float], slopes: list[float]) -> None:
    longest = max(lengths)
    print(
        f"\nFalse alarms on flat curves of independent noise ({runs} runs each): share of runs with a downturn within "
        "the first t evaluations"
    )
    names = ("earlier", "independent", "ar1")
    print(f"{'noise sd':>9} " + " ".join(f"{name + ' t=' + str(t):>17}" for t in lengths for name in names))
    for sd in sds:
        values = 0.5 + np.random.default_rng(int(round(sd * 1e4))).normal(0, sd, size=(runs, longest))
        first = {"earlier": _first(earlier_rule(values))}
        first.update({name: _first(current_rule(values, RULES[name])) for name in names[1:]})
        print(f"{sd:>9.2f} " + " ".join(f"{np.mean(first[name] < t):>17.3f}" for t in lengths for name in names))
    length, sd = 150, 0.02
    print(
        f"\nDelay to flag a decline after evaluation 60 (independent noise, sd {sd}, {runs} runs, {length} evaluations)"
    )
    print(f"{'slope (sd/eval)':>16} {'rule':>12} {'flagged <= 60':>14} {'within 40':>10} {'median delay':>13}")
    steps = np.arange(length)
    for slope in slopes:
        mean = np.where(steps < 60, 0.5, 0.5 - slope * sd * (steps - 60))
        values = mean + np.random.default_rng(int(slope * 1000)).normal(0, sd, size=(runs, length))
        rows = [("earlier", earlier_rule(values))] + [
            (name, current_rule(values, RULES[name])) for name in ("independent", "windows", "ar1")
        ]
        for name, flags in rows:
            early, within, median = _delay(flags)
            print(f"{slope:>16.2f} {name:>12} {early:>14.3f} {within:>10.3f} {median:>13.1f}")


def correlated_table(
    runs: int, length: int, rhos: list[float], start: int, sd: float = 0.02, slope: float = 0.1
) -> None:
    """Flat AR(1) curves of ``length`` evaluations, and the same curves falling by ``slope`` sd per evaluation from
    evaluation ``start`` on: false alarms, detection, covered looks, per rule."""
    print(
        f"\nAR(1) noise (marginal sd {sd}, {runs} runs, {length} evaluations): false alarms on flat curves; a fall of "
        f"{slope} sd per evaluation from evaluation {start}"
    )
    print(
        f"{'rho':>5} {'rule':>12} {'flat: flagged':>14} {'before fall':>12} {'within 60':>10} {'median delay':>13} "
        f"{'covered looks':>14} {'rho at end':>11}"
    )
    steps = np.arange(length)
    for rho in rhos:
        flat = _ar1(rho, sd, runs, length, seed=int(1000 * rho) + length)
        falling = flat - slope * sd * np.clip(steps - start, 0, None)
        for name, rule in RULES.items():
            tests = rule.series_tests(falling)
            flags = np.zeros(falling.shape, dtype=bool)
            flags[:, 2 * rule.window - 1 :] = tests["downturn"].numpy().astype(bool)
            flat_flagged = current_rule(flat, rule).any(axis=1).mean()
            early, within, median = _delay(flags, start=start, horizon=60)
            covered = float(tests["covered"].mean())
            end = float(np.nanmean(tests["correlation"][:, -1].numpy())) if name == "ar1" else float("nan")
            print(
                f"{rho:>5.2f} {name:>12} {flat_flagged:>14.3f} {early:>12.3f} {within:>10.3f} {median:>13.1f} "
                f"{covered:>14.2f} {end:>11.3f}"
            )


def reference_table(sims: int = 4000, length: int = 300, window: int = 10) -> None:
    """One look's statistic for the first window against the last on flat AR(1) curves: the Student t reference of the
    fitted noise (its correlation's uncertainty in ``nu``) and the normal one, against the nominal level."""
    from scipy import stats

    from beyondlabels.functional.convergence import ar1_noise

    print(
        f"\nReference distribution ({sims} flat AR(1) curves of {length} evaluations, window {window}): share of "
        "P(reference > T) below the level"
    )
    print(
        f"{'rho':>5} {'median df':>9} "
        + " ".join(f"{'t ' + str(q):>9} {'normal ' + str(q):>13}" for q in (0.05, 0.01, 0.001))
    )
    for rho in (0.0, 0.5, 0.8):
        curves = _ar1(rho, 1.0, sims, length, seed=77 + int(10 * rho))
        fit = ar1_noise(curves, window)
        statistic = (curves[:, :window].mean(1) - curves[:, -window:].mean(1)) / fit["scale"].numpy()
        df = fit["df"].numpy()
        p, normal = stats.t.sf(statistic, df), stats.norm.sf(statistic)
        cells = " ".join(f"{np.mean(p <= q):>9.4f} {np.mean(normal <= q):>13.4f}" for q in (0.05, 0.01, 0.001))
        print(f"{rho:>5.1f} {np.median(df):>9.1f} {cells}")


def outside_table(runs: int, length: int) -> None:
    """Noise the AR(1) model does not cover: a near random walk, and independent noise plus a slow component."""
    print(
        f"\nOutside the covered noise (marginal sd 0.02, {runs} flat runs, {length} evaluations): share of runs flagged"
    )
    print(f"{'noise':>34} {'independent':>12} {'ar1':>8} {'ar1 covered looks':>18}")
    cases = {"AR(1) 0.99": _ar1(0.99, 0.02, runs, length, seed=99)}
    for slow in (0.9, 0.98):
        cases[f"independent + AR(1) {slow} (half each)"] = _two_scale(
            slow, runs, length, int(slow * 100), int(slow * 1000)
        )
    for name, values in cases.items():
        tests = RULES["ar1"].series_tests(values)
        independent = current_rule(values, RULES["independent"]).any(axis=1).mean()
        print(
            f"{name:>34} {independent:>12.3f} {float(tests['downturn'].amax(dim=1).mean()):>8.3f} "
            f"{float(tests['covered'].mean()):>18.2f}"
        )


def cost_table(length: int = 1000) -> None:
    """Seconds of one ``observe`` at the ``length``-th evaluation, per rule."""
    values = 0.5 + np.random.default_rng(5).normal(0, 0.02, size=length)
    print(f"\nCost of one observe() at evaluation {length} (bootstrap band of 2000 resamples included)")
    for name in ("independent", "ar1"):
        rule = ConvergenceRule(noise_estimate="differences" if name == "independent" else "ar1")
        state = rule.new_state()
        for step, v in enumerate(values[:-1]):
            state["series"].append([step, float(v)])
        started = time.perf_counter()
        for _ in range(5):
            trial = {**state, "series": list(state["series"]), "events": [], "flags": dict(state["flags"])}
            rule.observe(trial, length, float(values[-1]))
        print(f"{name:>12} {(time.perf_counter() - started) / 5 * 1000:>8.1f} ms")


def _per_query_flags(rule: ConvergenceRule, scalars: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Downturn flags ``[t]`` of one run with per-query values ``values`` ``[t, queries]``: the current rule, the
    paired test alone (look- and candidate-corrected) and the union of that and the series rule."""
    length = len(scalars)
    flags = {name: np.zeros(length, dtype=bool) for name in ("current", "paired alone", "union")}
    state = rule.new_state()
    tests = rule.series_tests(scalars)  # the series rule at every look (each look sees only the values up to it)
    for step in range(length):
        out = rule.observe(state, step, float(scalars[step]), per_query=(None, values[step]))
        flags["current"][step] = out["downturn"] == 1.0
        alone = min(1.0, step * rule.max_looks * out["paired_p"]) if step else 1.0
        flags["paired alone"][step] = alone <= rule.alpha
        look = step - (2 * rule.window - 1)
        series = [float(tests["downturn_p"][0, look]) if tests["covered"][0, look] == 1.0 else 1.0] if look >= 0 else []
        flags["union"][step] = min(1.0, (1 + len(series)) * min([alone, *series])) <= rule.alpha if step else False
    return flags


def paired_table(runs: int, queries: list[int], slopes: list[float], length: int = 150) -> None:
    print(
        f"\nPaired (per-query hits, Beta(2,2) difficulty; {runs} runs, {length} evaluations): flat P@1, then a fall "
        "after 60"
    )
    print(f"{'queries':>8} {'slope':>6} {'rule':>16} {'flagged <= 60':>14} {'within 40':>10} {'median delay':>13}")
    for n in queries:
        for slope in [0.0, *slopes]:
            rng = np.random.default_rng(1000 * n + int(slope * 100))
            flags = {name: np.zeros((runs, length), dtype=bool) for name in ("current", "paired alone", "union")}
            scalars = np.zeros((runs, length))
            for r in range(runs):
                ability = rng.beta(2, 2, size=n)
                sd = np.sqrt(np.sum(ability * (1 - ability))) / n  # sd of P@1 at one evaluation
                fall = np.where(np.arange(length) < 60, 0.0, slope * sd * (np.arange(length) - 60))
                hits = (rng.random((length, n)) < np.clip(ability[None, :] - fall[:, None], 0, 1)).astype(np.float64)
                scalars[r] = hits.mean(axis=1)
                for name, row in _per_query_flags(ConvergenceRule(rounds=10), scalars[r], hits).items():
                    flags[name][r] = row
            rows = [
                ("current (both)", flags["current"]),
                ("series alone", current_rule(scalars, ConvergenceRule())),
                ("paired alone", flags["paired alone"]),
                ("union", flags["union"]),
                ("earlier", earlier_rule(scalars)),
            ]
            for name, rule_flags in rows:
                early, within, median = _delay(rule_flags)
                if slope == 0.0:
                    print(
                        f"{n:>8} {'flat':>6} {name:>16} {float(np.mean(rule_flags.any(axis=1))):>14.3f} {'':>10} "
                        f"{'':>13}"
                    )
                else:
                    print(f"{n:>8} {slope:>6.2f} {name:>16} {early:>14.3f} {within:>10.3f} {median:>13.1f}")


def model_noise_table(runs: int, queries: int = 2000, length: int = 60) -> None:
    print(
        f"\nModel-level noise on a fixed query set ({queries} queries, sd 0.01 per checkpoint + 0.05 per query; {runs} "
        f"runs, {length} evaluations, window 5, max_looks 100): flat runs flagged"
    )
    rng = np.random.default_rng(0)
    rule = ConvergenceRule(window=5, max_looks=100, rounds=10)
    counts = {"current (both)": 0, "series alone": 0, "paired alone": 0, "union": 0}
    for _ in range(runs):
        ability = rng.uniform(0.2, 0.8, size=queries)
        values = np.clip(
            ability[None, :] + 0.01 * rng.standard_normal((length, 1)) + 0.05 * rng.standard_normal((length, queries)),
            0,
            1,
        )
        scalars = values.mean(axis=1)
        flags = _per_query_flags(rule, scalars, values)
        counts["current (both)"] += bool(flags["current"].any())
        counts["series alone"] += bool(current_rule(scalars[None, :], rule).any())
        counts["paired alone"] += bool(flags["paired alone"].any())
        counts["union"] += bool(flags["union"].any())
    print(" ".join(f"{name:>16}" for name in counts))
    print(" ".join(f"{count / runs:>16.3f}" for count in counts.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 runs, up to 300 evaluations, fewer settings")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--queries", type=int, nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        help="tables to print: series early correlated reference outside paired model cost",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runs = args.runs or (40 if args.quick else 200)
    only = set(args.only or ["series", "early", "correlated", "reference", "outside", "paired", "model", "cost"])
    started = time.perf_counter()
    if "series" in only:
        series_tables(runs, [50, 150] if args.quick else [50, 150, 1000], [0.01, 0.02, 0.05], [0.05, 0.1, 0.2])
    if "early" in only:
        correlated_table(runs, 300, [0.5], start=100)
    if "correlated" in only:
        correlated_table(runs, 300, [0.0, 0.5, 0.8] if args.quick else [0.0, 0.3, 0.5, 0.8, 0.95], start=200)
        if not args.quick:
            correlated_table(runs, 1000, [0.0, 0.3, 0.5, 0.8, 0.95], start=900)
    if "reference" in only:
        reference_table(1000 if args.quick else 4000)
    if "outside" in only:
        outside_table(runs, 300 if args.quick else 1000)
    if "paired" in only:
        paired_table(
            min(runs, 40 if args.quick else 100), args.queries or ([100] if args.quick else [100, 600]), [0.1, 0.2]
        )
    if "model" in only:
        model_noise_table(runs)
    if "cost" in only:
        cost_table()
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
