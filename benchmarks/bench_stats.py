"""Bootstrap confidence intervals: beyondlabels against scipy.stats.bootstrap, in one process on the same data.

    python benchmarks/bench_stats.py [--queries 512 10000] [--keys 20] [--rounds 2000] [--threads 2]

Two workloads: one per-query vector (``bootstrap_ci`` against ``scipy.stats.bootstrap``, percentile and BCa), and
the intervals an evaluation logs for every headline key (``confidence_intervals`` over ``--keys`` vectors of the same
queries, against one ``scipy.stats.bootstrap`` call per key). Prints seconds, the ratio (scipy / ours) and the
largest difference between the interval bounds in units of the standard error (Monte Carlo error only: different
random streams).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy import stats as sps

from beyondlabels.functional.bootstrap import bootstrap_ci
from beyondlabels.metrics.intervals import confidence_intervals


def _time(fn, repeat: int = 3):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, nargs="+", default=[512, 10000])
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"rounds={args.rounds}, threads={args.threads}")
    print(f"{'workload':44s} {'ours s':>8s} {'scipy s':>8s} {'ratio':>6s} {'max |Δbound|/se':>16s}")
    for n in args.queries:
        values = rng.beta(0.6, 1.5, size=n)
        se = values.std(ddof=1) / np.sqrt(n)
        for method, scipy_method in (("percentile", "percentile"), ("bca", "BCa")):
            ours_s, ours = _time(
                lambda values=values, method=method: bootstrap_ci(values, rounds=args.rounds, method=method)
            )
            ref_s, ref = _time(
                lambda values=values, scipy_method=scipy_method: sps.bootstrap(
                    (values,), np.mean, n_resamples=args.rounds, method=scipy_method, random_state=1
                )
            )
            gap = max(abs(ours.low - ref.confidence_interval.low), abs(ours.high - ref.confidence_interval.high)) / se
            print(f"{f'one vector, n={n}, {method}':44s} {ours_s:8.3f} {ref_s:8.3f} {ref_s / ours_s:6.1f} {gap:16.3f}")
        matrix = rng.beta(0.6, 1.5, size=(n, args.keys))
        per_query = {f"k{i}": torch.from_numpy(matrix[:, i]) for i in range(args.keys)}
        ours_s, ours = _time(
            lambda per_query=per_query: confidence_intervals(per_query, list(per_query), rounds=args.rounds), repeat=2
        )

        def scipy_all(matrix=matrix):
            return [
                sps.bootstrap((matrix[:, i],), np.mean, n_resamples=args.rounds, method="percentile", random_state=i)
                for i in range(args.keys)
            ]

        ref_s, refs = _time(scipy_all, repeat=2)
        ses = matrix.std(axis=0, ddof=1) / np.sqrt(n)
        gap = max(
            max(
                abs(ours[f"k{i}_ci_low"] - r.confidence_interval.low),
                abs(ours[f"k{i}_ci_high"] - r.confidence_interval.high),
            )
            / ses[i]
            for i, r in enumerate(refs)
        )
        print(
            f"{f'{args.keys} keys of one evaluation, n={n}':44s} {ours_s:8.3f} {ref_s:8.3f} {ref_s / ours_s:6.1f} "
            f"{gap:16.3f}"
        )


if __name__ == "__main__":
    main()
