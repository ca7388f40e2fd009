"""Checkpoint selection where the best is known: coverage of the model confidence set, the winner's curse and its
correction, false discovery rate and power of the per-class regressions, and the cost at 100 evaluations x 10,000
queries beside arch's MCS in the same run.

    python benchmarks/bench_selection.py            # 500 runs per simulation
    python benchmarks/bench_selection.py --quick    # 100 runs

The simulated checkpoints (``docs/selection.md``): query ``i`` is right at checkpoint ``j`` when ``sqrt(r) z_i +
sqrt(1 - r) e_ij > Phi^-1(1 - mu_j)`` (``z_i``, ``e_ij`` independent standard normals): checkpoint ``j`` is right on
a share ``mu_j`` of the population of queries, and checkpoints agree on a query more than chance (a hard query is hard
for all), with latent correlation ``r = 0.7`` (about 12% of the queries change between two checkpoints of equal
value). The best checkpoint is the one of largest ``mu``.

- Coverage: the share of runs whose 90% set (``size=0.1``) holds the best checkpoint, and the mean set size, for
  ``close`` (best 0.88, one at 0.877, six at 0.85; 2,000 queries), ``curve`` (20 checkpoints on a peaked curve,
  0.88 at the top and 0.005 less per step away from it; 2,000 queries) and ``equal`` (two best at 0.88, eight
  from 0.87 down to 0.84; 2,000 queries), for both statistics.
- Winner's curse: 30 near-equal checkpoints (``mu`` evenly from 0.875 to 0.885) on 1,000 queries: the naive maximum
  minus the chosen checkpoint's ``mu`` (its bias), the out-of-bag estimate's, the share of that bias removed, and the
  coverage of the chosen checkpoint's ``mu`` by the 95% interval.
- Per-class regressions: 40 classes of 200 queries (accuracy drawn from 0.7..0.95), 8 of them 10 points worse at the
  current checkpoint; FDR 0.1: the mean false discovery proportion and the power (share of the 8 found); also at
  ``r = 0.5`` and ``0.9`` (more and fewer queries changing).
- Cost: seconds of ``model_confidence_set`` (``R``, ``max``), ``best_checkpoint_estimate`` and the whole
  ``select_checkpoints`` at 100 evaluations x 10,000 queries (1,000 resamples), and of ``arch.bootstrap.MCS``
  (``block_size=1``, 1,000 resamples) on the same losses, with the ratio.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch
from scipy.stats import norm

from beyondlabels.functional.regressions import class_regressions
from beyondlabels.functional.selection import best_checkpoint_estimate, model_confidence_set, select_checkpoints


def hits(rng: np.random.Generator, mu, queries: int, r: float = 0.7) -> np.ndarray:
    mu = np.asarray(mu, dtype=np.float64)
    z, e = rng.standard_normal((queries, 1)), rng.standard_normal((queries, mu.size))
    return (np.sqrt(r) * z + np.sqrt(1 - r) * e > norm.ppf(1 - mu)).astype(np.float64)


DESIGNS = {
    "close": np.r_[0.88, 0.877, np.full(6, 0.85)],
    "curve": 0.88 - 0.005 * np.abs(np.arange(20) - 12),
    "equal": np.r_[0.88, 0.88, np.linspace(0.87, 0.84, 8)],
}


def coverage_table(runs: int) -> None:
    print(f"\nCoverage of the 90% set ({runs} runs, 2,000 queries, r = 0.7)")
    print(f"{'design':>8} {'statistic':>9} {'holds the best':>15} {'mean size':>10} {'checkpoints':>12}")
    for name, mu in DESIGNS.items():
        best = np.flatnonzero(mu == mu.max())
        for statistic in ("R", "max"):
            rng = np.random.default_rng(len(name))
            held, sizes = 0, []
            for run in range(runs):
                losses = -torch.tensor(hits(rng, mu, 2000))
                out = model_confidence_set(losses, size=0.1, statistic=statistic, rounds=1000, seed=run)
                held += bool(out["included"][best].any())
                sizes.append(int(out["included"].sum()))
            print(f"{name:>8} {statistic:>9} {held / runs:>15.3f} {np.mean(sizes):>10.1f} {mu.size:>12}")


def bias_table(runs: int) -> None:
    mu = 0.88 + np.linspace(-0.005, 0.005, 30)
    rng = np.random.default_rng(30)
    naive, corrected, covered = [], [], 0
    for run in range(runs):
        out = best_checkpoint_estimate(torch.tensor(hits(rng, mu, 1000)), rounds=1000, seed=run)
        truth = mu[out["selected"]]
        naive.append(out["naive"] - truth)
        corrected.append(out["estimate"] - truth)
        covered += out["ci_low"] <= truth <= out["ci_high"]
    bias, left = np.mean(naive), np.mean(corrected)
    print(f"\nWinner's curse: 30 near-equal checkpoints (0.875..0.885), 1,000 queries, {runs} runs")
    print(f"  naive maximum: bias {bias:+.4f}, rmse {np.sqrt(np.mean(np.square(naive))):.4f}")
    print(f"  out-of-bag:    bias {left:+.4f}, rmse {np.sqrt(np.mean(np.square(corrected))):.4f}")
    print(
        f"  bias removed {1 - abs(left) / bias:.1%}; 95% interval covers the chosen checkpoint's value in "
        f"{covered / runs:.1%}"
    )


def classes_table(runs: int) -> None:
    print(f"\nPer-class regressions: 40 classes x 200 queries, 8 regressed by 10 points, FDR 0.1 ({runs} runs)")
    print(f"{'r':>5} {'changed queries':>16} {'FDR':>7} {'power':>7}")
    for r in (0.5, 0.7, 0.9):
        rng = np.random.default_rng(int(r * 10))
        fdp, power, changed = [], [], []
        for _ in range(runs):
            accuracy = rng.uniform(0.7, 0.95, 40)
            labels = np.repeat(np.arange(40), 200)
            drop = np.where(labels < 8, 0.10, 0.0)
            z = rng.standard_normal(labels.size)
            before, after = accuracy[labels], accuracy[labels] - drop
            reference = np.sqrt(r) * z + np.sqrt(1 - r) * rng.standard_normal(labels.size) > norm.ppf(1 - before)
            current = np.sqrt(r) * z + np.sqrt(1 - r) * rng.standard_normal(labels.size) > norm.ppf(1 - after)
            out = class_regressions(torch.tensor(reference * 1.0), torch.tensor(current * 1.0), torch.tensor(labels))
            called, truth = out["regressed"].numpy(), out["label"].numpy() < 8
            fdp.append((called & ~truth).sum() / max(called.sum(), 1))
            power.append((called & truth).sum() / 8)
            changed.append(np.mean(reference != current))
        print(f"{r:>5.1f} {np.mean(changed):>16.1%} {np.mean(fdp):>7.3f} {np.mean(power):>7.3f}")


def _seconds(call, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def cost_table(evaluations: int = 100, queries: int = 10_000) -> None:
    from arch.bootstrap import MCS

    rng = np.random.default_rng(0)
    mu = 0.85 + 0.03 * np.sin(np.linspace(0, 3, evaluations))
    values = hits(rng, mu, queries)
    losses = -values
    table = torch.tensor(values)
    print(f"\nCost at {evaluations} evaluations x {queries:,} queries, 1,000 resamples (best of 3, seconds)")
    ours = {
        "MCS R": _seconds(lambda: model_confidence_set(-table, statistic="R", rounds=1000)),
        "MCS max": _seconds(lambda: model_confidence_set(-table, statistic="max", rounds=1000)),
        "best estimate": _seconds(lambda: best_checkpoint_estimate(table, rounds=1000)),
        "select_checkpoints": _seconds(lambda: select_checkpoints(table, list(range(evaluations)), rounds=1000)),
    }

    def arch_mcs(method: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            MCS(losses, size=0.1, reps=1000, block_size=1, method=method, seed=0).compute()

    peers = {"MCS R": _seconds(lambda: arch_mcs("R"), 1), "MCS max": _seconds(lambda: arch_mcs("max"), 1)}
    for name, seconds in ours.items():
        peer = peers.get(name)
        versus = f"   arch {peer:6.2f} s   arch / ours {peer / seconds:5.1f}x" if peer else ""
        print(f"  {name:>18} {seconds:6.2f} s{versus}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 runs per simulation")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="+", default=None, help="tables: coverage bias classes cost")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runs = args.runs or (100 if args.quick else 500)
    only = set(args.only or ["coverage", "bias", "classes", "cost"])
    started = time.perf_counter()
    if "coverage" in only:
        coverage_table(runs)
    if "bias" in only:
        bias_table(runs)
    if "classes" in only:
        classes_table(runs)
    if "cost" in only:
        cost_table()
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
