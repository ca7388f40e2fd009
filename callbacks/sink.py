"""Where an evaluation callback's results go (internal to :mod:`beyondlabels.callbacks`): the scalars to the
loggers the way Lightning logs them, with the key-clash and monitor checks (:class:`ScalarSink`), and the history,
the evaluation files and the media on rank 0 (:class:`OutputSink`). Both serve one
:class:`~beyondlabels.callbacks.base.EvaluationCore`, whose options (``prefix``, ``strict``, ``prog_bar``, the files'
options) and schema they read as it is now (a family may complete its schema at ``setup``)."""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from beyondlabels.callbacks._sinks import media_sinks
from beyondlabels.callbacks.files import EvaluationFiles
from beyondlabels.callbacks.media import EvaluationMedia
from beyondlabels.callbacks.packages import is_lightning_instance, logging_step
from beyondlabels.callbacks.schedule import Occasion

log = logging.getLogger(__name__)

__all__ = ["EVAL_SECONDS", "OutputSink", "ScalarSink"]

# Logged with every evaluation: its wall time in seconds, files and media included (rank 0's, on every rank).
EVAL_SECONDS = "eval_seconds"
_CLASH_FIX = "rename your own key, or give this callback another prefix= (e.g. prefix='eval_retrieval')."
Trainer = Any
LightningModule = Any


def _scalar_tensor(value: float, device: torch.device) -> torch.Tensor:
    """``value`` as a 0-d float64 tensor on ``device`` (float32 on MPS, which has no float64): Lightning keeps a
    logged tensor's dtype, while a Python float would become float32 and lose digits in every logger."""
    return torch.tensor(value, dtype=torch.float32 if device.type == "mps" else torch.float64, device=device)


def _same_value(a: float, b: float) -> bool:
    """Whether a value read back from ``callback_metrics`` (a float64 or float32 tensor) is the float that was
    logged."""
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))


