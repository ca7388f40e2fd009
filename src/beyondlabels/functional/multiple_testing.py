"""Paired randomization tests, and the Holm–Bonferroni and Benjamini–Hochberg adjustments of a family of p-values.

Pure numpy (float64 on the CPU).

Definitions (stated once)
    - **Paired randomization (sign-flip) test** (:func:`paired_randomization_test`): under the null hypothesis that
      the two members of each pair are exchangeable, every paired difference ``d_i`` is as likely to have had the
      other sign. The statistic is ``|mean(d)|``; ``p`` is the share of sign assignments whose statistic is at least
      the observed one (two-sided). With ``2^n <= rounds`` every assignment is enumerated (the exact ``p``, which
      counts the observed assignment itself); otherwise ``rounds`` random assignments (each sign +1 or -1 with
      probability 1/2, from ``numpy.random.default_rng(seed)``) give ``p = (b + 1) / (rounds + 1)`` with ``b`` the
      number of random assignments at least as extreme as the observed one (the +1 counts the observed assignment,
      so ``p`` is never 0 and the test keeps its level). "At least" allows a relative rounding slack of
      ``100 · eps · |observed|``. NaN differences are left out; no difference at all gives NaN.
    - **Holm–Bonferroni** (:func:`holm_adjust`, Holm 1979): with the ``m`` finite p-values sorted ascending,
      ``p_(1) <= ... <= p_(m)``, the adjusted ``p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``. Rejecting every
      hypothesis whose adjusted p is below ``level`` keeps the family-wise error rate (the chance of any false
      rejection) at most ``level`` under any dependence between the tests. NaN p-values stay NaN and are not counted
      in ``m``.
    - **Benjamini–Hochberg** (:func:`benjamini_hochberg`, Benjamini & Hochberg 1995): with the ``m`` finite p-values
      sorted ascending, the adjusted ``q_(i) = min_{j >= i} min(1, m p_(j) / j)``. Rejecting every hypothesis whose
      adjusted p is at most ``q`` keeps the false discovery rate (the expected share of false rejections among the
      rejections) at most ``q m_0 / m <= q`` for independent or positively dependent (PRDS) tests. NaN p-values stay
      NaN and are not counted in ``m``.

Examples:
    >>> p = paired_randomization_test([0.3, 0.1, 0.2, 0.25, 0.15, 0.05])
    >>> round(p, 4)  # exact: only the all-positive and the all-negative assignments reach |mean| = 0.175
    0.0312
    >>> holm_adjust([0.01, 0.04, 0.03]).round(3).tolist()
    [0.03, 0.06, 0.06]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from beyondlabels._internal.checks import check_rounds, check_seed

__all__ = ["CORRECTION", "benjamini_hochberg", "holm_adjust", "paired_randomization_test"]

CORRECTION = "Holm–Bonferroni"
# sign assignments per matrix product of the Monte Carlo test (bounds its memory at rows × this many doubles)
_CHUNK = 4096


def _finite_pvalues(pvalues: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(p, index of the finite entries)``: ``pvalues`` as float64 after the checks both adjustments share."""
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"`pvalues` must be a 1-D sequence of p-values, got shape {p.shape}.")
    finite = ~np.isnan(p)
    if np.any((p[finite] < 0) | (p[finite] > 1)):
        raise ValueError(
            "`pvalues` must lie in [0, 1] (NaN for a test not made), "
            f"got {p[finite][(p[finite] < 0) | (p[finite] > 1)][:5].tolist()}."
        )
    return p, np.flatnonzero(finite)


