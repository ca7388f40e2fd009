"""A sweep's jobs grouped by setting, their seeds summarised, and tested against a baseline group with the
Holm–Bonferroni correction (the format: :mod:`beyondlabels.reporting.sweeps`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from beyondlabels._internal.checks import check_choice, check_number
from beyondlabels.functional.multiple_testing import CORRECTION, holm_adjust
from beyondlabels.functional.sweeps import (
    MIN_BOOTSTRAP_SEEDS,
    paired_group_difference,
    pooled_query_interval,
    seed_summary,
)
from beyondlabels.io.run_files import EvaluationRun
from beyondlabels.io.sweeps import SEED_KEYS, SweepJob, group_jobs
from beyondlabels.reporting.stats import split_key
from beyondlabels.reporting.sweeps._jobs import _direction, _find_baseline, _names, _number, _per_query, _record

__all__ = ["DAGGER", "EFFECT_SIZE", "TEST", "sweep_comparison", "sweep_headline_keys"]

TEST = (
    "the larger of a two-sided paired randomization (sign-flip) p over queries (each query's difference averaged over "
    "the shared seeds) and a two-sided paired t p over the per-seed differences (both must reject)"
)
EFFECT_SIZE = "d_z: mean / standard deviation of the per-query differences"
DAGGER = "†"
# Raised for a baseline without a metric to test (or the reverse).
_NEEDS_BOTH = (
    "a test against a baseline needs both baseline=GROUP (or a job folder) and metric=KEY (e.g. retrieval/precision@1)"
)


def sweep_headline_keys(runs: Sequence[EvaluationRun]) -> list[str]:
    """The keys :func:`sweep_comparison` tabulates by default: the scalars with a direction that have per-query
    values, prefixed as logged (``retrieval/precision@1``), in the order of ``runs`` and their schemas.

    Examples:
        >>> from beyondlabels.schema import KeySpec, OutputSchema
        >>> schema = OutputSchema({"map@r": KeySpec("scalar", True),
        ...                        "num_queries": KeySpec("scalar", None, count=True)},
        ...                       per_query={"map@r": KeySpec("per_query", True)})
        >>> sweep_headline_keys([EvaluationRun(Path("0/retrieval"), "0", "retrieval", [], schema=schema)])
        ['retrieval/map@r']
    """
    keys: dict[str, None] = {}
    for run in runs:
        if run.schema is None:
            continue
        for key in run.schema.scalar_keys():
            if run.schema.mode(key) is not None and key in run.schema.per_query:
                keys[f"{run.prefix}/{key}"] = None
    return list(keys)


def _default_keys(jobs: Sequence[SweepJob]) -> list[str]:
    return sweep_headline_keys([run for job in jobs for run in job.runs.values()])


def sweep_comparison(
    runs: Sequence[EvaluationRun],
    *,
    seed_keys: Sequence[str] = SEED_KEYS,
    keys: Sequence[str] | None = None,
    which: str = "final",
    baseline: str | Path | None = None,
    metric: str | None = None,
    guardrails: Sequence[str] = (),
    level: float = 0.05,
    permutations: int = 9999,
    intersect: bool = False,
    confidence: float = 0.95,
    rounds: int = 2000,
    seed: int = 11,
) -> dict[str, Any]:
    """Group ``runs`` by setting and summarise (and against ``baseline``, test) them (format: the module docstring).

    Args:
        runs: Evaluations read with :func:`beyondlabels.io.read_evaluation_run`, one per callback of each job.
        seed_keys: Override keys that tell a group's seeds apart.
        keys: Logged keys to tabulate (default: ``metric`` and ``guardrails`` with a baseline, else every headline
            key, i.e. every scalar with a direction and per-query values).
        which: ``"final"`` or ``"best"`` (best under each key's direction; with a baseline, the keys of ``metric``'s
            callback are read at its evaluation that is best under ``metric``, those of other callbacks at their last).
        baseline: A group name, group key or the folder of one of its jobs.
        metric, guardrails: The keys tested against the baseline.
        level: The family-wise error rate of the decisions.
        permutations: Random sign assignments of each randomization test.
        intersect: Compare the queries both jobs of a seed hold instead of raising on unmatched ids.
        confidence, rounds, seed: Of every interval (and the tests' seed).

    Raises:
        ValueError: for an unknown ``which``, a ``level`` outside (0, 1), a baseline without ``metric`` (or the
            reverse), a baseline that is no group, keys no job has.
    """
    check_choice(which, "which", ("final", "best"))
    check_number(level, "level", above=0.0, below=1.0, hint="e.g. 0.05")
    if (baseline is None) != (metric is None):
        raise ValueError(_NEEDS_BOTH)
    groups = group_jobs(runs, seed_keys)
    if not groups:
        raise ValueError("no runs to compare")
    all_jobs = [job for jobs in groups.values() for job in jobs]
    tested = [metric, *guardrails] if metric is not None else []
    keys = _checked_keys(all_jobs, keys, tested)
    names, common = _names(groups)
    primary = split_key(metric) if metric is not None else None
    table: dict[str, Any] = {
        "kind": "sweep",
        "which": which,
        "seed_keys": list(seed_keys) if not isinstance(seed_keys, str) else [seed_keys],
        "confidence": confidence,
        "min_bootstrap_seeds": MIN_BOOTSTRAP_SEEDS,
        "common_overrides": common,
        "metrics": {k: {"direction": _direction(all_jobs, *split_key(k))} for k in keys},
        "groups": {},
        "baseline": None,
        "warnings": [],
    }
    per_query: dict[tuple[int, str], dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for g, (name, (gkey, jobs)) in enumerate(zip(names, groups.items())):
        entry: dict[str, Any] = {
            "key": gkey,
            "overrides": jobs[0].setting,
            "seeds": [j.seed for j in jobs],
            "jobs": [],
            "metrics": {},
        }
        for job in jobs:
            entry["jobs"].append(
                {"path": str(job.folder), "seed": job.seed, "values": _job_values(job, keys, primary, which)}
            )
        for k in keys:
            per_query[(g, k)], entry["metrics"][k] = _group_metric(
                entry, jobs, k, primary, which, confidence, rounds, seed
            )
        table["groups"][name] = entry
        if len(jobs) < 3:
            table["warnings"].append(
                f"group {name}: {len(jobs)} seed(s); an interval across seeds needs at least 2, "
                "and 3 or more to mean much"
            )
    if baseline is not None:
        table["baseline"] = _against_baseline(
            table,
            names,
            groups,
            per_query,
            baseline,
            tested,
            level=level,
            permutations=permutations,
            intersect=intersect,
            confidence=confidence,
            rounds=rounds,
            seed=seed,
        )
    return table


def _tested_direction(table: Mapping[str, Any], key: str) -> str:
    """The direction of a key tested against the baseline; a key without one (a count or setting) cannot be tested."""
    direction = table["metrics"][key]["direction"]
    if direction is None:
        raise ValueError(
            f"{key!r} has no direction in the schema (a count or setting); "
            "test a key that is better when higher or lower"
        )
    return direction


def _against_baseline(
    table: dict[str, Any],
    names: list[str],
    groups: Mapping[str, list[SweepJob]],
    per_query: Mapping[tuple[int, str], Mapping[str, tuple[np.ndarray, np.ndarray]]],
    baseline: str | Path,
    tested: list[str],
    *,
    level: float,
    permutations: int,
    intersect: bool,
    confidence: float,
    rounds: int,
    seed: int,
) -> dict[str, Any]:
    b = _find_baseline(baseline, names, groups)
    base_seeds = set(table["groups"][names[b]]["seeds"])
    comparisons: list[dict[str, Any]] = []
    for g, name in enumerate(names):
        if g == b:
            continue
        seeds = set(table["groups"][name]["seeds"])
        if seeds != base_seeds:
            table["warnings"].append(
                f"group {name}: seeds {sorted(seeds)} differ from the baseline's {sorted(base_seeds)}; "
                "only the shared ones are paired"
            )
        for k in tested:
            direction = _tested_direction(table, k)
            entry: dict[str, Any] = {"group": name, "metric": k, "direction": direction}
            base_pq, other_pq = per_query[(b, k)], per_query[(g, k)]
            if not base_pq or not other_pq:
                entry.update(
                    pvalue=math.nan, reason=f"no per-query values of {k} in the per-query files of both groups"
                )
            elif not set(base_pq) & set(other_pq):
                entry.update(pvalue=math.nan, reason="the two groups share no seed")
            else:
                result = paired_group_difference(
                    base_pq,
                    other_pq,
                    intersect=intersect,
                    permutations=permutations,
                    rounds=rounds,
                    confidence=confidence,
                    seed=seed,
                )
                entry.update(result.to_json())
                if result.n_queries == 0:
                    entry.update(pvalue=math.nan, reason="no paired query has a value")
            comparisons.append(entry)
    adjusted = holm_adjust([c["pvalue"] for c in comparisons]) if comparisons else np.zeros(0)
    for entry, p in zip(comparisons, adjusted.tolist()):
        entry["p_adjusted"] = p
        if math.isnan(p):
            entry["decision"] = "no conclusion"
            entry.setdefault("reason", "no test was made")
            continue
        up = entry["difference"] > 0
        if p < level:
            entry["decision"] = "better" if up == (entry["direction"] == "max") else "worse"
            entry["reason"] = f"{CORRECTION}-adjusted p = {p:.4g} < {level}"
        else:
            entry["decision"] = "cannot distinguish"
            entry["reason"] = f"{CORRECTION}-adjusted p = {p:.4g} >= {level}"
    return {
        "group": names[b],
        "metric": tested[0],
        "guardrails": tested[1:],
        "level": level,
        "correction": CORRECTION,
        "family_size": int(np.isfinite(adjusted).sum()),
        "permutations": permutations,
        "test": TEST,
        "effect_size": EFFECT_SIZE,
        "comparisons": comparisons,
    }


# ---- text -----------------------------------------------------------------------------------------------------------


def _checked_keys(all_jobs: Sequence[SweepJob], keys: Sequence[str] | None, tested: list[str]) -> list[str]:
    """The keys to tabulate (``keys``, else the tested ones, else the headline keys), each held by some job."""
    for key in tested:
        split_key(key)
    keys = list(dict.fromkeys(list(keys) if keys else (tested or _default_keys(all_jobs))))
    if not keys:
        raise ValueError(
            "no key to tabulate: the runs' schemas name no scalar with a direction and per-query values; "
            "pass metrics=[prefix/key, ...]"
        )
    known = {f"{p}/{k}" for job in all_jobs for p, r in job.runs.items() for k in r.scalar_keys()}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise ValueError(f"keys {unknown} are in none of the runs; their keys: {sorted(known)}")
    return keys


def _job_values(
    job: SweepJob, keys: Sequence[str], primary: tuple[str, str] | None, which: str
) -> dict[str, float | None]:
    """The job's value of each key: at its final evaluation, or its best (with a baseline, the keys of ``primary``'s
    callback at its evaluation best under ``primary``, those of other callbacks at their last)."""
    values = {}
    for k in keys:
        prefix, key = split_key(k)
        run = job.runs.get(prefix)
        by = primary[1] if primary is not None and primary[0] == prefix else key
        record = _record(run, by, which) if run is not None else None
        if record is not None and primary is not None and primary[0] != prefix and which == "best":
            record = run.last()
        values[k] = _number(record.get(key)) if record is not None else None
    return values


def _group_metric(
    entry: Mapping[str, Any],
    jobs: Sequence[SweepJob],
    k: str,
    primary: tuple[str, str] | None,
    which: str,
    confidence: float,
    rounds: int,
    seed: int,
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, Any]]:
    """The per-query values of key ``k`` of each of a group's seeds, and the group's entry of ``k``: the values, their
    summary across seeds and the pooled per-query interval."""
    prefix, key = split_key(k)
    values = [v for v in (j["values"][k] for j in entry["jobs"]) if v is not None]
    by = primary[1] if primary is not None and primary[0] == prefix else None
    arrays = {job.seed: pq for job in jobs if (pq := _per_query(job, prefix, key, which, by)) is not None}
    pooled = (
        pooled_query_interval([v for _, v in arrays.values()], confidence=confidence, rounds=rounds, seed=seed)
        if arrays
        else None
    )
    return arrays, {
        "values": values,
        "seeds": seed_summary(values, confidence=confidence, rounds=rounds, seed=seed).to_json(),
        "pooled": pooled.to_json() if pooled is not None else None,
    }