class ScalarSink:
    """The scalars of ``core``'s evaluations: through ``pl_module.log`` or straight to the loggers, and what
    Lightning kept of them (a key of ours also logged by someone else; a monitor in the wrong direction)."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.reset()

    def reset(self) -> None:
        """Forget what was logged and said (a new fit)."""
        self.logged: dict[str, float] = {}  # logged name -> the value this callback gave it last (key clashes)
        self.clashes: set[str] = set()  # logged names already reported as logged by someone else too
        self.pending: dict[str, float] | None = None  # logged through Lightning in the current loop
        self.monitored: str | None = None  # a key of ours that a ModelCheckpoint / EarlyStopping monitors
        self.monitors: list[str] = []  # the ModelCheckpoint / EarlyStopping of the trainer watching our keys

    def log(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        record: dict[str, Any],
        occasion: Occasion,
        extra: Mapping[str, float] | None = None,
    ) -> None:
        """The scalars of ``record`` under ``<prefix>/<namespace><key>`` and the ``extra`` ones (already named, the
        checkpoint selection's): through ``pl_module.log`` (Lightning's row of the loop, ``callback_metrics``, the
        progress bar) or straight to every logger at Lightning's logging step with the epoch, as Lightning's own
        callbacks log outside its loops."""
        name = f"{self.core.prefix}/{occasion.namespace}"
        scalars = {f"{name}{k}": float(record[k]) for k in self.core.schema.scalar_keys() if k in record}
        scalars.update(extra or {})
        bar = {f"{name}{k}" for k in self.core.prog_bar}
        self.check_clashes(trainer, scalars)
        if occasion.through_lightning:
            sync, device = trainer.world_size > 1, pl_module.device
            for key, value in scalars.items():
                # the value is the same on every rank: "max" over the ranks is that value exactly (a mean may round)
                pl_module.log(
                    key,
                    _scalar_tensor(value, device),
                    prog_bar=key in bar,
                    on_step=False,
                    on_epoch=True,
                    reduce_fx="max",
                    sync_dist=sync,
                    add_dataloader_idx=False,
                )
            self.pending = {**(self.pending or {}), **scalars}
        else:
            for logger in trainer.loggers:
                logger.log_metrics({**scalars, "epoch": occasion.epoch}, step=occasion.log_step)
            device = trainer.strategy.root_device
            trainer.callback_metrics.update({k: _scalar_tensor(v, device) for k, v in scalars.items()})
            for key in bar & set(scalars):
                trainer.progress_bar_metrics[key] = scalars[key]
        self.logged.update(scalars)

    def check_pending(self, trainer: Trainer) -> None:
        """At the end of a loop in which scalars went through ``pl_module.log``: check what Lightning kept of them."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self.check_clashes(trainer, pending)

    def check_clashes(self, trainer: Trainer, names: Iterable[str]) -> None:
        """Say (once per key and fit; ``strict``: raise on every rank) which of our logged ``names`` hold in
        ``trainer.callback_metrics`` (what ModelCheckpoint, EarlyStopping and sweepers read) a value this callback
        did not put there: a key of the same name logged by the module or another callback."""
        metrics = trainer.callback_metrics
        clashes = []
        for key in names:
            if key in self.clashes or key not in metrics:
                continue
            ours, theirs = self.logged.get(key), float(metrics[key])
            if ours is None or not _same_value(theirs, ours):
                clashes.append((key, ours, theirs))
        if self.core.strict and trainer.strategy.reduce_boolean_decision(bool(clashes), all=False):
            described = ", ".join(f"`{key}`" for key, _, _ in clashes) or "a key (on another rank)"
            raise ValueError(
                f"{described} of {type(self.core).__name__}(prefix={self.core.prefix!r}) is also logged by something "
                f"else; {_CLASH_FIX}"
            )
        for key, ours, theirs in clashes:
            self.clashes.add(key)
            given = "before this callback logged it" if ours is None else f"where this callback logged {ours:.6g}"
            log.warning(
                "%s: `%s` is also logged by something else (the LightningModule's self.log, another callback): "
                "trainer.callback_metrics, which ModelCheckpoint, EarlyStopping and sweepers read, holds %.6g %s. %s",
                self.core.prefix,
                key,
                theirs,
                given,
                _CLASH_FIX,
            )

    def check_monitors(self, trainer: Trainer) -> None:
        """A ModelCheckpoint / EarlyStopping monitoring one of our keys in the wrong direction keeps the worst model.
        The first such key with a direction is the default ``keep_best``."""
        self.monitored, self.monitors = None, []
        for cb in trainer.callbacks:
            watches = is_lightning_instance(cb, "ModelCheckpoint") or is_lightning_instance(cb, "EarlyStopping")
            if not watches or not getattr(cb, "monitor", None):
                continue
            monitor = cb.monitor
            if not monitor.startswith(f"{self.core.prefix}/"):
                continue
            wanted = self.core.schema.mode(monitor[len(self.core.prefix) + 1 :])
            self.monitors.append(f"{type(cb).__name__}(monitor={monitor!r})")
            if wanted is not None and self.monitored is None:
                self.monitored = monitor[len(self.core.prefix) + 1 :]
            if wanted is not None and cb.mode != wanted:
                message = (
                    f"{type(cb).__name__}(monitor={monitor!r}) uses mode={cb.mode!r} but {monitor} is better when "
                    f"{'higher' if wanted == 'max' else 'lower'}; set mode={wanted!r}."
                )
                if self.core.strict:
                    raise ValueError(message)
                log.warning(message)


