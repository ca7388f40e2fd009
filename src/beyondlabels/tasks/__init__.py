"""The offline evaluation tasks of ``evaluate.py``: one module per task, each with ``run(cfg) -> report``.

:data:`TASKS` maps each ``task=<name>`` to its function; its settings are the config group option
``conf/task/<name>.yaml``. Every task that evaluates per-query values adds bootstrap intervals of its headline keys
(:func:`beyondlabels.metrics.intervals.add_confidence_intervals`, as the callbacks do) and writes its report through
one writer (JSON, per-query file beside it, PNGs, a terminal table).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from beyondlabels.tasks import abtest, audit, compare, crossmodal, hierarchy, mismatch, profiles, ranking, report, retrieval, rprecision

__all__ = ["TASKS", "run_task"]

TASKS: dict[str, Callable[[DictConfig], dict[str, Any]]] = {
    "retrieval": retrieval.run,
    "crossmodal": crossmodal.run,
    "hierarchy": hierarchy.run,
    "ranking": ranking.run,
    "rprecision": rprecision.run,
    "mismatch": mismatch.run,
    "profiles": profiles.run,
    "compare": compare.run,
    "abtest": abtest.run,
    "report": report.run,
    "audit": audit.run,
}


def run_task(name: str, cfg: DictConfig) -> dict[str, Any]:
    """Run the task ``name`` on ``cfg`` and return its report.

    Raises:
        ValueError: for a name that is not a task (the message lists them).
    """
    if name not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {name!r}")
    return TASKS[name](cfg)
