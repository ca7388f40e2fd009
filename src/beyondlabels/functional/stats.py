"""Statistics over per-query values: bootstrap confidence intervals, paired A/B tests with a decision protocol,
sample sizes, agreement (Cohen's kappa) and rank correlation (Spearman, Kendall).

Pure torch (float64 on the CPU; the Student t distribution comes from ``scipy.special``). No torchmetrics, no
Lightning. Every evaluation writes one value per query (``per_query``); everything here reads such vectors.

Definitions (stated once)
    - **Missing values.** NaN entries (lone queries, queries a metric leaves out) are dropped before any statistic;
      ``n`` counts what is left. A paired difference is NaN when either side is.
    - **Bootstrap** (:func:`bootstrap_ci`): ``rounds`` resamples of the ``n`` values with replacement, drawn by a
      CPU ``torch.Generator`` seeded with ``seed`` (so the same seed gives the same interval on any device and world
      size); the statistic is the mean. ``"percentile"``: the ``(1-c)/2`` and ``(1+c)/2`` quantiles (linear
      interpolation) of the resampled means. ``"bca"`` (bias-corrected and accelerated, Efron 1987): bias
      ``z0 = Phi^-1((#{m* < m} + #{m* <= m}) / (2B))`` and acceleration ``a = sum(d^3) / (6 (sum d^2)^1.5)`` with
      ``d_i`` the jackknife deviations ``mean(theta_(.)) - theta_(i)``; the quantile levels become
      ``Phi(z0 + (z0 + z) / (1 - a (z0 + z)))`` for ``z = Phi^-1`` of each percentile level. ``n == 1`` or constant
      values give the point interval; ``n == 0`` gives NaN.
    - **Paired A/B** (:func:`ab_test`): per-query differences ``B - A`` of two runs on the same queries, matched by
      query id (unmatched ids raise, or with ``intersect=True`` are left out and counted). Paired bootstrap CI of the
      mean difference (2,000 rounds, seed 11 by default) and paired t CI (``mean ± t_{n-1} sd / sqrt(n)``).
      Decision, in this order: fewer than ``min_queries`` (8) paired queries → ``"no conclusion"``; a guardrail
      metric worse in B by more than ``tolerance`` (0.02, mean difference, in the metric's own direction) →
      ``"reject"``; the deciding interval (the *wider* of the bootstrap and t intervals; when they disagree about
      crossing 0 this is the conservative one) contains 0 → ``"cannot distinguish"`` (never "no difference"); else
      ``"better"`` or ``"worse"`` for B under the primary metric's direction.
    - **Sample size** (:func:`sample_size`): ``n = ceil((z sd / half_width)^2)`` with ``z = Phi^-1((1+c)/2)``.
    - **Cohen's kappa** (:func:`cohen_kappa`): ``(p_o - p_e) / (1 - p_e)`` over the categories either rater used
      (ints or strings); weighted ``1 - sum(w O) / sum(w E)`` with ``w = |i - j|`` (linear) or ``(i - j)^2``
      (quadratic) over the sorted categories. NaN when ``p_e == 1``.
    - **Spearman** (:func:`spearman`): the Pearson correlation of average ranks; p-value from
      ``t = rho sqrt((n-2)/(1-rho^2))`` with ``n-2`` degrees of freedom. **Kendall** (:func:`kendall_tau`): tau-b
      ``S / sqrt((n0-n1)(n0-n2))`` with the tie-corrected normal approximation of the variance of ``S`` (Kendall
      1970); two-sided p-values.

Example:
    >>> a = torch.tensor([0.2, 0.4, 0.1, 0.5, 0.3, 0.6, 0.2, 0.4, 0.5, 0.3])
    >>> result = ab_test(a, a + 0.1)
    >>> result.decision, round(result.difference, 3), result.n
    ('better', 0.1, 10)
    >>> ab_test(a[:7], a[:7] + 0.1).decision
    'no conclusion'
    >>> sample_size(0.18, 0.05)
    50
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from beyondlabels.functional.labels import encode_labels
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "ABResult",
    "Correlation",
    "GuardrailCheck",
    "Interval",
    "ab_test",
    "bootstrap_ci",
    "bootstrap_difference_ci",
    "cohen_kappa",
    "confidence_interval_keys",
    "confidence_intervals",
    "kendall_tau",
    "paired_differences",
    "paired_t_ci",
    "sample_size",
    "spearman",
    "with_confidence_intervals",
]

METHODS = ("percentile", "bca")
DECISIONS = ("no conclusion", "reject", "cannot distinguish", "better", "worse")
# Resampled values held at once by the bootstrap (rounds are processed in chunks of at most this many values).
_CHUNK_VALUES = 1 << 22


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval.

    Attributes:
        estimate: The statistic on the data (the mean).
        low: Lower bound. high: Upper bound.
        confidence: Coverage of the interval (0.95).
        method: ``"percentile"``, ``"bca"`` or ``"t"``.
        n: Number of (finite) values used.
    """

    estimate: float
    low: float
    high: float
    confidence: float
    method: str
    n: int

    @property
    def width(self) -> float:
        return self.high - self.low

    def contains(self, value: float = 0.0) -> bool:
        """Whether ``value`` lies inside the closed interval (False for a NaN interval)."""
        return bool(self.low <= value <= self.high)

    def to_json(self) -> dict[str, Any]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "confidence": self.confidence, "method": self.method, "n": self.n}


