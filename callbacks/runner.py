"""Running one evaluation (internal to :mod:`beyondlabels.callbacks`): every batch of the evaluation loader into the
family's ``feed`` in eval mode without gradients, the module's calls made as Lightning makes ``validation_step``
(in the precision plugin's forward context, through the strategy's wrapped model: :func:`through_strategy`), one
collective decision about failures before any collective call, the metric's compute and intervals, then the results
to the sinks (:mod:`beyondlabels.callbacks.sink`). :class:`BatchTools` is what a family's ``feed`` uses."""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from lightning_fabric.utilities.apply_func import move_data_to_device
from torch.utils.data import DataLoader

from beyondlabels.callbacks._module_paths import resolve_method
from beyondlabels.callbacks.media import dataset_item, thumbnail
from beyondlabels.callbacks.schedule import Occasion
from beyondlabels.callbacks.sink import EVAL_SECONDS
from beyondlabels.metrics.intervals import add_confidence_intervals

log = logging.getLogger(__name__)

__all__ = ["BatchTools", "EvaluationRunner", "read_batch", "through_strategy"]

Trainer = Any
LightningModule = Any


def _wraps(wrapper: Any, pl_module: Any) -> bool:
    """Whether ``wrapper`` (a strategy's ``model``) is a module that holds ``pl_module`` as its direct child, as
    DistributedDataParallel, FullyShardedDataParallel and DeepSpeed's engine hold the LightningModule."""
    return (
        isinstance(wrapper, torch.nn.Module)
        and wrapper is not pl_module
        and any(child is pl_module for child in wrapper.children())
    )


