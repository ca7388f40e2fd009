"""A numpy reading of the convergence rule of ``beyondlabels.functional.convergence`` (its module docstring), written
from that text with plain loops: one look at a time, windows summed one by one, the MSER criterion at every
truncation point, the periodogram as explicit sums over the differences, the AR(1) penalty summed over the band's
frequencies (not by the product formula), the scale's derivative by a central difference, the Student t tail from
``scipy.stats.t`` (the normal tail from ``math.erfc`` for a known noise)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

GRID = [(-990 + i) / 1000.0 for i in range(1990)]  # -0.99 .. 0.999


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


def mser_start(x, window):
    """The MSER truncation point of ``x`` over the means of consecutive windows, in values."""
    count = len(x) // window
    if count < 2:
        return 0
    z = [sum(x[b * window : (b + 1) * window]) / window for b in range(count)]
    best_d, best = 0, math.inf
    for d in range(min(count // 2, count - 2) + 1):
        rest = z[d:]
        mean = sum(rest) / len(rest)
        criterion = sum((v - mean) ** 2 for v in rest) / len(rest) ** 2
        if criterion < best:
            best_d, best = d, criterion
    return best_d * window


def window_variance(rho, w, adjacent):
    """Variance (per unit marginal variance) of a difference of two non-overlapping window means of AR(1) noise:
    adjacent windows, or far apart (the worst separation for rho >= 0; for rho < 0 it is the adjacent pair)."""
    v = 1.0 + 2.0 * sum((1 - h / w) * rho**h for h in range(1, w))
    s = sum(rho**h for h in range(w))
    covariance = rho * s * s / w**2
    return 2 * v / w - 2 * covariance if adjacent else 2 * v / w


def ar1_fit(x, window):
    """The AR(1) noise model of a noise stretch ``x`` (already cut): a dict, or None where it is not estimated."""
    d = np.diff(np.asarray(x, dtype=np.float64))
    n = len(d)
    freqs, weights, values = [], [], []
    for k in range(1, n // 2 + 1):
        lam = 2 * math.pi * k / n
        if lam < 2 * math.pi / (4 * window):
            continue
        total = sum(d[j] * complex(math.cos(lam * j), -math.sin(lam * j)) for j in range(n))
        freqs.append(lam)
        weights.append(0.5 if 2 * k == n else 1.0)
        values.append(abs(total) ** 2 / n / (2 * (1 - math.cos(lam))))
    weight = sum(weights)
    if weight < 10:
        return None
    a = sum(o * j for o, j in zip(weights, values)) / weight
    b = sum(o * j * math.cos(lam) for o, j, lam in zip(weights, values, freqs)) / weight
    if a == 0:
        return None

    def objective(i):
        rho = GRID[i]
        penalty = sum(o * math.log(1 - 2 * rho * math.cos(lam) + rho * rho) for o, lam in zip(weights, freqs))
        return math.log(a * (1 + rho * rho) - 2 * b * rho) - penalty / weight

    coarse_set = list(range(0, len(GRID), 10)) + [len(GRID) - 1]  # -0.99, -0.98, .., 0.99 and 0.999
    coarse = min(coarse_set, key=lambda i: (objective(i), i))
    fine = [min(max(coarse + o, 0), len(GRID) - 1) for o in range(-10, 11)]
    best = min(fine, key=lambda i: (objective(i), fine.index(i)))
    rho = GRID[best]
    z = stats.norm.ppf(0.99)
    high = max(
        [rho]
        + [GRID[i] for i in coarse_set if GRID[i] >= rho and 2 * weight * (objective(i) - objective(best)) <= z * z]
    )
    innovation = a * (1 + rho * rho) - 2 * b * rho
    sigma2 = innovation / (1 - rho * rho)
    slopes = [2 * (math.cos(lam) - rho) / (1 - 2 * rho * math.cos(lam) + rho * rho) for lam in freqs]
    info = np.array(
        [
            [weight, sum(o * s for o, s in zip(weights, slopes))],
            [sum(o * s for o, s in zip(weights, slopes)), sum(o * s * s for o, s in zip(weights, slopes))],
        ]
    )
    out = {"correlation": rho, "correlation_high": high, "sd": math.sqrt(sigma2), "ordinates": weight}
    for name, adjacent in (("", rho < 0), ("_adjacent", True)):  # the worst separation: adjacent for rho < 0
        q = window_variance(rho, window, adjacent)
        h = 1e-6
        dq = (window_variance(rho + h, window, adjacent) - window_variance(rho - h, window, adjacent)) / (2 * h)
        g = np.array([1.0, 2 * rho / (1 - rho * rho) + dq / q])
        out["scale" + name] = math.sqrt(sigma2 * q)
        out["df" + name] = 2.0 / float(g @ np.linalg.solve(info, g))
    bound = math.exp(-1.0 / window)
    out["covered"] = 1.0 if high <= bound else 0.0
    out["beyond"] = 1.0 if weight >= 20 and rho > bound else 0.0
    return out


def noise_at_look(u, window):
    """The AR(1) noise model of the look after ``u``: the stretch before the last two windows, from its MSER start."""
    head = list(u[: len(u) - 2 * window])
    start = mser_start(head, window)
    fit = ar1_fit(head[start:], window) if len(head) - start >= 2 else None
    return start, fit


def series_look(curve, window, mode="max", min_delta=0.0, max_looks=1000, noise=None, noise_estimate="ar1"):
    """The series rule at the last value of ``curve`` (at least ``2 * window`` values): a dict of the downturn and
    plateau p-values, the noise (sd, correlation, df, covered), the best window's mean (metric units) and start, and
    ``k``."""
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
    step = max(1, w // 2)  # the candidates start every half window from the first value, before the last window
    candidates = list(range(0, t - 2 * w + 1, step))
    for j in candidates:  # the first of equal means wins
        if means[j] > means[best_start]:
            best_start = j
    k = len(candidates)
    covered, beyond, correlation, high, start = 1.0, 0.0, math.nan, math.nan, 0.0
    if noise is None and noise_estimate == "ar1":
        start, fit = noise_at_look(u, w)
        if fit is None:
            sd = correlation = se = se_a = df = df_a = math.nan
            covered = 0.0
        else:
            sd, correlation, high, covered, beyond = (
                fit["sd"],
                fit["correlation"],
                fit["correlation_high"],
                fit["covered"],
                fit["beyond"],
            )
            se, df, se_a, df_a = fit["scale"], fit["df"], fit["scale_adjacent"], fit["df_adjacent"]
    else:
        if noise is None:
            sd = math.sqrt(sum((u[i + 1] - u[i]) ** 2 for i in range(t - 1)) / (2 * (t - 1)))
            df = 2 * (t - 1) ** 2 / (3 * t - 4)
            if noise_estimate == "windows":  # the larger of s and the scale of consecutive windows' means, same df
                blocks = [sum(u[b * w : (b + 1) * w]) / w for b in range(t // w)]
                between = sum((blocks[b + 1] - blocks[b]) ** 2 for b in range(len(blocks) - 1))
                sd = max(sd, math.sqrt(w * between / (2 * (len(blocks) - 1))))
        else:
            sd, df = float(noise), math.inf
        se = se_a = sd * math.sqrt(2.0 / w)
        df_a = df
    sign = 1.0 if mode == "max" else -1.0
    if math.isnan(df):
        downturn_p = plateau_p = 1.0
    else:
        downturn_p = min(1.0, k * max_looks * tail(_divide(means[best_start] - last - min_delta, se), df))
        plateau_p = min(1.0, max_looks * tail(_divide(min_delta - (last - previous), se_a), df_a))
    return {
        "downturn_p": downturn_p,
        "plateau_p": plateau_p,
        "noise": sd,
        "correlation": correlation,
        "correlation_high": high,
        "noise_df": df,
        "covered": covered,
        "beyond": beyond,
        "noise_start": float(start),
        "best": sign * means[best_start],
        "best_index": best_start,
        "candidates": k,
    }


def series_run(curve, window, alpha=0.05, **kwargs):
    """Every look of a run: a list (one per value from ``2 * window`` on) of :func:`series_look` dicts plus the
    flags (0 past ``max_looks`` looks and at looks that are not covered: ``covered`` is 0 from the first look that
    was ``beyond`` on)."""
    max_looks = kwargs.get("max_looks", 1000)
    out, seen_beyond = [], False
    for n in range(2 * window, len(curve) + 1):
        look = series_look(curve[:n], window, **kwargs)
        seen_beyond = seen_beyond or look["beyond"] == 1.0
        if seen_beyond:
            look["covered"] = 0.0
        decides = n - 2 * window + 1 <= max_looks and look["covered"] == 1.0
        look["downturn"] = 1.0 if decides and look["downturn_p"] <= alpha else 0.0
        look["plateau"] = 1.0 if decides and look["plateau_p"] <= alpha else 0.0
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
