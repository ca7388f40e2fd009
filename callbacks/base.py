"""The base of every evaluation callback: schedule, evaluation loader, collective failure decision, history, files,
and logging the way Lightning logs. A family adds its metric and how to feed it a batch.

What a family implements (see :class:`~beyondlabels.callbacks.RetrievalEvalCallback` for a complete one):

- ``build_metric()`` → a :class:`~beyondlabels.metrics.PerSampleMetric` (its ``output_schema()`` drives logging).
  A family whose metric needs what only the trainer knows (class names of the datamodule, ...) overrides
  ``output_schema()`` (the keys it will log, known at construction) and builds the metric in ``setup``;
- ``feed(pl_module, batch)`` → encode one evaluation batch and call ``self.metric.update(...)`` with the ids from
  :meth:`EvaluationCore.take_ids` (the batch's own ids, or its positions / dataset indices);
- optionally ``on_evaluation_start`` / ``on_evaluation_end`` (per-evaluation caches), ``describe_media(trainer,
  results, media)`` (rank 0: the figures and tables of one evaluation, for every logger), ``write_step_files(trainer,
  results, step, files)`` (rank 0, pictures of one evaluation, kept under the retention policy), ``check_module`` and
  ``state_key_parts()``.

What the base gives a family: :meth:`EvaluationCore.unpack` (labelled batches as dicts or tuples, read with the
family's ``input_key`` / ``label_key`` / ``id_key``; every batch first goes through the user's ``batch_transform``),
:meth:`EvaluationCore.to_device` (the trainer's precision plugin's ``convert_input``, then Lightning's
``move_data_to_device``), :meth:`EvaluationCore.call_module` (a module method, by name or dotted path such as
``"model.encode_image"``, in the precision plugin's forward context, as Lightning runs a step; options naming one are
checked by :func:`check_method_paths` at construction and :meth:`EvaluationCore.check_methods` at setup),
:meth:`EvaluationCore.embed` and
:meth:`EvaluationCore.encode_texts` (call the module that way and check its ``[B, D]`` output; tokenise and embed
strings in batches), :meth:`EvaluationCore.take_ids` (on the
module's device), :meth:`EvaluationCore.thumbnail` / :meth:`EvaluationCore.item` (look a sample up by id in
``eval_dataset``) and :func:`check_names` (argument checks).

The base imports neither Lightning package: the hooks use only the trainer and module they receive, and each package
gets a thin subclass (:mod:`beyondlabels.callbacks.packages`).

What the base guarantees:

- **Schedule.** ``every_n_epochs=N``: at the end of the validation loops of epochs N-1, 2N-1, ... (zero-based), so it
  shares the trainer's validation cadence (a cadence that meets ``check_val_every_n_epoch`` more rarely than either
  asks is said at setup); a module without a validation loop (Lightning's own answer, ``Trainer.enable_validation``:
  also a ``torch.compile``-d module without ``validation_step``, or ``limit_val_batches=0``) is evaluated at the end
  of the training epoch instead (said once in the log). ``every_n_steps=M``: after every M-th optimiser step. Sanity
  checks are skipped. ``evaluate_at_fit_end=True`` adds one evaluation when fit ends after the last one, so every
  run ends with numbers whatever ``max_epochs`` and the cadence are. ``trainer.validate()`` evaluates once (keys
  ``<prefix>/<key>``), ``trainer.test()`` once on ``test_dataloader`` (keys ``<prefix>/test/<key>``): both are
  returned by the call and kept out of the history and the files.
- **Logged as Lightning logs.** An evaluation at the end of a validation loop (or of a training epoch, without one)
  logs its scalars with ``pl_module.log``: they join the user's row of that loop in every logger (one CSV row, with
  the user's ``step`` and ``epoch``), ``trainer.callback_metrics`` (ModelCheckpoint, EarlyStopping and sweepers
  monitor them), ``validate()``'s return value and, for ``prog_bar`` keys, the progress bar. An evaluation after an
  optimiser step (``every_n_steps``) or at fit end goes to every logger directly, at Lightning's logging step (that of
  the last training batch, :func:`~beyondlabels.callbacks.packages.logging_step`) with the epoch, never throttled by
  ``log_every_n_steps``, and into ``callback_metrics`` and the progress bar on every rank. The media go to the loggers
  at the same step as the scalars. ``history.jsonl``, the per-query files and the media's captions name an
  evaluation by ``trainer.global_step`` (as ModelCheckpoint names its files): one more than the logging step. A key
  of ours that the module or another callback also logs is said once (``strict``: raised), since
  ``callback_metrics`` then holds only one of the two. ``<prefix>/eval_seconds`` is the evaluation's wall time,
  files and media included (rank 0's, on every rank); :attr:`EvaluationCore.last_timings` splits it into forward,
  compute, intervals, files and media.
- **Loader.** The evaluation loader is a datamodule or module method name (``"val_dataloader"`` defined by neither:
  the validation loaders given to ``fit`` / ``validate``; none anywhere is refused at setup), a DataLoader, or a
  callable; of several (a list or dict, as Lightning's several validation loaders) ``dataloader_idx`` chooses one,
  said once. At most ``limit_batches`` batches, else as many as the trainer's ``limit_val_batches`` allows (said once
  when it cuts; ``fast_dev_run`` sets it). Batches reach the module as they reach its steps: floating-point tensors
  converted by the trainer's precision plugin (``convert_input``), on its device, and the module's calls run in the
  plugin's forward context (:meth:`EvaluationCore.module_context`), so every ``precision=`` works. Under DDP the
  loader is rebuilt with a ``DistributedSampler`` (no shuffling) that keeps the user's ``collate_fn``,
  ``num_workers``, ``pin_memory``, ``worker_init_fn``, ``persistent_workers``, ``timeout``, ``prefetch_factor``,
  ``multiprocessing_context``, ``generator`` and batch size (also a ``batch_sampler``'s). The metric drops the copies
  the sampler adds, by id.
- **No side effects on training.** Evaluation runs in eval mode without gradients and restores the torch random
  state, so the training that follows is the same with or without the callback.
- **Failures.** An evaluation that raises on any rank is skipped on every rank (ranks agree through
  ``trainer.strategy`` before any collective), recorded in the history and logged as an error; training goes on.
  With ``strict=True`` it raises on *every* rank — also for errors writing files or media on rank 0.
- **Files** (rank 0, beside any logger; none under ``fast_dev_run``), under ``save_dir`` (default
  ``<default_root_dir>/<prefix>``), at a cost
  that does not grow with the run (:class:`~beyondlabels.callbacks.files.EvaluationFiles`): ``history.jsonl`` (one
  record per evaluation, appended), ``schema.json`` (kind and direction of every key), ``per_query/step_<step>.npz``
  (the per-query values: the input of confidence intervals and paired tests; compressed, kept for the latest, the
  best, and every ``keep_every_n``-th evaluation), one PNG per curve key (at most 8 evaluations' curves) and
  ``confidence_intervals.png`` (the headline keys over the steps with their bootstrap bands; also a media figure),
  both redrawn every ``plot_every_n`` evaluations and at the end of fit; ``media/`` (the last evaluation's
  figures, tables and curves: ``media.json`` and the PNGs it names, :mod:`beyondlabels.io.media_files`). Every
  write is atomic; a failed one (a full disk) is logged, damages nothing on disk and is retried at the next
  evaluation; training goes on.
- **Media** (rank 0): the curves, ``confidence_intervals`` and what the family's ``describe_media`` adds go to
  every W&B, TensorBoard and MLflow logger of the trainer at the evaluation's step
  (:mod:`beyondlabels.callbacks._sinks`); other loggers get the scalars only; at the end of fit the ``media/``
  folder goes once to the loggers that keep files (MLflow). A failing logger stops neither the run nor the others:
  its first failure in a fit is logged with the traceback, each later one in one line with the count (strict mode
  raises).
- **Resume.** ``state_dict`` holds the history and the last evaluated step; ``load_state_dict`` ignores malformed
  entries with a warning. The first write after a resume makes ``history.jsonl`` hold exactly the restored history
  (evaluations the killed run made after its checkpoint are dropped; they are made again).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.utilities.apply_func import move_data_to_device
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from beyondlabels._internal.checks import check_int, check_optional_positive_int, check_positive_int, check_text
from beyondlabels.callbacks._folder_lock import close_files, hold_folder, release_folder
from beyondlabels.callbacks._module_paths import check_method_path, resolve_method
from beyondlabels.callbacks._sinks import media_sinks
from beyondlabels.callbacks.files import EvaluationFiles
from beyondlabels.callbacks.media import EvaluationMedia, dataset_item, thumbnail
from beyondlabels.callbacks.packages import (
    check_same_package,
    is_lightning_instance,
    lightning_package,
    lightning_state_key,
    logging_step,
    overrides,
    runs_validation,
    trainer_stage,
)
from beyondlabels.io.paths import check_name
from beyondlabels.metrics.base import PerSampleMetric
from beyondlabels.metrics.intervals import add_confidence_intervals, confidence_interval_keys, with_confidence_intervals
from beyondlabels.schema import KeySpec, OutputSchema

log = logging.getLogger(__name__)

__all__ = [
    "EVAL_SECONDS",
    "EvaluationCore",
    "Trainer",
    "LightningModule",
    "check_method_paths",
    "check_names",
    "shard_loader",
]

# Logged with every evaluation: its wall time in seconds, files and media included (rank 0's, on every rank).
EVAL_SECONDS = "eval_seconds"
# The trainer's own loaders for the standard loader method names, used when neither the datamodule nor the module
# defines the method (loaders given to fit / validate / test directly).
TRAINER_LOADERS = {"val_dataloader": "val_dataloaders", "test_dataloader": "test_dataloaders"}

# The hooks receive a Trainer and a LightningModule of whichever Lightning package the user's run is built on
# (beyondlabels.callbacks.packages); the cores use only what both packages' objects share.
Trainer = Any
LightningModule = Any


def check_names(**values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a non-empty string (a batch key, a name).
    A name given as ``None`` is allowed only for arguments listed in ``optional=(...)``."""
    optional = values.pop("optional", ())
    for name, value in values.items():
        check_text(value, name, optional=name in optional)


