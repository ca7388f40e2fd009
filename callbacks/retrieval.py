"""Periodic leave-one-out retrieval evaluation of a LightningModule's embeddings."""

from __future__ import annotations

import json
import logging
import traceback
from pathlib import Path
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_only
from torch.utils.data import DataLoader, DistributedSampler

from beyondlabels.callbacks.media import WandbMedia, find_wandb_logger
from beyondlabels.metrics import EmbeddingRetrieval
from beyondlabels.reporting import save_precision_curve_png

log = logging.getLogger(__name__)


class RetrievalEvalCallback(pl.Callback):
    """Every few epochs or steps, embed a fixed evaluation set and log P@k, R-precision, MAP@R, ...

    Each evaluation walks a fixed dataloader (by default the datamodule's ``val_dataloader``), calls
    ``pl_module.<encode_method>(batch[input_key])`` in eval mode without gradients, feeds
    :class:`~beyondlabels.metrics.EmbeddingRetrieval` on every rank (the metric gathers and drops the
    copies DistributedSampler adds, by ``batch[id_key]``), and logs every scalar under
    ``<prefix>/<name>`` (e.g. ``retrieval/precision@1``) identically on all ranks, so that
    ModelCheckpoint, EarlyStopping and sweepers can monitor them. On rank 0 it also logs, to W&B when a
    :class:`~pytorch_lightning.loggers.WandbLogger` is attached, the precision@k-vs-k curve and a table
    of the most confident label mismatches (query and retrieved thumbnails, labels, cosine).

    Schedule: with ``every_n_epochs=N`` it runs at the end of the validation loops of epochs
    ``N-1, 2N-1, ...`` (zero-based ``current_epoch``), so it shares the trainer's validation cadence;
    with ``every_n_steps=M`` it runs after every M-th optimiser step instead (use that for trainers
    without a validation loop). Sanity checks are skipped.

    A failing evaluation (bad embeddings, a user error in ``encode_method``) is logged as an error, kept
    in :attr:`history` and training continues; with ``strict=True`` it raises. Under DDP the ranks agree
    through ``trainer.strategy`` before gathering, so a failure on one rank never leaves the others
    waiting in a collective.

    Args:
        every_n_epochs: evaluate on every N-th validation epoch (None: not epoch-based).
        every_n_steps: evaluate every N optimiser steps (None: not step-based). Exactly one of the two.
        dataloader: name of a datamodule (or LightningModule) method returning the evaluation loader,
            or a ``DataLoader`` / zero-argument callable returning one.
        encode_method: name of the LightningModule method mapping inputs to embeddings.
        input_key, label_key, id_key: batch keys (batches are dicts) of inputs, labels and global ids;
            a tuple/list batch is read as ``(inputs, labels, ids)``.
        ks: the k of precision@k / recall@k / hit@k.
        prefix: namespace of the logged keys.
        chunk_size, precision: passed to the metric (search chunking, ``"fp32"`` or a fast mode).
        limit_batches: evaluate on at most this many batches (None: all).
        num_mismatches: rows of the worst-mismatch table (0 turns the table off).
        class_names: label → display name for tables (default: the datamodule's ``class_names``).
        save_dir: folder for ``history.json`` and ``precision_at_k.png`` (rank 0, after every evaluation);
            None means ``<trainer.default_root_dir>/<prefix>``, False writes nothing.
        strict: raise instead of logging evaluation errors.
    """

    def __init__(
        self,
        every_n_epochs: int | None = 1,
        every_n_steps: int | None = None,
        dataloader: str | DataLoader | Callable[[], DataLoader] = "val_dataloader",
        encode_method: str = "encode_image",
        input_key: str = "image",
        label_key: str = "label",
        id_key: str = "id",
        ks: Sequence[int] = (1, 5, 10),
        prefix: str = "retrieval",
        chunk_size: int = 1024,
        precision: str = "fp32",
        limit_batches: int | None = None,
        num_mismatches: int = 16,
        class_names: Sequence[str] | None = None,
        save_dir: str | Path | bool | None = None,
        strict: bool = False,
    ) -> None:
        super().__init__()
        if (every_n_epochs is None) == (every_n_steps is None):
            raise ValueError(
                "set exactly one of every_n_epochs and every_n_steps "
                f"(got every_n_epochs={every_n_epochs}, every_n_steps={every_n_steps})"
            )
        for name, value in (("every_n_epochs", every_n_epochs), ("every_n_steps", every_n_steps), ("limit_batches", limit_batches)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if num_mismatches < 0:
            raise ValueError(f"num_mismatches must be >= 0, got {num_mismatches}")
        if not prefix or prefix.endswith("/"):
            raise ValueError(f"prefix must be a non-empty name without a trailing '/', got {prefix!r}")
        self.every_n_epochs = every_n_epochs
        self.every_n_steps = every_n_steps
        self.dataloader = dataloader
        self.encode_method = encode_method
        self.input_key, self.label_key, self.id_key = input_key, label_key, id_key
        self.prefix = prefix
        self.limit_batches = limit_batches
        self.num_mismatches = num_mismatches
        self.class_names = list(class_names) if class_names else None
        self.save_dir = save_dir
        self.strict = strict
        # Built here so that argument errors surface when the config is instantiated, not mid-run.
        self.metric = EmbeddingRetrieval(ks=ks, chunk_size=chunk_size, precision=precision, return_neighbors=1 if num_mismatches else 0)
        self.history: list[dict[str, Any]] = []
        self._last_step_evaluated = -1
        self._eval_dataset: Any = None
        self._wandb_defined: set[str] = set()

    # ---- identity and resumable state -------------------------------------------------------------
    @property
    def state_key(self) -> str:
        source = self.dataloader if isinstance(self.dataloader, str) else type(self.dataloader).__name__
        return self._generate_state_key(prefix=self.prefix, dataloader=source, encode_method=self.encode_method)

    def state_dict(self) -> dict[str, Any]:
        return {"history": list(self.history), "last_step_evaluated": self._last_step_evaluated}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        history = state_dict.get("history", [])
        if isinstance(history, list) and all(isinstance(h, dict) for h in history):
            self.history = list(history)
        else:
            log.warning("%s: ignoring a checkpointed history of unexpected type %s", self.state_key, type(history).__name__)
        last = state_dict.get("last_step_evaluated", -1)
        self._last_step_evaluated = last if isinstance(last, int) else -1

    # ---- schedule -----------------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._wandb_defined = set()  # a new fit may log to a new W&B run
        if not callable(getattr(pl_module, self.encode_method, None)):
            raise AttributeError(
                f"{type(pl_module).__name__} has no method {self.encode_method!r}; set "
                f"RetrievalEvalCallback(encode_method=...) to the method that returns embeddings"
            )

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.every_n_epochs is None or trainer.sanity_checking:
            return
        if (trainer.current_epoch + 1) % self.every_n_epochs == 0 or trainer.fast_dev_run:
            self.evaluate(trainer, pl_module)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.every_n_steps is None:
            return
        step = trainer.global_step
        if step > 0 and step % self.every_n_steps == 0 and step != self._last_step_evaluated:
            self.evaluate(trainer, pl_module)

    # ---- one evaluation -------------------------------------------------------------------------------
    def evaluate(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, torch.Tensor] | None:
        """Run one evaluation now and log it; returns the metric dict, or None if it failed."""
        step, epoch = trainer.global_step, trainer.current_epoch
        self._last_step_evaluated = step
        self.metric.to(pl_module.device)
        self.metric.reset()
        error: BaseException | None = None
        try:
            loader = self._make_loader(trainer, pl_module)
            self._eval_dataset = loader.dataset
            self._feed(trainer, pl_module, loader)
        except Exception as exc:  # noqa: BLE001 - reported below, re-raised in strict mode
            error = exc
        # Collective decision: all ranks gather only if every rank encoded its shard.
        all_ok = trainer.strategy.reduce_boolean_decision(error is None, all=True)
        results = None
        if all_ok:
            try:
                results = self.metric.compute()
            except Exception as exc:  # noqa: BLE001
                error = exc
        elif error is None:
            error = RuntimeError("retrieval evaluation failed on another rank")
        if error is not None:
            self._report_failure(error, step, epoch)
            self.metric.reset()
            return None

        scalars = {k: v for k, v in results.items() if v.ndim == 0}
        for key, value in scalars.items():
            pl_module.log(f"{self.prefix}/{key}", value.float(), on_step=self.every_n_steps is not None, on_epoch=self.every_n_steps is None, sync_dist=False)
        record = {"step": step, "epoch": epoch, **{k: float(v) for k, v in scalars.items()}}
        if "precision_curve" in results:
            record["precision_curve"] = [float(v) for v in results["precision_curve"]]
        self.history.append(record)
        self._log_media(trainer, results)
        self.metric.reset()
        return results

    def _make_loader(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> DataLoader:
        source = self.dataloader
        if isinstance(source, str):
            owner = next((o for o in (trainer.datamodule, pl_module) if o is not None and hasattr(o, source)), None)
            if owner is None:
                raise AttributeError(
                    f"neither the datamodule nor the LightningModule has a method {source!r}; set "
                    "RetrievalEvalCallback(dataloader=...) to the name of a method returning the evaluation DataLoader"
                )
            loader = getattr(owner, source)()
        else:
            loader = source() if callable(source) and not isinstance(source, DataLoader) else source
        if not isinstance(loader, DataLoader):
            raise TypeError(f"dataloader must give a torch DataLoader, got {type(loader).__name__}")
        if trainer.world_size > 1:
            # Each rank embeds its shard; DistributedSampler pads with repeats, which the metric drops by id.
            sampler = DistributedSampler(loader.dataset, num_replicas=trainer.world_size, rank=trainer.global_rank, shuffle=False)
            loader = DataLoader(loader.dataset, batch_size=loader.batch_size or 1, sampler=sampler, num_workers=loader.num_workers, collate_fn=loader.collate_fn)
        return loader

    def _unpack(self, batch: Any) -> tuple[Any, torch.Tensor, torch.Tensor]:
        if isinstance(batch, dict):
            missing = [k for k in (self.input_key, self.label_key, self.id_key) if k not in batch]
            if missing:
                raise KeyError(f"evaluation batches lack the keys {missing}; present: {sorted(batch)}. Set input_key/label_key/id_key.")
            return batch[self.input_key], batch[self.label_key], batch[self.id_key]
        if isinstance(batch, (list, tuple)) and len(batch) == 3:
            return batch[0], batch[1], batch[2]
        raise TypeError("evaluation batches must be dicts or (inputs, labels, ids) tuples")

    def _batches(self, trainer: pl.Trainer, loader: DataLoader) -> Iterable[Any]:
        limit = self.limit_batches
        if trainer.fast_dev_run:
            limit = min(limit or 2, 2)
        for index, batch in enumerate(loader):
            if limit is not None and index >= limit:
                break
            yield batch

    def _feed(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loader: DataLoader) -> None:
        encode = getattr(pl_module, self.encode_method)
        was_training = pl_module.training
        pl_module.eval()
        try:
            with torch.no_grad():
                for batch in self._batches(trainer, loader):
                    inputs, labels, ids = self._unpack(batch)
                    if isinstance(inputs, torch.Tensor):
                        inputs = inputs.to(pl_module.device)
                    embeddings = encode(inputs)
                    self.metric.update(embeddings.float(), torch.as_tensor(labels, device=pl_module.device), torch.as_tensor(ids, device=pl_module.device))
        finally:
            pl_module.train(was_training)

    def _report_failure(self, error: BaseException, step: int, epoch: int) -> None:
        self.history.append({"step": step, "epoch": epoch, "error": f"{type(error).__name__}: {error}"})
        if self.strict:
            raise error
        log.error(
            "%s evaluation at step %d failed and was skipped (training continues; strict=True makes this fatal):\n%s",
            self.prefix,
            step,
            "".join(traceback.format_exception(error)),
        )

    # ---- media on rank 0 ---------------------------------------------------------------------------------
    @rank_zero_only
    def _log_media(self, trainer: pl.Trainer, results: dict[str, torch.Tensor]) -> None:
        self._write_files(trainer)
        logger = find_wandb_logger(trainer)
        if logger is None:
            return
        try:
            media = WandbMedia(logger, step=trainer.global_step, prefix=self.prefix)
            media.define_metrics([k for k, v in results.items() if v.ndim == 0], done=self._wandb_defined)
            curve = results.get("precision_curve")
            if curve is not None and curve.numel() > 0:
                media.precision_curve(curve.tolist())
            if self.num_mismatches and "neighbor_ids" in results:
                media.mismatch_table(self._mismatch_rows(trainer, results))
        except Exception:  # noqa: BLE001 - media are best effort, never worth a run
            if self.strict:
                raise
            log.exception("%s: logging W&B media failed; scalars were logged", self.prefix)

    def _write_files(self, trainer: pl.Trainer) -> None:
        """On-disk fallback beside any logger: ``<default_root_dir>/<prefix>/history.json`` and a PNG with the
        precision@k curve of every evaluation so far (convergence shows as curves moving up)."""
        if self.save_dir is False:
            return
        folder = Path(self.save_dir or Path(trainer.default_root_dir) / self.prefix)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "history.json").write_text(json.dumps(self.history, indent=1) + "\n", encoding="utf-8")
            curves = {f"step {h['step']}": h["precision_curve"] for h in self.history if h.get("precision_curve")}
            if curves:
                save_precision_curve_png(curves, folder / "precision_at_k.png", title=f"{self.prefix}: precision@k per evaluation")
        except Exception:  # noqa: BLE001 - files are best effort, never worth a run
            if self.strict:
                raise
            log.exception("%s: writing %s failed", self.prefix, folder)

    def _mismatch_rows(self, trainer: pl.Trainer, results: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
        """The most confident wrong top-1 neighbours, with thumbnails looked up by id in the dataset."""
        query_ids, query_labels = results["query_ids"], results["query_labels"]
        neighbor_ids, neighbor_labels, scores = results["neighbor_ids"], results["neighbor_labels"], results["neighbor_scores"]
        wrong = (neighbor_labels[:, 0] != query_labels).nonzero().flatten()
        order = wrong[scores[wrong, 0].argsort(descending=True, stable=True)][: self.num_mismatches]
        names = self.class_names or getattr(trainer.datamodule, "class_names", None)
        dataset = self._eval_dataset

        def label_name(label: int) -> str:
            return str(names[label]) if names is not None and 0 <= label < len(names) else str(label)

        rows = []
        for q in order.tolist():
            qid, nid = int(query_ids[q]), int(neighbor_ids[q, 0])
            rows.append(
                {
                    "query_id": qid,
                    "query_label": label_name(int(query_labels[q])),
                    "retrieved_id": nid,
                    "retrieved_label": label_name(int(neighbor_labels[q, 0])),
                    "cosine": float(scores[q, 0]),
                    "query_image": _thumbnail(dataset, qid, self.input_key),
                    "retrieved_image": _thumbnail(dataset, nid, self.input_key),
                }
            )
        return rows


def _thumbnail(dataset: Any, sample_id: int, key: str) -> torch.Tensor | None:
    """The image of ``sample_id`` when the dataset is indexed by id (item ``i`` has id ``i``)."""
    if dataset is None or not hasattr(dataset, "__getitem__"):
        return None
    try:
        item = dataset[sample_id]
    except Exception:  # noqa: BLE001
        return None
    if not isinstance(item, dict) or int(item.get("id", -1)) != sample_id:
        return None
    image = item.get(key)
    return image if isinstance(image, torch.Tensor) and image.ndim == 3 else None