def through_strategy(trainer: Any, pl_module: Any, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` (a method of ``pl_module`` or of one of its submodules) as Lightning runs
    ``validation_step``: when the trainer's strategy wraps the module (``trainer.strategy.model``: DDP, FSDP,
    DeepSpeed), the call goes through the wrapper's ``forward`` (``pl_module.forward`` stands for ``call`` for the
    duration of that one call, so the wrapper gathers sharded parameters, moves inputs and runs its hooks as for a
    step); without a wrapper (one device, a strategy that shards in place) ``call`` is called directly."""
    wrapper = getattr(getattr(trainer, "strategy", None), "model", None)
    if not _wraps(wrapper, pl_module):
        return call(*args, **kwargs)
    own = "forward" in vars(pl_module)
    original = vars(pl_module).get("forward")

    def restore() -> None:
        if own:
            pl_module.forward = original
        else:
            vars(pl_module).pop("forward", None)

    def redirected(*inner_args: Any, **inner_kwargs: Any) -> Any:
        restore()  # the method may call the module's real forward
        return call(*inner_args, **inner_kwargs)

    pl_module.forward = redirected
    try:
        return wrapper(*args, **kwargs)
    finally:
        restore()


def read_batch(
    batch: Any,
    keys: tuple[str, str, str],
    options: tuple[str, str] = ("input_key", "label_key"),
    parts: tuple[str, str] = ("inputs", "labels"),
    what: str = "",
) -> tuple[Any, Any, Any]:
    """``(first, second, ids or None)`` of an evaluation batch: a dict read with ``keys`` (the first two required, the
    ids optional) or a ``(first, second)`` / ``(first, second, ids)`` tuple. Anything else is refused with a
    description of what was received; the messages name the ``options`` that set the keys, the tuple's ``parts`` and
    ``what`` batches they are (e.g. ``"cross-modal "``)."""
    first, second, id_key = keys
    if isinstance(batch, dict):
        missing = [k for k in (first, second) if k not in batch]
        if missing:
            raise KeyError(
                f"{what}evaluation batches lack the keys {missing}; present: {sorted(map(str, batch))}. Set "
                f"{options[0]} / {options[1]} (and id_key) to the keys of your batches, or batch_transform= to make "
                "such dicts of them."
            )
        return batch[first], batch[second], batch.get(id_key)
    if isinstance(batch, (list, tuple)) and len(batch) in (2, 3):
        return batch[0], batch[1], batch[2] if len(batch) == 3 else None
    described = f"a {type(batch).__name__}" + (f" of {len(batch)} items" if isinstance(batch, (list, tuple)) else "")
    one, two = parts
    raise TypeError(
        f"{what}evaluation batches must be dicts (keys {first!r}, {second!r}, optional {id_key!r}) or ({one}, {two}) / "
        f"({one}, {two}, ids) tuples; got {described}. Set batch_transform= to turn your batches into one of these."
    )


class BatchTools:
    """What a family's ``feed`` uses (a base of :class:`~beyondlabels.callbacks.base.EvaluationCore`): a batch as the
    family reads it, on the module's device in the precision the trainer gives the steps, the module's methods called
    as Lightning calls a step, the ids of the samples, samples looked up by id."""

    batch_transform: Any
    eval_trainer: Any
    eval_dataset: Any
    loaders: Any
    input_key: str
    label_key: str
    id_key: str

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
        return read_batch(batch, (self.input_key, self.label_key, self.id_key))

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
        :meth:`module_method`), through the strategy's wrapped model as Lightning runs ``validation_step``
        (:func:`through_strategy`)."""
        call = self.module_method(pl_module, method)
        with self.module_context():
            return through_strategy(self.eval_trainer, pl_module, call, *args, **kwargs)

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
        :meth:`module_context` (both names or dotted paths, :meth:`module_method`; the encoder through the strategy's
        model, :func:`through_strategy`)."""
        texts = list(texts)
        step = batch_size or max(len(texts), 1)
        tokenize = self.module_method(pl_module, tokenizer) if tokenizer else None
        encode = self.module_method(pl_module, text_method)
        parts = []
        for start in range(0, len(texts), step):
            chunk = texts[start : start + step]
            with self.module_context():
                tokens = tokenize(chunk) if tokenize is not None else chunk
                emb = through_strategy(self.eval_trainer, pl_module, encode, self.to_device(tokens, pl_module))
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
        ids = self.batch_ids(batch_size, given, self._offset)
        self._offset += batch_size
        return ids.to(device=self._device, dtype=torch.long)

    def batch_ids(self, batch_size: int, given: Any, offset: int, trainer: Any = None) -> torch.Tensor:
        """The ids of a batch: as given, else (positional batches) the dataset index of each sample under DDP or the
        position in the fixed evaluation order on one process (``trainer``: unused, kept for callers)."""
        return self.loaders.batch_ids(batch_size, given, offset)


class EvaluationRunner:
    """One evaluation of ``core`` on every rank: its batches fed, every rank agreeing on failures, the metric computed,
    the results recorded, written and logged through ``core``'s sinks."""

    def __init__(self, core: Any) -> None:
        self.core = core

    def compute(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        occasion: Occasion,
        started: float,
        timings: dict[str, float],
    ) -> tuple[dict[str, Any] | None, BaseException | None]:
        """Feed every batch, then (only if every rank fed its shard) compute the metric and its intervals."""
        error: BaseException | None = None
        try:
            self.core.on_evaluation_start(trainer, pl_module)
            self.core.metric.to(pl_module.device)
            self.core.metric.reset()
            loader = self.core.loaders.make(trainer, pl_module, occasion.stage)
            self.core.eval_dataset = loader.dataset
            self.feed_all(trainer, pl_module, loader, occasion.stage)
        except Exception as exc:  # noqa: BLE001 - decided collectively below, re-raised in strict mode
            error = exc
        timings["forward"] = time.perf_counter() - started
        # Collective decision: gather (inside compute) only if every rank encoded its shard.
        results = None
        if trainer.strategy.reduce_boolean_decision(error is None, all=True):
            try:
                mark = time.perf_counter()
                results = self.core.after_compute(self.core.metric.compute())
                timings["compute"] = time.perf_counter() - mark
            except Exception as exc:  # noqa: BLE001
                error = exc
            # The ranks share the bootstrap rounds (a collective): only if every rank has its results.
            if self.core.ci_keys and trainer.strategy.reduce_boolean_decision(error is None, all=True):
                try:
                    mark = time.perf_counter()
                    results, _ = add_confidence_intervals(
                        results,
                        self.core.schema,
                        self.core.ci_keys,
                        rounds=self.core.bootstrap_rounds,
                        seed=self.core.ci_seed,
                        distributed=True,
                    )
                    timings["intervals"] = time.perf_counter() - mark
                except Exception as exc:  # noqa: BLE001
                    error = exc
        return results, error

    def run(
        self, trainer: Trainer, pl_module: LightningModule, occasion: Occasion, started: float
    ) -> dict[str, Any] | None:
        timings: dict[str, float] = {}
        step, epoch = occasion.step, occasion.epoch
        results, error = self.compute(trainer, pl_module, occasion, started, timings)
        if not trainer.strategy.reduce_boolean_decision(error is None, all=True):
            if self.core.metric is not None:
                self.core.metric.reset()
            self.core.outputs.report_failure(
                error or RuntimeError(f"{self.core.prefix} evaluation failed on another rank"), occasion, trainer
            )
            return None
        record = self.core.outputs.record(results, step, epoch)
        # Files and media (rank 0) come before the scalars, so that eval_seconds counts them; the history line is
        # written last, with eval_seconds in it. A one-off (validate, test) writes neither.
        problems: list[BaseException] = []
        self.core.outputs.errors = []
        if not occasion.one_off:
            self.core.last_per_query = (step, results.get("per_query"))
        if trainer.is_global_zero:
            if not occasion.one_off:
                problems = self.core.outputs.write_outputs(trainer, results, record, timings, occasion)
            record[EVAL_SECONDS] = time.perf_counter() - started
            if not occasion.one_off:
                self.core.history.append(record)
                if self.core.files is not None:
                    problems += self.core.files.write_history(self.core.history)
        failed, seconds = trainer.strategy.broadcast((bool(problems), record.get(EVAL_SECONDS, 0.0)), src=0)
        record[EVAL_SECONDS] = float(seconds)
        if not trainer.is_global_zero and not occasion.one_off:
            self.core.history.append(record)
        timings["total"] = float(seconds)
        self.core.last_timings = timings
        extra = self.core.outputs.select(trainer, step, results, occasion)
        self.core.scalars.log(trainer, pl_module, record, occasion, extra)
        self.core.metric.reset()
        if failed:
            if self.core.strict:
                raise (
                    problems[0]
                    if problems
                    else RuntimeError(f"{self.core.prefix}: writing evaluation files or media failed on rank 0")
                )
            on_disk = [p for p in problems if not any(p is q for q in self.core.outputs.errors)]  # loggers: reported
            if on_disk:
                log.error(
                    "%s: %d evaluation file or media write(s) failed at step %d; scalars were logged and nothing on "
                    "disk was damaged; the history, per-query files, schema and plots are written again at the next "
                    "evaluation (pictures and media of this evaluation are not):\n%s",
                    self.core.prefix,
                    len(on_disk),
                    step,
                    "".join(traceback.format_exception(on_disk[0])),
                )
        return results

    def feed_all(self, trainer: Trainer, pl_module: LightningModule, loader: DataLoader, stage: str = "fit") -> None:
        """Encode every evaluation batch in eval mode without gradients. The torch random state (CPU and the module's
        GPU) is restored afterwards: iterating a DataLoader draws a seed from it, and an evaluation must not change
        the training that follows it (a run trains identically with or without evaluation callbacks)."""
        was_training = pl_module.training
        pl_module.eval()
        self.core._offset = 0
        self.core.eval_trainer = trainer
        device = self.core._device = pl_module.device
        devices = (
            [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
        )
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                for batch in self.core.loaders.batches(trainer, loader, stage):
                    self.core.feed(pl_module, self.core.transform_batch(pl_module, batch))
        finally:
            pl_module.train(was_training)