@dataclass(frozen=True)
class Correlation:
    """A correlation coefficient with its two-sided p-value and the number of pairs used."""

    statistic: float
    pvalue: float
    n: int


@dataclass(frozen=True)
class GuardrailCheck:
    """One guardrail metric of an A/B test: mean difference ``B - A``, how much worse B is (``worse_by`` > 0 means
    worse, in the metric's direction), and whether that exceeds the tolerance."""

    difference: float
    worse_by: float
    breached: bool
    n: int
    higher_is_better: bool


@dataclass(frozen=True)
class ABResult:
    """The outcome of :func:`ab_test` (decision rules: the module docstring).

    Attributes:
        decision: One of ``"no conclusion"``, ``"reject"``, ``"cannot distinguish"``, ``"better"``, ``"worse"``.
        reason: One sentence saying why.
        n: Paired queries used for the primary metric.
        difference: Mean of ``B - A``.
        bootstrap: Paired bootstrap interval of the mean difference.
        t: Paired t interval of the mean difference.
        interval: The deciding interval (the wider of the two).
        disagree: Whether the bootstrap and t intervals disagree about containing 0.
        guardrails: ``{name: GuardrailCheck}``.
        unmatched: Query ids left out because only one run had them (with ``intersect=True``).
    """

    decision: str
    reason: str
    n: int
    difference: float
    bootstrap: Interval
    t: Interval
    interval: Interval
    disagree: bool
    higher_is_better: bool
    guardrails: dict[str, GuardrailCheck] = field(default_factory=dict)
    unmatched: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "reason": self.reason,
            "n": self.n,
            "difference": self.difference,
            "higher_is_better": self.higher_is_better,
            "bootstrap": self.bootstrap.to_json(),
            "t": self.t.to_json(),
            "interval": self.interval.to_json(),
            "disagree": self.disagree,
            "unmatched": self.unmatched,
            "guardrails": {
                name: {"difference": g.difference, "worse_by": g.worse_by, "breached": g.breached, "n": g.n, "higher_is_better": g.higher_is_better}
                for name, g in self.guardrails.items()
            },
        }


# ---- checks ----------------------------------------------------------------------------------------------------------


def _vector(values: Any, name: str) -> Tensor:
    """``values`` as a 1-D float64 CPU tensor (NaN kept)."""
    if isinstance(values, Tensor):
        tensor = values.detach().to("cpu")
    else:
        try:
            tensor = torch.as_tensor(values)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"`{name}` must be a 1-D sequence of numbers, got {type(values).__name__}: {exc}") from exc
    if tensor.dim() != 1 or tensor.is_complex() or tensor.dtype == torch.bool:
        raise ValueError(f"`{name}` must be a 1-D vector of real numbers (one per query), got shape {tuple(tensor.shape)} {tensor.dtype}.")
    return tensor.to(torch.float64)