def check_method_paths(**values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a module method's name or dotted path
    (``"encode_image"``, ``"model.encode_image"``, ``"clip.visual"``; checked on the module at setup by
    :meth:`EvaluationCore.check_methods`). ``None`` is allowed only for arguments listed in ``optional=(...)``."""
    optional = values.pop("optional", ())
    for name, value in values.items():
        check_method_path(value, name, optional=name in optional)


def _check_batch_transform(batch_transform: Any) -> None:
    if batch_transform is None or callable(batch_transform):
        return
    if not isinstance(batch_transform, str):
        raise ValueError(
            "`batch_transform` must be a callable (batch -> batch; in Hydra a `_target_` with `_partial_: true`), the "
            f"name or dotted path of a LightningModule method, or None, got {batch_transform!r}."
        )
    check_method_path(batch_transform, "batch_transform")


def _check_evaluation_options(
    every_n_epochs: int | None,
    every_n_steps: int | None,
    prefix: str,
    limit_batches: int | None,
    prog_bar: Sequence[str],
    save_dir: Any,
    save_per_query: Any,
    keep_every_n: int,
    plot_every_n: int,
    bootstrap_rounds: int,
    ci_seed: int,
) -> int | None:
    """Check the schedule, file and interval options of :class:`EvaluationCore`; ``every_n_epochs`` as used (1 when
    neither schedule is set)."""
    check_optional_positive_int(bootstrap_rounds, "bootstrap_rounds")
    check_int(ci_seed, "ci_seed")
    if every_n_epochs is not None and every_n_steps is not None:
        raise ValueError(
            f"set at most one of every_n_epochs and every_n_steps (got every_n_epochs={every_n_epochs!r}, "
            f"every_n_steps={every_n_steps!r}); set the other to None."
        )
    if every_n_epochs is None and every_n_steps is None:
        every_n_epochs = 1
    check_optional_positive_int(every_n_epochs, "every_n_epochs")
    check_optional_positive_int(every_n_steps, "every_n_steps")
    check_optional_positive_int(limit_batches, "limit_batches")
    check_name(prefix, "prefix")  # it names the default file folder <default_root_dir>/<prefix>
    if isinstance(prog_bar, str) or not all(isinstance(k, str) for k in prog_bar):
        raise ValueError(f"`prog_bar` must be a list of metric names, got {prog_bar!r}.")
    if save_dir is True:
        raise ValueError("`save_dir` must be a folder, None (the default folder) or False (no files), not True.")
    if save_per_query not in (True, False, "all"):
        raise ValueError(
            f"`save_per_query` must be True (the retained evaluations), 'all' or False, got {save_per_query!r}."
        )
    check_positive_int(keep_every_n, "keep_every_n")
    check_positive_int(plot_every_n, "plot_every_n")
    return every_n_epochs


def _check_loader_options(dataloader: Any, dataloader_idx: Any, test_dataloader: Any) -> None:
    for name, source in (("dataloader", dataloader), ("test_dataloader", test_dataloader)):
        if source is None and name == "test_dataloader":
            continue
        if isinstance(source, str) and not source or not (isinstance(source, (str, DataLoader)) or callable(source)):
            raise ValueError(
                f"`{name}` must be the name of a datamodule or module method, a DataLoader or a zero-argument callable "
                f"returning one{' (or None)' if name == 'test_dataloader' else ''}, got {source!r}."
            )
    if isinstance(dataloader_idx, bool) or not (
        isinstance(dataloader_idx, int) and dataloader_idx >= 0 or isinstance(dataloader_idx, str) and dataloader_idx
    ):
        raise ValueError(
            f"`dataloader_idx` must be an int >= 0 (a position) or a loader's name, got {dataloader_idx!r}."
        )


_CLASH_FIX = "rename your own key, or give this callback another prefix= (e.g. prefix='eval_retrieval')."


def _scalar_tensor(value: float, device: torch.device) -> torch.Tensor:
    """``value`` as a 0-d float64 tensor on ``device`` (float32 on MPS, which has no float64): Lightning keeps a
    logged tensor's dtype, while a Python float would become float32 and lose digits in every logger."""
    return torch.tensor(value, dtype=torch.float32 if device.type == "mps" else torch.float64, device=device)


def _same_value(a: float, b: float) -> bool:
    """Whether a value read back from ``callback_metrics`` (a float64 or float32 tensor) is the float that was
    logged."""
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))


def _check_selection(selection: Any, schema: OutputSchema) -> Any:
    """``selection`` when it is None or a checkpoint selection over a per-query key of ``schema`` with a direction."""
    if selection is None:
        return None
    if not all(callable(getattr(selection, name, None)) for name in ("bind", "observe", "state_dict")):
        raise ValueError(
            f"`selection` must be a beyondlabels.callbacks.selection.CheckpointSelection or None, got {selection!r}."
        )
    key = getattr(selection, "key", None)
    if key not in schema.per_query or schema.mode(key) is None:
        keys = [k for k in schema.per_query if schema.mode(k) is not None]
        raise ValueError(
            f"`selection` selects by {key!r}, which is not a per-query key with a direction; choose from {keys}."
        )
    return selection


@dataclass(frozen=True)
class _Occasion:
    """When and how one evaluation runs (set by the hook that calls it)."""

    stage: str  # what the trainer runs: "fit", "validate", "test" (``trainer.state.fn``)
    step: int  # trainer.global_step: names the evaluation in the history, the files and the media
    epoch: int
    log_step: int  # the step the loggers get (Lightning's logging step)
    through_lightning: bool  # scalars through pl_module.log
    final: bool  # the evaluation at the end of fit

    @property
    def one_off(self) -> bool:
        """An evaluation outside fit (validate, test): logged and returned, kept out of the history and files."""
        return self.stage != "fit"

    @property
    def namespace(self) -> str:
        """What comes between ``<prefix>/`` and a key: nothing in fit and validate, the stage otherwise."""
        return "" if self.stage in ("fit", "validate") else f"{self.stage}/"


