"""Fit a model with beyondlabels evaluation callbacks attached (Hydra entry point).

    python train.py                       # the embedded demo, offline W&B + CSV logs under logs/
    python train.py trainer=gpu logger=csv
    python train.py -m seed=1,2 model.lr=1e-3,3e-3      # a multirun sweep
    python train.py hparams_search=shapes_optuna        # Optuna search (extra: beyondlabels[sweep])

Returns the value of ``optimized_metric`` so Hydra sweepers can optimise it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import hydra
import pytorch_lightning as pl
from omegaconf import DictConfig, OmegaConf, open_dict

from beyondlabels._internal.checks import check_bool
from beyondlabels.callbacks.base import EvaluationCore
from beyondlabels.callbacks.convergence import ConvergenceMonitorCore
from beyondlabels.callbacks.packages import is_lightning_instance
from beyondlabels.io.run_files import EvaluationRun, read_evaluation_run
from beyondlabels.io.run_lock import RunFolderLock
from beyondlabels.utils import (
    close_wandb,
    instantiate_callbacks,
    instantiate_loggers,
    keep_wandb_run_id,
    metric_value,
    print_run_summary,
    resumed_wandb_run_id,
)
from beyondlabels.utils.run import apply_sweep_group, is_wandb_logger_config
from beyondlabels.utils.run_folder import launched_as_rank_zero

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Instantiate data, model, callbacks, loggers and trainer from ``cfg``; fit; return metrics and objects."""
    check_bool(cfg.get("full_table", False), "full_table", hint="true: every key at the end; false: the summary")
    pl.seed_everything(cfg.seed, workers=True)
    log.info("data: %s", cfg.data._target_)
    datamodule: pl.LightningDataModule = hydra.utils.instantiate(cfg.data)
    log.info("model: %s", cfg.model._target_)
    model: pl.LightningModule = hydra.utils.instantiate(cfg.model)
    callbacks = instantiate_callbacks(cfg.get("callbacks"))
    continue_wandb_run(cfg)
    apply_sweep_group(cfg)  # W&B groups a sweep's seeds by setting, as task=compare does
    loggers = instantiate_loggers(cfg.get("logger"))
    if not loggers:
        # LearningRateMonitor refuses to run without a logger; with logger=none there is nothing to monitor into.
        callbacks = [c for c in callbacks if not is_lightning_instance(c, "LearningRateMonitor")]
    trainer: pl.Trainer = hydra.utils.instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    objects = {
        "cfg": cfg,
        "datamodule": datamodule,
        "model": model,
        "callbacks": callbacks,
        "loggers": loggers,
        "trainer": trainer,
    }

    for logger in trainer.loggers:
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
        if is_lightning_instance(logger, "WandbLogger") and trainer.is_global_zero:
            keep_wandb_run_id(cfg.paths.output_dir, logger.experiment.id)  # a resumed training continues this run

    if cfg.get("train", True):
        trainer.fit(model=model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    else:
        trainer.validate(model=model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    metrics = dict(trainer.callback_metrics)
    if cfg.get("train", True) and cfg.get("ckpt_path") and not metrics:
        metrics = finished_run_metrics(trainer, callbacks, cfg.ckpt_path)
    return metrics, objects


def finished_run_metrics(trainer: pl.Trainer, callbacks: list[Any], ckpt_path: str) -> dict[str, float]:
    """The final numbers of a run whose checkpoint is resumed after it had finished.

    Lightning's fit of such a checkpoint trains and logs nothing ("`Trainer.fit` stopped: `max_epochs=...`
    reached"): the run is said to have nothing left to train, and its numbers are those it ended with, the last
    successful evaluation of every evaluation callback as restored from the checkpoint (for the summary and the sweep
    objective). Nothing is evaluated again; ``train=false`` evaluates a checkpoint with the validation loop.
    """
    log.warning(
        "nothing left to train: %s is the checkpoint of a finished run (epoch %d, step %d; trainer.max_epochs=%s, "
        "max_steps=%s). Its final numbers are its last evaluation's; raise trainer.max_epochs or trainer.max_steps "
        "to train on, or set train=false to evaluate the checkpoint again.",
        ckpt_path,
        trainer.current_epoch,
        trainer.global_step,
        trainer.max_epochs,
        trainer.max_steps,
    )
    metrics: dict[str, float] = {}
    for callback in callbacks:
        if not isinstance(callback, EvaluationCore):
            continue
        done = [record for record in callback.history if "error" not in record]
        for key, value in (done[-1] if done else {}).items():
            if key not in ("step", "epoch") and isinstance(value, (int, float)) and not isinstance(value, bool):
                metrics[f"{callback.prefix}/{key}"] = float(value)
    return metrics


def continue_wandb_run(cfg: DictConfig) -> None:
    """A training resumed from ``ckpt_path`` (in its own run folder or a new one) continues its W&B run: every
    WandbLogger config without an ``id`` gets the kept run id and ``resume="allow"``."""
    run_id = resumed_wandb_run_id(cfg.paths.output_dir, cfg.get("ckpt_path"))
    if run_id is None:
        return
    for name, logger in (cfg.get("logger") or {}).items():
        if is_wandb_logger_config(logger) and not logger.get("id") and not logger.get("version"):
            with open_dict(logger):
                logger.id, logger.resume = run_id, "allow"
            log.info("logger.%s continues the W&B run %s", name, run_id)


def write_run_report(output_dir: str | Path) -> Path | None:
    """Write ``<output_dir>/report.html`` (:func:`beyondlabels.reporting.html_report.write_report`) and return its path;
    None, with a warning, when it could not be written: a report never fails the run."""
    try:
        from beyondlabels.reporting.html_report import write_report

        return write_report([output_dir], Path(output_dir) / "report.html")
    except Exception as exc:  # noqa: BLE001 - whatever breaks the report, the trained model and its files stand
        log.warning("the HTML report of %s was not written: %s: %s", output_dir, type(exc).__name__, exc)
        return None


def evaluation_runs(
    callbacks: list[Any], trainer: pl.Trainer, output_dir: str | Path
) -> tuple[list[EvaluationRun], list[dict[str, Any]]]:
    """The run's evaluation families, read from each evaluation callback's folder (its history in memory when it
    writes no files), and the events of its convergence monitors, in callback order."""
    runs: list[EvaluationRun] = []
    events: list[dict[str, Any]] = []
    for callback in callbacks:
        if isinstance(callback, EvaluationCore):
            folder = callback.output_folder(trainer)
            try:
                runs.append(read_evaluation_run(folder))
            except (TypeError, OSError, ValueError):  # no folder (save_dir=False) or no history in it yet
                history = list(callback.history)
                path = Path(folder) if folder is not None else Path(output_dir) / callback.prefix
                name = Path(output_dir).name
                runs.append(EvaluationRun(path, name, callback.prefix, history, schema=callback.schema))
        elif isinstance(callback, ConvergenceMonitorCore):
            events.extend({**event, "monitor": callback.monitor} for event in callback.events)
    return runs, events


def end_of_run_summary(cfg: DictConfig, metrics: dict[str, Any], objects: dict[str, Any]) -> None:
    """Write ``<run>/metrics.md`` (every key) and print the run summary (:func:`beyondlabels.utils.print_run_summary`;
    ``full_table=true``: every key); whatever breaks it is a warning, never the run's failure."""
    try:
        runs, events = evaluation_runs(objects["callbacks"], objects["trainer"], cfg.paths.output_dir)
        full = cfg.get("full_table", False)
        print_run_summary(cfg.paths.output_dir, metrics, runs=runs, events=events, full_table=full)
    except Exception as exc:  # noqa: BLE001 - the trained model and its files stand
        log.warning("the run summary was not printed: %s: %s", type(exc).__name__, exc)


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    # one writer per run folder (shared with the Hydra callback that took it before Hydra wrote .hydra/)
    lock = RunFolderLock(cfg.paths.output_dir).acquire() if launched_as_rank_zero() else None
    try:
        metrics, objects = train(cfg)
        if objects["trainer"].is_global_zero:
            if cfg.get("report", True):
                write_run_report(cfg.paths.output_dir)
            close_wandb()  # W&B's closing lines come before the summary, and its offline log is whole
            end_of_run_summary(cfg, metrics, objects)
        if objects["trainer"].fast_dev_run:
            return None
        return metric_value(metrics, cfg.get("optimized_metric"))
    except BaseException:
        # a run that fails mid-fit still gets the report of the evaluations it made (rank 0; never hides the error)
        if (
            cfg.get("report", True)
            and getattr(pl.utilities.rank_zero_only, "rank", 0) == 0
            and Path(cfg.paths.output_dir).is_dir()
        ):
            report = write_run_report(cfg.paths.output_dir)
            if report is not None:
                log.error("training failed; the HTML report of the evaluations so far: %s", report)
        raise
    finally:
        close_wandb()
        if lock is not None:
            lock.release()


if __name__ == "__main__":
    main()
