"""How far a "can't tell" test could take the convergence rule on flat two-scale noise: an optimistic stand-in.

    python benchmarks/convergence_coverage_limit.py              # 200 runs of 300 evaluations, about 4 minutes
    python benchmarks/convergence_coverage_limit.py --runs 50    # a quick look

Two-scale noise (independent noise plus a slow AR(1) component, half the variance each, slow correlation 0.9 or
0.98) is outside the noise the rule covers, and the rule flags many of its flat runs as downturns
(docs/convergence.md). A rule could instead say "can't tell" (no flag, a warning) once the values show the slow
component. This script gives that idea every advantage: an **oracle** coverage test that knows both noise models
exactly (the null one, independent noise or AR(1) of correlation 0.5, and the two-scale one) and uses the most
powerful test between them that does not depend on the level or the scale of the values (Neyman-Pearson on the
direction of the successive differences: a zero-mean normal vector with covariance ``S`` has a direction of density
proportional to ``|S|^(-1/2) (d' S^-1 d)^(-m/2)``, ``m`` its length). At every look ``t`` it tests the values the
rule learns its noise from, ``u[0 : t - 2w]`` (at least as many as the rule uses), and once it rejects, the rest
of the run is uncovered (no flag). Its threshold lets at most ``--budget`` of the null model's flat runs be
uncovered over the whole run (what that costs: the falls of those runs are no longer found).

Printed, per null model and slow correlation: the share of flat two-scale runs flagged by the rule at its defaults,
and the share flagged before the oracle uncovers them (a real test knows neither model: at each look it is no more
powerful than the oracle's).
"""

from __future__ import annotations

import argparse
import functools

import numpy as np
import torch
from bench_convergence import _ar1, _first, _two_scale

from beyondlabels.functional.convergence import ConvergenceRule

WINDOW = 10
SD = 0.02


def _covariance(model: tuple[str, float], n: int) -> np.ndarray:
    lag = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    kind, phi = model
    if kind == "ar1":
        return phi**lag
    return 0.5 * np.eye(n) + 0.5 * phi**lag  # two-scale: independent plus slow AR(1), half the variance each


def _log_ratios(values: np.ndarray, null: tuple[str, float], alternative: tuple[str, float]) -> np.ndarray:
    """``[runs, length]``: at column ``t - 1`` the log likelihood ratio, alternative over null, of the direction of
    the differences of ``values[:, :t - 2w]``; -inf where that stretch has under 12 values."""
    runs, length = values.shape
    out = np.full((runs, length), -np.inf)
    for t in range(2 * WINDOW, length + 1):
        n = t - 2 * WINDOW
        if n < 12:
            continue
        d = np.diff(values[:, :n], axis=1)
        alt_inverse, alt_log_det = _difference_covariance(alternative, n)
        null_inverse, null_log_det = _difference_covariance(null, n)
        alt_quad = np.einsum("ij,jk,ik->i", d, alt_inverse, d)
        null_quad = np.einsum("ij,jk,ik->i", d, null_inverse, d)
        out[:, t - 1] = -0.5 * (alt_log_det - null_log_det) - 0.5 * (n - 1) * np.log(alt_quad / null_quad)
    return out


@functools.cache
def _difference_covariance(model: tuple[str, float], n: int) -> tuple[np.ndarray, float]:
    """The inverse and log determinant of the covariance of the ``n - 1`` differences of ``n`` values."""
    diff = np.eye(n)[1:] - np.eye(n)[:-1]
    cov = diff @ _covariance(model, n) @ diff.T
    return np.linalg.inv(cov), float(np.linalg.slogdet(cov)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--length", type=int, default=300)
    parser.add_argument("--budget", type=float, default=0.05, help="share of null runs the oracle may uncover")
    args = parser.parse_args()
    rule = ConvergenceRule(window=WINDOW)
    print(
        f"Flat two-scale noise (marginal sd {SD}, {args.runs} runs, {args.length} evaluations): share flagged as a "
        f"downturn; the oracle may uncover {args.budget:.0%} of the null model's flat runs"
    )
    print(f"{'null model':>14} {'slow':>5} {'rule alone':>11} {'before the oracle uncovers':>27}")
    for name, null in (("independent", ("ar1", 0.0)), ("AR(1) 0.5", ("ar1", 0.5))):
        null_runs = _ar1(null[1], SD, args.runs, args.length, seed=91)
        for slow in (0.9, 0.98):
            alternative = ("two-scale", slow)
            ratio = _log_ratios(null_runs, null, alternative)
            threshold = np.quantile(ratio.max(axis=1), 1 - args.budget)
            curves = _two_scale(slow, args.runs, args.length, int(slow * 100) + 7, int(slow * 1000) + 3)
            flags = np.zeros(curves.shape, dtype=bool)
            flags[:, 2 * WINDOW - 1 :] = rule.series_tests(torch.as_tensor(curves))["downturn"].numpy() > 0
            ratio = _log_ratios(curves, null, alternative)
            flagged, uncovered = _first(flags), _first(ratio > threshold)
            rule_alone = np.mean(flagged < args.length)
            print(f"{name:>14} {slow:>5} {rule_alone:>11.3f} {np.mean(flagged < uncovered):>27.3f}", flush=True)


if __name__ == "__main__":
    main()
