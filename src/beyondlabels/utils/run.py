"""Helpers around one training run: the objective for sweepers, a closing summary, W&B clean-up and resume."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from beyondlabels._internal.checks import is_number
from beyondlabels._internal.parse import read_json
from beyondlabels.io.atomic import write_json
from beyondlabels.io.run_files import EvaluationRun
from beyondlabels.io.run_lock import RunFolderInUseError, writing
from beyondlabels.io.sweeps import SEED_KEYS
from beyondlabels.reporting.summary import (
    TABLE_FILE,
    RunSummary,
    print_summary,
    summarize_run_folder,
    summarize_runs,
    write_summary_table,
)

log = logging.getLogger(__name__)

# Where a run folder keeps the id of its W&B run, so that a resumed training continues the same W&B run.
WANDB_RUN_FILE = "wandb_run.json"


def scalar_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Plain floats of every scalar entry (tensors of one element or numbers), sorted by key.

    Examples:
        >>> scalar_metrics({"b": torch.tensor(0.5), "a": 2, "curve": torch.ones(3)})
        {'a': 2.0, 'b': 0.5}
    """
    out = {}
    for key, value in metrics.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            out[key] = float(value)
        elif is_number(value):
            out[key] = float(value)
    return dict(sorted(out.items()))


def metric_value(metrics: Mapping[str, Any], name: str | None) -> float | None:
    """The value of the sweep objective ``name``; None when no objective is configured.

    Raises:
        KeyError: if ``name`` was not logged; the message lists the keys that were.
    """
    if not name:
        return None
    scalars = scalar_metrics(metrics)
    if name not in scalars:
        raise KeyError(
            f"optimized_metric={name!r} was not logged by this run; logged scalars: {sorted(scalars)}. "
            "Set optimized_metric to one of them (or null)."
        )
    value = scalars[name]
    return value if math.isfinite(value) else float("nan")


def print_run_summary(
    output_dir: str | Path,
    metrics: Mapping[str, Any] | None = None,
    *,
    runs: Sequence[EvaluationRun] | None = None,
    events: Sequence[Mapping[str, Any]] | None = None,
    full_table: bool = False,
    table_file: str | None = TABLE_FILE,
    console: Any = None,
) -> RunSummary:
    """Print the end-of-run summary of a run folder (:mod:`beyondlabels.reporting.summary`): per evaluation family its
    headline keys (last value and interval, best value and step, change since the first evaluation) and its notes,
    then where everything else is; write the full table of every key to ``<output_dir>/<table_file>`` first (None:
    no file).

    Args:
        output_dir: The run folder.
        metrics: The trainer's ``callback_metrics``: its scalars outside the families (``val/loss``, ...) join the
            full table.
        runs: The run's evaluation families; default: every evaluation history in ``output_dir``.
        events: Convergence events (``{"monitor", "event", "step", "p", "window_mean"}``); default: those in the
            run folder's CSV logs.
        full_table: Print every key instead of the headline keys.
        table_file: The full table's file name in ``output_dir``.
        console: A ``rich.console.Console`` to print to (default: stdout; colour only on a terminal).

    Returns:
        The summary printed.
    """
    output_dir = Path(output_dir)
    extra = scalar_metrics(metrics or {})
    if runs is None:
        summary = summarize_run_folder(output_dir, events=events, extra=extra)
    else:
        summary = summarize_runs(runs, output_dir, events=events, extra=extra)
    if table_file is not None and output_dir.is_dir():
        try:
            with writing(output_dir):  # one writer per run folder
                write_summary_table(summary, output_dir / table_file)
        except (OSError, RunFolderInUseError) as exc:  # the summary is still printed; the file is what it costs
            log.warning("the full table %s was not written: %s", output_dir / table_file, exc)
    print_summary(summary, console=console, full=full_table)
    return summary


