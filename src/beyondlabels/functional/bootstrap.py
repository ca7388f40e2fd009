"""Bootstrap confidence intervals of the mean of per-query values.

Pure torch (float64 on the CPU). Every evaluation writes one value per query (``per_query``); the statistics read
such vectors.

Definitions (stated once)
    - **Missing values.** NaN entries (lone queries, queries a metric leaves out) are dropped before any statistic;
      ``n`` counts what is left. A paired difference is NaN when either side is.
    - **Bootstrap** (:func:`bootstrap_ci`): ``rounds`` resamples of the ``n`` values with replacement; the statistic
      is the mean. The draws are a function of ``seed`` alone (the same seed gives the same interval on any device
      and world size): rounds come in blocks of 50, block ``b``'s drawn in order by a CPU ``torch.Generator`` seeded
      from ``(seed, b)`` (the rule: ``resampled_means`` in ``beyondlabels._internal.stats``), so processes can share
      the rounds and still get one process's interval bit for bit. ``"percentile"``: the ``(1-c)/2`` and
      ``(1+c)/2`` quantiles (linear interpolation) of the resampled means. ``"bca"`` (bias-corrected and
      accelerated, Efron 1987): bias
      ``z0 = Phi^-1((#{m* < m} + #{m* <= m}) / (2B))`` and acceleration ``a = sum(d^3) / (6 (sum d^2)^1.5)`` with
      ``d_i`` the jackknife deviations ``mean(theta_(.)) - theta_(i)``; the quantile levels become
      ``Phi(z0 + (z0 + z) / (1 - a (z0 + z)))`` for ``z = Phi^-1`` of each percentile level. ``n == 1`` or constant
      values give the point interval; ``n == 0`` gives NaN.

Examples:
    >>> ci = bootstrap_ci([0.2, 0.4, 0.1, 0.5, 0.3, 0.6, 0.2, 0.4], rounds=500, seed=0)
    >>> ci.method, ci.n, ci.low < ci.estimate < ci.high
    ('percentile', 8, True)
"""

from __future__ import annotations

import math
from typing import Any

from beyondlabels._internal.checks import check_choice, check_confidence, check_rounds, check_seed
from beyondlabels._internal.stats import (
    Interval,
    bootstrap_means,
    finite,
    interval_from,
    point_interval,
    vector,
)

__all__ = ["METHODS", "Interval", "bootstrap_ci", "bootstrap_difference_ci"]

METHODS = ("percentile", "bca")


def bootstrap_ci(
    values: Any, *, rounds: int = 2000, confidence: float = 0.95, method: str = "percentile", seed: int = 11
) -> Interval:
    """Bootstrap confidence interval of the mean of per-query values (definition: the module docstring).

    Args:
        values: One value per query (tensor, array or list); NaN entries are left out.
        rounds: Resamples.
        confidence: Coverage, e.g. 0.95.
        method: ``"percentile"`` or ``"bca"``.
        seed: Seed of the resampling generator.

    Examples:
        >>> ci = bootstrap_ci([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0], rounds=1000, seed=0)
        >>> ci.estimate, ci.low < 0.625 < ci.high, ci.n
        (0.625, True, 8)
    """
    rounds, seed, confidence = check_rounds(rounds), check_seed(seed), check_confidence(confidence)
    check_choice(method, "method", METHODS)
    data = finite(vector(values, "values"))
    n = data.numel()
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, confidence, method, 0)
    estimate = float(data.mean())
    if n == 1 or bool((data == data[0]).all()):
        return point_interval(estimate, confidence, method, n)
    (means,) = bootstrap_means([data], rounds, seed)
    jackknife = (data.sum() - data) / (n - 1) if method == "bca" else None
    return interval_from(means, estimate, confidence, method, n, jackknife)


def bootstrap_difference_ci(
    a: Any, b: Any, *, rounds: int = 2000, confidence: float = 0.95, seed: int = 11
) -> Interval:
    """Percentile bootstrap interval of ``mean(b) - mean(a)`` for two *independent* samples (each resampled on its
    own; NaN left out). Used to compare two windows of a training curve.

    Examples:
        >>> ci = bootstrap_difference_ci([0.1, 0.2, 0.15, 0.12], [0.5, 0.55, 0.6, 0.52], rounds=500, seed=0)
        >>> round(ci.estimate, 4), ci.low > 0
        (0.4, True)
    """
    rounds, seed, confidence = check_rounds(rounds), check_seed(seed), check_confidence(confidence)
    x, y = finite(vector(a, "a")), finite(vector(b, "b"))
    if x.numel() == 0 or y.numel() == 0:
        return Interval(math.nan, math.nan, math.nan, confidence, "percentile", 0)
    estimate = float(y.mean() - x.mean())
    n = min(x.numel(), y.numel())
    means_x, means_y = bootstrap_means([x, y], rounds, seed)
    return interval_from(means_y - means_x, estimate, confidence, "percentile", n, None)
