"""Statistics of a sweep's groups: one setting trained with several seeds, summarised across the seeds and compared
with a baseline setting.

Pure numpy/torch on arrays: each seed's value (a job's final scalar) and each seed's per-query values with their
query ids. The grouping of run folders is :mod:`beyondlabels.io.sweeps`.

Three modules are named after sweeps, one per layer: :mod:`beyondlabels.functional.sweeps` the statistics,
:mod:`beyondlabels.io.sweeps` the reading and grouping of the job folders, :mod:`beyondlabels.reporting.sweeps` the
tables and pictures; each name reads as what a sweep is to its layer.

Definitions (stated once)
    - **Across seeds** (:func:`seed_summary`): the mean of the seeds' values, their sample standard deviation
      (``n - 1``), ``n``, the t interval ``mean ± t_{n-1,(1+c)/2} sd / sqrt(n)`` (NaN bounds for one seed) and, with at
      least :data:`MIN_BOOTSTRAP_SEEDS` seeds, the percentile bootstrap of the mean over the seeds
      (:func:`beyondlabels.functional.bootstrap.bootstrap_ci`); with fewer seeds a bootstrap over seeds has too few
      distinct resamples (10 for 3 seeds) to be an interval, so it is None.
    - **Pooled per-query interval** (:func:`pooled_query_interval`): the percentile bootstrap of the mean over the
      per-query values of all the group's jobs together (the per-run interval of the callbacks, over every job).
    - **Against a baseline** (:func:`paired_group_difference`): for each seed both groups share, the per-query
      differences ``other - baseline`` paired by query id within that seed
      (:func:`beyondlabels.functional.abtest.paired_differences`); the *per-seed difference* is their mean (NaN left
      out), summarised across the shared seeds by the t interval. The *per-query difference* of a query is the mean
      of its differences over the shared seeds; over the queries: its mean (equal to the mean over all pooled
      (seed, query) differences when every seed holds every query), a percentile bootstrap interval, the two-sided
      paired randomization (sign-flip) p-value with the query as the exchangeable unit
      (:func:`beyondlabels.functional.multiple_testing.paired_randomization_test`) and the effect size
      ``d_z = mean / sd`` of the per-query differences. That test answers whether the two settings' trained models
      differ on this query distribution, not whether retraining would repeat it: seed-to-seed variation never enters
      it. The per-seed differences get the paired t test across the shared seeds (``seed_pvalue``).
    - **The decision's p-value** (``pvalue``) is the larger of the two, ``max(query p, seed p)``: an
      intersection–union test, which rejects only when both the query-level and the seed-level test reject, so its
      level is at most that of the seed-level test (the unit of replication of a setting is the training run) while
      the query-level test keeps it from resting on a few lucky queries. With one shared seed there is no seed-level
      test and ``pvalue`` is the query-level one (``method`` says so).

Examples:
    >>> s = seed_summary([0.70, 0.72, 0.74])
    >>> round(s.mean, 2), round(s.sd, 2), s.n, s.bootstrap is None
    (0.72, 0.02, 3, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from beyondlabels.functional.abtest import paired_differences, paired_t_ci
from beyondlabels.functional.bootstrap import Interval, bootstrap_ci
from beyondlabels.functional.multiple_testing import paired_randomization_test

__all__ = [
    "INTERSECTION_UNION",
    "MIN_BOOTSTRAP_SEEDS",
    "QUERIES_ONLY",
    "GroupDifference",
    "SeedSummary",
    "paired_group_difference",
    "pooled_query_interval",
    "seed_summary",
]

MIN_BOOTSTRAP_SEEDS = 5
INTERSECTION_UNION = "max of the paired randomization (sign-flip) p over queries and the paired t p over seeds"
QUERIES_ONLY = "paired randomization (sign-flip) over queries (one shared seed: no test across seeds)"


@dataclass(frozen=True)
class SeedSummary:
    """One group's values across its seeds (definitions: the module docstring)."""

    mean: float
    sd: float
    n: int
    t: Interval
    bootstrap: Interval | None

    def to_json(self) -> dict[str, Any]:
        """Every field, in field order (the intervals as their own dicts)."""
        return asdict(self)


