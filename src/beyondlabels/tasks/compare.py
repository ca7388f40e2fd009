"""``task=compare``: finished runs side by side, one row per metric and one column per run.

Reads the evaluation files the callbacks write (``source=files``: history.jsonl, schema.json; or evaluate.py
reports) or offline W&B runs (``source=wandb``) and tabulates final values, or ``which=best`` under each metric's
direction (tables: :mod:`beyondlabels.reporting.tables`). Paired tests against a baseline run are ``task=abtest``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from beyondlabels.io import evaluation_schema, find_evaluation_runs, find_offline_runs, read_evaluation_run, read_offline_run, run_overrides
from beyondlabels.io._convert import plain
from beyondlabels.reporting import compare_evaluation_runs, compare_wandb_runs, print_comparison
from beyondlabels.tasks._common import ReportFiles, path_list

__all__ = ["SOURCES", "WAIT_S", "WHICH", "run"]

log = logging.getLogger(__name__)

SOURCES = ("files", "wandb")
WHICH = ("final", "best")
# source=wandb: how long to wait for a run whose log wandb is still writing
WAIT_S = 10.0


def run(cfg: DictConfig) -> dict[str, Any]:
    """Compare ``runs`` and print (and with ``output``, save) the table."""
    roots = path_list(cfg.get("runs"))
    if not roots:
        raise ValueError("task=compare needs runs=[PATH, ...]: run folders, multirun folders or history.jsonl files")
    source = cfg.get("source", "files")
    which = cfg.get("which", "final")
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if which not in WHICH:
        raise ValueError(f"which must be one of {WHICH}, got {which!r}")
    keys = plain(cfg.get("metrics"))
    keys = [keys] if isinstance(keys, str) else (list(keys) if keys else None)
    table = _from_files(roots, keys, which) if source == "files" else _from_wandb(roots, keys, which)
    print_comparison(table)
    if cfg.get("output"):
        ReportFiles(cfg).write(table)
    return table


def _from_files(roots: list[str], keys: list[str] | None, which: str) -> dict[str, Any]:
    try:
        files = [file for root in roots for file in find_evaluation_runs(root)]
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{exc} Offline W&B runs are read with source=wandb.") from None
    return compare_evaluation_runs([read_evaluation_run(file) for file in files], keys=keys, which=which)


def _from_wandb(roots: list[str], keys: list[str] | None, which: str) -> dict[str, Any]:
    paths = [p for root in roots for p in find_offline_runs(root)]
    if not paths:
        raise ValueError(f"no offline W&B runs (*.wandb) under {roots}; to read the project's own evaluation files use source=files")
    offline = [read_offline_run(p, wait_s=WAIT_S, allow_incomplete=True) for p in paths]
    for run in offline:
        if not run.complete:
            log.warning("%s is incomplete (no final exit record): its values may be partial", run.path)
    folders = [_wandb_run_folder(p) for p in paths]
    hydra_jobs = [folder is not None and (folder / ".hydra").is_dir() for folder in folders]
    labels = [folder.name if job else f"{run.name} ({run.run_id})" for run, folder, job in zip(offline, folders, hydra_jobs)]
    overrides = [run_overrides(folder) if job else [] for folder, job in zip(folders, hydra_jobs)]
    schemas = [evaluation_schema(folder) if folder is not None else None for folder in folders]
    return compare_wandb_runs(
        offline, keys=keys, which=which, schemas=schemas, labels=labels, overrides=overrides, paths=[f or p for f, p in zip(folders, paths)]
    )


def _wandb_run_folder(log_file: Path) -> Path | None:
    """The run folder of ``<run folder>/wandb/offline-run-*/run-*.wandb`` (None for another layout)."""
    parents = log_file.parents
    return parents[2] if len(parents) > 2 and parents[1].name == "wandb" else None
