"""Sequential convergence decisions over a training curve: a downturn and a plateau with a false-alarm rate per run.

Pure torch (float64 on the CPU), no Lightning. A run's values arrive one evaluation at a time; after each one
:meth:`ConvergenceRule.observe` decides, from the values so far, whether the curve has turned down and whether it
has stopped improving. ``u = v`` for ``mode="max"`` and ``u = -v`` for ``"min"``, so "better" is "larger ``u``";
``w`` is the window, ``t`` the number of values so far, ``m_j`` the mean of ``u[j : j + w]``.

Definitions (stated once; the derivation is in ``docs/convergence.md``)
    - **Noise model** (``noise_estimate="ar1"``, the default): stationary AR(1) noise of marginal sd ``sigma`` and
      lag-1 correlation ``rho`` around the curve's mean, fitted at each look as follows.
    - **Noise stretch**: the values before the last two windows (``u[s : t - 2w]``; the windows the tests compare are
      left out), from ``s`` = the MSER truncation point of those values (:func:`transient_end`), which leaves out the
      rise at the start of training.
    - **AR(1) fit** (Whittle, above the trend band): ``d`` the ``n`` successive differences of the stretch, ``I_k =
      |sum_j d_j e^(-i lambda_k j)|^2 / n`` at the Fourier frequencies ``lambda_k = 2 pi k / n`` in ``[2 pi / (4w),
      pi]`` (weight ``omega_k`` 1, and 1/2 at ``pi``), ``J_k = I_k / (2 (1 - cos lambda_k))``, ``A`` and ``B`` the
      ``omega``-weighted means of ``J_k`` and ``J_k cos lambda_k``. ``rho`` minimises ``log(A (1 + rho^2) - 2 B rho)
      - sum_k omega_k log(1 - 2 rho cos lambda_k + rho^2) / sum_k omega_k`` over ``-0.99, -0.989, .., 0.999`` (the
      best of every tenth value, then the best within 0.01 of it); ``sigma_e^2 = A (1 + rho^2) - 2 B rho`` (the
      innovation variance), ``sigma^2 = sigma_e^2 / (1 - rho^2)``. Slower changes of the mean than ``4w``
      evaluations do not enter it, a linear trend not at all (its differences are constant).
    - **Scales**: the sd of a difference of two non-overlapping window means under that noise, at the worst
      separation: ``se = sigma sqrt(q)``, ``q = 2 v / w`` for ``rho >= 0``, ``v = 1 + 2 sum_(h<w) (1 - h/w) rho^h``
      (for ``rho < 0`` the adjacent pair's ``q = 2 v / w - 2 rho S^2 / w^2``, ``S = sum_(h<w) rho^h``); for two
      adjacent windows (the plateau) ``q_a = 2 v / w - 2 rho S^2 / w^2``.
    - **Degrees of freedom** ``nu = 2 / Var(log se^2)``: the Whittle information of ``(log sigma_e^2, rho)``, ``F =
      sum_k omega_k [1, a_k]' [1, a_k]`` with ``a_k = 2 (cos lambda_k - rho) / (1 - 2 rho cos lambda_k + rho^2)``,
      and ``Var(log se^2) = g' F^-1 g`` for ``g = (1, 2 rho / (1 - rho^2) + q'(rho) / q(rho))``: the uncertainty of
      the fitted ``rho`` enters the Student t reference (a large one near ``rho = 1``).
    - **Covered**: a look decides (can flag) only when the noise was estimated (ordinates of weight at least 10, a
      stretch that changes) with ``rho_high <= exp(-1/w)`` (:func:`covered_correlation`: a correlation time of at most
      one window), ``rho_high`` the largest of ``-0.99, -0.98, .., 0.99, 0.999`` at or above ``rho`` inside the
      one-sided 99% profile-likelihood bound (``2 W (F(rho') - F(rho)) <= 2.326^2``, ``F`` the objective above, ``W =
      sum_k omega_k``), and no earlier look of the run was **beyond**: ``rho > exp(-1/w)`` from ordinates of weight
      at least 20 (the noise is stationary: a correlation seen once holds for the run; a lower estimate later is the
      estimate's scatter near 1). Where not covered the rule states no rate and flags nothing.
    - ``noise_estimate="differences"``: independent noise, ``sigma = s``, the root mean square successive difference
      ``s^2 = sum_i (u[i+1] - u[i])^2 / (2 (t-1))`` over all values, ``se = s sqrt(2/w)`` for both tests, ``nu = 2
      (t-1)^2 / (3t - 4)`` (the chi-square with the variance of ``s^2``). ``noise_estimate="windows"``: the larger of
      ``s`` and ``s_w``, ``s_w^2 = w sum_b (M_(b+1) - M_b)^2 / (2 (n_w - 1))`` over the means ``M_b`` of the ``n_w =
      floor(t / w)`` consecutive windows from the start, with the same ``nu``. ``noise=`` gives ``sigma`` (the sd of a
      window mean times ``sqrt(w)``), ``nu`` infinite (the normal reference). These are always covered.
    - **Look**: an evaluation at which a test is made: the plateau and the downturn at every evaluation from
      ``t = 2w`` on. Each look spends ``alpha / max_looks`` of the level, so a run of up to ``max_looks`` looks
      spends at most ``alpha`` (Bonferroni over the looks); after ``max_looks`` looks nothing more is flagged.
    - **Downturn (series)**: the last window ``L = m_(t-w)`` against the best earlier window that does not overlap it
      among the windows that start every half window from the first value (``j = 0, h, 2h, ..``, ``h =
      max(1, floor(w / 2))``, :func:`candidate_step`), ``B = max_(j <= t-2w) m_j`` (the first of equal means is the
      one reported), over ``k = floor((t - 2w) / h) + 1`` candidates: ``T = (B - L - min_delta) / se``, ``p = min(1, k
      * max_looks * P(t_nu > T))`` (Bonferroni over the candidates too, so picking the best one is paid for; ``p = 1``
      when the noise was not estimated). Neighbouring candidates share half their values; every window position
      would cost ``h`` times the Bonferroni factor for a best window at most a quarter window away.
    - **Paired confirmation**, when the evaluation gives per-query values (the same queries every time): the latest
      evaluation against the best earlier one (the largest mean of ``u`` over its queries, among the earlier
      evaluations with per-query values), paired by query id: ``d_i = u_best,i - u_latest,i - min_delta`` (pairs
      with a NaN left out), ``S = sum d_i``, ``p_paired = exp(-S^2 / (2 sum d_i^2))`` for ``S > 0`` (1 otherwise):
      the sign-flip (Hoeffding) bound of this one comparison, with ``min_delta = 0`` valid for any per-query
      distribution whose pairs are exchangeable (with ``min_delta > 0``: a test of a mean decline above
      ``min_delta``, not exact). It asks whether the latest model is worse than the best one on these queries, not
      whether the expected curve fell: model-level noise (a checkpoint a bit better or worse on every query) is a
      real difference on a fixed query set. It therefore only confirms the series rule, never flags on its own.
      Without query ids the values are paired by position.
    - **Downturn** at a covered look: the series rule, and with per-query values the paired confirmation too, must
      reject (an intersection-union rule): ``p = max(p_series, p_paired)``, a downturn when ``p <= alpha``.
    - **Plateau** at a covered look: the last window no better than the one before it by ``min_delta``: ``D = m_(t-w)
      - m_(t-2w)``, ``T = (min_delta - D) / se_a`` (``se_a = sigma sqrt(q_a)``, its ``nu`` from ``q_a``), ``p = min(1,
      max_looks * P(t_nu > T))``, a plateau when ``p <= alpha``. The rate of calling flat a curve that still gains
      ``min_delta`` or more per window is at most ``alpha`` per run. With ``min_delta = 0`` any gain counts, so only a
      significant fall reads as a plateau.
    - **min_delta**: the smallest change between window means (or per-query means) that matters; never a noise guard.
    - **Window band**: the mean of the last ``w`` values with a seeded percentile bootstrap interval
      (:func:`~beyondlabels.functional.bootstrap.bootstrap_ci`); descriptive, it decides nothing.
    - **Event**: the evaluation at which a flag goes from 0 to 1.

Guarantee and assumptions: when the values are a flat mean plus stationary Gaussian AR(1) noise with ``rho <=
exp(-1/w)``, a run of up to ``max_looks`` looks flags a downturn with probability at most ``alpha`` (up to the
Student t reference of the fitted scale, checked by simulation in ``docs/convergence.md``), at any noise level: the
statistics do not change when the values are shifted or scaled. Independent noise is ``rho = 0``. The paired
confirmation can only remove flags of the series rule, so the rate with per-query values is at most the series
rule's whatever the per-query structure. Near ``rho = 1`` (evaluations every few steps) a wandering curve cannot be
told from a falling one by any rule over these values: such looks are not covered and flag nothing. Noise that is
not AR(1) (fast noise plus a component slower than the trend band) can exceed the rate: measured in
``docs/convergence.md``. ``noise_estimate="differences"`` assumes independent noise (at lag-1 correlation 0.5 it
flags most flat runs); ``noise=`` keeps the bound when the given sd is right.

Examples:
    >>> rule = ConvergenceRule(window=5, min_delta=0.01)
    >>> state = rule.new_state()
    >>> noise = torch.randn(72, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> curve = (0.5 + 0.01 * noise[:60]).tolist() + (0.5 - 0.02 * torch.arange(1, 13) + 0.01 * noise[60:]).tolist()
    >>> flags = [rule.observe(state, step, v)["downturn"] for step, v in enumerate(curve)]  # flat, falls from 60
    >>> flags.index(1.0), [(e["event"], e["step"]) for e in state["events"]]
    (64, [('plateau', 62), ('downturn', 64)])
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import (
    check_choice,
    check_confidence,
    check_int,
    check_number,
    check_positive_int,
    check_rounds,
    check_seed,
)
from beyondlabels._internal.stats import vector
from beyondlabels.functional.abtest import paired_differences
from beyondlabels.functional.bootstrap import bootstrap_ci

__all__ = [
    "STATE_VERSION",
    "ConvergenceRule",
    "ar1_noise",
    "candidate_step",
    "covered_correlation",
    "noise_df",
    "noise_scale",
    "sign_flip_bound",
    "transient_end",
]

STATE_VERSION = 2
EVENTS = ("plateau", "downturn")
NOISE_ESTIMATES = ("ar1", "differences", "windows")
SERIES_KEYS = (
    "downturn_p",
    "plateau_p",
    "downturn",
    "plateau",
    "noise",
    "correlation",
    "correlation_high",
    "noise_df",
    "covered",
    "beyond",
    "noise_start",
    "best",
    "best_index",
    "candidates",
)


def noise_scale(values: Any) -> float:
    """Root mean square successive difference ``sqrt(sum (v[i+1] - v[i])^2 / (2 (n-1)))`` (NaN below 2 values).

    Examples:
        >>> noise_scale([0.0, 1.0, 0.0, 1.0])  # successive differences of 1: s^2 = 3 / 6
        0.7071067811865476
    """
    v = vector(values, "values")
    if v.numel() < 2:
        return math.nan
    return math.sqrt(float((v.diff() ** 2).sum()) / (2 * (v.numel() - 1)))


def noise_df(n: Any) -> Any:
    """Degrees of freedom of :func:`noise_scale` over ``n`` values: ``2 (n-1)^2 / (3n - 4)``.

    Examples:
        >>> noise_df(20)
        12.892857142857142
    """
    return 2.0 * (n - 1) ** 2 / (3 * n - 4)


def sign_flip_bound(differences: Any) -> float:
    """``exp(-S^2 / (2 sum d^2))`` for ``S = sum d > 0``, else 1: a bound on ``P(sum eps_i |d_i| >= S)`` over random
    signs ``eps_i`` (NaN left out; no differences or all zero give 1).

    Examples:
        >>> round(sign_flip_bound([1.0, 1.0, 1.0, 1.0]), 6)  # exp(-16 / 8)
        0.135335
    """
    d = vector(differences, "differences")
    d = d[~torch.isnan(d)]
    total, squares = float(d.sum()), float((d**2).sum())
    if total <= 0 or squares == 0:
        return 1.0
    return math.exp(-(total**2) / (2.0 * squares))


def _t_sf(statistic: Tensor, df: Tensor | float) -> Tensor:
    """``P(t_df > statistic)`` elementwise; an infinite ``df`` is the normal."""
    from scipy import special

    stat = statistic.numpy()
    dfs = torch.as_tensor(df, dtype=torch.float64).expand_as(statistic).numpy()
    out = special.stdtr(dfs, -stat)
    normal = special.ndtr(-stat)
    return torch.where(torch.isinf(torch.as_tensor(dfs)), torch.as_tensor(normal), torch.as_tensor(out))


# ---- the AR(1) noise model -----------------------------------------------------------------------------------------

RHO_GRID = torch.arange(-990, 1000, dtype=torch.float64) / 1000.0  # -0.99, -0.989, ..., 0.999: where rho is sought
MIN_ORDINATES = 10  # weight of the band's periodogram ordinates below which the noise is not estimated
BEYOND_ORDINATES = 20  # and from which a correlation beyond the covered one leaves the rest of the run uncovered
NOISE_KEYS = (
    "start",
    "correlation",
    "correlation_high",
    "sd",
    "innovation_sd",
    "scale",
    "df",
    "scale_adjacent",
    "df_adjacent",
    "ordinates",
    "covered",
    "beyond",
)


def candidate_step(window: int) -> int:
    """The spacing of the downturn's candidate windows: half a window, ``max(1, window // 2)``.

    Examples:
        >>> candidate_step(10), candidate_step(3), candidate_step(1)
        (5, 1, 1)
    """
    return max(1, window // 2)


def covered_correlation(window: int) -> float:
    """The largest lag-1 noise correlation the AR(1) noise model covers: ``exp(-1 / window)`` (a correlation time
    ``-1 / log(rho)`` of at most one window).

    Examples:
        >>> round(covered_correlation(10), 4)
        0.9048
    """
    return math.exp(-1.0 / window)


def transient_end(values: Any, window: int) -> int:
    """Where the noise stretch starts: the MSER truncation point (White 1997) over the means ``Z_b`` of the
    consecutive windows of ``window`` values from the start, ``d* = argmin_d sum_(b >= d) (Z_b - Zbar_d)^2 /
    (n_w - d)^2`` for ``d = 0 .. min(n_w // 2, n_w - 2)`` (``Zbar_d`` the mean of ``Z_b, b >= d``; the first of equal
    values), as ``d* window`` values (0 below two windows).

    Examples:
        >>> rise = [0.1 * i for i in range(10)] + [1.0, 1.02, 0.98, 1.01, 0.99] * 6  # a rise, then flat
        >>> transient_end(rise, window=5)
        10
    """
    return int(_transient_ends(vector(values, "values").unsqueeze(0), window)[0])


def _transient_ends(u: Tensor, window: int) -> Tensor:
    """:func:`transient_end` of every row of ``u`` ``[runs, t]``."""
    runs, t = u.shape
    count = t // window
    if count < 2:
        return torch.zeros(runs, dtype=torch.long)
    z = u[:, : count * window].reshape(runs, count, window).mean(dim=2)
    s1, s2 = z.flip(1).cumsum(1).flip(1), (z**2).flip(1).cumsum(1).flip(1)  # sums over b >= d
    d = torch.arange(min(count // 2, count - 2) + 1)
    remaining = (count - d).to(torch.float64)
    criterion = (s2[:, d] - s1[:, d] ** 2 / remaining).clamp(min=0.0) / remaining**2
    return criterion.argmin(dim=1) * window


@functools.lru_cache(maxsize=64)
def _band(n: int, window: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The Fourier frequencies ``2 pi k / n`` of ``n`` differences that the fit uses, those in ``[2 pi / (4 window),
    pi]``: their ``k``, their cosines ``c_k``, their weights (1, and 1/2 for ``pi``, a real ordinate) and ``sum_k
    weight_k log(1 - 2 rho c_k + rho^2)`` over them at each :data:`RHO_GRID` value. Over every ``k = 1 .. n // 2``
    that sum is ``log|1 - rho^n| - log(1 - rho)`` (``prod_(k < n) (1 - rho e^(2 pi i k / n)) = 1 - rho^n``); the few
    ``k`` below the band are taken off it. (Cached: the vectorised rule meets the same lengths again and again.)"""
    k = torch.arange(1, max(n, 0) // 2 + 1)
    below = int((k * 4 * window < n).sum())  # 2 pi k / n < 2 pi / (4 window)
    rho, kept = RHO_GRID, k[below:]
    weights = torch.ones(kept.numel(), dtype=torch.float64)
    if n % 2 == 0 and kept.numel():
        weights[-1] = 0.5
    total = torch.log(torch.abs(1 - rho**n)) - torch.log1p(-rho)
    if below:
        c_low = torch.cos(2 * math.pi * k[:below].to(torch.float64) / n)
        total = total - torch.log(1 - 2 * rho[:, None] * c_low + rho[:, None] ** 2).sum(dim=1)
    return kept, torch.cos(2 * math.pi * kept.to(torch.float64) / n), weights, total


def _whittle(x: Tensor, window: int) -> dict[str, Tensor] | None:
    """The Whittle fit of AR(1) noise to every row of ``x`` ``[runs, m]`` (one stretch each): ``rho``, ``rho_high``
    (:func:`_grid_fit`), the level periodogram's weighted means ``a = mean J``, ``b = mean J c``, the sums ``s1 = sum
    weight * slope`` and ``s2 = sum weight * slope^2`` of ``slope_k = d log f_k / d rho`` at ``rho`` (the Fisher
    information), and ``n`` (the ordinates' weight); None with fewer than :data:`MIN_ORDINATES` ordinates."""
    d = x.diff(dim=1)
    kept, c, weights, log_sums = _band(d.shape[1], window)
    n = float(weights.sum())
    if n < MIN_ORDINATES:
        return None
    spectrum = torch.fft.rfft(d, dim=1)[:, kept]
    j = (spectrum.real**2 + spectrum.imag**2) * (weights / (d.shape[1] * 2 * (1 - c)))  # weighted level periodogram
    a, b = j.sum(1) / n, (j * c).sum(1) / n
    index, high = _grid_fit(a, b, log_sums / n, n)
    rho = torch.where(a > 0, RHO_GRID[index], 0.0)
    slope = 2 * (c - rho[:, None]) / (1 - 2 * rho[:, None] * c + rho[:, None] ** 2)
    return {
        "rho": rho,
        "rho_high": high,
        "a": a,
        "b": b,
        "s1": (weights * slope).sum(1),
        "s2": (weights * slope**2).sum(1),
        "n": torch.full_like(a, n),
    }


COARSE = torch.cat([torch.arange(0, RHO_GRID.numel(), 10), torch.tensor([RHO_GRID.numel() - 1])])  # -0.99..0.99, 0.999
HIGH_Z2 = 2.3263478740408408**2  # z of a one-sided 99% bound: the likelihood ratio limit of rho_high


def _grid_fit(a: Tensor, b: Tensor, penalty: Tensor, n: float) -> tuple[Tensor, Tensor]:
    """For each row, with ``F(rho) = log(a (1 + rho^2) - 2 b rho) - penalty(rho)``: the index in :data:`RHO_GRID` of
    its minimum (the best of :data:`COARSE`, then the best within 0.01 of it; the first of equal values each time)
    and ``rho_high``, the largest :data:`COARSE` value at or above it with ``2 n (F(rho) - F(rho_hat)) <= z^2``
    (a one-sided 99% profile-likelihood bound: the Whittle log-likelihood is ``-n F`` up to a constant)."""

    def objective(index: Tensor) -> Tensor:
        rho = RHO_GRID[index]
        return torch.log(a[:, None] * (1 + rho**2) - 2 * rho * b[:, None]) - penalty[index]

    coarse = objective(COARSE[None, :])
    centre = COARSE[coarse.argmin(dim=1)]
    fine = (centre[:, None] + torch.arange(-10, 11)).clamp(0, RHO_GRID.numel() - 1)
    values = objective(fine)
    best = values.argmin(dim=1, keepdim=True)
    index, low = fine.gather(1, best).squeeze(1), values.gather(1, best)
    inside = (2 * n * (coarse - low) <= HIGH_Z2) & (COARSE[None, :] >= index[:, None])
    high = torch.where(inside, RHO_GRID[COARSE][None, :], -math.inf).amax(dim=1)
    return index, torch.maximum(high, RHO_GRID[index])


def _window_variances(r: Tensor, w: int) -> dict[str, Tensor]:
    """Per unit marginal variance, for AR(1) noise of lag-1 correlation ``r``: ``q`` = the largest variance of a
    difference of two non-overlapping window means at any separation (``2 v / w``, and for ``r < 0`` the adjacent
    pair's ``2 v / w - 2 r S^2 / w^2``), ``q_adjacent`` = that of two adjacent windows, and their derivatives in
    ``r`` (``v = 1 + 2 sum_(h<w) (1 - h/w) r^h``, ``S = sum_(h<w) r^h``)."""
    h = torch.arange(1, w, dtype=torch.float64)
    powers = r[:, None] ** torch.arange(w, dtype=torch.float64)  # r^0 .. r^(w-1)
    v = 1 + 2 * ((1 - h / w) * powers[:, 1:]).sum(1)
    dv = 2 * ((1 - h / w) * h * powers[:, :-1]).sum(1)
    s, ds = powers.sum(1), (h * powers[:, :-1]).sum(1)
    c, dc = r * s * s / w**2, (s * s + 2 * r * s * ds) / w**2  # covariance of adjacent windows, and its derivative
    negative = c < 0
    return {
        "q": 2 * v / w - 2 * torch.where(negative, c, 0.0),
        "dq": 2 * dv / w - 2 * torch.where(negative, dc, 0.0),
        "q_adjacent": 2 * v / w - 2 * c,
        "dq_adjacent": 2 * dv / w - 2 * dc,
    }


def _noise_from_fit(fit: dict[str, Tensor], window: int) -> dict[str, Tensor]:
    """:data:`NOISE_KEYS` (but ``start``) from the Whittle fits of :func:`_whittle` (NaN ``rho``: none)."""
    r = fit["rho"].nan_to_num(0.0)
    seen = ~torch.isnan(fit["rho"]) & (fit["a"] > 0)  # a stretch without any change tells nothing about its noise
    innovation = (fit["a"] * (1 + r * r) - 2 * r * fit["b"]).clamp(min=0.0)
    marginal = innovation / (1 - r * r)
    q = _window_variances(r, window)
    s1, s2, n = fit["s1"], fit["s2"], fit["n"]
    det = n * s2 - s1**2
    known = seen & (det > 0)
    nan = torch.full_like(r, math.nan)
    out = {
        "correlation": torch.where(seen, r, nan),
        "correlation_high": torch.where(seen, fit["rho_high"], nan),
        "sd": torch.where(seen, marginal.sqrt(), nan),
        "innovation_sd": torch.where(seen, innovation.sqrt(), nan),
        "ordinates": n,
    }
    for name in ("", "_adjacent"):
        g = 2 * r / (1 - r * r) + q["dq" + name] / q["q" + name]  # d log(variance) / d rho
        variance = (s2 - 2 * g * s1 + g * g * n) / det  # of log(variance), from the Whittle information
        out["scale" + name] = torch.where(known, torch.sqrt(marginal * q["q" + name]), math.nan)
        out["df" + name] = torch.where(known, 2.0 / variance, math.nan)
    bound = covered_correlation(window)
    out["covered"] = (known & (fit["rho_high"] <= bound)).to(torch.float64)
    out["beyond"] = (known & (n >= BEYOND_ORDINATES) & (r > bound)).to(torch.float64)
    return out


def _ar1_looks(u: Tensor, ends: Tensor, window: int) -> dict[str, Tensor]:
    """The noise model of ``u`` ``[runs, t]`` at each look (``ends``: values seen): :data:`NOISE_KEYS` ``[runs, L]``."""
    runs = u.shape[0]
    out = {key: torch.full((runs, ends.numel()), math.nan, dtype=torch.float64) for key in NOISE_KEYS}
    fields = ("rho", "rho_high", "a", "b", "s1", "s2", "n")
    for i, end in enumerate(ends.tolist()):
        stop = end - 2 * window  # the last two windows, which the tests compare, are left out
        starts = _transient_ends(u[:, : max(stop, 0)], window)
        fit = {name: torch.full((runs,), math.nan, dtype=torch.float64) for name in fields}
        for start in starts.unique().tolist():
            rows = (starts == start).nonzero().flatten()
            part = _whittle(u[rows, start : max(stop, start)], window)
            for name in fields if part is not None else ():
                fit[name][rows] = part[name]
        fit["n"] = fit["n"].nan_to_num(0.0)
        for key, value in _noise_from_fit(fit, window).items():
            out[key][:, i] = value
        out["start"][:, i] = starts.to(torch.float64)
    return out


def ar1_noise(values: Any, window: int) -> dict[str, Any]:
    """The AR(1) noise model of the rule's look after ``values`` (fitted to the noise stretch: the values before the
    last two windows of ``window``, from :func:`transient_end`; definitions: the module docstring): ``start`` (first
    value of the stretch), ``correlation`` (``rho``), ``sd`` (marginal ``sigma``), ``innovation_sd``, ``scale`` and
    ``df`` (``se``, the sd of a difference of two window means at the worst separation, and its ``nu``),
    ``scale_adjacent`` and ``df_adjacent`` (two adjacent windows), ``ordinates`` (their total weight) and
    ``covered``; NaN where the noise is not estimated. ``values`` ``[t]`` gives floats, ``[runs, t]`` tensors
    ``[runs]`` (many curves at once).

    Examples:
        >>> noise = torch.randn(420, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> fit = ar1_noise(0.5 + 0.02 * noise, window=10)  # independent noise of sd 0.02
        >>> round(fit["correlation"], 3), round(fit["sd"], 4), fit["covered"]
        (0.011, 0.0198, 1.0)
    """
    window = _check_window(window)
    given = torch.as_tensor(values, dtype=torch.float64)
    single = given.dim() == 1
    v = given.unsqueeze(0) if single else given
    if v.dim() != 2 or v.shape[1] < 2 * window + 2 or not bool(torch.isfinite(v).all()):
        raise ValueError(
            f"`values` must be finite numbers [t] or [runs, t] with t >= 2 * window + 2 = {2 * window + 2}, got shape "
            f"{tuple(given.shape)}."
        )
    fit = _ar1_looks(v, torch.tensor([v.shape[1]]), window)
    return {key: float(value[0, 0]) if single else value[:, 0] for key, value in fit.items()}


def _check_window(window: Any) -> int:
    return check_int(window, "window", minimum=2, hint="values per window")


@dataclass(frozen=True)
class ConvergenceRule:
    """The settings of the convergence decisions (definitions: the module docstring).

    Args:
        window: Values per window (evaluations), at least 2.
        mode: ``"max"`` (higher is better) or ``"min"``.
        min_delta: The smallest change that matters, in the metric's units (default 0: any real change).
        alpha: False-alarm rate per run, of each of downturn and plateau.
        max_looks: Looks (evaluations tested) the level ``alpha`` is spent over.
        noise: The sd of the values' noise when known (independent noise, or the sd of a window mean times
            ``sqrt(window)``); None (default) estimates it from the series.
        noise_estimate: ``"ar1"`` (default: AR(1) noise fitted above the trend band, for noise correlated from one
            evaluation to the next), ``"differences"`` (independent noise) or ``"windows"`` (the larger of the
            differences' and successive windows' scales).
        confidence: Level of the descriptive window band.
        rounds: Bootstrap resamples of the window band.
        seed: Seed of the window band's bootstrap.

    Examples:
        >>> ConvergenceRule(window=5).per_look_level()
        5e-05
    """

    window: int = 10
    mode: str = "max"
    min_delta: float = 0.0
    alpha: float = 0.05
    max_looks: int = 1000
    noise: float | None = None
    noise_estimate: str = "ar1"
    confidence: float = 0.95
    rounds: int = 2000
    seed: int = 11

    def __post_init__(self) -> None:
        # The int settings are stored as Python ints (a numpy int from a sweep script stays out of the state files).
        object.__setattr__(self, "window", _check_window(self.window))
        check_choice(self.mode, "mode", ("max", "min"), what="'max' (higher is better) or 'min'")
        check_number(self.min_delta, "min_delta", at_least=0.0)
        check_number(
            self.alpha,
            "alpha",
            above=0.0,
            below=1.0,
            what="a false-alarm rate strictly between 0 and 1",
            hint="e.g. 0.05",
        )
        object.__setattr__(
            self,
            "max_looks",
            check_positive_int(self.max_looks, "max_looks", hint="the most evaluations a run tests, e.g. 1000"),
        )
        if self.noise is not None:
            check_number(
                self.noise, "noise", above=0.0, what="None (estimated from the series) or the noise sd, a number > 0"
            )
        check_choice(self.noise_estimate, "noise_estimate", NOISE_ESTIMATES)
        check_confidence(self.confidence)
        object.__setattr__(self, "rounds", check_rounds(self.rounds))
        object.__setattr__(self, "seed", check_seed(self.seed))

    @property
    def sign(self) -> float:
        return 1.0 if self.mode == "max" else -1.0

    def per_look_level(self) -> float:
        """The level each look spends, ``alpha / max_looks``."""
        return self.alpha / self.max_looks

    # ---- the series rule, every look of many runs at once ----------------------------------------------------------
    def series_tests(self, values: Any) -> dict[str, Tensor]:
        """The series rule at every look of every run: ``values`` ``[runs, t]`` (or ``[t]``) -> tensors ``[runs, L]``
        for the looks ``t' = 2w .. t`` (``L = t - 2w + 1``, empty below ``2w`` values): ``downturn_p``,
        ``plateau_p``, ``downturn`` and ``plateau`` (0/1, also 0 past ``max_looks`` and where not covered),
        ``noise`` (``sigma``), ``correlation`` (``rho``), ``correlation_high`` (``rho_high``), ``noise_df`` (the
        downturn's ``nu``), ``covered``,
        ``noise_start`` (``s``), ``best`` (``B`` in the metric's units), ``best_index`` (start of the best window) and
        ``candidates`` (``k``).

        Examples:
            >>> noise = torch.randn(72, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
            >>> curve = torch.cat([0.5 + 0.01 * noise[:60], 0.5 - 0.02 * torch.arange(1, 13) + 0.01 * noise[60:]])
            >>> out = ConvergenceRule(window=5).series_tests(curve)
            >>> out["downturn"].shape, out["downturn"][0].nonzero().flatten().tolist()  # looks 0 .. 62 (values 10 ..)
            (torch.Size([1, 63]), [55, 56, 57, 58, 59, 60, 61, 62])
        """
        v = torch.as_tensor(values, dtype=torch.float64)
        if v.dim() == 1:
            v = v.unsqueeze(0)
        if v.dim() != 2 or not bool(torch.isfinite(v).all()):
            raise ValueError(f"`values` must be finite numbers [runs, evaluations], got shape {tuple(v.shape)}.")
        return self._series(v, torch.arange(2 * self.window, max(2 * self.window, v.shape[1] + 1)))

    def _series(self, v: Tensor, ends: Tensor) -> dict[str, Tensor]:
        """The series rule of ``v`` ``[runs, t]`` at the looks that have seen ``ends`` values (each ``2w .. t``)."""
        w, runs, t = self.window, v.shape[0], v.shape[1]
        looks = ends.numel()
        if looks == 0:
            empty = torch.zeros(runs, 0, dtype=torch.float64)
            return {k: empty for k in SERIES_KEYS}
        u = v * self.sign
        sums = torch.nn.functional.pad(u.cumsum(1), (1, 0))
        means = (sums[:, w:] - sums[:, :-w]) / w  # m_j, j = 0 .. t-w
        last = means[:, ends - w]
        previous = means[:, ends - 2 * w]
        position = torch.arange(t - 2 * w + 1)
        aligned = position % candidate_step(w) == 0  # the candidate windows: every half window from the first value
        candidate_means = means[:, : t - 2 * w + 1].masked_fill(~aligned, -math.inf)
        running = torch.cummax(candidate_means, dim=1).values  # best over the candidates j <= t' - 2w
        # the first window of the best mean: the last position where the running best rose strictly
        rose = torch.ones_like(running, dtype=torch.bool)
        rose[:, 1:] = candidate_means[:, 1:] > running[:, :-1]
        best_index = torch.where(rose, position, 0).cummax(dim=1).values[:, ends - 2 * w]
        best = running[:, ends - 2 * w]
        noise = self._scales(u, ends)
        candidates = ((ends - 2 * w) // candidate_step(w) + 1).to(torch.float64).expand(runs, looks)
        down_t = _ratio(best - last - self.min_delta, noise["scale"])
        plateau_t = _ratio(self.min_delta - (last - previous), noise["scale_adjacent"])
        known = ~torch.isnan(noise["df"])  # no noise estimate: no evidence (p = 1)
        downturn_p = torch.where(known, (candidates * self.max_looks * _t_sf(down_t, noise["df"])).clamp(max=1.0), 1.0)
        plateau_p = torch.where(known, (self.max_looks * _t_sf(plateau_t, noise["df_adjacent"])).clamp(max=1.0), 1.0)
        covered = noise["covered"] * (1 - torch.cummax(noise["beyond"], dim=1).values)  # beyond once: beyond for good
        decides = (ends - 2 * w + 1 <= self.max_looks).expand(runs, looks) & (covered == 1.0)
        return {
            "downturn_p": downturn_p,
            "plateau_p": plateau_p,
            "downturn": ((downturn_p <= self.alpha) & decides).to(torch.float64),
            "plateau": ((plateau_p <= self.alpha) & decides).to(torch.float64),
            "noise": noise["sd"],
            "correlation": noise["correlation"],
            "correlation_high": noise["correlation_high"],
            "noise_df": noise["df"],
            "covered": covered,
            "beyond": noise["beyond"],
            "noise_start": noise["start"],
            "best": best * self.sign,
            "best_index": best_index.to(torch.float64),
            "candidates": candidates,
        }

    def _scales(self, u: Tensor, ends: Tensor) -> dict[str, Tensor]:
        """The noise at each look: ``scale`` / ``df`` (the downturn's, a window mean against any earlier window),
        ``scale_adjacent`` / ``df_adjacent`` (the plateau's), ``sd``, ``correlation``, ``covered``, ``start``."""
        w, runs, t = self.window, u.shape[0], u.shape[1]
        looks = ends.numel()
        if self.noise is None and self.noise_estimate == "ar1":
            return _ar1_looks(u, ends, w)
        if self.noise is None:
            squares = torch.nn.functional.pad((u.diff(dim=1) ** 2).cumsum(1), (1, 0))[:, ends - 1]
            sd = torch.sqrt(squares / (2 * (ends - 1)))
            df = noise_df(ends.to(torch.float64)).expand(runs, looks)
            if self.noise_estimate == "windows":
                blocks = u[:, : (t // w) * w].reshape(runs, t // w, w).mean(dim=2)  # consecutive windows from the start
                block_squares = torch.nn.functional.pad((blocks.diff(dim=1) ** 2).cumsum(1), (1, 0))
                count = ends // w  # whole windows seen at each look (>= 2)
                sd = torch.maximum(sd, torch.sqrt(w * block_squares[:, count - 1] / (2 * (count - 1))))
        else:
            sd = torch.full((runs, looks), float(self.noise), dtype=torch.float64)
            df = torch.full((runs, looks), math.inf, dtype=torch.float64)
        scale = sd * math.sqrt(2.0 / w)
        nan, ones = torch.full_like(sd, math.nan), torch.ones_like(sd)
        return {
            "scale": scale,
            "df": df.clone(),
            "scale_adjacent": scale,
            "df_adjacent": df.clone(),
            "sd": sd,
            "correlation": nan,
            "correlation_high": nan,
            "covered": ones,
            "beyond": torch.zeros_like(sd),
            "start": torch.zeros_like(sd),
        }

    # ---- one run, one evaluation at a time -------------------------------------------------------------------------
    def new_state(self) -> dict[str, Any]:
        """The state of a run before its first value: plain data (lists, numbers), what a checkpoint saves.

        ``series`` ``[[step, value], ...]``; ``looks`` (downturn looks made; the level spent is
        ``looks * alpha / max_looks``); ``plateau_looks``; ``flags`` (the last plateau / downturn flags); ``best``
        (the best evaluation with per-query values: ``step``, ``mean``, ``ids``, ``values``; None before one);
        ``beyond`` (the step of the first look whose noise was correlated beyond the covered range; None before one);
        ``events``; ``version``."""
        return {
            "version": STATE_VERSION,
            "series": [],
            "looks": 0,
            "plateau_looks": 0,
            "flags": {e: 0.0 for e in EVENTS},
            "best": None,
            "beyond": None,
            "events": [],
        }

    def observe(
        self, state: dict[str, Any], step: int, value: float, per_query: tuple[Any, Any] | None = None
    ) -> dict[str, float]:
        """Add one evaluation to ``state`` (updated in place) and return what is logged: ``window_mean``,
        ``window_ci_low``, ``window_ci_high``, ``noise`` (the noise sd), ``correlation`` (its lag-1 correlation),
        ``correlation_high`` (its upper bound), ``noise_df`` (the downturn reference's degrees of freedom), ``covered``
        (1 when the look can decide),
        ``plateau``, ``plateau_p``, ``downturn``, ``downturn_p``, ``paired_p`` (the paired confirmation's p-value),
        ``spent`` (level spent on downturn looks so far) and ``paired`` (1 when the downturn p-value is the paired
        confirmation's, the larger of the two). Before the first look ``noise`` is :func:`noise_scale` (NaN for the
        AR(1) model), the others NaN.

        Args:
            state: From :meth:`new_state` (or a checkpoint).
            step: The training step of the evaluation.
            value: The monitored value.
            per_query: ``(query_ids, values)`` of this evaluation (ids None: matched by position), or None.
        """
        check_number(value, "value", hint="the monitored metric")
        paired, evaluation = self._paired(state, step, per_query) if per_query is not None else (None, None)
        state["series"].append([int(step), float(value)])
        values = torch.tensor([v for _, v in state["series"]], dtype=torch.float64)
        w, t = self.window, values.numel()
        band = bootstrap_ci(values[-w:], rounds=self.rounds, confidence=self.confidence, seed=self.seed)
        ar1 = self.noise is None and self.noise_estimate == "ar1"
        early_noise = math.nan if ar1 else self.noise or noise_scale(values)
        out = {
            "window_mean": band.estimate,
            "window_ci_low": band.low,
            "window_ci_high": band.high,
            "noise": early_noise,
            "correlation": math.nan,
            "correlation_high": math.nan,
            "noise_df": math.nan,
            "covered": math.nan,
            "plateau": 0.0,
            "plateau_p": math.nan,
            "downturn": 0.0,
            "downturn_p": math.nan,
            "paired_p": math.nan,
            "paired": 0.0,
        }
        best_record: dict[str, Any] | None = None
        last = self._series_last_look(values) if t >= 2 * w else {}
        if last and last["beyond"] == 1.0 and state.get("beyond") is None:
            state["beyond"] = int(step)  # the first look whose noise was correlated beyond the covered range
        if last:
            last["covered"] = 0.0 if state.get("beyond") is not None else last["covered"]
            out.update({key: last[key] for key in ("noise", "correlation", "correlation_high", "noise_df", "covered")})
        decides = bool(last) and last["covered"] == 1.0
        if last and state["plateau_looks"] < self.max_looks:
            state["plateau_looks"] += 1
            out["plateau_p"] = float(last["plateau_p"])
            out["plateau"] = float(decides and out["plateau_p"] <= self.alpha)
        if paired is not None:
            out["paired_p"] = paired[0]
        if evaluation is not None:
            best = state["best"]
            if math.isfinite(evaluation["mean"]) and (
                best is None or self.sign * evaluation["mean"] > self.sign * best["mean"]
            ):
                state["best"] = evaluation
        if last and state["looks"] < self.max_looks:
            state["looks"] += 1
            start = int(last["best_index"])
            tests = [
                (
                    float(last["downturn_p"]),
                    {"best_mean": float(last["best"]), "best_step": state["series"][start + w - 1][0]},
                    "series",
                )
            ]
            if paired is not None:
                tests.append((paired[0], paired[1], "paired"))
            p, best_record, test = max(
                tests, key=lambda item: item[0]
            )  # both must reject; equal p: the series test is named
            out["downturn_p"] = p
            out["paired"] = float(test == "paired")
            out["downturn"] = float(decides and p <= self.alpha)
        out["spent"] = state["looks"] * self.per_look_level()
        for event in EVENTS:
            if out[event] == 1.0 and state["flags"].get(event, 0.0) != 1.0:
                record = {"step": int(step), "event": event, "window_mean": band.estimate, "p": out[f"{event}_p"]}
                if event == "downturn" and best_record is not None:
                    record.update(best_record, test="paired" if out["paired"] else "series")
                state["events"].append(record)
        state["flags"] = {e: out[e] for e in EVENTS}
        return out

    def _series_last_look(self, values: Tensor) -> dict[str, float]:
        """The series rule at the last look only."""
        tests = self._series(values.unsqueeze(0), torch.tensor([values.numel()]))
        return {k: float(v[0, -1]) for k, v in tests.items()}

    def _paired(
        self, state: dict[str, Any], step: int, per_query: tuple[Any, Any]
    ) -> tuple[tuple[float, dict[str, Any]] | None, dict[str, Any]]:
        """The paired downturn test of this evaluation against the best earlier one (None before one) and this
        evaluation's record for the running best; ``state`` is not changed (a bad ``per_query`` raises first)."""
        ids, values = per_query
        current = vector(values, "per_query values")
        current_ids = None if ids is None else [int(i) for i in torch.as_tensor(ids).reshape(-1).tolist()]
        if current_ids is not None and (
            len(current_ids) != current.numel() or len(set(current_ids)) != len(current_ids)
        ):
            raise ValueError(
                f"`per_query` must hold one distinct query id per value, got {len(current_ids)} ids "
                f"({len(set(current_ids))} distinct) for {current.numel()} values."
            )
        finite_values = current[~torch.isnan(current)]
        mean = float(finite_values.mean()) if finite_values.numel() else math.nan
        record = {"step": int(step), "mean": mean, "ids": current_ids, "values": current.tolist()}
        best = state.get("best")
        if best is None:
            return None, record
        best_values = torch.tensor(best["values"], dtype=torch.float64)
        if best["ids"] is None or current_ids is None:  # matched by position
            if best_values.numel() != current.numel():
                raise ValueError(
                    f"`per_query` without query ids must keep the order and number of queries ({best_values.numel()} "
                    f"at the best evaluation, {current.numel()} now); give the query ids to pair by id."
                )
            diff = best_values - current
        else:
            _, diff, _ = paired_differences(current, best_values, current_ids, best["ids"], intersect=True)
        diff = self.sign * diff - self.min_delta  # u_best - u_latest - min_delta
        p = sign_flip_bound(diff)
        return (p, {"best_mean": float(best["mean"]), "best_step": int(best["step"])}), record


def _ratio(numerator: Tensor, denominator: Tensor) -> Tensor:
    """``numerator / denominator`` with a zero scale read as: +inf for a positive numerator, -inf otherwise."""
    out = numerator / denominator
    zero = denominator == 0
    return torch.where(zero, torch.where(numerator > 0, math.inf, -math.inf), out)