def seed_summary(
    values: Any,
    *,
    confidence: float = 0.95,
    rounds: int = 2000,
    seed: int = 11,
    min_bootstrap: int = MIN_BOOTSTRAP_SEEDS,
) -> SeedSummary:
    """Mean, sd, n, t interval and (from ``min_bootstrap`` seeds on) bootstrap interval of one value per seed.

    NaN values are left out. Example:
        >>> s = seed_summary([0.1, 0.2, 0.3, 0.4, 0.5], rounds=500, seed=0)
        >>> round(s.t.low, 4), round(s.t.high, 4), s.bootstrap.low < s.mean < s.bootstrap.high
        (0.1037, 0.4963, True)
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    x = x[~np.isnan(x)]
    n = int(x.size)
    mean = float(x.mean()) if n else math.nan
    sd = float(x.std(ddof=1)) if n > 1 else math.nan
    t, _, _ = paired_t_ci(x, confidence=confidence)
    boot = bootstrap_ci(x, rounds=rounds, confidence=confidence, seed=seed) if n >= min_bootstrap else None
    return SeedSummary(mean, sd, n, t, boot)


def pooled_query_interval(
    per_query: Sequence[Any], *, confidence: float = 0.95, rounds: int = 2000, seed: int = 11
) -> Interval:
    """Percentile bootstrap interval of the mean over every job's per-query values together (NaN left out).

    Examples:
        >>> ci = pooled_query_interval([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]], rounds=500, seed=0)
        >>> round(ci.estimate, 4), ci.n
        (0.7143, 7)
    """
    arrays = [np.asarray(v, dtype=np.float64).reshape(-1) for v in per_query]
    pooled = np.concatenate(arrays) if arrays else np.zeros(0)
    return bootstrap_ci(pooled, rounds=rounds, confidence=confidence, seed=seed)


@dataclass(frozen=True)
class GroupDifference:
    """A group against the baseline group (definitions: the module docstring).

    Attributes:
        seeds: The shared seeds, in the order given.
        per_seed: The per-seed differences (other - baseline), one per shared seed.
        seed_t: Their t interval across seeds.
        per_query: Bootstrap interval of the mean per-query difference (its estimate is the difference).
        n_queries: Queries with a difference.
        pvalue: The decision's p-value (unadjusted): ``max(query_pvalue, seed_pvalue)``, or ``query_pvalue`` with
            one shared seed.
        query_pvalue: Two-sided paired randomization p-value over the queries.
        seed_pvalue: Two-sided paired t p-value over the per-seed differences (NaN with one shared seed).
        effect_size: ``d_z``: mean / sd of the per-query differences.
        unmatched: Query ids left out because only one side held them (with ``intersect``), summed over seeds.
    """

    seeds: list[str]
    per_seed: list[float]
    seed_t: Interval
    per_query: Interval
    n_queries: int
    pvalue: float
    effect_size: float
    query_pvalue: float = math.nan
    seed_pvalue: float = math.nan
    unmatched: int = 0
    method: str = field(default=INTERSECTION_UNION)

    @property
    def difference(self) -> float:
        return self.per_query.estimate

    def to_json(self) -> dict[str, Any]:
        return {
            "difference": self.difference,
            "seeds": list(self.seeds),
            "per_seed": list(self.per_seed),
            "seed_t": self.seed_t.to_json(),
            "per_query": self.per_query.to_json(),
            "n_queries": self.n_queries,
            "pvalue": self.pvalue,
            "query_pvalue": self.query_pvalue,
            "seed_pvalue": self.seed_pvalue,
            "effect_size": self.effect_size,
            "unmatched": self.unmatched,
            "method": self.method,
        }


def paired_group_difference(
    baseline: Mapping[str, tuple[Any, Any]],
    other: Mapping[str, tuple[Any, Any]],
    *,
    intersect: bool = False,
    permutations: int = 9999,
    rounds: int = 2000,
    confidence: float = 0.95,
    seed: int = 11,
) -> GroupDifference:
    """Compare ``other`` with ``baseline`` over the seeds both hold (definitions: the module docstring).

    Args:
        baseline: ``{seed: (query ids, per-query values)}`` of the baseline group's jobs.
        other: The same of the other group's jobs.
        intersect: Within a seed, compare the queries both hold instead of raising on unmatched ids.
        permutations: Random sign assignments of the randomization test (exact enumeration when ``2^n`` is smaller).
        rounds: Resamples of the bootstrap interval.
        confidence: Level of the interval.
        seed: Seed of the bootstrap and of the test.

    Raises:
        ValueError: when the groups share no seed, or (without ``intersect``) a shared seed's jobs do not hold the
            same queries.

    Examples:
        >>> ids = np.arange(12)
        >>> base = {"seed=1": (ids, np.linspace(0.2, 0.7, 12)), "seed=2": (ids, np.linspace(0.25, 0.75, 12))}
        >>> better = {s: (i, v + 0.1) for s, (i, v) in base.items()}
        >>> r = paired_group_difference(base, better)
        >>> round(r.difference, 4), r.seeds, r.query_pvalue == 2 / 4096  # 12 queries: all 4096 assignments enumerated
        (0.1, ['seed=1', 'seed=2'], True)
        >>> r.pvalue == max(r.query_pvalue, r.seed_pvalue)  # both tests must reject
        True
    """
    shared = [s for s in baseline if s in other]
    if not shared:
        raise ValueError(
            f"the two groups share no seed (baseline: {sorted(baseline)}, other: {sorted(other)}); train both settings "
            "with the same seeds to pair them"
        )
    per_seed: list[float] = []
    columns: dict[int, list[float]] = {}
    unmatched = 0
    for s in shared:
        ids_a, values_a = baseline[s]
        ids_b, values_b = other[s]
        ids, diff, left = paired_differences(values_a, values_b, ids_a, ids_b, intersect=intersect)
        unmatched += left
        d = diff.double().numpy()
        ok = ~np.isnan(d)
        per_seed.append(float(d[ok].mean()) if ok.any() else math.nan)
        for query, value in zip(ids.tolist(), d.tolist()):
            columns.setdefault(query, []).append(value)
    by_query = np.array(
        [np.nanmean(v) if not np.all(np.isnan(v)) else np.nan for v in columns.values()], dtype=np.float64
    )
    by_query = by_query[~np.isnan(by_query)]
    seed_t, _, seed_pvalue = paired_t_ci(np.asarray(per_seed), confidence=confidence)
    interval = bootstrap_ci(by_query, rounds=rounds, confidence=confidence, seed=seed)
    query_pvalue = float(paired_randomization_test(by_query, rounds=permutations, seed=seed))
    across_seeds = sum(not math.isnan(d) for d in per_seed) >= 2
    pvalue = max(query_pvalue, seed_pvalue) if across_seeds else query_pvalue
    sd = float(by_query.std(ddof=1)) if by_query.size > 1 else math.nan
    mean = float(by_query.mean()) if by_query.size else math.nan
    effect = (
        mean / sd
        if sd and not math.isnan(sd)
        else (math.nan if mean == 0 or math.isnan(mean) else math.copysign(math.inf, mean))
    )
    return GroupDifference(
        list(shared),
        per_seed,
        seed_t,
        interval,
        int(by_query.size),
        pvalue,
        effect,
        query_pvalue,
        seed_pvalue,
        unmatched,
        INTERSECTION_UNION if across_seeds else QUERIES_ONLY,
    )