def _check_confidence(confidence: Any) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
        raise ValueError(f"`confidence` must be a number strictly between 0 and 1 (e.g. 0.95), got {confidence!r}.")
    return float(confidence)


def _check_rounds(rounds: Any) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"`rounds` must be a positive int (e.g. 2000 bootstrap resamples), got {rounds!r}.")
    return rounds


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an int, got {seed!r}.")
    return seed


def _finite(values: Tensor) -> Tensor:
    return values[~torch.isnan(values)]


def _normal_ppf(p: float | Tensor) -> Tensor:
    return torch.special.ndtri(torch.as_tensor(p, dtype=torch.float64))


def _t_ppf(p: float, df: float) -> float:
    from scipy import special

    return float(special.stdtrit(df, p))


def _t_sf(t: float, df: float) -> float:
    from scipy import special

    return float(special.stdtr(df, -t))


# ---- bootstrap -------------------------------------------------------------------------------------------------------


def _resampled_means(values: Tensor, rounds: int, generator: torch.Generator) -> Tensor:
    """Means ``[rounds, K]`` of ``rounds`` resamples (with replacement) of the rows of ``values`` ``[n, K]``.

    One set of resamples serves every column: each round's multiplicities (counts of each row) times the matrix.
    Rounds are drawn in chunks, so memory is bounded by ``_CHUNK_VALUES``, and the numbers do not depend on the chunk.
    """
    n = values.shape[0]
    chunk = max(1, _CHUNK_VALUES // max(n, 1))
    parts = []
    for start in range(0, rounds, chunk):
        size = min(chunk, rounds - start)
        index = torch.randint(n, (size, n), generator=generator)
        counts = torch.zeros(size, n, dtype=torch.float64).scatter_add_(1, index, torch.ones(size, n, dtype=torch.float64))
        parts.append(counts @ values / n)
    return torch.cat(parts)


def _bootstrap_means(groups: Sequence[Tensor], rounds: int, seed: int) -> list[Tensor]:
    """Resampled means ``[rounds]`` of each vector in ``groups`` (independent resamples, one generator)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return [_resampled_means(values.unsqueeze(1), rounds, generator)[:, 0] for values in groups]


def _interval_from(means: Tensor, estimate: float, confidence: float, method: str, n: int, jackknife: Tensor | None) -> Interval:
    alpha = (1.0 - confidence) / 2.0
    levels = torch.tensor([alpha, 1.0 - alpha], dtype=torch.float64)
    if method == "bca":
        b = means.numel()
        below = float((means < estimate).sum()) + float((means <= estimate).sum())
        z0 = _normal_ppf(below / (2.0 * b))
        deviations = jackknife.mean() - jackknife
        denominator = 6.0 * float((deviations**2).sum()) ** 1.5
        accel = float((deviations**3).sum()) / denominator if denominator > 0 else 0.0
        z = _normal_ppf(levels)
        levels = torch.special.ndtr(z0 + (z0 + z) / (1.0 - accel * (z0 + z)))
        if not bool(torch.isfinite(levels).all()):
            levels = torch.tensor([alpha, 1.0 - alpha], dtype=torch.float64)  # degenerate bias: fall back to percentile
    low, high = torch.quantile(means, levels.clamp(0.0, 1.0)).tolist()
    return Interval(estimate, float(low), float(high), confidence, method, n)


def _point(estimate: float, confidence: float, method: str, n: int) -> Interval:
    return Interval(estimate, estimate, estimate, confidence, method, n)


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

    Example:
        >>> ci = bootstrap_ci([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0], rounds=1000, seed=0)
        >>> ci.estimate, ci.low < 0.625 < ci.high, ci.n
        (0.625, True, 8)
    """
    rounds, seed, confidence = _check_rounds(rounds), _check_seed(seed), _check_confidence(confidence)
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got {method!r}.")
    data = _finite(_vector(values, "values"))
    n = data.numel()
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, confidence, method, 0)
    estimate = float(data.mean())
    if n == 1 or bool((data == data[0]).all()):
        return _point(estimate, confidence, method, n)
    (means,) = _bootstrap_means([data], rounds, seed)
    jackknife = (data.sum() - data) / (n - 1) if method == "bca" else None
    return _interval_from(means, estimate, confidence, method, n, jackknife)


