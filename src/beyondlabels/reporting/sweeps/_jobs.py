"""What the grouped comparison reads of each job: its record, its values, its per-query values, the groups'
names and the baseline group (definitions: :mod:`beyondlabels.reporting.sweeps`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from beyondlabels._internal.checks import is_number
from beyondlabels.io.run_files import EvaluationRun, query_values
from beyondlabels.io.sweeps import SweepJob

_NO_OVERRIDE = "(no override)"


def _record(run: EvaluationRun, key: str, which: str) -> dict[str, Any] | None:
    if (
        which == "best"
        and run.schema is not None
        and key in run.schema.scalar_keys()
        and run.schema.mode(key) is not None
    ):
        return run.best(key)
    return run.last()


def _number(value: Any) -> float | None:
    return float(value) if is_number(value) else None


def _direction(jobs: Sequence[SweepJob], prefix: str, key: str) -> str | None:
    for job in jobs:
        run = job.runs.get(prefix)
        if run is not None and run.schema is not None and key in run.schema.scalar_keys():
            return run.schema.mode(key)
    return None


def _per_query(
    job: SweepJob, prefix: str, key: str, which: str, primary: str | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """(ids, values) of ``key`` at the job's final or best evaluation (best under ``primary`` when given); None
    without a per-query file holding it."""
    run = job.runs.get(prefix)
    if run is None or run.schema is None or key not in run.schema.per_query:
        return None
    record = (
        _record(run, primary or key, which) if primary is None or primary in run.schema.scalar_keys() else run.last()
    )
    if record is None:
        return None
    try:
        return query_values(run.per_query(int(record["step"])), key, run.file)
    except (FileNotFoundError, KeyError, ValueError):
        return None


def _names(groups: Mapping[str, list[SweepJob]]) -> tuple[list[str], list[str]]:
    """Display names (the overrides that differ between groups) and the overrides every group shares."""
    settings = [jobs[0].setting for jobs in groups.values()]
    common = [o for o in settings[0] if all(o in s for s in settings)] if settings else []
    names = []
    for _key, jobs in groups.items():
        differing = [o for o in jobs[0].setting if o not in common]
        name = ", ".join(differing) if differing else (jobs[0].folder.name if not jobs[0].seed else _NO_OVERRIDE)
        names.append(name)
    unique = []
    for name, jobs in zip(names, groups.values()):
        unique.append(name if names.count(name) == 1 else f"{name} ({jobs[0].folder.name})")
    return unique, common


def _find_baseline(baseline: str | Path, names: list[str], groups: Mapping[str, list[SweepJob]]) -> int:
    text = str(baseline)
    keys = list(groups)
    for i, (name, key) in enumerate(zip(names, keys)):
        if text in (name, key):
            return i
    path = Path(text).resolve()
    for i, jobs in enumerate(groups.values()):
        for job in jobs:
            folder = job.folder.resolve()
            if path == folder or folder in path.parents:
                return i
    raise ValueError(
        f"baseline={text!r} is neither a group nor one of the job folders compared; groups: {names} (or pass the "
        "folder of one of the baseline group's jobs)"
    )