def close_wandb() -> None:
    """Finish the active W&B run, if any, so the next job of a multirun starts its own run."""
    try:
        import wandb
    except ImportError:  # pragma: no cover - wandb is a dependency, kept defensive for slim installs
        return
    if wandb.run is not None:
        wandb.finish()


def wandb_run_id(run_folder: str | os.PathLike[str]) -> str | None:
    """The id of the W&B run a run folder belongs to, as :func:`keep_wandb_run_id` wrote it to
    ``<run_folder>/wandb_run.json``; None when there is none (or it is unreadable, with a warning).

    Examples:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> keep_wandb_run_id(folder, "3x9kq2ab"); wandb_run_id(folder)
        '3x9kq2ab'
    """
    file = Path(run_folder) / WANDB_RUN_FILE
    if not file.is_file():
        return None
    try:
        run_id = read_json(file, str(file), max_bytes=1 << 20).get("id")
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("ignoring unreadable %s (%s): the run starts a new W&B run", file, exc)
        return None
    return run_id if isinstance(run_id, str) and run_id else None


def keep_wandb_run_id(run_folder: str | os.PathLike[str], run_id: str) -> None:
    """Write ``run_id`` to ``<run_folder>/wandb_run.json`` (atomically), for :func:`wandb_run_id` on resume."""
    write_json(Path(run_folder) / WANDB_RUN_FILE, {"id": str(run_id)})


def resumed_wandb_run_id(run_folder: str | os.PathLike[str], ckpt_path: str | os.PathLike[str] | None) -> str | None:
    """The W&B run a training resumed in ``run_folder`` from ``ckpt_path`` continues: the id kept in ``run_folder``
    (a run resumed in its own folder), else the one kept in the checkpoint's run folder (``<run>/checkpoints/x.ckpt``
    → ``<run>``, a run resumed into a new folder). None without a checkpoint: a training started from scratch is a
    new W&B run, even in a folder that held one."""
    if not ckpt_path:
        return None
    return wandb_run_id(run_folder) or wandb_run_id(Path(ckpt_path).resolve().parent.parent)


def is_wandb_logger_config(config: Any) -> bool:
    """Whether a logger config (a mapping with ``_target_``) builds a Lightning ``WandbLogger`` (of either package)."""
    return isinstance(config, Mapping) and str(config.get("_target_", "")).endswith(".WandbLogger")


def apply_sweep_group(cfg: Any, overrides: Sequence[str] | None = None, seed_keys: Sequence[str] = SEED_KEYS) -> str:
    """Give a job's W&B run the group of its setting, so that W&B groups a sweep's seeds as ``task=compare`` does.

    The group is :func:`beyondlabels.io.sweeps.sweep_group` of ``overrides`` (default: the Hydra job's command-line
    overrides, none outside a Hydra job), or ``cfg.task_name`` for a job without an override but seeds. It is set
    as ``cfg.sweep_group`` (so it is in the logged hyperparameters, the run's W&B config) and as the ``group`` of
    every W&B logger config under ``cfg.logger`` whose group is unset (null or empty): a group the user gives wins.

    Returns:
        The group key.

    Examples:
        >>> from omegaconf import OmegaConf
        >>> cfg = OmegaConf.create({"task_name": "train",
        ...                         "logger": {"wandb": {"_target_": "x.WandbLogger", "group": None}}})
        >>> apply_sweep_group(cfg, ["seed=2", "model.lr=0.003"]), cfg.logger.wandb.group, cfg.sweep_group
        ('model.lr=0.003', 'model.lr=0.003', 'model.lr=0.003')
    """
    from omegaconf import open_dict

    from beyondlabels.io.sweeps import sweep_group

    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    group = sweep_group(list(overrides), seed_keys) or str(cfg.get("task_name") or "default")
    with open_dict(cfg):
        cfg.sweep_group = group
    for logger in (cfg.get("logger") or {}).values():
        if is_wandb_logger_config(logger) and not logger.get("group"):
            with open_dict(logger):
                logger.group = group
    return group
