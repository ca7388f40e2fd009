"""Agreement between raters (Cohen's kappa) and rank correlation (Spearman, Kendall).

Definitions (stated once; missing values as in :mod:`beyondlabels.functional.bootstrap`)
      (ints or strings); weighted ``1 - sum(w O) / sum(w E)`` with ``w = |i - j|`` (linear) or ``(i - j)^2``
      (quadratic) over the sorted categories. NaN when ``p_e == 1``.
    - **Spearman** (:func:`spearman`): the Pearson correlation of average ranks; p-value from
      ``t = rho sqrt((n-2)/(1-rho^2))`` with ``n-2`` degrees of freedom. **Kendall** (:func:`kendall_tau`): tau-b
      ``S / sqrt((n0-n1)(n0-n2))`` with the tie-corrected normal approximation of the variance of ``S`` (Kendall
      1970); two-sided p-values.

Examples:

Examples:
    >>> round(spearman([1, 2, 3, 4], [1, 3, 2, 4]).statistic, 2)
    0.8
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.stats import t_sf, vector
from beyondlabels.functional.labels import encode_labels

__all__ = ["Correlation", "cohen_kappa", "kendall_tau", "spearman"]


@dataclass(frozen=True)
class Correlation:
    """A correlation coefficient with its two-sided p-value and the number of pairs used."""

    statistic: float
    pvalue: float
    n: int


def cohen_kappa(rater_a: Any, rater_b: Any, weights: str | None = None) -> float:
    """Cohen's kappa between two raters' labels of the same items (definition: the module docstring).

    Args:
        rater_a: One label per item: ints, strings or booleans-as-ints.
        rater_b: The other rater's labels of the same items, same length.
        weights: None (unweighted), ``"linear"`` or ``"quadratic"`` (ordinal categories, sorted by code).

    Examples:
        >>> round(cohen_kappa([1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 1, 1]), 4)
        0.3333
        >>> round(cohen_kappa(["good", "bad", "ok", "good"], ["good", "ok", "ok", "good"]), 4)
        0.6
    """
    if weights not in (None, "linear", "quadratic"):
        raise ValueError(f"`weights` must be None, 'linear' or 'quadratic', got {weights!r}.")
    codes_a, _ = encode_labels(_as_labels(rater_a, "rater_a"), "rater_a")
    codes_b, _ = encode_labels(_as_labels(rater_b, "rater_b"), "rater_b")
    if codes_a.numel() != codes_b.numel() or codes_a.numel() == 0:
        raise ValueError(
            "`rater_a` and `rater_b` must label the same non-empty set of items, "
            f"got {codes_a.numel()} and {codes_b.numel()} labels."
        )
    categories, inverse = torch.unique(torch.cat([codes_a, codes_b]), return_inverse=True)
    c, n = categories.numel(), codes_a.numel()
    ia, ib = inverse[:n], inverse[n:]
    observed = torch.zeros(c, c, dtype=torch.float64).index_put_(
        (ia, ib), torch.ones(n, dtype=torch.float64), accumulate=True
    )
    expected = torch.outer(observed.sum(1), observed.sum(0)) / n
    if weights is None:
        w = 1.0 - torch.eye(c, dtype=torch.float64)
    else:
        grid = torch.arange(c, dtype=torch.float64)
        w = (grid[:, None] - grid[None, :]).abs()
        w = w if weights == "linear" else w**2
    denominator = float((w * expected).sum())
    if denominator == 0.0:
        return math.nan
    return 1.0 - float((w * observed).sum()) / denominator


def _as_labels(values: Any, name: str) -> Any:
    if isinstance(values, Tensor) and values.dtype == torch.bool:
        return values.long()
    if isinstance(values, (list, tuple)) and values and all(isinstance(v, bool) for v in values):
        return [int(v) for v in values]
    return values


def _ranks(x: Tensor) -> Tensor:
    """Average ranks (1-based) with ties sharing the mean of their positions."""
    order = torch.argsort(x, stable=True)
    sorted_x = x[order]
    new = torch.ones_like(sorted_x, dtype=torch.bool)
    new[1:] = sorted_x[1:] != sorted_x[:-1]
    group = torch.cumsum(new, 0) - 1
    positions = torch.arange(1, x.numel() + 1, dtype=torch.float64)
    sums = torch.zeros(int(group[-1]) + 1, dtype=torch.float64).index_add_(0, group, positions)
    counts = torch.zeros_like(sums).index_add_(0, group, torch.ones_like(positions))
    ranks = torch.empty_like(positions)
    ranks[order] = (sums / counts)[group]
    return ranks


def _pairs(x: Any, y: Any) -> tuple[Tensor, Tensor]:
    a, b = vector(x, "x"), vector(y, "y")
    if a.numel() != b.numel():
        raise ValueError(f"`x` and `y` must have one value per item each, got {a.numel()} and {b.numel()}.")
    keep = ~(torch.isnan(a) | torch.isnan(b))
    return a[keep], b[keep]


def _correlation(x: Any, y: Any, least: int, correlate: Callable[[Tensor, Tensor, int], Correlation]) -> Correlation:
    """``correlate(a, b, n)`` of the ``n`` pairs of ``x`` and ``y`` without a NaN; NaN with fewer than ``least``."""
    a, b = _pairs(x, y)
    n = a.numel()
    if n < least:
        return Correlation(math.nan, math.nan, n)
    return correlate(a, b, n)


def spearman(x: Any, y: Any) -> Correlation:
    """Spearman's rank correlation with its two-sided p-value (t approximation; pairs with a NaN left out).

    Examples:
        >>> r = spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
        >>> round(r.statistic, 2), r.n
        (0.8, 5)
    """
    return _correlation(x, y, 3, _spearman)


def _spearman(a: Tensor, b: Tensor, n: int) -> Correlation:
    """:func:`spearman` of ``n >= 3`` pairs without a NaN."""
    ra, rb = _ranks(a) - (n + 1) / 2.0, _ranks(b) - (n + 1) / 2.0
    denominator = math.sqrt(float((ra**2).sum()) * float((rb**2).sum()))
    if denominator == 0.0:
        return Correlation(math.nan, math.nan, n)
    rho = max(-1.0, min(1.0, float((ra * rb).sum()) / denominator))
    if abs(rho) == 1.0:
        return Correlation(rho, 0.0, n)
    t = rho * math.sqrt((n - 2) / (1.0 - rho * rho))
    return Correlation(rho, min(1.0, 2.0 * t_sf(abs(t), n - 2)), n)


def _tie_sums(x: Tensor) -> tuple[float, float, float]:
    """Over groups of tied values of size t: sum t(t-1), sum t(t-1)(t-2), sum t(t-1)(2t+5)."""
    _, counts = torch.unique(x, return_counts=True)
    t = counts.to(torch.float64)
    return float((t * (t - 1)).sum()), float((t * (t - 1) * (t - 2)).sum()), float((t * (t - 1) * (2 * t + 5)).sum())


def kendall_tau(x: Any, y: Any, chunk_size: int = 1024) -> Correlation:
    """Kendall's tau-b with its two-sided p-value (normal approximation with tie corrections; NaN pairs left out).

    Examples:
        >>> r = kendall_tau([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
        >>> round(r.statistic, 2), r.n
        (0.6, 5)
    """
    return _correlation(x, y, 2, lambda a, b, n: _kendall_tau(a, b, n, chunk_size))


def _kendall_tau(a: Tensor, b: Tensor, n: int, chunk_size: int) -> Correlation:
    """:func:`kendall_tau` of ``n >= 2`` pairs without a NaN (sign products ``chunk_size`` rows at a time)."""
    s = 0.0
    for start in range(0, n, chunk_size):
        sa = torch.sign(a[start : start + chunk_size, None] - a[None, :])
        sb = torch.sign(b[start : start + chunk_size, None] - b[None, :])
        s += float((sa * sb).sum())
    s /= 2.0  # every pair was counted twice
    n0 = n * (n - 1) / 2.0
    tx1, tx2, tx3 = _tie_sums(a)
    ty1, ty2, ty3 = _tie_sums(b)
    denominator = math.sqrt((n0 - tx1 / 2.0) * (n0 - ty1 / 2.0))
    if denominator == 0.0:
        return Correlation(math.nan, math.nan, n)
    tau = max(-1.0, min(1.0, s / denominator))
    variance = (n * (n - 1) * (2 * n + 5) - tx3 - ty3) / 18.0 + tx1 * ty1 / (2.0 * n * (n - 1))
    if n > 2:
        variance += tx2 * ty2 / (9.0 * n * (n - 1) * (n - 2))
    if variance <= 0:
        return Correlation(tau, math.nan, n)
    z = abs(s) / math.sqrt(variance)
    return Correlation(tau, math.erfc(z / math.sqrt(2.0)), n)