def _adjusted(pvalues: Any, adjust: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``pvalues`` adjusted in the order given: ``adjust`` maps the ``m`` finite p-values, sorted ascending, to their
    adjusted values; NaN entries stay NaN."""
    p, index = _finite_pvalues(pvalues)
    out = np.full_like(p, np.nan)
    if index.size == 0:
        return out
    order = index[np.argsort(p[index], kind="stable")]
    out[order] = adjust(p[order])
    return out


def benjamini_hochberg(pvalues: Any) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (definition: the module docstring), in the order given.

    Args:
        pvalues: A 1-D sequence of p-values in [0, 1]; NaN entries stay NaN and are not counted.

    Raises:
        ValueError: for a p-value outside [0, 1] or input that is not 1-D.

    Examples:
        >>> benjamini_hochberg([0.01, 0.04, 0.03, float("nan")]).round(3).tolist()
        [0.03, 0.04, 0.04, nan]
    """

    def adjust(p: np.ndarray) -> np.ndarray:
        m = p.size
        return np.minimum.accumulate(np.minimum(1.0, m * p / np.arange(1, m + 1))[::-1])[::-1]

    return _adjusted(pvalues, adjust)


def holm_adjust(pvalues: Any) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (definition: the module docstring), in the order given; ``pvalues`` and
    errors as for :func:`benjamini_hochberg`.

    Examples:
        >>> holm_adjust([0.02, float("nan"), 0.001]).tolist()
        [0.02, nan, 0.002]
    """
    return _adjusted(pvalues, lambda p: np.maximum.accumulate(np.minimum(1.0, (p.size - np.arange(p.size)) * p)))


def paired_randomization_test(differences: Any, *, rounds: int = 9999, seed: int = 11) -> Any:
    """Two-sided paired randomization (sign-flip) test of a zero mean difference (definition: the module docstring).

    Args:
        differences: Paired differences ``b - a``: a 1-D sequence (NaN left out), or a 2-D array with one test per
            row (no NaN; every row's test uses the same random sign assignments, so rows are tested at once).
        rounds: Random sign assignments when ``2^n > rounds`` (else every assignment is enumerated).
        seed: Seed of the random sign assignments.

    Returns:
        The p-value (a float for 1-D input, an array of one per row for 2-D input).

    Raises:
        ValueError: for ``rounds`` < 1, a non-int ``seed``, input that is not 1-D or 2-D, or NaN in 2-D input.

    Examples:
        >>> paired_randomization_test([0.2, -0.1, 0.05, 0.0, 0.1])  # n = 5: all 32 assignments
        0.5
        >>> p = paired_randomization_test(np.full(20, 0.1), rounds=999, seed=0)
        >>> p == 1 / 1000  # no random assignment reaches |mean| = 0.1: the smallest p that 999 rounds can give
        True
    """
    rounds, seed = check_rounds(rounds, hint="e.g. 9999"), check_seed(seed)
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim == 1:
        d = d[~np.isnan(d)]
        if d.size == 0:
            return math.nan
        return float(_pvalues(d[None, :], rounds, seed)[0])
    if d.ndim != 2:
        raise ValueError(f"`differences` must be 1-D (one test) or 2-D (one test per row), got shape {d.shape}.")
    if np.isnan(d).any():
        raise ValueError(
            "2-D `differences` must not hold NaN (every row is one test on the same pairs); "
            "test rows with NaN one by one."
        )
    if d.shape[1] == 0:
        return np.full(d.shape[0], np.nan)
    return _pvalues(d, rounds, seed)


def _pvalues(d: np.ndarray, rounds: int, seed: int) -> np.ndarray:
    n = d.shape[1]
    observed = np.abs(d.mean(axis=1))
    slack = 100 * np.finfo(np.float64).eps * observed
    if n < 63 and 2**n <= rounds:  # exact: every sign assignment, the observed one included
        codes = np.arange(2**n, dtype=np.int64)
        signs = 1.0 - 2.0 * ((codes[:, None] >> np.arange(n)) & 1)
        extreme = np.zeros(d.shape[0], dtype=np.int64)
        for start in range(0, signs.shape[0], _CHUNK):
            stats = np.abs(d @ signs[start : start + _CHUNK].T) / n
            extreme += (stats >= (observed - slack)[:, None]).sum(axis=1)
        return extreme / 2**n
    rng = np.random.default_rng(seed)
    extreme = np.zeros(d.shape[0], dtype=np.int64)
    done = 0
    while done < rounds:
        size = min(_CHUNK, rounds - done)
        signs = rng.integers(0, 2, size=(size, n)) * 2.0 - 1.0
        stats = np.abs(d @ signs.T) / n
        extreme += (stats >= (observed - slack)[:, None]).sum(axis=1)
        done += size
    return (extreme + 1) / (rounds + 1)