class EvaluationCore:
    """Base class of periodic evaluation callbacks (behaviour: the module docstring), importing neither Lightning
    package: a Trainer gets it as ``EvaluationCallback`` of :mod:`beyondlabels.callbacks` (``pytorch_lightning``) or
    of :mod:`beyondlabels.callbacks.lightning` (``lightning.pytorch``), which add the package's ``Callback`` base.

    Args:
        every_n_epochs: Evaluate on every N-th validation epoch.
        every_n_steps: Evaluate every N optimiser steps instead. Set at most one of the two; with neither, every
            validation epoch is evaluated.
        dataloader: Name of a datamodule (or LightningModule) method returning the evaluation loader, a ``DataLoader``,
            or a zero-argument callable returning one. ``"val_dataloader"`` defined by neither the datamodule nor the
            module means the validation loaders given to ``fit`` / ``validate``.
        dataloader_idx: Which loader to evaluate when ``dataloader`` gives several (a list, or a dict of named
            loaders, as Lightning's several validation loaders): a position, or a name of a dict (said once).
        test_dataloader: The loader ``trainer.test()`` evaluates (same forms as ``dataloader``; the default,
            defined by neither, means the loaders given to ``test``), logged as ``<prefix>/test/<key>``; None: not
            evaluated under ``test()``.
        prefix: Namespace of the logged keys (``<prefix>/<key>``) and the default file folder: one file name
            (:func:`beyondlabels.io.paths.check_name`: not ``.`` or ``..``, no ``/``, at most 255 bytes).
        limit_batches: Evaluate on at most this many batches (None: as many as the trainer's ``limit_val_batches``,
            or ``limit_test_batches`` under ``test()``, allows; all by default).
        prog_bar: Keys (un-prefixed, e.g. ``["precision@1"]``) also shown in the progress bar.
        save_dir: Folder of the evaluation files; None means ``<trainer.default_root_dir>/<prefix>``, False writes none.
        save_per_query: Write ``per_query/step_<step>.npz``: True for the evaluations the retention policy keeps
            (``keep_every_n``, ``keep_best``), ``"all"`` for every evaluation, False for none.
        keep_every_n: Step files (per-query values and the pictures a family draws per evaluation) are kept for the
            latest evaluation, the best by ``keep_best``, and every ``keep_every_n``-th evaluation (the 1st, the
            ``keep_every_n + 1``-th, ...); the others are removed when they fall out of that set.
        keep_best: The key whose best evaluation keeps its step files; None picks the key a ``ModelCheckpoint`` or
            ``EarlyStopping`` of the trainer monitors under this prefix, else the first ``prog_bar`` key with a
            direction, else the first headline key.
        plot_every_n: Redraw the plots of the whole run (one PNG per curve key, ``confidence_intervals.png``) every
            N evaluations and at the end of fit; each draws at most 8 curves (evenly spaced evaluations, the latest
            among them) and 500 points per line, so its cost does not grow with the run.
        evaluate_at_fit_end: Evaluate once more when fit ends after the last evaluation.
        strict: Raise (on every rank) instead of logging evaluation errors.
        confidence_intervals: Log ``<key>_ci_low`` / ``<key>_ci_high``, a 95% percentile bootstrap interval over
            queries (:func:`beyondlabels.metrics.intervals.confidence_intervals`), for every headline key (True: each
            scalar with a direction and a per-query vector of the same name), for the listed keys, or for none
            (False). They are logged, stored in the history and drawn as bands in ``confidence_intervals.png``.
        bootstrap_rounds: Resamples of those intervals.
        ci_seed: Seed of those intervals (the same on every rank).
        batch_transform: Turns each evaluation batch, as the loader yields it, into the batch the family reads
            (before the precision plugin's conversion, the move to the module's device and the family's reading of
            its keys), on every rank: a callable ``batch -> batch`` (in Hydra a ``_target_`` with ``_partial_:
            true``), or the name or dotted path of a LightningModule method called with the batch (checked at
            setup). None: batches as they come. Not saved in checkpoints (a lambda is fine).
        selection: A :class:`~beyondlabels.callbacks.selection.CheckpointSelection` kept current after every
            evaluation in fit: the checkpoints as good as the best (a model confidence set over the evaluations), the
            best one's selection-corrected value, what got worse since it; logged with the evaluation's scalars under
            its prefix, written to ``selection.json`` (None: off).
    """

    def __init__(
        self,
        *,
        every_n_epochs: int | None = None,
        every_n_steps: int | None = None,
        dataloader: str | DataLoader | Callable[[], DataLoader] = "val_dataloader",
        dataloader_idx: int | str = 0,
        test_dataloader: str | DataLoader | Callable[[], DataLoader] | None = "test_dataloader",
        prefix: str = "eval",
        limit_batches: int | None = None,
        prog_bar: Sequence[str] = (),
        save_dir: str | Path | None | bool = None,
        save_per_query: bool | str = True,
        keep_every_n: int = 10,
        keep_best: str | None = None,
        plot_every_n: int = 10,
        evaluate_at_fit_end: bool = True,
        strict: bool = False,
        confidence_intervals: bool | Sequence[str] = True,
        bootstrap_rounds: int = 2000,
        ci_seed: int = 11,
        batch_transform: Callable[[Any], Any] | str | None = None,
        selection: Any = None,
    ) -> None:
        super().__init__()
        every_n_epochs = _check_evaluation_options(
            every_n_epochs,
            every_n_steps,
            prefix,
            limit_batches,
            prog_bar,
            save_dir,
            save_per_query,
            keep_every_n,
            plot_every_n,
            bootstrap_rounds,
            ci_seed,
        )
        _check_loader_options(dataloader, dataloader_idx, test_dataloader)
        _check_batch_transform(batch_transform)
        self.batch_transform = batch_transform
        self.every_n_epochs = every_n_epochs
        self.every_n_steps = every_n_steps
        self.dataloader = dataloader
        self.dataloader_idx = dataloader_idx
        self.test_dataloader = test_dataloader
        self.prefix = prefix
        self.limit_batches = limit_batches
        self.prog_bar = tuple(prog_bar)
        self.save_dir = save_dir
        self.save_per_query = save_per_query
        self.keep_every_n, self.keep_best, self.plot_every_n = keep_every_n, keep_best, plot_every_n
        self.evaluate_at_fit_end = bool(evaluate_at_fit_end)
        self.strict = bool(strict)
        self.metric: PerSampleMetric | None = None
        self.schema: OutputSchema = self.output_schema()
        self.ci_keys = confidence_interval_keys(
            self.schema, True if confidence_intervals is None else confidence_intervals
        )
        self.schema = with_confidence_intervals(self.schema, self.ci_keys).merged(
            OutputSchema({EVAL_SECONDS: KeySpec("scalar", None)})
        )
        self.bootstrap_rounds, self.ci_seed = int(bootstrap_rounds or 2000), ci_seed
        unknown = [k for k in self.prog_bar if k not in self.schema.scalar_keys()]
        if unknown:
            raise ValueError(
                f"`prog_bar` names {unknown}, which this evaluation does not log; choose from "
                f"{self.schema.scalar_keys()}."
            )
        self.selection = _check_selection(selection, self.schema)
        if keep_best is not None and self.schema.mode(keep_best) is None:
            with_direction = [k for k in self.schema.scalar_keys() if self.schema.mode(k)]
            raise ValueError(
                f"`keep_best` must be a key with a direction that this evaluation logs, got {keep_best!r}; choose from "
                f"{with_direction}."
            )
        self._init_run_state()

    def _init_run_state(self) -> None:
        """The state an evaluation run fills in (history, the last evaluation, what the fit has said and logged)."""
        self.history: list[dict[str, Any]] = []
        self.last_per_query: tuple[int, Any] | None = None  # (step, the per_query dict) of the last evaluation
        self._last_step_evaluated = -1
        self._wandb_defined: set[str] = set()
        self._sink_failures: dict[tuple[str, int], int] = {}  # (logger kind, id) -> media failures in this fit
        self._sink_errors: list[BaseException] = []  # this evaluation's logger failures (already reported)
        self._train_epoch_fallback = False
        self.eval_dataset: Any = None  # the dataset of the current (or last) evaluation: thumbnails, captions
        self.eval_trainer: Trainer | None = None  # the trainer during an evaluation (feed() gets only the module)
        self._device = torch.device("cpu")  # the module's, during an evaluation: where take_ids puts the ids
        self._monitored: str | None = None  # a key of ours that a ModelCheckpoint / EarlyStopping monitors
        self._monitors: list[str] = []  # the ModelCheckpoint / EarlyStopping of the trainer watching our keys
        self._said: set[str] = set()  # what was said once in this fit (loader choice, batch limits)
        self._logged: dict[str, float] = {}  # logged name -> the value this callback gave it last (key clashes)
        self._clashes: set[str] = set()  # logged names already reported as logged by someone else too
        self._pending: dict[str, float] | None = (
            None  # logged through Lightning in the current loop, checked at its end
        )
        self._how: tuple[bool, bool] | None = None  # (through_lightning, in_batch) of the hook evaluating now
        self.files: EvaluationFiles | None = None  # the folder's writer, made at the first evaluation of a fit
        self._last_media: EvaluationMedia | None = None  # the last evaluation's media (the fit-end band joins them)
        self.last_timings: dict[str, float] = {}

    # ---- what a family provides ---------------------------------------------------------------------------------
    def build_metric(self) -> PerSampleMetric:
        raise NotImplementedError

    def output_schema(self) -> OutputSchema:
        """The metric's keys, known at construction. By default the metric is built now and asked; a family whose
        metric is built at ``setup`` returns the schema without it."""
        self.metric = self.build_metric()
        return self.metric.output_schema()

    def after_compute(self, results: dict[str, Any]) -> dict[str, Any]:
        """The metric's results of this evaluation, completed with what needs the callback's own state across
        evaluations (the metric's ``compute()`` depends on its states alone); called on every rank with the same
        results. By default, ``results`` unchanged."""
        return results

    def on_evaluation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Called on every rank before an evaluation feeds its first batch (an error here fails the evaluation)."""

    def on_evaluation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Called on every rank after an evaluation, also a failed one (per-evaluation caches are dropped here)."""

    def feed(self, pl_module: LightningModule, batch: Any) -> None:
        """Encode one evaluation batch and update ``self.metric``."""
        raise NotImplementedError

    def describe_media(self, trainer: Trainer, results: dict[str, Any], media: EvaluationMedia) -> None:
        """Rank 0: add the family's figures and tables of this evaluation to ``media`` (``media.figure(...)``,
        ``media.table(...)``); the base adds the curves and ``confidence_intervals``, writes the ``media/`` folder
        and sends the media to every logger."""

    def write_step_files(self, trainer: Trainer, results: dict[str, Any], step: int, files: EvaluationFiles) -> None:
        """Family-specific files of one evaluation on rank 0 (e.g. a picture of its samples), each written to
        ``files.step_path(kind, step, suffix)`` so that the retention policy keeps and removes it with the step's
        per-query file."""

    @classmethod
    def examples(cls) -> list[dict[str, Any]]:
        """Keyword arguments of small instances of the family's callback, built without a Trainer: the first plain,
        each other differing from it in one part of the checkpoint state key (:meth:`state_key_parts`). Every
        family's core defines them; the contract tests over the families of :mod:`beyondlabels.families` build
        them (state keys under both Lightning packages, default prefixes), so a new family is checked the moment it
        is registered."""
        raise NotImplementedError(f"{cls.__name__} defines no examples(): a family's core lists small instances")

    def state_key_parts(self) -> dict[str, Any]:
        """What distinguishes two instances of the family besides the prefix (e.g. the encode method)."""
        return {}

    def check_module(self, pl_module: LightningModule) -> None:
        """Raise at setup when the module lacks what :meth:`feed` calls (a family lists its method options with
        :meth:`check_methods`)."""

    def check_methods(self, pl_module: LightningModule, **roles: str) -> None:
        """Raise an ``AttributeError`` when an option of this callback that names a module method (``option=role``,
        the role saying what the method does, e.g. ``encode_method="returns embeddings [B, D]"``) names nothing
        callable on ``pl_module``: the message names the option, the missing part of the path and what to set. An
        option set to None is skipped."""
        for option, role in roles.items():
            path = getattr(self, option)
            if path is not None:
                resolve_method(pl_module, path, option, type(self).__name__, role)

    # ---- Lightning plumbing ----------------------------------------------------------------------------------------
    callback_name = "EvaluationCallback"  # the name a Trainer gets it under (in error messages)

    @property
    def state_key(self) -> str:
        return lightning_state_key(self, prefix=self.prefix, **self.state_key_parts())

    def state_dict(self) -> dict[str, Any]:
        state = {"history": list(self.history), "last_step_evaluated": self._last_step_evaluated}
        if self.selection is not None:
            state["selection"] = self.selection.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        history = state_dict.get("history", [])
        valid = lambda h: isinstance(h, dict) and isinstance(h.get("step"), int) and not isinstance(h["step"], bool)  # noqa: E731
        if isinstance(history, list) and all(valid(h) for h in history):
            self.history = list(history)
        else:
            log.warning(
                "%s: ignoring a checkpointed history of unexpected type %s", self.state_key, type(history).__name__
            )
        last = state_dict.get("last_step_evaluated", -1)
        self._last_step_evaluated = last if isinstance(last, int) and not isinstance(last, bool) else -1
        close_files(self)  # the folder is brought in line with the restored history at the next evaluation
        if self.selection is not None and "selection" in state_dict:
            self.selection.load_state_dict(state_dict["selection"])

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        check_same_package(self, trainer)
        self._wandb_defined = set()  # a new fit may log to a new W&B run
        self._sink_failures = {}
        release_folder(self)  # a new fit starts its files afresh (the history file is rewritten once, then appended)
        self._last_media = None
        self._said, self._logged, self._clashes, self._pending = set(), {}, set(), None
        self.check_module(pl_module)
        if isinstance(self.batch_transform, str):
            self.check_methods(pl_module, batch_transform="turns an evaluation batch into the batch this family reads")
        if self.selection is not None:
            every = 1 if self.save_per_query == "all" else self.keep_every_n
            self.selection.bind(self.schema.mode(self.selection.key), every, self.prefix)
        self._check_monitors(trainer)
        self._train_epoch_fallback = False
        if stage != "fit":
            return
        self._check_loader_source(trainer, pl_module)
        hold_folder(self, trainer)  # one writer per folder
        if getattr(trainer, "fast_dev_run", False) and self.save_dir is not False:
            log.info(
                "%s: fast_dev_run: evaluating as usual but writing no files (as Lightning writes none)", self.prefix
            )
        if self.every_n_epochs is None:
            return
        if not runs_validation(trainer, pl_module):
            self._train_epoch_fallback = True
            log.info(
                "%s: %s has no validation loop, so evaluations run at the end of every %d training epoch(s) instead",
                self.prefix,
                type(pl_module).__name__,
                self.every_n_epochs,
            )
        else:
            self._check_cadence(trainer)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            release_folder(self)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        release_folder(self)

    def _check_cadence(self, trainer: Trainer) -> None:
        """Warn when ``every_n_epochs`` and the trainer's ``check_val_every_n_epoch`` meet more rarely than either
        asks (neither divides the other): evaluations run only at the end of validation loops."""
        n, every = self.every_n_epochs, getattr(trainer, "check_val_every_n_epoch", None)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            return
        period = math.lcm(n, every)
        if period <= max(n, every):
            return
        max_epochs = getattr(trainer, "max_epochs", None)
        never = isinstance(max_epochs, int) and 0 < max_epochs < period
        log.warning(
            "%s: every_n_epochs=%d evaluates at the end of the validation loops of every %d-th epoch, and "
            "check_val_every_n_epoch=%d runs one every %d epochs: they meet every %d epochs (first after epoch %d)%s. "
            "Set every_n_epochs to a multiple or a divisor of %d, or evaluate every_n_steps.",
            self.prefix,
            n,
            n,
            every,
            every,
            period,
            period,
            f", so with max_epochs={max_epochs} no evaluation runs during training"
            + (" (only the one at fit end)" if self.evaluate_at_fit_end else "")
            if never
            else "",
            every,
        )

    def _check_monitors(self, trainer: Trainer) -> None:
        """A ModelCheckpoint / EarlyStopping monitoring one of our keys in the wrong direction keeps the worst model.
        The first such key with a direction is the default ``keep_best``."""
        self._monitored, self._monitors = None, []
        for cb in trainer.callbacks:
            watches = is_lightning_instance(cb, "ModelCheckpoint") or is_lightning_instance(cb, "EarlyStopping")
            if not watches or not getattr(cb, "monitor", None):
                continue
            monitor = cb.monitor
            if not monitor.startswith(f"{self.prefix}/"):
                continue
            wanted = self.schema.mode(monitor[len(self.prefix) + 1 :])
            self._monitors.append(f"{type(cb).__name__}(monitor={monitor!r})")
            if wanted is not None and self._monitored is None:
                self._monitored = monitor[len(self.prefix) + 1 :]
            if wanted is not None and cb.mode != wanted:
                message = (
                    f"{type(cb).__name__}(monitor={monitor!r}) uses mode={cb.mode!r} but {monitor} is better when "
                    f"{'higher' if wanted == 'max' else 'lower'}; set mode={wanted!r}."
                )
                if self.strict:
                    raise ValueError(message)
                log.warning(message)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        stage = trainer_stage(trainer)
        if stage == "validate":  # trainer.validate(): one evaluation now, returned by validate()
            self._evaluate_in_hook(trainer, pl_module, through_lightning=True)
            return
        if self.every_n_epochs is None or self._train_epoch_fallback or stage != "fit":
            return
        if (trainer.current_epoch + 1) % self.every_n_epochs == 0 or trainer.fast_dev_run:
            self._evaluate_in_hook(trainer, pl_module, through_lightning=True, in_batch=True)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._check_pending(trainer)

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.test_dataloader is not None:
            self._evaluate_in_hook(trainer, pl_module, through_lightning=True)

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._check_pending(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._train_epoch_fallback and (
            (trainer.current_epoch + 1) % self.every_n_epochs == 0 or trainer.fast_dev_run
        ):
            self._evaluate_in_hook(trainer, pl_module, through_lightning=True)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.every_n_steps is None:
            return
        step = trainer.global_step
        if step > 0 and step % self.every_n_steps == 0 and step != self._last_step_evaluated:
            self._evaluate_in_hook(trainer, pl_module, in_batch=True)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._check_pending(trainer)  # what the previous training epoch's end kept of our scalars

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._check_pending(trainer)
        if self.evaluate_at_fit_end and not trainer.interrupted and trainer.global_step != self._last_step_evaluated:
            self.evaluate(trainer, pl_module, final=True)
        self._finish_plots(trainer)
        if self.selection is not None:  # which of the saved checkpoints are in the set (said and written on rank 0)
            folder = self.files.folder if trainer.is_global_zero and self.files is not None else None
            try:
                self.selection.finish(trainer, folder)
            except Exception as exc:  # noqa: BLE001 - the trained model and its files stand
                log.error(
                    "%s: matching the saved checkpoints to the set failed (%s: %s)",
                    self.prefix,
                    type(exc).__name__,
                    exc,
                )

    def _finish_plots(self, trainer: Trainer) -> None:
        """Draw the run's plots once more if they lack its last evaluations, then hand the media folder to the loggers
        that keep files (rank 0; ranks agree on a failure)."""
        problems: list[BaseException] = []
        if trainer.is_global_zero and self.files is not None:
            if self.files.plots_stale():
                try:
                    problems = self.files.draw_plots(self.history)
                    if not problems:
                        problems = self._publish_band(trainer)
                except Exception as exc:  # noqa: BLE001 - decided collectively below
                    log.error(
                        "%s: drawing the run's plots at fit end failed (%s: %s)", self.prefix, type(exc).__name__, exc
                    )
                    problems.append(exc)
            problems += self._finish_media(trainer)
        if trainer.strategy.broadcast(bool(problems), src=0) and self.strict:
            raise problems[0] if problems else RuntimeError(f"{self.prefix}: drawing the run's plots failed on rank 0")

    # ---- one evaluation ----------------------------------------------------------------------------------------------
    def _evaluate_in_hook(
        self, trainer: Trainer, pl_module: LightningModule, *, through_lightning: bool = False, in_batch: bool = False
    ) -> None:
        """:meth:`evaluate` from a hook, which says how its scalars are logged: ``through_lightning`` with
        ``pl_module.log`` (only from hooks in which Lightning allows ``self.log(on_epoch=True)``); ``in_batch``:
        inside a training batch, where Lightning's logging step is
        (:func:`~beyondlabels.callbacks.packages.logging_step`)."""
        self._how = (through_lightning, in_batch)
        try:
            self.evaluate(trainer, pl_module)
        finally:
            self._how = None

    def evaluate(self, trainer: Trainer, pl_module: LightningModule, final: bool = False) -> dict[str, Any] | None:
        """Run one evaluation now (on every rank) and log it; returns the metric's output, or None if it failed.
        ``final``: the evaluation at the end of fit (the plots of the whole run are drawn).

        From the end of a validation loop (or of a training epoch) the scalars go through ``pl_module.log``; called
        anywhere else, straight to every logger at Lightning's logging step, with the epoch, and into
        ``trainer.callback_metrics``. Under ``trainer.validate()`` and ``trainer.test()`` the evaluation is a one-off:
        its scalars are logged (as ``<prefix>/<key>`` and ``<prefix>/test/<key>``) and returned by ``validate()`` /
        ``test()``, and it stays out of the history, the files and the media (those follow the training run)."""
        through_lightning, in_batch = getattr(self, "_how", None) or (False, False)
        stage = trainer_stage(trainer)
        occasion = _Occasion(
            stage, trainer.global_step, trainer.current_epoch, logging_step(trainer, in_batch), through_lightning, final
        )
        started = time.perf_counter()
        if not occasion.one_off:
            self._last_step_evaluated = occasion.step
        try:
            return self._evaluate(trainer, pl_module, occasion, started)
        finally:
            self.on_evaluation_end(trainer, pl_module)

    def _encode_and_compute(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        occasion: _Occasion,
        started: float,
        timings: dict[str, float],
    ) -> tuple[dict[str, Any] | None, BaseException | None]:
        """Feed every batch, then (only if every rank fed its shard) compute the metric and its intervals."""
        error: BaseException | None = None
        try:
            self.on_evaluation_start(trainer, pl_module)
            self.metric.to(pl_module.device)
            self.metric.reset()
            loader = self._make_loader(trainer, pl_module, occasion.stage)
            self.eval_dataset = loader.dataset
            self._feed_all(trainer, pl_module, loader, occasion.stage)
        except Exception as exc:  # noqa: BLE001 - decided collectively below, re-raised in strict mode
            error = exc
        timings["forward"] = time.perf_counter() - started
        # Collective decision: gather (inside compute) only if every rank encoded its shard.
        results = None
        if trainer.strategy.reduce_boolean_decision(error is None, all=True):
            try:
                mark = time.perf_counter()
                results = self.after_compute(self.metric.compute())
                timings["compute"] = time.perf_counter() - mark
                if self.ci_keys:
                    mark = time.perf_counter()
                    results, _ = add_confidence_intervals(
                        results, self.schema, self.ci_keys, rounds=self.bootstrap_rounds, seed=self.ci_seed
                    )
                    timings["intervals"] = time.perf_counter() - mark
            except Exception as exc:  # noqa: BLE001
                error = exc
        return results, error

    def _evaluate(
        self, trainer: Trainer, pl_module: LightningModule, occasion: _Occasion, started: float
    ) -> dict[str, Any] | None:
        timings: dict[str, float] = {}
        step, epoch = occasion.step, occasion.epoch
        results, error = self._encode_and_compute(trainer, pl_module, occasion, started, timings)
        if not trainer.strategy.reduce_boolean_decision(error is None, all=True):
            if self.metric is not None:
                self.metric.reset()
            self._report_failure(
                error or RuntimeError(f"{self.prefix} evaluation failed on another rank"), occasion, trainer
            )
            return None
        record = self._record(results, step, epoch)
        # Files and media (rank 0) come before the scalars, so that eval_seconds counts them; the history line is
        # written last, with eval_seconds in it. A one-off (validate, test) writes neither.
        problems: list[BaseException] = []
        self._sink_errors = []
        if not occasion.one_off:
            self.last_per_query = (step, results.get("per_query"))
        extra = self._select(trainer, step, results, occasion)
        if trainer.is_global_zero:
            if not occasion.one_off:
                problems = self._write_outputs(trainer, results, record, timings, occasion)
            record[EVAL_SECONDS] = time.perf_counter() - started
            if not occasion.one_off:
                self.history.append(record)
                if self.files is not None:
                    problems += self.files.write_history(self.history)
        # rank 0's wall time and selection scalars (its own seconds among them) on every rank: logged values must be
        # the same on every rank (a rank's own time would clash with the reduced one in callback_metrics)
        failed, seconds, extra = trainer.strategy.broadcast(
            (bool(problems), record.get(EVAL_SECONDS, 0.0), extra), src=0
        )
        record[EVAL_SECONDS] = float(seconds)
        if not trainer.is_global_zero and not occasion.one_off:
            self.history.append(record)
        timings["total"] = float(seconds)
        self.last_timings = timings
        self._log_scalars(trainer, pl_module, record, occasion, extra)
        self.metric.reset()
        if failed:
            if self.strict:
                raise (
                    problems[0]
                    if problems
                    else RuntimeError(f"{self.prefix}: writing evaluation files or media failed on rank 0")
                )
            on_disk = [p for p in problems if not any(p is q for q in self._sink_errors)]  # loggers: reported
            if on_disk:
                log.error(
                    "%s: %d evaluation file or media write(s) failed at step %d; scalars were logged and nothing on "
                    "disk was damaged; the history, per-query files, schema and plots are written again at the next "
                    "evaluation (pictures and media of this evaluation are not):\n%s",
                    self.prefix,
                    len(on_disk),
                    step,
                    "".join(traceback.format_exception(on_disk[0])),
                )
        return results

    def _write_outputs(
        self,
        trainer: Trainer,
        results: dict[str, Any],
        record: dict[str, Any],
        timings: dict[str, float],
        occasion: _Occasion,
    ) -> list[BaseException]:
        """Rank 0: this evaluation's files (:class:`EvaluationFiles`, the family's step files) and media. Each
        failure is collected, none stops the others."""
        problems: list[BaseException] = []
        mark = time.perf_counter()
        band_drawn = False
        try:
            files = self._ensure_files(trainer)
            if files is not None:
                drawn_before = files.plotted_evaluations
                # the family's files first: the retention policy then knows every kind of step file it removes
                files.attempt(
                    problems,
                    "this evaluation's pictures",
                    self.write_step_files,
                    trainer,
                    results,
                    int(record["step"]),
                    files,
                )
                problems += files.write_evaluation(record, results, self.history, final=occasion.final)
                band_drawn = files.plotted_evaluations != drawn_before and files.band_path.is_file()
        except Exception as exc:  # noqa: BLE001 - collected: rank 0 alone must never raise before the broadcast
            log.error("%s: writing the evaluation files failed (%s: %s)", self.prefix, type(exc).__name__, exc)
            problems.append(exc)
        timings["files"] = time.perf_counter() - mark
        mark = time.perf_counter()
        problems += self._publish_media(trainer, results, occasion, band_drawn)
        timings["media"] = time.perf_counter() - mark
        return problems

    def _ensure_files(self, trainer: Trainer) -> EvaluationFiles | None:
        """The folder's writer (None without a folder), made at the first write of a fit and brought in line with the
        history so far (restored from a checkpoint, or empty)."""
        folder = self.output_folder(trainer)
        if self.files is None and folder is not None:
            self.files = EvaluationFiles(
                folder,
                self.schema,
                self.prefix,
                self.history,
                per_query=self.save_per_query,
                keep_every_n=self.keep_every_n,
                best=self._best_key(),
                plot_every_n=self.plot_every_n,
                band_keys=self._band_keys(),
            )
        return self.files

    def _best_key(self) -> str | None:
        """The key whose best evaluation keeps its step files (see ``keep_best``)."""
        if self.keep_best is not None:
            return self.keep_best
        for key in (self._monitored, *self.prog_bar, *self.ci_keys):
            if key is not None and self.schema.mode(key) is not None:
                return key
        return None

    def _band_keys(self) -> list[str]:
        """The keys of ``confidence_intervals.png``: progress-bar keys first, then every interval key."""
        if not self.ci_keys:
            return []
        return list(dict.fromkeys([*(k for k in self.prog_bar if k in self.ci_keys), *self.ci_keys]))

    def _record(self, results: dict[str, Any], step: int, epoch: int) -> dict[str, Any]:
        record: dict[str, Any] = {"step": step, "epoch": epoch}
        for key in self.schema.scalar_keys():
            if key in results:
                value = float(results[key])
                if math.isinf(value):  # no metric value is infinite; the history's reader refuses one
                    log.warning("%s: %s is %s at step %d, recorded as NaN (undefined)", self.prefix, key, value, step)
                    value = math.nan
                record[key] = int(value) if self.schema[key].count and math.isfinite(value) else value
        for key in self.schema.curve_keys():
            if key in results:
                # torchmetrics squeezes a one-element output to 0-d: a curve of length 1 arrives as a scalar
                record[key] = [float(v) for v in torch.atleast_1d(torch.as_tensor(results[key]))]
        return record

    def _select(self, trainer: Trainer, step: int, results: Mapping[str, Any], occasion: _Occasion) -> dict[str, float]:
        """The checkpoint selection after an evaluation of fit (every rank alike; ``selection.json`` on rank 0): its
        scalars, logged with the evaluation's. A failure is logged (strict: raised on every rank, which all fail
        alike: they compute the same from the same gathered values)."""
        if self.selection is None or occasion.one_off:
            return {}
        try:
            scalars = self.selection.observe(step, results.get("per_query"))
        except Exception as exc:
            if self.strict:
                raise
            log.error("%s: the checkpoint selection failed (%s: %s)", self.prefix, type(exc).__name__, exc)
            return {}
        if trainer.is_global_zero and self.files is not None:
            self.files.attempt([], "selection.json", self.selection.write, self.files.folder)
        return scalars

    def _log_scalars(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        record: dict[str, Any],
        occasion: _Occasion,
        extra: Mapping[str, float] | None = None,
    ) -> None:
        """The scalars of ``record`` under ``<prefix>/<namespace><key>`` and the ``extra`` ones (already named, the
        checkpoint selection's): through ``pl_module.log`` (Lightning's row of the loop, ``callback_metrics``, the
        progress bar) or straight to every logger at Lightning's logging step with the epoch, as Lightning's own
        callbacks log outside its loops."""
        name = f"{self.prefix}/{occasion.namespace}"
        scalars = {f"{name}{k}": float(record[k]) for k in self.schema.scalar_keys() if k in record}
        scalars.update(extra or {})
        bar = {f"{name}{k}" for k in self.prog_bar}
        self._check_clashes(trainer, scalars)
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
            self._pending = {**(self._pending or {}), **scalars}
        else:
            for logger in trainer.loggers:
                logger.log_metrics({**scalars, "epoch": occasion.epoch}, step=occasion.log_step)
            device = trainer.strategy.root_device
            trainer.callback_metrics.update({k: _scalar_tensor(v, device) for k, v in scalars.items()})
            for key in bar & set(scalars):
                trainer.progress_bar_metrics[key] = scalars[key]
        self._logged.update(scalars)

    def _check_pending(self, trainer: Trainer) -> None:
        """At the end of a loop in which scalars went through ``pl_module.log``: check what Lightning kept of them."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._check_clashes(trainer, pending)

    def _check_clashes(self, trainer: Trainer, names: Iterable[str]) -> None:
        """Say (once per key and fit; ``strict``: raise on every rank) which of our logged ``names`` hold in
        ``trainer.callback_metrics`` (what ModelCheckpoint, EarlyStopping and sweepers read) a value this callback
        did not put there: a key of the same name logged by the module or another callback."""
        metrics = trainer.callback_metrics
        clashes = []
        for key in names:
            if key in self._clashes or key not in metrics:
                continue
            ours, theirs = self._logged.get(key), float(metrics[key])
            if ours is None or not _same_value(theirs, ours):
                clashes.append((key, ours, theirs))
        if self.strict and trainer.strategy.reduce_boolean_decision(bool(clashes), all=False):
            described = ", ".join(f"`{key}`" for key, _, _ in clashes) or "a key (on another rank)"
            raise ValueError(
                f"{described} of {type(self).__name__}(prefix={self.prefix!r}) is also logged by something else; "
                f"{_CLASH_FIX}"
            )
        for key, ours, theirs in clashes:
            self._clashes.add(key)
            given = "before this callback logged it" if ours is None else f"where this callback logged {ours:.6g}"
            log.warning(
                "%s: `%s` is also logged by something else (the LightningModule's self.log, another callback): "
                "trainer.callback_metrics, which ModelCheckpoint, EarlyStopping and sweepers read, holds %.6g %s. %s",
                self.prefix,
                key,
                theirs,
                given,
                _CLASH_FIX,
            )

    def per_query_values(self, key: str, step: int) -> tuple[Any, torch.Tensor] | None:
        """``(query_ids or None, values)`` of the per-query vector ``key`` of the evaluation at ``step``, while that
        evaluation is the last one held in memory (None otherwise, or when it has no such vector)."""
        if (
            self.last_per_query is None
            or self.last_per_query[0] != step
            or not isinstance(self.last_per_query[1], Mapping)
        ):
            return None
        per_query = self.last_per_query[1]
        if key not in per_query:
            return None
        return per_query.get("query_id"), torch.as_tensor(per_query[key]).detach().cpu()

    def _make_loader(self, trainer: Trainer, pl_module: LightningModule, stage: str = "fit") -> DataLoader:
        source = self.test_dataloader if stage == "test" else self.dataloader
        loader = self._choose_loader(self._source_loaders(source, trainer, pl_module), source)
        if not isinstance(loader, DataLoader):
            raise TypeError(
                f"dataloader must give a torch DataLoader (or a list or dict of them, of which dataloader_idx chooses "
                f"one), got {type(loader).__name__}"
            )
        self._positions = None
        if trainer.world_size > 1:
            if isinstance(loader.dataset, IterableDataset):
                raise TypeError(
                    "an IterableDataset cannot be sharded between ranks by the evaluation; give a map-style dataset "
                    "(with __getitem__ and __len__) or one evaluation loader per rank that yields global ids"
                )
            loader = shard_loader(loader, trainer.world_size, trainer.global_rank)
            self._positions = list(iter(loader.sampler))
        return loader

    def _loader_owner(self, trainer: Trainer, pl_module: LightningModule, name: str) -> Any:
        """The datamodule, else the module, that defines the loader method ``name`` (Lightning's default, which only
        raises, does not count); None when neither does."""
        for owner in (getattr(trainer, "datamodule", None), pl_module):
            if (
                owner is not None
                and callable(getattr(owner, name, None))
                and (lightning_package(owner) is None or overrides(owner, name))
            ):
                return owner
        return None

    def _source_loaders(self, source: Any, trainer: Trainer, pl_module: LightningModule) -> Any:
        """What ``source`` gives: a method's loader(s) (of the datamodule or module that defines it; for the standard
        names defined by neither, the loaders the trainer was given), a DataLoader, or a callable's loader(s)."""
        if not isinstance(source, str):
            return source() if callable(source) and not isinstance(source, DataLoader) else source
        owner = self._loader_owner(trainer, pl_module, source)
        if owner is not None:
            return getattr(owner, source)()
        given = getattr(trainer, TRAINER_LOADERS[source], None) if source in TRAINER_LOADERS else None
        if given is None:
            raise AttributeError(self._no_loader(source))
        return given

    def _no_loader(self, name: str, at_setup: bool = False) -> str:
        option = "test_dataloader" if name == self.test_dataloader and name != self.dataloader else "dataloader"
        if name not in TRAINER_LOADERS:
            trainer_has = ""
        elif at_setup:
            trainer_has = " and the trainer runs no validation loop that would give its loaders"
        else:
            trainer_has = f" and the trainer holds no {TRAINER_LOADERS[name]}"
        return (
            f"{type(self).__name__}(`{option}`={name!r}): neither the datamodule nor the LightningModule defines "
            f"{name}(){trainer_has}; define it, or set {option}= to a DataLoader, a zero-argument callable returning "
            "one, or the name of a method that returns one"
        )

    def _check_loader_source(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """At fit's setup: a loader method named by ``dataloader`` must exist somewhere (the trainer's validation
        loaders stand in for ``"val_dataloader"`` when it validates)."""
        name = self.dataloader
        if not isinstance(name, str) or self._loader_owner(trainer, pl_module, name) is not None:
            return
        if name == "val_dataloader" and runs_validation(trainer, pl_module):
            return
        raise ValueError(self._no_loader(name, at_setup=True))

    def _choose_loader(self, loaders: Any, source: Any) -> Any:
        """The loader at ``dataloader_idx`` when ``loaders`` is a list or dict of several (said once per fit)."""
        if not isinstance(loaders, (list, tuple, Mapping)):
            return loaders
        idx, names = self.dataloader_idx, list(loaders) if isinstance(loaders, Mapping) else None
        what = f"{source}()" if isinstance(source, str) else "the evaluation loader source"
        items = list(loaders.values()) if names is not None else list(loaders)
        if isinstance(idx, str) and (names is None or idx not in loaders) or isinstance(idx, int) and idx >= len(items):
            named = f" ({', '.join(map(repr, names))})" if names is not None else ""
            raise ValueError(
                f"`dataloader_idx={idx!r}` does not name one of the {len(items)} loaders {what} gives{named}; set it "
                "to a position" + (" or a name" if names is not None else "")
            )
        chosen = loaders[idx] if isinstance(idx, str) else items[idx]
        if len(items) > 1 and "loader choice" not in self._said:
            self._said.add("loader choice")
            log.info(
                "%s: %s gives %d loaders; evaluating loader %r (dataloader_idx=%r; set it to choose another)",
                self.prefix,
                what,
                len(items),
                idx,
                idx,
            )
        return chosen

    def batch_ids(self, batch_size: int, given: Any, offset: int, trainer: Trainer) -> torch.Tensor | None:
        """The ids of a batch: as given, else (positional batches) the dataset index of each sample under DDP or the
        position in the fixed evaluation order on one process."""
        if given is not None:
            return given if isinstance(given, torch.Tensor) else torch.as_tensor(given)
        if self._positions is not None:
            return torch.as_tensor(self._positions[offset : offset + batch_size], dtype=torch.long)
        return torch.arange(offset, offset + batch_size)

    def _batch_limit(self, trainer: Trainer, loader: DataLoader, stage: str) -> int | None:
        """``limit_batches``, else what the trainer's ``limit_val_batches`` (``limit_test_batches`` under test)
        allows, counted as Lightning counts it (a fraction of the loader's batches, rounded down, at least one);
        a limit below the loader's length is said once per fit."""
        if self.limit_batches is not None:
            return self.limit_batches
        option = "limit_test_batches" if stage == "test" else "limit_val_batches"
        value = getattr(trainer, option, None)
        try:
            total: int | None = len(loader)
        except TypeError:
            total = None
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or value <= 0
            or isinstance(value, float)
            and value >= 1.0
        ):
            return None  # all (0 means no validation loop: the evaluation then runs at the end of training epochs)
        if isinstance(value, float):
            if total is None:
                return None
            limit = max(int(total * value), 1)
        else:
            limit = int(value)
        if total is not None and limit < total and option not in self._said:
            self._said.add(option)
            reason = " (fast_dev_run)" if getattr(trainer, "fast_dev_run", False) else ""
            log.info(
                "%s: evaluating %d of %d batches of the evaluation loader, as the trainer's %s=%r%s asks (set "
                "limit_batches= to choose another number)",
                self.prefix,
                limit,
                total,
                option,
                value,
                reason,
            )
        return limit

    def _batches(self, trainer: Trainer, loader: DataLoader, stage: str = "fit") -> Iterable[Any]:
        limit = self._batch_limit(trainer, loader, stage)
        for index, batch in enumerate(loader):
            if limit is not None and index >= limit:
                break
            yield batch

    def _feed_all(self, trainer: Trainer, pl_module: LightningModule, loader: DataLoader, stage: str = "fit") -> None:
        """Encode every evaluation batch in eval mode without gradients. The torch random state (CPU and the module's
        GPU) is restored afterwards: iterating a DataLoader draws a seed from it, and an evaluation must not change
        the training that follows it (a run trains identically with or without evaluation callbacks)."""
        was_training = pl_module.training
        pl_module.eval()
        self._offset = 0
        self.eval_trainer = trainer
        device = self._device = pl_module.device
        devices = (
            [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
        )
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                for batch in self._batches(trainer, loader, stage):
                    self.feed(pl_module, self.transform_batch(pl_module, batch))
        finally:
            pl_module.train(was_training)

    def transform_batch(self, pl_module: LightningModule, batch: Any) -> Any:
        """``batch`` as the family reads it: through ``batch_transform`` (a callable, or a module method by name or
        dotted path), or as it is."""
        transform = self.batch_transform
        if transform is None:
            return batch
        if isinstance(transform, str):
            transform = resolve_method(pl_module, transform, "batch_transform", type(self).__name__, "turns batches")
        return transform(batch)

    def unpack(self, batch: Any) -> tuple[Any, Any, Any]:
        """``(inputs, labels, ids or None)`` of a batch of labelled inputs: a dict (read with the family's
        ``input_key``, ``label_key`` and ``id_key``; the id entry is optional) or an ``(inputs, labels)`` /
        ``(inputs, labels, ids)`` tuple. Anything else is refused with a description of what was received."""
        input_key, label_key, id_key = self.input_key, self.label_key, self.id_key
        if isinstance(batch, dict):
            missing = [k for k in (input_key, label_key) if k not in batch]
            if missing:
                raise KeyError(
                    f"evaluation batches lack the keys {missing}; present: {sorted(map(str, batch))}. "
                    "Set input_key / label_key (and id_key) to the keys of your batches."
                )
            return batch[input_key], batch[label_key], batch.get(id_key)
        if isinstance(batch, (list, tuple)) and len(batch) in (2, 3):
            return batch[0], batch[1], batch[2] if len(batch) == 3 else None
        described = f"a {type(batch).__name__}" + (
            f" of {len(batch)} items" if isinstance(batch, (list, tuple)) else ""
        )
        raise TypeError(
            f"evaluation batches must be dicts (keys {input_key!r}, {label_key!r}, optional {id_key!r}) "
            f"or (inputs, labels) / (inputs, labels, ids) tuples; got {described}"
        )

    def to_device(self, data: Any, pl_module: LightningModule) -> Any:
        """``data`` (a tensor, or a collection holding tensors) as Lightning hands a batch to the module's steps: its
        floating-point tensors converted by the trainer's precision plugin (``convert_input``: bfloat16 under
        ``"bf16-true"``, float64 under ``"64-true"``, unchanged under ``"32-true"``), then on the module's device;
        other values unchanged."""
        plugin = getattr(self.eval_trainer, "precision_plugin", None)
        if plugin is not None:
            data = plugin.convert_input(data)
        return move_data_to_device(data, pl_module.device)

    @contextlib.contextmanager
    def module_context(self) -> Iterator[None]:
        """The context Lightning runs the module's steps in: the trainer's precision plugin's ``forward_context``
        (autocast under ``"*-mixed"``, the default dtype of ``"bf16-true"`` / ``"64-true"``). Only the module's own
        calls belong in it: an evaluator of another precision (a reference CLIP model) runs outside."""
        plugin = getattr(self.eval_trainer, "precision_plugin", None)
        with plugin.forward_context() if plugin is not None else contextlib.nullcontext():
            yield

    def module_method(self, pl_module: LightningModule, method: str) -> Callable[..., Any]:
        """The callable ``method`` names on ``pl_module``: a method name or a dotted path (``"model.encode_image"``,
        ``"clip.visual"``)."""
        return resolve_method(pl_module, method, "method", type(self).__name__, "the family calls")

    def call_module(self, pl_module: LightningModule, method: str, *args: Any, **kwargs: Any) -> Any:
        """``pl_module.<method>(*args, **kwargs)`` inside :meth:`module_context` (``method``: a name or a dotted path,
        :meth:`module_method`)."""
        call = self.module_method(pl_module, method)
        with self.module_context():
            return call(*args, **kwargs)

    def encode_texts(
        self,
        pl_module: LightningModule,
        texts: Sequence[str],
        text_method: str,
        tokenizer: str | None,
        batch_size: int | None = None,
    ) -> torch.Tensor:
        """The float32 embeddings ``[M, D]`` of ``M`` strings: ``pl_module.<tokenizer>(chunk)`` (when set) and
        ``pl_module.<text_method>(...)`` over chunks of ``batch_size`` strings (all at once when None), in
        :meth:`module_context` (both names or dotted paths, :meth:`module_method`)."""
        texts = list(texts)
        step = batch_size or max(len(texts), 1)
        tokenize = self.module_method(pl_module, tokenizer) if tokenizer else None
        encode = self.module_method(pl_module, text_method)
        parts = []
        for start in range(0, len(texts), step):
            chunk = texts[start : start + step]
            with self.module_context():
                tokens = tokenize(chunk) if tokenize is not None else chunk
                emb = encode(self.to_device(tokens, pl_module))
            if not isinstance(emb, torch.Tensor) or emb.dim() != 2 or emb.shape[0] != len(chunk):
                got = getattr(emb, "shape", type(emb).__name__)
                raise TypeError(f"{text_method}() must return a [M, D] tensor for M={len(chunk)} texts, got {got}")
            parts.append(emb.float())
        return torch.cat(parts)

    def embed(self, pl_module: LightningModule, method: str, inputs: Any) -> torch.Tensor:
        """``pl_module.<method>(inputs)`` (in :meth:`module_context`) as float32 embeddings ``[B, D]`` (a
        ``TypeError`` names the method when it returns anything else)."""
        embeddings = self.call_module(pl_module, method, inputs)
        if not isinstance(embeddings, torch.Tensor) or embeddings.dim() != 2:
            got = tuple(embeddings.shape) if isinstance(embeddings, torch.Tensor) else type(embeddings).__name__
            raise TypeError(f"{method}() must return a [B, D] tensor, got {got}")
        return embeddings.float()

    def item(self, sample_id: int) -> Any | None:
        """The evaluation dataset's item of ``sample_id`` (:func:`~beyondlabels.callbacks.media.dataset_item`)."""
        return dataset_item(self.eval_dataset, sample_id, self.id_key)

    def thumbnail(self, sample_id: int, image_key: str | None = None) -> torch.Tensor | None:
        """The C×H×W image of ``sample_id`` in the evaluation dataset (``image_key``, default the family's
        ``input_key``), or None (:func:`~beyondlabels.callbacks.media.thumbnail`)."""
        return thumbnail(self.eval_dataset, sample_id, image_key or self.input_key, self.id_key)

    def take_ids(self, batch_size: int, given: Any) -> torch.Tensor:
        """Ids (int64, on the module's device) of the next ``batch_size`` samples of this evaluation (see
        :meth:`batch_ids`); advances the position."""
        ids = self.batch_ids(batch_size, given, self._offset, self.eval_trainer)
        self._offset += batch_size
        return ids.to(device=self._device, dtype=torch.long)

    def _report_failure(self, error: BaseException, occasion: _Occasion, trainer: Trainer) -> None:
        step = occasion.step
        if not occasion.one_off:
            self.history.append({"step": step, "epoch": occasion.epoch, "error": f"{type(error).__name__}: {error}"})
        if trainer.is_global_zero and not occasion.one_off:
            try:
                files = self._ensure_files(trainer)
                if files is not None:
                    files.write_history(self.history)  # a failed write logs its own error
            except Exception as exc:  # noqa: BLE001 - the evaluation's own error is the one to report
                log.error(
                    "%s: recording the failed evaluation on disk failed (%s: %s)", self.prefix, type(exc).__name__, exc
                )
        if self.strict:
            raise error
        watching = (
            f" {', '.join(self._monitors)} will find no value of this evaluation: the cause is this error, not a "
            "missing self.log."
            if self._monitors
            else ""
        )
        log.error(
            "%s evaluation at step %d failed and was skipped (training continues; strict=True makes this fatal).%s\n%s",
            self.prefix,
            step,
            watching,
            "".join(traceback.format_exception(error)),
        )

    # ---- files and media (rank 0) ------------------------------------------------------------------------------------
    def output_folder(self, trainer: Trainer) -> Path | None:
        """The folder of the evaluation files (``save_dir``, default ``<default_root_dir>/<prefix>``); None with
        ``save_dir=False`` and under ``fast_dev_run`` (Lightning writes nothing in that mode)."""
        if self.save_dir is False or getattr(trainer, "fast_dev_run", False):
            return None
        return Path(self.save_dir) if self.save_dir else Path(trainer.default_root_dir) / self.prefix

    def _publish_media(
        self, trainer: Trainer, results: dict[str, Any], occasion: _Occasion, band_drawn: bool
    ) -> list[BaseException]:
        """Rank 0: describe this evaluation's media (curves, ``confidence_intervals`` when it exists, the family's
        figures and tables), write the ``media/`` folder, send them to every logger (at the step they got the
        scalars). Failures are collected; what was described before one still goes out."""
        problems: list[BaseException] = []
        media = EvaluationMedia(self.prefix, occasion.step, occasion.epoch, log_step=occasion.log_step)
        try:
            for key in self.schema.curve_keys():
                curve = None if results.get(key) is None else torch.atleast_1d(torch.as_tensor(results[key]))
                if curve is not None and curve.numel() > 0:
                    media.curve(key, curve.tolist())
            if self.files is not None and self.files.band_path.is_file():
                media.figure(
                    "confidence_intervals", self.files.band_path, caption=self._band_caption(), to_loggers=band_drawn
                )
            self.describe_media(trainer, results, media)
        except Exception as exc:  # noqa: BLE001 - collected, decided by the caller
            log.error("%s: describing the evaluation's media failed (%s: %s)", self.prefix, type(exc).__name__, exc)
            problems.append(exc)
        self._last_media = media
        folder = self._write_media_folder(trainer, media, problems)
        problems += self._send_media(trainer, media, folder)
        return problems

    def _band_caption(self) -> str:
        return f"{self.prefix}: {', '.join(self._band_keys())} over the steps with 95% bootstrap intervals"

    def media_folder(self, trainer: Trainer) -> Path | None:
        """``<output folder>/media`` (the last evaluation's media, :mod:`beyondlabels.io.media_files`), or None
        without an output folder."""
        folder = self.output_folder(trainer)
        return None if folder is None else folder / "media"

    def _write_media_folder(
        self, trainer: Trainer, media: EvaluationMedia, problems: list[BaseException]
    ) -> Path | None:
        folder = self.media_folder(trainer)
        if self.files is None or folder is None:
            return None
        try:
            media.write(folder)
            return folder
        except Exception as exc:  # noqa: BLE001 - collected, decided by the caller
            log.error("%s: writing the media folder %s failed (%s: %s)", self.prefix, folder, type(exc).__name__, exc)
            problems.append(exc)
            return None

    def _send_media(self, trainer: Trainer, media: EvaluationMedia, folder: Path | None) -> list[BaseException]:
        """``media`` to every media-capable logger (:func:`~beyondlabels.callbacks._sinks.media_sinks`); one failing
        logger does not stop the others."""
        problems: list[BaseException] = []
        for sink in media_sinks(trainer, self.schema, self._wandb_defined):
            try:
                sink.log(media, folder)
            except Exception as exc:  # noqa: BLE001 - collected, decided by the caller
                names = [item.name for item in (*media.figures, *media.tables, *media.curves)]
                self._sink_failed(sink, f"the media of step {media.step} ({', '.join(names) or 'none'})", exc)
                problems.append(exc)
        return problems

    def _sink_failed(self, sink: Any, what: str, exc: BaseException) -> None:
        """Log that ``sink`` could not take ``what``: with the traceback at its first failure in this fit, then one
        line with the count."""
        key = (sink.kind, id(sink.logger))
        count = self._sink_failures[key] = self._sink_failures.get(key, 0) + 1
        self._sink_errors.append(exc)
        logger = f"{sink.kind} ({type(sink.logger).__name__})"
        if count == 1:
            log.error(
                "%s: logging %s to the %s logger failed (%s: %s); training goes on and the media folder on disk is "
                "not affected; later failures of this logger in this fit are logged in one line each:\n%s",
                self.prefix,
                what,
                logger,
                type(exc).__name__,
                exc,
                "".join(traceback.format_exception(exc)),
            )
        else:
            log.error(
                "%s: logging %s to the %s logger failed again (%s: %s); %d failures of this logger in this fit",
                self.prefix,
                what,
                logger,
                type(exc).__name__,
                exc,
                count,
            )

    def _finish_media(self, trainer: Trainer) -> list[BaseException]:
        """At the end of fit: the last evaluation's ``media/`` folder to every logger that keeps files (once per fit,
        not at every evaluation)."""
        problems: list[BaseException] = []
        folder = self.media_folder(trainer)
        try:
            if folder is None or not folder.is_dir():
                return problems
        except OSError as exc:  # e.g. ENAMETOOLONG: the folder was never written; logged, fatal in strict mode only
            log.error("%s: the media folder %s cannot be opened (%s: %s)", self.prefix, folder, type(exc).__name__, exc)
            return [exc]
        for sink in media_sinks(trainer, self.schema, self._wandb_defined):
            try:
                sink.finish(self.prefix, folder)
            except Exception as exc:  # noqa: BLE001 - collected, decided by the caller
                self._sink_failed(sink, "the media folder", exc)
                problems.append(exc)
        return problems

    def _publish_band(self, trainer: Trainer) -> list[BaseException]:
        """After the fit-end redraw of ``confidence_intervals.png``: the picture to every logger, and into the last
        evaluation's ``media/`` folder."""
        problems: list[BaseException] = []
        if self.files is None or not self.files.band_path.is_file():
            return problems
        band = EvaluationMedia(
            self.prefix, trainer.global_step, trainer.current_epoch, log_step=logging_step(trainer, False)
        )
        band.figure("confidence_intervals", self.files.band_path, caption=self._band_caption())
        last = getattr(self, "_last_media", None)
        if last is not None:
            names = [f.name for f in last.figures]
            if "confidence_intervals" in names:
                last.figures[names.index("confidence_intervals")] = band.figures[0]
            else:
                last.figures.insert(0, band.figures[0])
            self._write_media_folder(trainer, last, problems)
        return problems + self._send_media(trainer, band, None)


def shard_loader(loader: DataLoader, world_size: int, rank: int) -> DataLoader:
    """The same loader over this rank's shard: a ``DistributedSampler`` (no shuffling, no dropping) with the user's
    options kept (batch size, also a ``batch_sampler``'s, ``collate_fn``, workers, pinning, worker init, ...)."""
    batch_size = loader.batch_size
    if batch_size is None:
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
        if batch_size is None:
            raise TypeError(
                f"the evaluation loader uses a {type(loader.batch_sampler).__name__} without a batch_size; give it a "
                "`batch_size` attribute or use a plain batch_size so that it can be sharded between ranks"
            )
    sampler = DistributedSampler(loader.dataset, num_replicas=world_size, rank=rank, shuffle=False, drop_last=False)
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "sampler": sampler,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "drop_last": False,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
    if "pin_memory_device" in inspect.signature(DataLoader).parameters:
        options["pin_memory_device"] = loader.pin_memory_device
    return DataLoader(loader.dataset, **options)
