"""The offline evaluation tasks of ``evaluate.py`` and the ``beyondlabels`` command: one module per task, each with
``run(cfg) -> report``.

:data:`TASKS` maps each ``task=<name>`` to its function, for every task of the registry
(:func:`beyondlabels.families.tasks`: the families' tasks, then the tools); its settings are the config group option
``task/<name>.yaml`` of the command's configs (:data:`beyondlabels.conf.EVALUATE_SEARCHPATH`), and :func:`usage` is
the list of tasks the command's help prints. Every task that evaluates per-query values adds bootstrap intervals of
its headline keys (:func:`beyondlabels.metrics.intervals.add_confidence_intervals`, as the callbacks do) and writes its
report through one writer (JSON, per-query file beside it, PNGs, a terminal table).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from beyondlabels.families import tasks

__all__ = ["TASKS", "run_task", "usage"]

TASKS: dict[str, Callable[[DictConfig], dict[str, Any]]] = {task.name: task.run for task in tasks()}


def usage() -> str:
    """A command line of every task, one per line (the registry's ``usage``), as ``evaluate.py --help`` shows them.

    Examples:
        >>> usage().splitlines()[0]
        'python evaluate.py task=retrieval input=embeddings.npz output=report.json k=[1,5,10]'
    """
    return "\n".join(line for task in tasks() for line in task.usage)


def run_task(name: str, cfg: DictConfig) -> dict[str, Any]:
    """Run the task ``name`` on ``cfg`` and return its report.

    Raises:
        ValueError: for a name that is not a task (the message lists them).
    """
    if name not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {name!r}")
    return TASKS[name](cfg)
