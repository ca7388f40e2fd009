"""Text-to-image R-precision of a generator while it trains: fixed seeded prompts → generated images → a frozen
CLIP evaluator → :class:`~beyondlabels.metrics.TextImageRPrecision`."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from beyondlabels._internal.checks import check_int_at_least, check_positive_int
from beyondlabels.callbacks.base import EvaluationCore, LightningModule, Trainer, check_method_paths
from beyondlabels.callbacks.files import EvaluationFiles
from beyondlabels.callbacks.media import EvaluationMedia
from beyondlabels.io.atomic import write_json
from beyondlabels.metrics.rprecision import TextImageRPrecision

log = logging.getLogger(__name__)

__all__ = ["PromptSet", "RPrecisionCore", "select_prompts"]


def select_prompts(pool: Sequence[str], num_prompts: int, seed: int) -> tuple[list[int], list[str]]:
    """A fixed, seeded choice of ``num_prompts`` prompts of ``pool`` (without replacement), in pool order.

    Returns the pool indices (the samples' global ids) and the prompts.

    Examples:
        >>> select_prompts(["a", "b", "c", "d"], 2, seed=0) == select_prompts(["a", "b", "c", "d"], 2, seed=0)
        True
    """
    if isinstance(pool, str) or not isinstance(pool, Sequence) or not all(isinstance(p, str) for p in pool):
        raise ValueError(f"the prompt pool must be a list of strings, got {type(pool).__name__}.")
    if num_prompts > len(pool):
        raise ValueError(
            f"`num_prompts` {num_prompts} exceeds the {len(pool)} prompts of the pool; lower it or give more prompts."
        )
    chosen = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:num_prompts]
    ids = sorted(int(i) for i in chosen)
    return ids, [pool[i] for i in ids]


# The options of TextImageRPrecision a callback passes through (the metric validates them and holds their defaults).
PROTOCOL_OPTIONS = (
    "num_candidates",
    "r",
    "top_r",
    "protocol",
    "repeats",
    "seed",
    "near_duplicate_threshold",
    "hard_negatives",
)
# Their defaults, read from the metric: the callback declares each option (LightningCLI / jsonargparse read the
# signature) with the metric's default.
_METRIC_DEFAULTS = {name: inspect.signature(TextImageRPrecision).parameters[name].default for name in PROTOCOL_OPTIONS}


class PromptSet(Dataset):
    """Items ``{"prompt": str, "id": int}`` (map-style, so the base shards it under DDP)."""

    def __init__(self, ids: Sequence[int], prompts: Sequence[str]) -> None:
        self.ids, self.prompts = list(ids), list(prompts)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"prompt": self.prompts[i], "id": self.ids[i]}


class RPrecisionCore(EvaluationCore):
    """Every N steps (or epochs): generate images for a fixed seeded prompt set and log their R-precision.

    Each evaluation takes the same ``num_prompts`` prompts (chosen from ``prompts`` with ``prompt_seed``), calls
    ``pl_module.<generate_method>(prompts)`` (images ``[B, 3, H, W]`` in ``[0, 1]``), embeds images and prompts with the
    frozen ``evaluator`` (:class:`~beyondlabels.io.evaluator.ClipEvaluator` or any object with ``encode_images``,
    ``encode_texts`` and an ``identity`` dict) and feeds :class:`~beyondlabels.metrics.TextImageRPrecision`
    (definitions: :mod:`beyondlabels.functional.rprecision`). Scalars are logged on every rank by the base; on rank 0 a
    media table (every logger, ``media/``) of prompts, their generated images and the rank of their own caption, and the
    top-r curve. The evaluator identity and the protocol are logged as hyperparameters and written to
    ``<save_dir>/evaluator.json``.

    Args:
        evaluator: The frozen evaluator (numbers are comparable only under one evaluator).
        prompts: The prompt pool: a list of strings, or the name of a datamodule / module attribute holding one.
        num_prompts: Prompts per evaluation (at least ``num_candidates``).
        prompt_seed: Seed of the prompt choice.
        generate_method: The module method ``(list[str]) -> images in [0, 1]``: a name, or a dotted path to a
            submodule's method or to a submodule (``"pipeline.generate"``).
        batch_size: Prompts generated per call.
        num_table_rows: Rows of the media table (0: none).
        prefix: Namespace of the logged keys.
        num_candidates: A protocol option of :class:`~beyondlabels.metrics.TextImageRPrecision` (definition and default
            there).
        r: A protocol option of :class:`~beyondlabels.metrics.TextImageRPrecision` (definition and default there).
        top_r: A protocol option of :class:`~beyondlabels.metrics.TextImageRPrecision` (definition and default there).
        protocol: A protocol option of :class:`~beyondlabels.metrics.TextImageRPrecision` (definition and default
            there).
        repeats: A protocol option of :class:`~beyondlabels.metrics.TextImageRPrecision` (definition and default there).
        seed: A protocol option of :class:`~beyondlabels.metrics.TextImageRPrecision` (definition and default there).
        near_duplicate_threshold: A protocol option of :class:`~beyondlabels.metrics.TextImageRPrecision` (definition
            and default there).
        hard_negatives: A protocol option of :class:`~beyondlabels.metrics.TextImageRPrecision` (definition and default
            there).
        dataloader: None (default): the seeded prompt set; else a loader of ``{"prompt", "id"}`` batches.
        test_dataloader: What ``trainer.test()`` evaluates; None (default): nothing (the prompt set is the evaluation's
            own).
        kwargs: The options of :class:`~beyondlabels.callbacks.base.EvaluationCore` (schedule, files, strict, ...).
    """

    def __init__(
        self,
        evaluator: Any,
        prompts: str | Sequence[str] = "prompts",
        num_prompts: int = 128,
        prompt_seed: int = 0,
        generate_method: str = "generate",
        batch_size: int = 32,
        num_table_rows: int = 16,
        *,
        num_candidates: int = _METRIC_DEFAULTS["num_candidates"],
        r: int = _METRIC_DEFAULTS["r"],
        top_r: Sequence[int] = _METRIC_DEFAULTS["top_r"],
        protocol: str = _METRIC_DEFAULTS["protocol"],
        repeats: int = _METRIC_DEFAULTS["repeats"],
        seed: int = _METRIC_DEFAULTS["seed"],
        near_duplicate_threshold: float | None = _METRIC_DEFAULTS["near_duplicate_threshold"],
        hard_negatives: bool = _METRIC_DEFAULTS["hard_negatives"],
        dataloader: str | DataLoader | Callable[[], DataLoader] | None = None,
        test_dataloader: str | DataLoader | Callable[[], DataLoader] | None = None,
        prefix: str = "rprecision",
        **kwargs: Any,
    ) -> None:
        for name in ("encode_images", "encode_texts"):
            if not callable(getattr(evaluator, name, None)):
                raise ValueError(
                    f"`evaluator` must have an `{name}` method (e.g. beyondlabels.io.evaluator.ClipEvaluator), got "
                    f"{type(evaluator).__name__}."
                )
        check_positive_int(num_prompts, "num_prompts")
        check_positive_int(batch_size, "batch_size")
        check_int_at_least(num_table_rows, "num_table_rows", 0)
        check_method_paths(generate_method=generate_method)
        self.evaluator = evaluator
        self.prompts = prompts if isinstance(prompts, str) else list(prompts)
        self.num_prompts, self.prompt_seed = num_prompts, prompt_seed
        self.generate_method, self.batch_size, self.num_table_rows = generate_method, batch_size, num_table_rows
        self._metric_args = {
            "num_candidates": num_candidates,
            "r": r,
            "top_r": top_r,
            "protocol": protocol,
            "repeats": repeats,
            "seed": seed,
            "near_duplicate_threshold": near_duplicate_threshold,
            "hard_negatives": hard_negatives,
        }
        self._prompt_set: PromptSet | None = None
        self._table: dict[int, tuple[str, torch.Tensor]] = {}
        # declared here, not taken from the base's defaults: a configuration that passes every option (LightningCLI)
        # would otherwise hand the prompt evaluation the validation loader
        loader = self._loader if dataloader is None else dataloader
        super().__init__(prefix=prefix, dataloader=loader, test_dataloader=test_dataloader, **kwargs)
        num_candidates = self.metric.num_candidates
        if num_prompts < num_candidates:
            raise ValueError(
                f"`num_prompts` {num_prompts} is below `num_candidates` {num_candidates}: each image needs "
                f"{num_candidates - 1} other prompts as distractors; raise num_prompts or lower num_candidates."
            )

    def build_metric(self) -> TextImageRPrecision:
        return TextImageRPrecision(**self._metric_args)

    @classmethod
    def examples(cls) -> list[dict[str, Any]]:
        """(See :meth:`EvaluationCore.examples`.) The evaluator is a stand-in: an object with ``encode_images``,
        ``encode_texts`` and the ``identity_hash`` that names it in the state key."""

        def evaluator(name: str) -> SimpleNamespace:
            return SimpleNamespace(
                identity={"evaluator": name},
                identity_hash=name,
                encode_images=lambda x: x.flatten(1),
                encode_texts=lambda texts: torch.zeros(len(texts), 3),
            )

        plain = {"evaluator": evaluator("example-a"), "num_prompts": 8, "num_candidates": 4, "top_r": (1,), "r": 1}
        return [plain, {**plain, "generate_method": "sample"}, {**plain, "evaluator": evaluator("example-b")}]

    def state_key_parts(self) -> dict[str, Any]:
        return {
            "generate_method": self.generate_method,
            "evaluator": getattr(self.evaluator, "identity_hash", type(self.evaluator).__name__),
        }

    @property
    def identity(self) -> dict[str, Any]:
        return dict(getattr(self.evaluator, "identity", {"evaluator": type(self.evaluator).__name__}))

    # ---- prompts ---------------------------------------------------------------------------------------------------
    def _pool(self, trainer: Trainer, pl_module: LightningModule) -> list[str]:
        if not isinstance(self.prompts, str):
            return self.prompts
        for owner in (getattr(trainer, "datamodule", None), pl_module):
            if owner is not None and hasattr(owner, self.prompts):
                pool = getattr(owner, self.prompts)
                return list(pool() if callable(pool) else pool)
        raise AttributeError(
            f"neither the datamodule nor the LightningModule has an attribute {self.prompts!r}; pass "
            f"{type(self).__name__}(prompts=[...]) or the name of an attribute holding the prompt pool"
        )

    def check_module(self, pl_module: LightningModule) -> None:
        self.check_methods(pl_module, generate_method="maps a list of prompts to images [B, 3, H, W] in [0, 1]")

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        ids, prompts = select_prompts(self._pool(trainer, pl_module), self.num_prompts, self.prompt_seed)
        self._prompt_set = PromptSet(ids, prompts)
        config = {
            "evaluator": self.identity,
            "protocol": self.metric.settings(),
            "num_prompts": self.num_prompts,
            "prompt_seed": self.prompt_seed,
        }
        for logger in trainer.loggers:
            logger.log_hyperparams({self.prefix: config})
        folder = self.output_folder(trainer)
        if trainer.is_global_zero and folder is not None:
            try:
                write_json(folder / "evaluator.json", config, sort_keys=True)
            except OSError as exc:  # rank 0 alone: raising here would leave the other ranks waiting
                log.error(
                    "%s: writing %s failed (%s); the evaluator's identity is also in every report",
                    self.prefix,
                    folder / "evaluator.json",
                    exc,
                )

    def _loader(self) -> DataLoader:
        if self._prompt_set is None:
            raise RuntimeError("RPrecisionEvalCallback evaluates only after setup (the prompt set is chosen there).")
        return DataLoader(self._prompt_set, batch_size=self.batch_size, shuffle=False)

    # ---- one batch -------------------------------------------------------------------------------------------------
    def feed(self, pl_module: LightningModule, batch: Mapping[str, Any]) -> None:
        prompts = list(batch["prompt"])
        ids = self.take_ids(len(prompts), batch.get("id"))
        images = self.call_module(pl_module, self.generate_method, prompts)  # the evaluator keeps its own precision
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[0] != len(prompts):
            got = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            raise ValueError(
                f"{self.generate_method}(prompts) must return images [B, 3, H, W] in [0, 1] for B={len(prompts)} "
                f"prompts, got {got}."
            )
        image_features = self.evaluator.encode_images(images.detach().float())
        text_features = self.evaluator.encode_texts(prompts).to(image_features.device)
        device = pl_module.device
        self.metric.update(image_features.to(device), text_features.to(device), ids, captions=prompts)
        if self.num_table_rows and len(self._table) < self.num_table_rows:
            for i, prompt, image in zip(ids.tolist(), prompts, images):
                if len(self._table) < self.num_table_rows:
                    self._table[i] = (prompt, image.detach().float().clamp(0, 1).cpu())

    def on_evaluation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._table = {}

    def on_evaluation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._table = {}

    # ---- files and media (rank 0) ----------------------------------------------------------------------------------
    def _sample_rows(self, results: dict[str, Any]) -> list[dict[str, Any]]:
        """The first ``num_table_rows`` prompts of the evaluation with their generated image and own-caption rank."""
        if not self._table:
            return []
        per_query = results["per_query"]
        rank_of = dict(zip(per_query["query_id"].tolist(), per_query["rank"].tolist()))
        return [
            {"prompt": prompt, "generated_image": image, "rank_of_own_caption": int(rank_of[i]), "id": i}
            for i, (prompt, image) in sorted(self._table.items())
            if i in rank_of
        ]

    def write_step_files(self, trainer: Trainer, results: dict[str, Any], step: int, files: EvaluationFiles) -> None:
        """``samples/step_<step>.png`` beside the base's files: the sample pictures under their prompt and rank."""
        path = files.step_path("samples", step, ".png")  # known to the retention policy even when nothing is drawn
        rows = self._sample_rows(results)
        if not rows:
            return
        from beyondlabels.reporting.plots import save_image_grid_png

        save_image_grid_png(
            torch.stack([row["generated_image"] for row in rows]),
            [f"{row['prompt']} (rank {row['rank_of_own_caption']})" for row in rows],
            path,
            title=(
                f"{self.prefix}: generated at step {step} (rank of the own caption among {self.metric.num_candidates})"
            ),
        )

    def describe_media(self, trainer: Trainer, results: dict[str, Any], media: EvaluationMedia) -> None:
        rows = self._sample_rows(results)
        if rows:
            media.table("samples", ["prompt", "generated_image", "rank_of_own_caption", "id"], rows)
