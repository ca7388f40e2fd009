"""The base of every evaluation callback. A family adds its metric and how to feed it a batch; the base composes one
collaborator per job: when to evaluate (:class:`~beyondlabels.callbacks.schedule.EvaluationSchedule`, each
evaluation on an :class:`~beyondlabels.callbacks.schedule.Occasion`), which loader and batches
(:class:`~beyondlabels.callbacks.loaders.EvaluationLoaders`), running one evaluation with every rank agreeing and the
module called through the strategy's model (:class:`~beyondlabels.callbacks.runner.EvaluationRunner`,
:class:`~beyondlabels.callbacks.runner.BatchTools`), and where the results go: the loggers the way Lightning logs
(:class:`~beyondlabels.callbacks.sink.ScalarSink`), the history, files and media
(:class:`~beyondlabels.callbacks.sink.OutputSink`).

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

What the base guarantees (schedule, logging, loader, no side effects on training, failures, files, media, resume) is
stated once, in the documentation: ``docs/trainer.md``, "What every evaluation callback guarantees".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from beyondlabels._internal.checks import check_int, check_optional_positive_int, check_positive_int, check_text
from beyondlabels.callbacks._folder_lock import close_files, hold_folder, release_folder
from beyondlabels.callbacks._module_paths import check_method_path, resolve_method
from beyondlabels.callbacks.files import EvaluationFiles
from beyondlabels.callbacks.loaders import EvaluationLoaders, check_loader_options, shard_loader
from beyondlabels.callbacks.media import EvaluationMedia
from beyondlabels.callbacks.packages import check_same_package, lightning_state_key
from beyondlabels.callbacks.runner import BatchTools, EvaluationRunner
from beyondlabels.callbacks.schedule import EvaluationSchedule, Occasion
from beyondlabels.callbacks.sink import EVAL_SECONDS, OutputSink, ScalarSink
from beyondlabels.io.paths import check_name
from beyondlabels.metrics.base import PerSampleMetric
from beyondlabels.metrics.intervals import confidence_interval_keys, with_confidence_intervals
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


class EvaluationCore(BatchTools):
    """Base class of periodic evaluation callbacks (what it guarantees: ``docs/trainer.md``), importing neither
    Lightning package: a Trainer gets it as ``EvaluationCallback`` of :mod:`beyondlabels.callbacks`
    (``pytorch_lightning``) or of :mod:`beyondlabels.callbacks.lightning` (``lightning.pytorch``), which add the
    package's ``Callback`` base.

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
        check_loader_options(dataloader, dataloader_idx, test_dataloader)
        _check_batch_transform(batch_transform)
        self.batch_transform, self.prefix = batch_transform, prefix
        self.every_n_epochs, self.every_n_steps = every_n_epochs, every_n_steps
        self.dataloader, self.dataloader_idx, self.test_dataloader = dataloader, dataloader_idx, test_dataloader
        self.limit_batches = limit_batches
        self.schedule = EvaluationSchedule(prefix, every_n_epochs, every_n_steps, bool(evaluate_at_fit_end))
        self.loaders = EvaluationLoaders(
            prefix, type(self).__name__, dataloader, dataloader_idx, test_dataloader, limit_batches
        )
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
        """The collaborators (:class:`EvaluationRunner`, :class:`ScalarSink`, :class:`OutputSink`) and the state an
        evaluation run fills in (history, the last evaluation)."""
        self.runner, self.scalars, self.outputs = EvaluationRunner(self), ScalarSink(self), OutputSink(self)
        self.history: list[dict[str, Any]] = []
        self.last_per_query: tuple[int, Any] | None = None  # (step, the per_query dict) of the last evaluation
        self.eval_dataset: Any = None  # the dataset of the current (or last) evaluation: thumbnails, captions
        self.eval_trainer: Trainer | None = None  # the trainer during an evaluation (feed() gets only the module)
        self._device = torch.device("cpu")  # the module's, during an evaluation: where take_ids puts the ids
        self._offset = 0  # how many samples of this evaluation take_ids has given ids
        self.files: EvaluationFiles | None = None  # the folder's writer, made at the first evaluation of a fit
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
        state = {"history": list(self.history), "last_step_evaluated": self.schedule.last_step_evaluated}
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
        self.schedule.last_step_evaluated = last if isinstance(last, int) and not isinstance(last, bool) else -1
        close_files(self)  # the folder is brought in line with the restored history at the next evaluation
        if self.selection is not None and "selection" in state_dict:
            self.selection.load_state_dict(state_dict["selection"])

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        check_same_package(self, trainer)
        release_folder(self)  # a new fit starts its files afresh (the history file is rewritten once, then appended)
        self.outputs.reset()  # a new fit may log to a new W&B run
        self.scalars.reset()
        self.loaders.said = set()
        self.check_module(pl_module)
        if isinstance(self.batch_transform, str):
            self.check_methods(pl_module, batch_transform="turns an evaluation batch into the batch this family reads")
        if self.selection is not None:
            every = 1 if self.save_per_query == "all" else self.keep_every_n
            self.selection.bind(self.schema.mode(self.selection.key), every, self.prefix)
        self.scalars.check_monitors(trainer)
        if stage == "fit":
            self.loaders.check_source(trainer, pl_module)
            hold_folder(self, trainer)  # one writer per folder
            if getattr(trainer, "fast_dev_run", False) and self.save_dir is not False:
                log.info(
                    "%s: fast_dev_run: evaluating as usual but writing no files (as Lightning writes none)",
                    self.prefix,
                )
        self.schedule.setup(trainer, pl_module, stage)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            release_folder(self)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        release_folder(self)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._evaluate_on(trainer, pl_module, self.schedule.at_validation_epoch_end(trainer))

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.scalars.check_pending(trainer)

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.test_dataloader is not None:
            self._evaluate_on(trainer, pl_module, Occasion.now(trainer, through_lightning=True))

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.scalars.check_pending(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._evaluate_on(trainer, pl_module, self.schedule.at_train_epoch_end(trainer))

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._evaluate_on(trainer, pl_module, self.schedule.at_train_batch_end(trainer))

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.scalars.check_pending(trainer)  # what the previous training epoch's end kept of our scalars

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.scalars.check_pending(trainer)
        self._evaluate_on(trainer, pl_module, self.schedule.at_fit_end(trainer))
        self.outputs.finish_plots(trainer)
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

    # ---- one evaluation ----------------------------------------------------------------------------------------------
    def evaluate(
        self, trainer: Trainer, pl_module: LightningModule, final: bool = False, *, occasion: Occasion | None = None
    ) -> dict[str, Any] | None:
        """Run one evaluation now (on every rank) and log it; returns the metric's output, or None if it failed.
        ``final``: the evaluation at the end of fit (the plots of the whole run are drawn).

        The hooks pass the ``occasion`` their schedule gives (:class:`~beyondlabels.callbacks.schedule.Occasion`): at
        the end of a validation loop (or of a training epoch) the scalars go through ``pl_module.log``; called without
        one, straight to every logger at Lightning's logging step, with the epoch, and into
        ``trainer.callback_metrics``. Under ``trainer.validate()`` and ``trainer.test()`` the evaluation is a one-off:
        its scalars are logged (as ``<prefix>/<key>`` and ``<prefix>/test/<key>``) and returned by ``validate()`` /
        ``test()``, and it stays out of the history, the files and the media (those follow the training run). A
        subclass that overrides it passes ``occasion`` on."""
        occasion = occasion or Occasion.now(trainer, final=final)
        started = time.perf_counter()
        self.schedule.started(occasion)
        try:
            return self.runner.run(trainer, pl_module, occasion, started)
        finally:
            self.on_evaluation_end(trainer, pl_module)

    def _evaluate_on(self, trainer: Trainer, pl_module: LightningModule, occasion: Occasion | None) -> None:
        """:meth:`evaluate` on the ``occasion`` a hook's schedule gives; nothing when it gives None."""
        if occasion is not None:
            self.evaluate(trainer, pl_module, occasion.final, occasion=occasion)

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

    # ---- files (rank 0) --------------------------------------------------------------------------------------------
    def output_folder(self, trainer: Trainer) -> Path | None:
        """The folder of the evaluation files (``save_dir``, default ``<default_root_dir>/<prefix>``); None with
        ``save_dir=False`` and under ``fast_dev_run`` (Lightning writes nothing in that mode)."""
        if self.save_dir is False or getattr(trainer, "fast_dev_run", False):
            return None
        return Path(self.save_dir) if self.save_dir else Path(trainer.default_root_dir) / self.prefix

    def media_folder(self, trainer: Trainer) -> Path | None:
        """``<output folder>/media`` (the last evaluation's media, :mod:`beyondlabels.io.media_files`), or None
        without an output folder."""
        folder = self.output_folder(trainer)
        return None if folder is None else folder / "media"