def bootstrap_difference_ci(
    a: Any, b: Any, *, rounds: int = 2000, confidence: float = 0.95, seed: int = 11
) -> Interval:
    """Percentile bootstrap interval of ``mean(b) - mean(a)`` for two *independent* samples (each resampled on its
    own; NaN left out). Used to compare two windows of a training curve.

    Example:
        >>> ci = bootstrap_difference_ci([0.1, 0.2, 0.15, 0.12], [0.5, 0.55, 0.6, 0.52], rounds=500, seed=0)
        >>> round(ci.estimate, 4), ci.low > 0
        (0.4, True)
    """
    rounds, seed, confidence = _check_rounds(rounds), _check_seed(seed), _check_confidence(confidence)
    x, y = _finite(_vector(a, "a")), _finite(_vector(b, "b"))
    if x.numel() == 0 or y.numel() == 0:
        return Interval(math.nan, math.nan, math.nan, confidence, "percentile", 0)
    estimate = float(y.mean() - x.mean())
    n = min(x.numel(), y.numel())
    means_x, means_y = _bootstrap_means([x, y], rounds, seed)
    return _interval_from(means_y - means_x, estimate, confidence, "percentile", n, None)


# ---- paired comparison -------------------------------------------------------------------------------------------------


def paired_differences(
    a: Any, b: Any, ids_a: Any = None, ids_b: Any = None, *, intersect: bool = False
) -> tuple[Tensor, Tensor, int]:
    """Per-query differences ``b - a``, matched by query id.

    Args:
        a, b: Per-query values of the two runs.
        ids_a, ids_b: Their query ids (ints); without them the vectors are matched by position (same length).
        intersect: Leave out ids only one run has (counted) instead of raising.

    Returns:
        ``(ids, differences, unmatched)``: the matched ids in ascending order, ``b - a`` for each (NaN kept), and how
        many ids were left out.

    Raises:
        ValueError: for ids given on one side only, duplicate ids, or unmatched ids without ``intersect`` (naming
            how many and some of them).

    Example:
        >>> ids, d, left = paired_differences([0.1, 0.5], [0.3, 0.5, 0.9], [7, 3], [3, 7, 9], intersect=True)
        >>> ids.tolist(), [round(v, 2) for v in d.tolist()], left
        ([3, 7], [-0.2, 0.4], 1)
    """
    x, y = _vector(a, "a"), _vector(b, "b")
    if (ids_a is None) != (ids_b is None):
        raise ValueError("give query ids for both runs (`ids_a` and `ids_b`) or for neither (match by position).")
    if ids_a is None:
        if x.numel() != y.numel():
            raise ValueError(f"`a` has {x.numel()} values and `b` {y.numel()}; without query ids they must have one value per query in the same order.")
        return torch.arange(x.numel()), y - x, 0
    ia, ib = torch.as_tensor(ids_a).to("cpu", torch.long), torch.as_tensor(ids_b).to("cpu", torch.long)
    for ids, values, name in ((ia, x, "ids_a"), (ib, y, "ids_b")):
        if ids.dim() != 1 or ids.numel() != values.numel():
            raise ValueError(f"`{name}` must hold one query id per value ({values.numel()}), got shape {tuple(ids.shape)}.")
        if torch.unique(ids).numel() != ids.numel():
            raise ValueError(f"`{name}` holds duplicate query ids; each query must appear once per run.")
    common, in_a, in_b = _intersect(ia, ib)
    unmatched = ia.numel() + ib.numel() - 2 * common.numel()
    if unmatched and not intersect:
        only_a = ia[~torch.isin(ia, common)][:5].tolist()
        only_b = ib[~torch.isin(ib, common)][:5].tolist()
        raise ValueError(
            f"the two runs do not hold the same queries: {unmatched} query ids are in only one of them "
            f"(only in A, e.g. {only_a}; only in B, e.g. {only_b}). Evaluate both on the same queries, or pass "
            "intersect=True to compare the queries they share."
        )
    return common, y[in_b] - x[in_a], unmatched


