"""``task=select``: which checkpoint to keep, from a finished run's files: over the evaluations whose per-query files
the evaluation callback kept (``per_query/step_<step>.npz``; ``save_per_query='all'`` keeps every one), the model
confidence set of the checkpoints (the steps as good as the best at level ``1 - size``), the best one's value
corrected for its selection with an interval, negative flips and per-class regressions (with labels) from the best
evaluation to the latest, and forgetting events (definitions: :mod:`beyondlabels.functional.selection`,
:mod:`beyondlabels.functional.regressions`).

For every run folder in ``runs`` and every evaluation callback folder in it whose prefix ``metric`` names
(``retrieval/precision@1``; null: each family's first headline key with per-query values), the values are lined up
by query id (:func:`beyondlabels.io.per_query_table`), the selection is printed, written as ``selection.json`` into the
callback's folder (``write=true``: the run summary and ``report.html`` then show it; the same file the callback writes
during fit, with the same numbers when the evaluations and settings are the same) and, with ``output``, all of them as
one JSON report.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from beyondlabels._internal.checks import check_bool
from beyondlabels._internal.convert import plain
from beyondlabels.functional.selection import select_checkpoints
from beyondlabels.io import find_evaluation_runs, per_query_table, read_evaluation_run
from beyondlabels.io.atomic import write_json
from beyondlabels.io.run_files import EvaluationRun
from beyondlabels.io.run_lock import RunFolderInUseError, writing
from beyondlabels.io.selection_file import read_selection, write_selection
from beyondlabels.tasks._common import path_list, report_path

log = logging.getLogger(__name__)

__all__ = ["run"]

_SETTINGS = ("size", "statistic", "rounds", "confidence", "seed", "threshold", "fdr")


def _keys(run: EvaluationRun, metric: str | None) -> list[str]:
    """The per-query keys of ``run`` to select by: the one ``metric`` names under the run's prefix, or the first
    headline key with per-query values and a direction."""
    schema = run.schema
    if schema is None:
        return []
    with_values = [k for k in schema.per_query if schema.mode(k) is not None]
    if metric is not None:
        prefix, _, key = metric.partition("/")
        if prefix != run.prefix:
            return []
        if key not in with_values:
            raise ValueError(
                f"metric={metric!r}: {run.path} keeps no per-query values of {key!r} with a direction; choose from "
                f"{[f'{run.prefix}/{k}' for k in with_values]}"
            )
        return [key]
    chosen = [k for k in schema.headline if k in with_values] or with_values
    return chosen[:1]


def _settings(cfg: DictConfig) -> dict[str, Any]:
    settings = {name: plain(cfg.get(name)) for name in _SETTINGS if cfg.get(name) is not None}
    for name in ("rounds", "seed"):
        if name in settings:
            settings[name] = int(settings[name])
    return settings


def select_run(run: EvaluationRun, key: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The selection of ``key`` over ``run``'s evaluations with per-query files (what ``selection.json`` holds)."""
    table = per_query_table(run, key)
    if not table.steps:
        raise ValueError(
            f"{run.path}: no evaluation with a per-query file; the evaluation callback writes them with "
            "save_per_query=true (or 'all')"
        )
    if table.values.shape[0] < 2:
        raise ValueError(f"{run.path}: fewer than 2 queries have a value of {key!r} at every evaluation")
    labels = torch.as_tensor(table.labels) if table.labels is not None else None
    mode = run.schema.mode(key) if run.schema is not None else "max"
    result = select_checkpoints(torch.as_tensor(table.values), table.steps, mode=mode, labels=labels, **settings)
    return {"key": key, "monitor": f"{run.prefix}/{key}", **result, "queries_dropped": table.dropped}


def _checkpoints_of(run: EvaluationRun, result: dict[str, Any]) -> list[dict[str, Any]]:
    """The saved checkpoints an earlier ``selection.json`` of the folder names (the callback writes them at fit end),
    judged against this selection's set (None: a step not among its evaluations)."""
    try:
        earlier = read_selection(run.path)
    except ValueError as exc:
        log.warning(
            "%s: the earlier selection.json is not read (%s); its checkpoints are not carried over", run.path, exc
        )
        return []
    if earlier is None:
        return []
    in_set, considered = set(result["set_steps"]), set(result["steps"])
    return [{**c, "in_set": (c["step"] in in_set) if c["step"] in considered else None} for c in earlier.checkpoints]


def _write_locked(folder: Path, result: dict[str, Any]) -> None:
    """``selection.json`` into an evaluation folder under its lock: a training still evaluating into it writes its own
    selection there, so this one is refused rather than overwritten at its next evaluation."""
    try:
        with writing(folder):
            write_selection(folder, result)
    except RunFolderInUseError as err:
        raise RunFolderInUseError(
            f"{err} task=select write=false prints the selection without writing into the folder.",
            err.folder,
            err.holder,
        ) from None


def run(cfg: DictConfig) -> dict[str, Any]:
    """Select over every matching evaluation folder of ``runs``; print, write ``selection.json`` (``write``) and, with
    ``output``, the report."""
    from beyondlabels.reporting.selection import selection_lines

    roots = path_list(cfg.get("runs"))
    if not roots:
        raise ValueError("task=select needs runs=[RUN_FOLDER, ...] (run folders, callback folders or history files)")
    metric = plain(cfg.get("metric"))
    write = check_bool(cfg.get("write", True), "write", hint="true: selection.json into each callback folder")
    settings = _settings(cfg)
    report: dict[str, Any] = {"task": "select", "settings": settings, "selections": []}
    for file in dict.fromkeys(f for root in roots for f in find_evaluation_runs(root)):
        run = read_evaluation_run(file)
        for key in _keys(run, metric):
            result = select_run(run, key, settings)
            result["checkpoints"] = _checkpoints_of(run, result)
            if write:
                _write_locked(run.path, result)
                lines = selection_lines(read_selection(run.path))
            else:
                lines = [f"{key}: set {result['set_steps']}, best step {result['best_step']}"]
            print(f"{run.name} {run.prefix}/{key}:")
            for line in lines:
                print(f"  {line}")
            report["selections"].append({"run": run.name, "folder": str(run.path), **result})
    if not report["selections"]:
        raise ValueError(
            f"task=select found no evaluation folder with per-query values of {metric or 'a headline key'} in {roots}"
        )
    if cfg.get("output"):
        path = report_path(cfg, "selection.json")
        write_json(path, report)
        log.info("report: %s", path)
    return report
