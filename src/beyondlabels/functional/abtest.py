"""Paired A/B tests of two runs on the same queries, with a decision protocol, and sample sizes.

Definitions (stated once)
    - **Missing values** and the **bootstrap**: :mod:`beyondlabels.functional.bootstrap`.
    - **Paired A/B** (:func:`ab_test`): per-query differences ``B - A`` of two runs on the same queries, matched by
      query id (unmatched ids raise, or with ``intersect=True`` are left out and counted). Paired bootstrap CI of the
      mean difference (2,000 rounds, seed 11 by default) and paired t CI (``mean ± t_{n-1} sd / sqrt(n)``).
      Decision, in this order: fewer than ``min_queries`` (8) paired queries → ``"no conclusion"``; a guardrail
      metric worse in B by more than ``tolerance`` (0.02, mean difference, in the metric's own direction) →
      ``"reject"``; the deciding interval (the *wider* of the bootstrap and t intervals; when they disagree about
      crossing 0 this is the conservative one) contains 0 → ``"cannot distinguish"`` (never "no difference"); else
      ``"better"`` or ``"worse"`` for B under the primary metric's direction.
    - **Sample size** (:func:`sample_size`): ``n = ceil((z sd / half_width)^2)`` with ``z = Phi^-1((1+c)/2)``.

Examples:
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
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_bool, check_confidence, check_int, check_number
from beyondlabels._internal.stats import Interval, finite, normal_ppf, point_interval, t_ppf, t_sf, vector
from beyondlabels.functional.bootstrap import bootstrap_ci

__all__ = ["DECISIONS", "ABResult", "GuardrailCheck", "ab_test", "paired_differences", "paired_t_ci", "sample_size"]

DECISIONS = ("no conclusion", "reject", "cannot distinguish", "better", "worse")


@dataclass(frozen=True)
class GuardrailCheck:
    """One guardrail metric of an A/B test: mean difference ``B - A``, how much worse B is (``worse_by`` > 0 means
    worse, in the metric's direction), and whether that exceeds the tolerance."""

    difference: float
    worse_by: float
    breached: bool
    n: int
    higher_is_better: bool

    def to_json(self) -> dict[str, Any]:
        """Every field, in field order."""
        return asdict(self)


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
            "guardrails": {name: g.to_json() for name, g in self.guardrails.items()},
        }


