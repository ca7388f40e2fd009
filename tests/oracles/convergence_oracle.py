"""A numpy reading of the convergence rule of ``beyondlabels.functional.convergence`` (its module docstring), written
from that text with plain loops: one look at a time, windows summed one by one, the Student t tail from
``scipy.stats.t`` (the normal tail from ``math.erfc`` for a known noise)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def tail(statistic: float, df: float) -> float:
    """P(T > statistic) for Student t with ``df`` degrees of freedom (normal for infinite df)."""
    if statistic == math.inf:
        return 0.0
    if statistic == -math.inf:
        return 1.0
    if math.isinf(df):
        return 0.5 * math.erfc(statistic / math.sqrt(2.0))
    return float(stats.t.sf(statistic, df))


def _divide(numerator: float, denominator: float) -> float:
    if denominator == 0:
        return math.inf if numerator > 0 else -math.inf
    return numerator / denominator


def series_look(curve, window, mode="max", min_delta=0.0, max_looks=1000, noise=None, noise_estimate="differences"):
    """The series rule at the last value of ``curve`` (at least ``2 * window`` values): a dict of the downturn and
    plateau p-values, the scale ``s``, the best window's mean (metric units) and start, and ``k``."""
    u = np.asarray(curve, dtype=np.float64) * (1.0 if mode == "max" else -1.0)
    t, w = len(u), window
    means = []
    for j in range(t - w + 1):
        total = 0.0
        for i in range(j, j + w):
            total += u[i]
        means.append(total / w)
    last, previous = means[t - w], means[t - 2 * w]
    best_start = 0
    for j in range(t - 2 * w + 1):  # candidates that do not overlap the last window; the first of equal means wins
        if means[j] > means[best_start]:
            best_start = j
    k = t - 2 * w + 1
    if noise is None:
        s = math.sqrt(sum((u[i + 1] - u[i]) ** 2 for i in range(t - 1)) / (2 * (t - 1)))
        df = 2 * (t - 1) ** 2 / (3 * t - 4)
        if noise_estimate == "windows":  # the larger of s and the scale of consecutive windows' means, same df
            blocks = [sum(u[b * w : (b + 1) * w]) / w for b in range(t // w)]
            between = sum((blocks[b + 1] - blocks[b]) ** 2 for b in range(len(blocks) - 1))
            s = max(s, math.sqrt(w * between / (2 * (len(blocks) - 1))))
    else:
        s, df = float(noise), math.inf
    se = s * math.sqrt(2.0 / w)
    down = _divide(means[best_start] - last - min_delta, se)
    flat = _divide(min_delta - (last - previous), se)
    sign = 1.0 if mode == "max" else -1.0
    return {
        "downturn_p": min(1.0, k * max_looks * tail(down, df)),
        "plateau_p": min(1.0, max_looks * tail(flat, df)),
        "noise": s,
        "best": sign * means[best_start],
        "best_index": best_start,
        "candidates": k,
    }


def series_run(curve, window, alpha=0.05, **kwargs):
    """Every look of a run: a list (one per value from ``2 * window`` on) of :func:`series_look` dicts plus the
    flags (0 past ``max_looks`` looks)."""
    max_looks = kwargs.get("max_looks", 1000)
    out = []
    for n in range(2 * window, len(curve) + 1):
        look = series_look(curve[:n], window, **kwargs)
        within = n - 2 * window + 1 <= max_looks
        look["downturn"] = 1.0 if within and look["downturn_p"] <= alpha else 0.0
        look["plateau"] = 1.0 if within and look["plateau_p"] <= alpha else 0.0
        out.append(look)
    return out


def paired_p(best_ids, best_values, ids, values, mode="max", min_delta=0.0):
    """Paired confirmation p-value of an evaluation (``ids``, ``values``) against the best earlier one: pairs by id,
    pairs with a NaN dropped, ``d = u_best - u_latest - min_delta``, the sign-flip bound."""
    sign = 1.0 if mode == "max" else -1.0
    best = dict(zip([int(i) for i in best_ids], [float(v) for v in best_values]))
    d = []
    for i, v in zip(ids, values):
        if int(i) in best and not math.isnan(best[int(i)]) and not math.isnan(float(v)):
            d.append(sign * (best[int(i)] - float(v)) - min_delta)
    total = sum(d)
    squares = sum(x * x for x in d)
    bound = 1.0 if total <= 0 or squares == 0 else math.exp(-total * total / (2 * squares))
    return bound
