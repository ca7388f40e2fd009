"""Convergence decisions: false alarms on flat curves and the delay to flag a decline, earlier rule against the
current rule (``beyondlabels.functional.convergence``), on the same simulated curves.

    python benchmarks/bench_convergence.py            # 200 runs per setting, runs of up to 1000 evaluations
    python benchmarks/bench_convergence.py --quick    # 40 runs, up to 150 evaluations

Series (scalar values): independent normal noise of sd 0.01, 0.02, 0.05 around 0.5. False alarms: the share of flat
runs with a downturn flagged within the first 50, 150, 1000 evaluations. Autocorrelation: flat curves of AR(1) noise
(marginal sd 0.02, lag-1 correlation 0, 0.3, 0.5), outside the default rule's assumptions; "windows" is the current rule with
``noise_estimate="windows"``. Delay: the mean falls by 0.05,
0.1, 0.2 sd per evaluation after evaluation 60 (sd 0.02); the share of runs flagged at evaluations 61..100 ("within
40") and the median delay of those flagged after 60. The earlier rule is the monitor's rule before the current one,
written out here at its defaults (window 10, ``min_delta`` 0.01, 95% percentile bootstrap intervals of 2000 resamples
drawn from one seeded generator, the best earlier window's interval at the Bonferroni level over the non-overlapping
windows, re-tested at every evaluation; it flags exactly what the earlier callback's ``observe`` flagged); the
current rule runs at its defaults (window 10, ``min_delta`` 0, ``alpha`` 0.05, ``max_looks`` 1000).

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


def earlier_rule(values: np.ndarray, window: int = 10, min_delta: float = 0.01, rounds: int = 2000, confidence: float = 0.95, seed: int = 11) -> np.ndarray:
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


def _delay(flags: np.ndarray, start: int = 60) -> tuple[float, float, float]:
    """(share flagged before ``start``, share first flagged at start+1 .. start+40, median delay after start)."""
    first = _first(flags)
    early = float(np.mean(first <= start))
    within = float(np.mean((first > start) & (first <= start + 40)))
    late = first[(first > start) & (first < flags.shape[1])] - start
    return early, within, float(np.median(late)) if late.size else float("nan")


def series_tables(runs: int, lengths: list[int], sds: list[float], slopes: list[float]) -> None:
    rule, windows_rule = ConvergenceRule(), ConvergenceRule(noise_estimate="windows")
    longest = max(lengths)
    print(f"\nFalse alarms on flat curves ({runs} runs each): share of runs with a downturn within the first t evaluations")
    print(f"{'noise sd':>9} " + " ".join(f"{'earlier t=' + str(t):>15} {'current t=' + str(t):>15}" for t in lengths))
    for sd in sds:
        values = 0.5 + np.random.default_rng(int(round(sd * 1e4))).normal(0, sd, size=(runs, longest))
        old, new = _first(earlier_rule(values)), _first(current_rule(values, rule))
        cells = [f"{np.mean(old < t):>15.3f} {np.mean(new < t):>15.3f}" for t in lengths]
        print(f"{sd:>9.2f} " + " ".join(cells))
    length, sd = 150, 0.02
    print(f"\nFalse alarms on flat curves of autocorrelated noise (AR(1), sd {sd}, {runs} runs, {length} evaluations)")
    print(f"{'rho':>9} {'earlier':>15} {'current':>15} {'windows scale':>15}")
    for rho in (0.0, 0.3, 0.5):
        shocks = np.random.default_rng(21).normal(0, sd * np.sqrt(1 - rho**2), size=(runs, length))
        noise = np.zeros_like(shocks)
        noise[:, 0] = shocks[:, 0] / np.sqrt(1 - rho**2)
        for i in range(1, length):
            noise[:, i] = rho * noise[:, i - 1] + shocks[:, i]
        values = 0.5 + noise  # stationary, marginal sd = sd
        old, new = earlier_rule(values).any(axis=1), current_rule(values, rule).any(axis=1)
        windows = current_rule(values, windows_rule).any(axis=1)
        print(f"{rho:>9.1f} {np.mean(old):>15.3f} {np.mean(new):>15.3f} {np.mean(windows):>15.3f}")
    print(f"\nDelay to flag a decline after evaluation 60 (sd {sd}, {runs} runs, {length} evaluations)")
    print(f"{'slope (sd/eval)':>16} {'rule':>8} {'flagged <= 60':>14} {'within 40':>10} {'median delay':>13}")
    steps = np.arange(length)
    for slope in slopes:
        mean = np.where(steps < 60, 0.5, 0.5 - slope * sd * (steps - 60))
        values = mean + np.random.default_rng(int(slope * 1000)).normal(0, sd, size=(runs, length))
        rows = (("earlier", earlier_rule(values)), ("current", current_rule(values, rule)), ("windows", current_rule(values, windows_rule)))
        for name, flags in rows:
            early, within, median = _delay(flags)
            print(f"{slope:>16.2f} {name:>8} {early:>14.3f} {within:>10.3f} {median:>13.1f}")


def _per_query_flags(rule: ConvergenceRule, scalars: np.ndarray, values: np.ndarray) -> dict[str, np.ndarray]:
    """Downturn flags ``[t]`` of one run with per-query values ``values`` ``[t, queries]``: the current rule, the
    paired test alone (look- and candidate-corrected) and the union of that and the series rule."""
    length = len(scalars)
    flags = {name: np.zeros(length, dtype=bool) for name in ("current", "paired alone", "union")}
    state = rule.new_state()
    for step in range(length):
        out = rule.observe(state, step, float(scalars[step]), per_query=(None, values[step]))
        flags["current"][step] = out["downturn"] == 1.0
        alone = min(1.0, step * rule.max_looks * out["paired_p"]) if step else 1.0
        flags["paired alone"][step] = alone <= rule.alpha
        series = rule.series_tests(scalars[: step + 1])["downturn_p"][0, -1:].tolist()  # empty before the first look
        flags["union"][step] = min(1.0, (1 + len(series)) * min([alone, *series])) <= rule.alpha if step else False
    return flags


def paired_table(runs: int, queries: list[int], slopes: list[float], length: int = 150) -> None:
    print(f"\nPaired (per-query hits, Beta(2,2) difficulty; {runs} runs, {length} evaluations): flat P@1, then a fall after 60")
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
            rows = [("current (both)", flags["current"]), ("series alone", current_rule(scalars, ConvergenceRule())),
                    ("paired alone", flags["paired alone"]), ("union", flags["union"]), ("earlier", earlier_rule(scalars))]  # fmt: skip
            for name, rule_flags in rows:
                early, within, median = _delay(rule_flags)
                if slope == 0.0:
                    print(f"{n:>8} {'flat':>6} {name:>16} {float(np.mean(rule_flags.any(axis=1))):>14.3f} {'':>10} {'':>13}")
                else:
                    print(f"{n:>8} {slope:>6.2f} {name:>16} {early:>14.3f} {within:>10.3f} {median:>13.1f}")


def model_noise_table(runs: int, queries: int = 2000, length: int = 60) -> None:
    print(f"\nModel-level noise on a fixed query set ({queries} queries, sd 0.01 per checkpoint + 0.05 per query; {runs} runs, {length} evaluations, window 5, max_looks 100): flat runs flagged")
    rng = np.random.default_rng(0)
    rule = ConvergenceRule(window=5, max_looks=100, rounds=10)
    counts = {"current (both)": 0, "series alone": 0, "paired alone": 0, "union": 0}
    for _ in range(runs):
        ability = rng.uniform(0.2, 0.8, size=queries)
        values = np.clip(ability[None, :] + 0.01 * rng.standard_normal((length, 1)) + 0.05 * rng.standard_normal((length, queries)), 0, 1)
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
    parser.add_argument("--quick", action="store_true", help="40 runs, up to 150 evaluations, fewer paired settings")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--queries", type=int, nargs="+", default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runs = args.runs or (40 if args.quick else 200)
    lengths = [50, 150] if args.quick else [50, 150, 1000]
    started = time.perf_counter()
    series_tables(runs, lengths, [0.01, 0.02, 0.05], [0.05, 0.1, 0.2])
    paired_table(min(runs, 40 if args.quick else 100), args.queries or ([100] if args.quick else [100, 600]), [0.1, 0.2])
    model_noise_table(runs)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