def paired_differences(
    a: Any, b: Any, ids_a: Any = None, ids_b: Any = None, *, intersect: bool = False
) -> tuple[Tensor, Tensor, int]:
    """Per-query differences ``b - a``, matched by query id.

    Args:
        a: Per-query values of run A.
        b: Per-query values of run B.
        ids_a: The query ids (ints) of ``a``; without ids the vectors are matched by position (same length).
        ids_b: The query ids (ints) of ``b``.
        intersect: Leave out ids only one run has (counted) instead of raising.

    Returns:
        ``(ids, differences, unmatched)``: the matched ids in ascending order, ``b - a`` for each (NaN kept), and how
        many ids were left out.

    Raises:
        ValueError: for ids given on one side only, duplicate ids, or unmatched ids without ``intersect`` (naming
            how many and some of them).

    Examples:
        >>> ids, d, left = paired_differences([0.1, 0.5], [0.3, 0.5, 0.9], [7, 3], [3, 7, 9], intersect=True)
        >>> ids.tolist(), [round(v, 2) for v in d.tolist()], left
        ([3, 7], [-0.2, 0.4], 1)
    """
    x, y = vector(a, "a"), vector(b, "b")
    if (ids_a is None) != (ids_b is None):
        raise ValueError("give query ids for both runs (`ids_a` and `ids_b`) or for neither (match by position).")
    if ids_a is None:
        if x.numel() != y.numel():
            raise ValueError(
                f"`a` has {x.numel()} values and `b` {y.numel()}; "
                "without query ids they must have one value per query in the same order."
            )
        return torch.arange(x.numel()), y - x, 0
    ia, ib = torch.as_tensor(ids_a).to("cpu", torch.long), torch.as_tensor(ids_b).to("cpu", torch.long)
    for ids, values, name in ((ia, x, "ids_a"), (ib, y, "ids_b")):
        if ids.dim() != 1 or ids.numel() != values.numel():
            raise ValueError(
                f"`{name}` must hold one query id per value ({values.numel()}), got shape {tuple(ids.shape)}."
            )
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

    Examples:
        >>> ci, t, p = paired_t_ci([0.1, 0.2, 0.0, 0.3, 0.1])
        >>> round(ci.estimate, 2), round(t, 3), round(p, 4)
        (0.14, 2.746, 0.0516)
    """
    confidence = check_confidence(confidence)
    d = finite(vector(differences, "differences"))
    n = d.numel()
    if n < 2:
        mean = float(d.mean()) if n else math.nan
        return Interval(mean, math.nan, math.nan, confidence, "t", n), math.nan, math.nan
    mean = float(d.mean())
    sd = float(d.std(unbiased=True))
    if sd == 0.0:
        statistic = math.copysign(math.inf, mean) if mean != 0 else math.nan
        return point_interval(mean, confidence, "t", n), statistic, (0.0 if mean != 0 else math.nan)
    se = sd / math.sqrt(n)
    half = t_ppf((1.0 + confidence) / 2.0, n - 1) * se
    statistic = mean / se
    pvalue = min(1.0, 2.0 * t_sf(abs(statistic), n - 1))
    return Interval(mean, mean - half, mean + half, confidence, "t", n), statistic, pvalue


def _check_direction(value: Any, name: str) -> bool:
    return check_bool(value, name, what="True (higher is better) or False (lower is better)")


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
        a: Per-query values of the primary metric for run A (the baseline).
        b: Per-query values of the primary metric for run B.
        ids_a: The query ids of ``a`` (default: match by position).
        ids_b: The query ids of ``b``.
        higher_is_better: Direction of the primary metric.
        guardrails: ``{name: (values_a, values_b, higher_is_better)}``, paired with ``ids_a`` / ``ids_b`` unless
            ``guardrail_ids`` gives their own ``(ids_a, ids_b)``.
        tolerance: How much worse (mean difference) a guardrail may get before B is rejected.
        min_queries: Fewer paired queries than this give ``"no conclusion"``.
        intersect: Compare the queries both runs hold instead of raising on unmatched ids.
        rounds: Resamples of the paired bootstrap.
        confidence: Level of its intervals.
        seed: Seed of its resampling.

    Examples:
        >>> a = torch.linspace(0.2, 0.8, 12)
        >>> r = ab_test(a, a + 0.05, guardrails={"latency": (a, a + 0.5, False)})
        >>> r.decision, r.guardrails["latency"].breached
        ('reject', True)
    """
    higher_is_better = _check_direction(higher_is_better, "higher_is_better")
    check_number(tolerance, "tolerance", at_least=0.0, hint="e.g. 0.02", finite=False)
    min_queries = check_int(min_queries, "min_queries", minimum=2)
    _, diff, unmatched = paired_differences(a, b, ids_a, ids_b, intersect=intersect)
    d = finite(diff)
    n = d.numel()
    boot = bootstrap_ci(d, rounds=rounds, confidence=confidence, seed=seed)
    t, _, _ = paired_t_ci(d, confidence=confidence)
    checks: dict[str, GuardrailCheck] = {}
    for name, spec in (guardrails or {}).items():
        if not isinstance(spec, (tuple, list)) or len(spec) != 3:
            raise ValueError(
                f"guardrail {name!r} must be (values_a, values_b, higher_is_better), got {type(spec).__name__}."
            )
        ga, gb, up = spec
        up = _check_direction(up, f"guardrails[{name!r}] higher_is_better")
        gids = (guardrail_ids or {}).get(name, (ids_a, ids_b))
        _, gdiff, _ = paired_differences(ga, gb, gids[0], gids[1], intersect=intersect)
        gd = finite(gdiff)
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

    Examples:
        >>> sample_size(0.18, 0.05), sample_size(0.18, 0.025)
        (50, 200)
    """
    confidence = check_confidence(confidence)
    check_number(sd, "sd", at_least=0.0)
    check_number(half_width, "half_width", at_least=0.0)
    if half_width == 0:
        raise ValueError("`half_width` must be > 0: no finite number of queries gives a zero-width interval.")
    z = float(normal_ppf((1.0 + confidence) / 2.0))
    # round away float noise before the ceiling (1.96 * 0.2 / 0.04 must give 96, not 97)
    return max(1, math.ceil(round((z * sd / half_width) ** 2, 9)))