def _intersect(ia: Tensor, ib: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    common = torch.unique(ia[torch.isin(ia, ib)])  # sorted
    order_a, order_b = torch.argsort(ia), torch.argsort(ib)
    pos_a = order_a[torch.searchsorted(ia[order_a], common)]
    pos_b = order_b[torch.searchsorted(ib[order_b], common)]
    return common, pos_a, pos_b


def paired_t_ci(differences: Any, *, confidence: float = 0.95) -> tuple[Interval, float, float]:
    """Paired t interval of the mean difference, with the t statistic and its two-sided p-value.

    ``mean ± t_{n-1, (1+c)/2} · sd / sqrt(n)`` with the sample standard deviation (``n - 1`` denominator); NaN left
    out. Fewer than 2 values: NaN interval; zero spread: the point interval, statistic ±inf (NaN for a zero mean).

    Returns:
        ``(interval, statistic, pvalue)``.

    Example:
        >>> ci, t, p = paired_t_ci([0.1, 0.2, 0.0, 0.3, 0.1])
        >>> round(ci.estimate, 2), round(t, 3), round(p, 4)
        (0.14, 2.746, 0.0516)
    """
    confidence = _check_confidence(confidence)
    d = _finite(_vector(differences, "differences"))
    n = d.numel()
    if n < 2:
        mean = float(d.mean()) if n else math.nan
        return Interval(mean, math.nan, math.nan, confidence, "t", n), math.nan, math.nan
    mean = float(d.mean())
    sd = float(d.std(unbiased=True))
    if sd == 0.0:
        statistic = math.copysign(math.inf, mean) if mean != 0 else math.nan
        return _point(mean, confidence, "t", n), statistic, (0.0 if mean != 0 else math.nan)
    se = sd / math.sqrt(n)
    half = _t_ppf((1.0 + confidence) / 2.0, n - 1) * se
    statistic = mean / se
    pvalue = min(1.0, 2.0 * _t_sf(abs(statistic), n - 1))
    return Interval(mean, mean - half, mean + half, confidence, "t", n), statistic, pvalue


def _check_direction(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True (higher is better) or False (lower is better), got {value!r}.")
    return value


def ab_test(
    a: Any,
    b: Any,
    ids_a: Any = None,
    ids_b: Any = None,
    *,
    higher_is_better: bool = True,
    guardrails: Mapping[str, tuple[Any, Any, bool]] | None = None,
    guardrail_ids: Mapping[str, tuple[Any, Any]] | None = None,
    tolerance: float = 0.02,
    min_queries: int = 8,
    intersect: bool = False,
    rounds: int = 2000,
    confidence: float = 0.95,
    seed: int = 11,
) -> ABResult:
    """Paired A/B test of run B against run A on a primary metric, with guardrails and the decision protocol of the
    module docstring.

    Args:
        a, b: Per-query values of the primary metric for runs A (baseline) and B.
        ids_a, ids_b: Their query ids (default: match by position).
        higher_is_better: Direction of the primary metric.
        guardrails: ``{name: (values_a, values_b, higher_is_better)}``, paired with ``ids_a`` / ``ids_b`` unless
            ``guardrail_ids`` gives their own ``(ids_a, ids_b)``.
        tolerance: How much worse (mean difference) a guardrail may get before B is rejected.
        min_queries: Fewer paired queries than this give ``"no conclusion"``.
        intersect: Compare the queries both runs hold instead of raising on unmatched ids.
        rounds, confidence, seed: Of the paired bootstrap.

    Example:
        >>> a = torch.linspace(0.2, 0.8, 12)
        >>> r = ab_test(a, a + 0.05, guardrails={"latency": (a, a + 0.5, False)})
        >>> r.decision, r.guardrails["latency"].breached
        ('reject', True)
    """
    higher_is_better = _check_direction(higher_is_better, "higher_is_better")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or tolerance < 0:
        raise ValueError(f"`tolerance` must be a number >= 0 (e.g. 0.02), got {tolerance!r}.")
    if isinstance(min_queries, bool) or not isinstance(min_queries, int) or min_queries < 2:
        raise ValueError(f"`min_queries` must be an int >= 2, got {min_queries!r}.")
    _, diff, unmatched = paired_differences(a, b, ids_a, ids_b, intersect=intersect)
    d = _finite(diff)
    n = d.numel()
    boot = bootstrap_ci(d, rounds=rounds, confidence=confidence, seed=seed)
    t, _, _ = paired_t_ci(d, confidence=confidence)
    checks: dict[str, GuardrailCheck] = {}
    for name, spec in (guardrails or {}).items():
        if not isinstance(spec, (tuple, list)) or len(spec) != 3:
            raise ValueError(f"guardrail {name!r} must be (values_a, values_b, higher_is_better), got {type(spec).__name__}.")
        ga, gb, up = spec
        up = _check_direction(up, f"guardrails[{name!r}] higher_is_better")
        gids = (guardrail_ids or {}).get(name, (ids_a, ids_b))
        _, gdiff, _ = paired_differences(ga, gb, gids[0], gids[1], intersect=intersect)
        gd = _finite(gdiff)
        mean = float(gd.mean()) if gd.numel() else math.nan
        worse_by = -mean if up else mean
        checks[name] = GuardrailCheck(mean, worse_by, bool(worse_by > tolerance), int(gd.numel()), up)
    wider = boot if not (t.width > boot.width) else t  # NaN widths keep the bootstrap interval
    disagree = boot.contains(0.0) != t.contains(0.0) and not math.isnan(t.width)
    breached = [name for name, c in checks.items() if c.breached]
    mean = float(d.mean()) if n else math.nan
    if n < min_queries:
        decision, reason = "no conclusion", f"only {n} paired queries (at least {min_queries} are needed)"
    elif breached:
        worst = ", ".join(f"{name} worse by {checks[name].worse_by:.4f}" for name in breached)
        decision, reason = "reject", f"guardrail breached (tolerance {tolerance}): {worst}"
    elif wider.contains(0.0) or math.isnan(wider.low):
        decision = "cannot distinguish"
        reason = f"the {confidence:.0%} {wider.method} interval [{wider.low:.4f}, {wider.high:.4f}] of B - A contains 0"
    else:
        improved = (wider.low > 0) == higher_is_better
        decision = "better" if improved else "worse"
        reason = f"the {confidence:.0%} {wider.method} interval [{wider.low:.4f}, {wider.high:.4f}] of B - A excludes 0"
    if disagree and decision in ("better", "worse", "cannot distinguish"):
        reason += " (bootstrap and t disagreed; the wider interval decided)"
    return ABResult(decision, reason, n, mean, boot, t, wider, disagree, higher_is_better, checks, unmatched)


def sample_size(sd: float, half_width: float, confidence: float = 0.95) -> int:
    """Queries needed for a confidence interval of the mean of half-width ``half_width`` when per-query values (or
    differences) have standard deviation ``sd``: ``ceil((z sd / half_width)^2)``.

    Example:
        >>> sample_size(0.18, 0.05), sample_size(0.18, 0.025)
        (50, 200)
    """
    confidence = _check_confidence(confidence)
    for value, name in ((sd, "sd"), (half_width, "half_width")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"`{name}` must be a finite number >= 0, got {value!r}.")
    if half_width == 0:
        raise ValueError("`half_width` must be > 0: no finite number of queries gives a zero-width interval.")
    z = float(_normal_ppf((1.0 + confidence) / 2.0))
    # round away float noise before the ceiling (1.96 * 0.2 / 0.04 must give 96, not 97)
    return max(1, math.ceil(round((z * sd / half_width) ** 2, 9)))


# ---- agreement and correlation ------------------------------------------------------------------------------------------


def cohen_kappa(rater_a: Any, rater_b: Any, weights: str | None = None) -> float:
    """Cohen's kappa between two raters' labels of the same items (definition: the module docstring).

    Args:
        rater_a, rater_b: One label per item: ints, strings or booleans-as-ints, same length.
        weights: None (unweighted), ``"linear"`` or ``"quadratic"`` (ordinal categories, sorted by code).

    Example:
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
        raise ValueError(f"`rater_a` and `rater_b` must label the same non-empty set of items, got {codes_a.numel()} and {codes_b.numel()} labels.")
    categories, inverse = torch.unique(torch.cat([codes_a, codes_b]), return_inverse=True)
    c, n = categories.numel(), codes_a.numel()
    ia, ib = inverse[:n], inverse[n:]
    observed = torch.zeros(c, c, dtype=torch.float64).index_put_((ia, ib), torch.ones(n, dtype=torch.float64), accumulate=True)
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
    a, b = _vector(x, "x"), _vector(y, "y")
    if a.numel() != b.numel():
        raise ValueError(f"`x` and `y` must have one value per item each, got {a.numel()} and {b.numel()}.")
    keep = ~(torch.isnan(a) | torch.isnan(b))
    return a[keep], b[keep]


def spearman(x: Any, y: Any) -> Correlation:
    """Spearman's rank correlation with its two-sided p-value (t approximation; pairs with a NaN left out).

    Example:
        >>> r = spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
        >>> round(r.statistic, 2), r.n
        (0.8, 5)
    """
    a, b = _pairs(x, y)
    n = a.numel()
    if n < 3:
        return Correlation(math.nan, math.nan, n)
    ra, rb = _ranks(a) - (n + 1) / 2.0, _ranks(b) - (n + 1) / 2.0
    denominator = math.sqrt(float((ra**2).sum()) * float((rb**2).sum()))
    if denominator == 0.0:
        return Correlation(math.nan, math.nan, n)
    rho = max(-1.0, min(1.0, float((ra * rb).sum()) / denominator))
    if abs(rho) == 1.0:
        return Correlation(rho, 0.0, n)
    t = rho * math.sqrt((n - 2) / (1.0 - rho * rho))
    return Correlation(rho, min(1.0, 2.0 * _t_sf(abs(t), n - 2)), n)


def _tie_sums(x: Tensor) -> tuple[float, float, float]:
    """Over groups of tied values of size t: sum t(t-1), sum t(t-1)(t-2), sum t(t-1)(2t+5)."""
    _, counts = torch.unique(x, return_counts=True)
    t = counts.to(torch.float64)
    return float((t * (t - 1)).sum()), float((t * (t - 1) * (t - 2)).sum()), float((t * (t - 1) * (2 * t + 5)).sum())


def kendall_tau(x: Any, y: Any, chunk_size: int = 1024) -> Correlation:
    """Kendall's tau-b with its two-sided p-value (normal approximation with tie corrections; NaN pairs left out).

    Example:
        >>> r = kendall_tau([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
        >>> round(r.statistic, 2), r.n
        (0.6, 5)
    """
    a, b = _pairs(x, y)
    n = a.numel()
    if n < 2:
        return Correlation(math.nan, math.nan, n)
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


# ---- confidence intervals of an evaluation ---------------------------------------------------------------------------------


def confidence_interval_keys(schema: OutputSchema, keys: bool | Sequence[str] = True) -> list[str]:
    """The headline keys that get a confidence interval: scalars with a direction that have a per-query vector of
    the same name (all of them for ``keys=True``, none for False, or the given subset).

    Raises:
        ValueError: when a requested key is not such a scalar (the message lists the ones that are).

    Example:
        >>> schema = OutputSchema({"p@1": KeySpec("scalar", True), "n": KeySpec("scalar", None, count=True)},
        ...                       {"p@1": KeySpec("per_query", True)})
        >>> confidence_interval_keys(schema), confidence_interval_keys(schema, False)
        (['p@1'], [])
    """
    eligible = [k for k in schema.scalar_keys() if schema[k].higher_is_better is not None and k in schema.per_query]
    if keys is True:
        return eligible
    if keys is False or keys is None:
        return []
    if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"`confidence_intervals` must be True, False or a list of metric names, got {keys!r}.")
    unknown = [k for k in keys if k not in eligible]
    if unknown:
        raise ValueError(f"`confidence_intervals` names {unknown}, which have no per-query values; choose from {eligible}.")
    return list(keys)


def with_confidence_intervals(schema: OutputSchema, keys: Sequence[str]) -> OutputSchema:
    """``schema`` plus ``<key>_ci_low`` and ``<key>_ci_high`` (scalars with the key's direction) for each key."""
    extra: dict[str, KeySpec] = {}
    for key in keys:
        extra[f"{key}_ci_low"] = extra[f"{key}_ci_high"] = KeySpec("scalar", schema[key].higher_is_better)
    return schema.merged(OutputSchema(extra))


def confidence_intervals(
    per_query: Mapping[str, Any],
    keys: Sequence[str],
    *,
    rounds: int = 2000,
    confidence: float = 0.95,
    seed: int = 11,
    max_bootstrap_n: int = 20_000,
) -> dict[str, float]:
    """``{<key>_ci_low: ..., <key>_ci_high: ...}``: the percentile bootstrap interval of the mean of each per-query
    vector (NaN left out), equal to :func:`bootstrap_ci` with the same seed. Keys missing from ``per_query`` are
    skipped. Above ``max_bootstrap_n`` values the bootstrap (whose cost grows as ``rounds x n``) is replaced by the
    normal interval ``mean +- z * sd / sqrt(n)`` (sample sd, ddof 1), which the bootstrap of a mean approaches at
    that size; it keeps an evaluation of a million queries cheap.

    Example:
        >>> ci = confidence_intervals({"p@1": torch.tensor([1.0, 0.0, 1.0, 1.0])}, ["p@1"], rounds=200)
        >>> sorted(ci), ci["p@1_ci_low"] <= 0.75 <= ci["p@1_ci_high"]
        (['p@1_ci_high', 'p@1_ci_low'], True)
    """
    rounds, seed, confidence = _check_rounds(rounds), _check_seed(seed), _check_confidence(confidence)
    out: dict[str, float] = {}
    # keys with the same queries (the same NaN pattern) share one set of resamples: one matrix product for all
    groups: dict[bytes, list[tuple[str, Tensor]]] = {}
    for key in keys:
        if key not in per_query:
            continue
        values = _vector(per_query[key], key)
        groups.setdefault(torch.isnan(values).numpy().tobytes(), []).append((key, values))
    for members in groups.values():
        matrix = torch.stack([_finite(v) for _, v in members], dim=1)
        n = matrix.shape[0]
        estimates = matrix.mean(dim=0) if n else torch.full((len(members),), math.nan, dtype=torch.float64)
        constant = n < 2 or bool((matrix == matrix[:1]).all())
        if not constant and n > max_bootstrap_n:
            half = _normal_ppf(0.5 + confidence / 2.0) * matrix.std(dim=0, unbiased=True) / math.sqrt(n)
            for column, (key, _) in enumerate(members):
                out[f"{key}_ci_low"] = float(estimates[column] - half[column])
                out[f"{key}_ci_high"] = float(estimates[column] + half[column])
            continue
        means = None if constant else _resampled_means(matrix, rounds, torch.Generator(device="cpu").manual_seed(seed))
        for column, (key, _) in enumerate(members):
            estimate = float(estimates[column])
            if means is None or bool((matrix[:, column] == matrix[0, column]).all()):
                interval = _point(estimate, confidence, "percentile", n) if n else Interval(math.nan, math.nan, math.nan, confidence, "percentile", 0)
            else:
                interval = _interval_from(means[:, column], estimate, confidence, "percentile", n, None)
            out[f"{key}_ci_low"], out[f"{key}_ci_high"] = interval.low, interval.high
    return out
