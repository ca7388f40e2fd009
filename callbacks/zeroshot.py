"""Periodic zero-shot classification of a dual encoder (CLIP-style): class names and prompt templates against images."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from beyondlabels._internal.checks import check_positive_int
from beyondlabels.callbacks._module_paths import TWO_TOWER_METHODS
from beyondlabels.callbacks.base import EvaluationCore, LightningModule, Trainer, check_method_paths, check_names
from beyondlabels.callbacks.media import EvaluationMedia
from beyondlabels.functional.zeroshot import (
    check_class_names,
    check_templates,
    class_prompts,
    prompt_ensemble,
    zeroshot_scores,
)
from beyondlabels.metrics import ZeroShotClassification
from beyondlabels.schema import OutputSchema

__all__ = ["DEFAULT_KS", "ZeroShotEvalCore", "default_ks"]

# The cut-offs logged when `ks` is not given: CLIP's top-1 / top-5, each only where there are that many classes.
DEFAULT_KS = (1, 5)


def default_ks(num_classes: int) -> tuple[int, ...]:
    """The default cut-offs for ``num_classes`` classes: the k of ``DEFAULT_KS`` that are at most ``num_classes``.

    Examples:
        >>> default_ks(16), default_ks(2)
        ((1, 5), (1,))
    """
    return tuple(k for k in DEFAULT_KS if k <= num_classes) or DEFAULT_KS[:1]


class ZeroShotEvalCore(EvaluationCore):
    """Every few epochs or steps, classify the evaluation images against prompt-ensembled class embeddings.

    At the start of each evaluation the class embeddings are rebuilt with the module's current text tower (it trains):
    every class name is put into every template (:func:`~beyondlabels.functional.zeroshot.class_prompts`), the prompts
    are encoded with ``pl_module.<text_method>`` (in chunks of ``text_batch_size``) and ensembled
    (:func:`~beyondlabels.functional.zeroshot.prompt_ensemble`: mean of the normalised template embeddings,
    renormalised — CLIP's recipe); they are then reused for every batch of that evaluation only. Each image's class
    scores are its cosines with the class embeddings, fed to :class:`~beyondlabels.metrics.ZeroShotClassification`.
    It logs ``<prefix>/top1``, ``<prefix>/top5``, ``<prefix>/balanced_accuracy`` and counts at the trainer's global
    step, writes each sample's top-1 ``prediction`` to the per-query files (what label-based families read) and, on
    rank 0, sends the confusion matrix (a figure, and a table of its non-zero counts) to every logger with media and the
    ``media/`` folder. Schedule, loader sharding, failures, files and resume:
    :class:`~beyondlabels.callbacks.base.EvaluationCore`.

    Args:
        class_names: Class names in label order (label ``i`` is ``class_names[i]``); None reads the datamodule's (or
            the module's) attribute named ``class_names_from`` at every evaluation.
        class_names_from: That attribute's name (the demo's ``class_phrases`` are its class names as words).
        templates: Prompt templates with one ``{}`` for the class name, e.g. ``["a photo of a {}."]``.
        image_method: LightningModule method mapping images to embeddings ``[B, D]``: its name, or a dotted path to a
            submodule's method or to a submodule (``"model.encode_image"``, ``"clip.visual"``).
        text_method: LightningModule method (a name or a dotted path) mapping prompts (strings, or with ``tokenizer``
            tokens) to ``[M, D]``.
        tokenizer: Optional LightningModule attribute (a name or a dotted path) mapping a list of strings to the tokens
            ``text_method`` takes; None: ``text_method`` takes strings.
        text_batch_size: Prompts encoded per call.
        input_key: Batch key of the images; tuple batches ``(images, labels)`` / ``(images, labels, ids)`` work too.
        label_key: Batch key of the labels (class indices, or class names).
        id_key: Batch key of the global sample ids.
        ks: The k of every ``top{k}`` key; at most the number of classes. None (the default): ``DEFAULT_KS``, (1, 5),
            cut to the number of classes: top-1, and top-5 when there are at least 5 classes (top-5 of fewer classes
            would be 1 for every image). With class names from the datamodule the cut is made at ``setup``.
        confusion_matrix: Describe the confusion matrix in the media (rank 0).
        kwargs: Schedule, loader, files and failure options of
            :class:`~beyondlabels.callbacks.base.EvaluationCore`.

    Examples:
        >>> from beyondlabels.callbacks import ZeroShotEvalCallback
        >>> callback = ZeroShotEvalCallback(
        ...     class_names=["cat", "dog", "bird", "fish", "frog"], templates=["a {}", "a photo of a {}"]
        ... )
        >>> callback.prompts()[:3], callback.schema.scalar_keys()[:3]
        (['a cat', 'a photo of a cat', 'a dog'], ['top1', 'top5', 'balanced_accuracy'])
        >>> ZeroShotEvalCallback(class_names=["square", "circle"]).ks  # the default ks, cut to 2 classes
        (1,)
    """

    def __init__(
        self,
        class_names: Sequence[str] | None = None,
        templates: Sequence[str] = ("a photo of a {}.",),
        class_names_from: str = "class_names",
        image_method: str = "encode_image",
        text_method: str = "encode_text",
        tokenizer: str | None = None,
        text_batch_size: int = 256,
        input_key: str = "image",
        label_key: str = "label",
        id_key: str = "id",
        ks: Sequence[int] | None = None,
        confusion_matrix: bool = True,
        *,
        every_n_epochs: int | None = None,
        every_n_steps: int | None = None,
        dataloader: str | DataLoader | Callable[[], DataLoader] = "val_dataloader",
        prefix: str = "zeroshot",
        **kwargs: Any,
    ) -> None:
        self.class_names = None if class_names is None else check_class_names(list(class_names))
        self.templates = check_templates(list(templates) if not isinstance(templates, str) else templates)
        check_method_paths(
            image_method=image_method, text_method=text_method, tokenizer=tokenizer, optional=("tokenizer",)
        )
        check_names(class_names_from=class_names_from, input_key=input_key, label_key=label_key, id_key=id_key)
        check_positive_int(text_batch_size, "text_batch_size")
        self.class_names_from = class_names_from
        self.image_method, self.text_method, self.tokenizer = image_method, text_method, tokenizer
        self.text_batch_size = text_batch_size
        self.input_key, self.label_key, self.id_key = input_key, label_key, id_key
        self._default_ks = ks is None  # cut to the number of classes once it is known
        if ks is None:
            ks = default_ks(len(self.class_names)) if self.class_names is not None else DEFAULT_KS
        self.ks = tuple(ks) if isinstance(ks, Sequence) and not isinstance(ks, str) else ks
        self.confusion_matrix = bool(confusion_matrix)
        self._classifier: torch.Tensor | None = None
        self._names: tuple[str, ...] | None = self.class_names
        super().__init__(
            every_n_epochs=every_n_epochs, every_n_steps=every_n_steps, dataloader=dataloader, prefix=prefix, **kwargs
        )

    # The metric needs the number of classes: it is built once the class names are known (at construction when
    # they are given, else at setup from the datamodule or module).
    def build_metric(self) -> ZeroShotClassification:
        return ZeroShotClassification(num_classes=len(self._names), ks=self.ks)

    def output_schema(self) -> OutputSchema:
        if self._names is not None:
            return super().output_schema()  # builds the metric: ks above the number of classes fail now
        return ZeroShotClassification.schema_for(self.ks)

    @classmethod
    def examples(cls) -> list[dict[str, Any]]:
        plain = {"templates": ["a {}"]}
        return [plain, {**plain, "image_method": "embed_image"}, {"templates": ["a {}", "the {}"]}]

    def state_key_parts(self) -> dict[str, Any]:
        return {"image_method": self.image_method, "templates": "|".join(self.templates)}

    def prompts(self) -> list[str]:
        """Every prompt of the current class names, class by class (prompt ``c * T + t``)."""
        if self._names is None:
            raise ValueError(
                "no class names yet: pass class_names=[...] or attach the callback to a trainer whose datamodule has "
                "them"
            )
        return class_prompts(self._names, self.templates)

    def _resolve_names(self, trainer: Trainer, pl_module: LightningModule) -> tuple[str, ...]:
        if self.class_names is not None:
            return self.class_names
        for owner in (trainer.datamodule, pl_module):
            names = getattr(owner, self.class_names_from, None) if owner is not None else None
            if names is not None:
                return check_class_names(list(names))
        raise AttributeError(
            f"ZeroShotEvalCallback has no class names: pass class_names=[...] or give the datamodule (or module) an "
            f"attribute {self.class_names_from!r} listing them in label order (set class_names_from=... to its name)"
        )

    def check_module(self, pl_module: LightningModule) -> None:
        self.check_methods(pl_module, **TWO_TOWER_METHODS)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._use_names(self._resolve_names(trainer, pl_module))

    def _use_names(self, names: tuple[str, ...]) -> None:
        if self.metric is None or names != self._names:
            self._names = names
            if self._default_ks:
                self._cut_default_ks(default_ks(len(names)))
            # a ValueError naming `ks` when ks exceeds the number of classes; the schema depends on ks only
            self.metric = self.build_metric()

    def _cut_default_ks(self, ks: tuple[int, ...]) -> None:
        """Log the default cut-offs ``ks`` of this many classes: the ``top{k}`` keys of the others leave the schema
        (a ``prog_bar`` or ``keep_best`` naming one of them is an error). A cut is never undone: the keys stay those
        the callback was set up with."""
        ks = tuple(k for k in ks if k in self.ks) or self.ks[:1]
        gone = {f"top{k}" for k in self.ks if k not in ks}
        self.ks = ks
        if not gone:
            return
        named = sorted(gone & {*self.prog_bar, self.keep_best})
        if named:
            raise ValueError(
                f"ZeroShotEvalCallback: {named} named by prog_bar / keep_best are not logged with {len(self._names)} "
                f"classes (the default `ks` is cut to {list(ks)}); remove them or pass ks=... of at most "
                f"{len(self._names)}."
            )
        dropped = gone | {f"{key}_ci_{end}" for key in gone for end in ("low", "high")}
        self.schema = OutputSchema(
            {k: v for k, v in self.schema.items() if k not in dropped},
            {k: v for k, v in self.schema.per_query.items() if k not in gone},
        )
        self.ci_keys = [k for k in self.ci_keys if k not in gone]

    def on_evaluation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.metric is None:  # evaluated without setup
            self._use_names(self._resolve_names(trainer, pl_module))
        self._classifier = None  # rebuilt with the current text tower, once per evaluation

    def on_evaluation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._classifier = None

    # ---- one batch -----------------------------------------------------------------------------------------------
    def class_embeddings(self, pl_module: LightningModule) -> torch.Tensor:
        """The prompt-ensembled class embeddings ``[C, D]`` of this evaluation (built on first use, then cached)."""
        if self._classifier is None:
            embeddings = self.encode_texts(
                pl_module, self.prompts(), self.text_method, self.tokenizer, self.text_batch_size
            )
            self._classifier = prompt_ensemble(embeddings, num_classes=len(self._names))
        return self._classifier

    def _label_indices(self, labels: Any, device: torch.device) -> torch.Tensor:
        if isinstance(labels, (list, tuple)) and labels and all(isinstance(v, str) for v in labels):
            index = {name: i for i, name in enumerate(self._names)}
            unknown = sorted({v for v in labels if v not in index})
            if unknown:
                raise ValueError(
                    f"labels {unknown[:5]} are not among the class names; labels must be class indices or class names."
                )
            return torch.tensor([index[v] for v in labels], dtype=torch.long, device=device)
        return torch.as_tensor(labels).to(device)

    def feed(self, pl_module: LightningModule, batch: Any) -> None:
        images, labels, given_ids = self.unpack(batch)
        images = self.to_device(images, pl_module)
        scores = zeroshot_scores(self.embed(pl_module, self.image_method, images), self.class_embeddings(pl_module))
        ids = self.take_ids(scores.shape[0], given_ids)
        self.metric.update(scores, self._label_indices(labels, scores.device), ids)

    # ---- media ---------------------------------------------------------------------------------------------------
    def describe_media(self, trainer: Trainer, results: dict[str, Any], media: EvaluationMedia) -> None:
        if not self.confusion_matrix or "confusion_matrix" not in results:
            return
        from beyondlabels.reporting.media_figures import confusion_matrix_figure

        matrix = torch.as_tensor(results["confusion_matrix"]).cpu()
        names = [str(n) for n in self._names]
        title = f"{self.prefix}: confusion matrix (step {media.step})"
        media.figure(
            "confusion_matrix",
            confusion_matrix_figure(matrix.numpy(), names, title=title),
            caption="rows: true class, columns: predicted class",
        )
        cells = matrix.nonzero().tolist()  # the non-zero cells only: K*K rows would not scale to many classes
        rows = [[names[a], names[p], int(matrix[a, p])] for a, p in cells]
        media.table("confusion_counts", ["Actual", "Predicted", "nPredictions"], rows)