class OutputSink:
    """The history, files and media of ``core``'s evaluations (files and media on rank 0), and how a failed
    evaluation is recorded; a failing logger stops neither the run nor the others."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.reset()

    def reset(self) -> None:
        """A new fit: W&B keys defined anew, logger failures counted afresh, no media yet."""
        self.wandb_defined: set[str] = set()
        self.failures: dict[tuple[str, int], int] = {}  # (logger kind, id) -> media failures in this fit
        self.errors: list[BaseException] = []  # this evaluation's logger failures (already reported)
        self.last_media: EvaluationMedia | None = None  # the last evaluation's media (the fit-end band joins them)

    def record(self, results: dict[str, Any], step: int, epoch: int) -> dict[str, Any]:
        record: dict[str, Any] = {"step": step, "epoch": epoch}
        for key in self.core.schema.scalar_keys():
            if key in results:
                value = float(results[key])
                if math.isinf(value):  # no metric value is infinite; the history's reader refuses one
                    log.warning(
                        "%s: %s is %s at step %d, recorded as NaN (undefined)", self.core.prefix, key, value, step
                    )
                    value = math.nan
                record[key] = int(value) if self.core.schema[key].count and math.isfinite(value) else value
        for key in self.core.schema.curve_keys():
            if key in results:
                # torchmetrics squeezes a one-element output to 0-d: a curve of length 1 arrives as a scalar
                record[key] = [float(v) for v in torch.atleast_1d(torch.as_tensor(results[key]))]
        return record

    def select(self, trainer: Trainer, step: int, results: Mapping[str, Any], occasion: Occasion) -> dict[str, float]:
        """The checkpoint selection after an evaluation of fit (every rank alike; ``selection.json`` on rank 0): its
        scalars, logged with the evaluation's: rank 0's on every rank (its ``seconds`` is a wall time, which differs
        between ranks; logged through ``pl_module.log`` with ``reduce_fx="max"``, another rank's larger value would
        stand in ``callback_metrics`` and read as a key clash). A failure is logged (strict: raised on every rank,
        which all fail alike: they compute the same from the same gathered values)."""
        if self.core.selection is None or occasion.one_off:
            return {}
        scalars: dict[str, float] = {}
        try:
            scalars = self.core.selection.observe(step, results.get("per_query"))
        except Exception as exc:
            if self.core.strict:
                raise
            log.error("%s: the checkpoint selection failed (%s: %s)", self.core.prefix, type(exc).__name__, exc)
        if scalars and trainer.is_global_zero and self.core.files is not None:
            self.core.files.attempt([], "selection.json", self.core.selection.write, self.core.files.folder)
        return dict(trainer.strategy.broadcast(scalars, src=0))

    def write_outputs(
        self,
        trainer: Trainer,
        results: dict[str, Any],
        record: dict[str, Any],
        timings: dict[str, float],
        occasion: Occasion,
    ) -> list[BaseException]:
        """Rank 0: this evaluation's files (:class:`EvaluationFiles`, the family's step files) and media. Each
        failure is collected, none stops the others."""
        problems: list[BaseException] = []
        mark = time.perf_counter()
        band_drawn = False
        try:
            files = self.ensure_files(trainer)
            if files is not None:
                drawn_before = files.plotted_evaluations
                # the family's files first: the retention policy then knows every kind of step file it removes
                files.attempt(
                    problems,
                    "this evaluation's pictures",
                    self.core.write_step_files,
                    trainer,
                    results,
                    int(record["step"]),
                    files,
                )
                problems += files.write_evaluation(record, results, self.core.history, final=occasion.final)
                band_drawn = files.plotted_evaluations != drawn_before and files.band_path.is_file()
        except Exception as exc:  # noqa: BLE001 - collected: rank 0 alone must never raise before the broadcast
            log.error("%s: writing the evaluation files failed (%s: %s)", self.core.prefix, type(exc).__name__, exc)
            problems.append(exc)
        timings["files"] = time.perf_counter() - mark
        mark = time.perf_counter()
        problems += self.publish_media(trainer, results, occasion, band_drawn)
        timings["media"] = time.perf_counter() - mark
        return problems

    def ensure_files(self, trainer: Trainer) -> EvaluationFiles | None:
        """The folder's writer (None without a folder), made at the first write of a fit and brought in line with the
        history so far (restored from a checkpoint, or empty)."""
        folder = self.core.output_folder(trainer)
        if self.core.files is None and folder is not None:
            self.core.files = EvaluationFiles(
                folder,
                self.core.schema,
                self.core.prefix,
                self.core.history,
                per_query=self.core.save_per_query,
                keep_every_n=self.core.keep_every_n,
                best=self.best_key(),
                plot_every_n=self.core.plot_every_n,
                band_keys=self.band_keys(),
            )
        return self.core.files

    def best_key(self) -> str | None:
        """The key whose best evaluation keeps its step files (see ``keep_best``)."""
        if self.core.keep_best is not None:
            return self.core.keep_best
        for key in (self.core.scalars.monitored, *self.core.prog_bar, *self.core.ci_keys):
            if key is not None and self.core.schema.mode(key) is not None:
                return key
        return None

    def band_keys(self) -> list[str]:
        """The keys of ``confidence_intervals.png``: progress-bar keys first, then every interval key."""
        if not self.core.ci_keys:
            return []
        return list(dict.fromkeys([*(k for k in self.core.prog_bar if k in self.core.ci_keys), *self.core.ci_keys]))

    def report_failure(self, error: BaseException, occasion: Occasion, trainer: Trainer) -> None:
        step = occasion.step
        if not occasion.one_off:
            self.core.history.append(
                {"step": step, "epoch": occasion.epoch, "error": f"{type(error).__name__}: {error}"}
            )
        if trainer.is_global_zero and not occasion.one_off:
            try:
                files = self.ensure_files(trainer)
                if files is not None:
                    files.write_history(self.core.history)  # a failed write logs its own error
            except Exception as exc:  # noqa: BLE001 - the evaluation's own error is the one to report
                log.error(
                    "%s: recording the failed evaluation on disk failed (%s: %s)",
                    self.core.prefix,
                    type(exc).__name__,
                    exc,
                )
        if self.core.strict:
            raise error
        watching = (
            f" {', '.join(self.core.scalars.monitors)} will find no value of this evaluation: the cause is this error, "
            "not a missing self.log."
            if self.core.scalars.monitors
            else ""
        )
        log.error(
            "%s evaluation at step %d failed and was skipped (training continues; strict=True makes this fatal).%s\n%s",
            self.core.prefix,
            step,
            watching,
            "".join(traceback.format_exception(error)),
        )

    def publish_media(
        self, trainer: Trainer, results: dict[str, Any], occasion: Occasion, band_drawn: bool
    ) -> list[BaseException]:
        """Rank 0: describe this evaluation's media (curves, ``confidence_intervals`` when it exists, the family's
        figures and tables), write the ``media/`` folder, send them to every logger (at the step they got the
        scalars). Failures are collected; what was described before one still goes out."""
        problems: list[BaseException] = []
        media = EvaluationMedia(self.core.prefix, occasion.step, occasion.epoch, log_step=occasion.log_step)
        try:
            for key in self.core.schema.curve_keys():
                curve = None if results.get(key) is None else torch.atleast_1d(torch.as_tensor(results[key]))
                if curve is not None and curve.numel() > 0:
                    media.curve(key, curve.tolist())
            if self.core.files is not None and self.core.files.band_path.is_file():
                media.figure(
                    "confidence_intervals",
                    self.core.files.band_path,
                    caption=self.band_caption(),
                    to_loggers=band_drawn,
                )
            self.core.describe_media(trainer, results, media)
        except Exception as exc:  # noqa: BLE001 - collected, decided by the caller
            log.error(
                "%s: describing the evaluation's media failed (%s: %s)", self.core.prefix, type(exc).__name__, exc
            )
            problems.append(exc)
        self.last_media = media
        folder = self.write_media_folder(trainer, media, problems)
        problems += self.send_media(trainer, media, folder)
        return problems

    def band_caption(self) -> str:
        return f"{self.core.prefix}: {', '.join(self.band_keys())} over the steps with 95% bootstrap intervals"

    def write_media_folder(
        self, trainer: Trainer, media: EvaluationMedia, problems: list[BaseException]
    ) -> Path | None:
        folder = self.core.media_folder(trainer)
        if self.core.files is None or folder is None:
            return None
        try:
            media.write(folder)
            return folder
        except Exception as exc:  # noqa: BLE001 - collected, decided by the caller
            log.error(
                "%s: writing the media folder %s failed (%s: %s)", self.core.prefix, folder, type(exc).__name__, exc
            )
            problems.append(exc)
            return None

    def send_media(self, trainer: Trainer, media: EvaluationMedia, folder: Path | None) -> list[BaseException]:
        """``media`` to every media-capable logger (:func:`~beyondlabels.callbacks._sinks.media_sinks`); one failing
        logger does not stop the others."""
        problems: list[BaseException] = []
        for sink in media_sinks(trainer, self.core.schema, self.wandb_defined):
            try:
                sink.log(media, folder)
            except Exception as exc:  # noqa: BLE001 - collected, decided by the caller
                names = [item.name for item in (*media.figures, *media.tables, *media.curves)]
                self.sink_failed(sink, f"the media of step {media.step} ({', '.join(names) or 'none'})", exc)
                problems.append(exc)
        return problems

    def sink_failed(self, sink: Any, what: str, exc: BaseException) -> None:
        """Log that ``sink`` could not take ``what``: with the traceback at its first failure in this fit, then one
        line with the count."""
        key = (sink.kind, id(sink.logger))
        count = self.failures[key] = self.failures.get(key, 0) + 1
        self.errors.append(exc)
        logger = f"{sink.kind} ({type(sink.logger).__name__})"
        if count == 1:
            log.error(
                "%s: logging %s to the %s logger failed (%s: %s); training goes on and the media folder on disk is "
                "not affected; later failures of this logger in this fit are logged in one line each:\n%s",
                self.core.prefix,
                what,
                logger,
                type(exc).__name__,
                exc,
                "".join(traceback.format_exception(exc)),
            )
        else:
            log.error(
                "%s: logging %s to the %s logger failed again (%s: %s); %d failures of this logger in this fit",
                self.core.prefix,
                what,
                logger,
                type(exc).__name__,
                exc,
                count,
            )

    def finish_media(self, trainer: Trainer) -> list[BaseException]:
        """At the end of fit: the last evaluation's ``media/`` folder to every logger that keeps files (once per fit,
        not at every evaluation)."""
        problems: list[BaseException] = []
        folder = self.core.media_folder(trainer)
        try:
            if folder is None or not folder.is_dir():
                return problems
        except OSError as exc:  # e.g. ENAMETOOLONG: the folder was never written; logged, fatal in strict mode only
            log.error(
                "%s: the media folder %s cannot be opened (%s: %s)", self.core.prefix, folder, type(exc).__name__, exc
            )
            return [exc]
        for sink in media_sinks(trainer, self.core.schema, self.wandb_defined):
            try:
                sink.finish(self.core.prefix, folder)
            except Exception as exc:  # noqa: BLE001 - collected, decided by the caller
                self.sink_failed(sink, "the media folder", exc)
                problems.append(exc)
        return problems

    def publish_band(self, trainer: Trainer) -> list[BaseException]:
        """After the fit-end redraw of ``confidence_intervals.png``: the picture to every logger, and into the last
        evaluation's ``media/`` folder."""
        problems: list[BaseException] = []
        if self.core.files is None or not self.core.files.band_path.is_file():
            return problems
        band = EvaluationMedia(
            self.core.prefix, trainer.global_step, trainer.current_epoch, log_step=logging_step(trainer, False)
        )
        band.figure("confidence_intervals", self.core.files.band_path, caption=self.band_caption())
        last = self.last_media
        if last is not None:
            names = [f.name for f in last.figures]
            if "confidence_intervals" in names:
                last.figures[names.index("confidence_intervals")] = band.figures[0]
            else:
                last.figures.insert(0, band.figures[0])
            self.write_media_folder(trainer, last, problems)
        return problems + self.send_media(trainer, band, None)

    def finish_plots(self, trainer: Trainer) -> None:
        """Draw the run's plots once more if they lack its last evaluations, then hand the media folder to the loggers
        that keep files (rank 0; ranks agree on a failure)."""
        problems: list[BaseException] = []
        if trainer.is_global_zero and self.core.files is not None:
            if self.core.files.plots_stale():
                try:
                    problems = self.core.files.draw_plots(self.core.history)
                    if not problems:
                        problems = self.publish_band(trainer)
                except Exception as exc:  # noqa: BLE001 - decided collectively below
                    log.error(
                        "%s: drawing the run's plots at fit end failed (%s: %s)",
                        self.core.prefix,
                        type(exc).__name__,
                        exc,
                    )
                    problems.append(exc)
            problems += self.finish_media(trainer)
        if trainer.strategy.broadcast(bool(problems), src=0) and self.core.strict:
            raise (
                problems[0]
                if problems
                else RuntimeError(f"{self.core.prefix}: drawing the run's plots failed on rank 0")
            )
