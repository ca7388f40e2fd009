"""Periodic taxonomy-aware evaluation: hierarchical precision / recall / F of a module's predictions."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from beyondlabels._internal.checks import check_int_at_least
from beyondlabels.callbacks.base import EvaluationCore, LightningModule, Trainer, check_method_paths, check_names
from beyondlabels.callbacks.media import EvaluationMedia
from beyondlabels.functional.hierarchy import check_abstention_precision, per_class_means
from beyondlabels.io.taxonomy_files import load_node_texts, load_taxonomy
from beyondlabels.io.text_encoders import text_encoder
from beyondlabels.metrics import HierarchicalPrecisionRecall
from beyondlabels.taxonomy import Taxonomy, TextToNode
from beyondlabels.taxonomy.text import DEFAULT_RULES

log = logging.getLogger(__name__)

__all__ = ["HierarchyEvalCore"]

SOURCES = ("labels", "text")


class HierarchyEvalCore(EvaluationCore):
    """Every few epochs or steps, ask the module for predictions on a fixed evaluation set and log hP / hR / hF.

    Predictions come from the LightningModule, in eval mode without gradients:

    - ``source="labels"``: ``pl_module.<predict_method>(inputs)`` returns class indices ``[B]`` (mapped to nodes with
      ``class_names``) or a list of node names;
    - ``source="text"``: ``pl_module.<text_method>(inputs)`` returns free-text answers, mapped to nodes by
      :class:`~beyondlabels.taxonomy.TextToNode` (the CVPR 2025 paper's mapping, every rule switchable) with the
      module's own ``encode_text`` (``encoder="module"``, re-embedding node texts at every evaluation) or any encoder
      :func:`~beyondlabels.io.text_encoders.text_encoder` builds (a name, a ``_target_`` config, an object).

    Ground truths are the batch's labels: class indices (mapped with ``class_names``) or node names.
    :class:`~beyondlabels.metrics.HierarchicalPrecisionRecall` gathers them on every rank; every scalar is logged as
    ``<prefix>/<name>`` (``hierarchy/hP``, ``hierarchy/hR``, ``hierarchy/hF``, ``hierarchy/micro_hF``,
    ``hierarchy/abstentions``: predictions at the root, worth ``abstention_precision``, ...) at the trainer's global
    step. On rank 0, the media (every logger, ``media/``) also get a table of examples (image, answer, mapped node,
    rule, ground truth, p_n, r_n) and an hP-hR scatter with one point per ground-truth class. Schedule, loader
    sharding, failures, files and resume: :class:`~beyondlabels.callbacks.base.EvaluationCore`.

    Args:
        taxonomy: a :class:`~beyondlabels.taxonomy.Taxonomy` or what
            :func:`~beyondlabels.io.taxonomy_files.load_taxonomy` reads (a YAML/JSON/TSV path, ``"wordnet"``, a
            ``{root, parent}`` mapping).
        taxonomy_root: evaluate within the subtree under this node (``"vehicle.n.01"`` of ``"wordnet"``).
        source: ``"labels"`` or ``"text"``.
        predict_method: module method returning class indices or node names (``source="labels"``): a name, or a dotted
            path to a submodule's method or to a submodule (``"model.classify"``).
        text_method: module method returning answers (``source="text"``; a name or a dotted path).
        class_names: node name of every class index, in label order (default: the datamodule's ``class_names``).
        include_root: count the root in ancestor sets.
        abstention_precision: the precision of a prediction at the root (default 0: an abstention earns nothing).
        encoder: ``"module"`` (the module's ``encode_text``), ``"hashing"``, ``"sentence-transformers:<name or path>"``,
            ``"open_clip:<model>[:<weights>]"``, a ``{_target_: ...}`` config, or an encoder object (a callable, an
            object with ``encode_text`` or ``encode``) (``source="text"``).
        node_texts: texts of the nodes for ``source="text"``: None (names), ``"wordnet_lemmas"``, a mapping or a
            YAML/JSON file (:func:`~beyondlabels.io.taxonomy_files.load_node_texts`).
        top_k: option of :class:`~beyondlabels.taxonomy.TextToNode` (as are the next five).
        rules: option of :class:`~beyondlabels.taxonomy.TextToNode`.
        ngram_orders: option of :class:`~beyondlabels.taxonomy.TextToNode`.
        context: option of :class:`~beyondlabels.taxonomy.TextToNode`.
        lca_gap: option of :class:`~beyondlabels.taxonomy.TextToNode`.
        temperature: option of :class:`~beyondlabels.taxonomy.TextToNode`.
        input_key: key of the inputs in dict batches (tuples are ``(inputs, labels[, ids])``).
        label_key: key of the labels in dict batches.
        id_key: key of the global sample ids in dict batches.
        num_examples: rows of the example table (0 turns it off).
        kwargs: schedule, loader, files and failure options of :class:`~beyondlabels.callbacks.base.EvaluationCore`.

    Examples:
        >>> from beyondlabels.demo import demo_taxonomy
        >>> from beyondlabels.callbacks import HierarchyEvalCallback
        >>> callback = HierarchyEvalCallback(demo_taxonomy(), every_n_epochs=2, prog_bar=["hF"])
        >>> callback.schema.mode("hF"), callback.schema.curve_keys()
        ('max', ['error_lca_depth_fraction'])
    """

    def __init__(
        self,
        taxonomy: Any,
        source: str = "labels",
        predict_method: str = "predict_labels",
        text_method: str = "generate_text",
        class_names: Sequence[str] | None = None,
        include_root: bool = False,
        encoder: Any = "module",
        top_k: int = 10,
        rules: Sequence[str] = DEFAULT_RULES,
        ngram_orders: Sequence[int] = (4, 3, 2),
        context: str | None = "both",
        lca_gap: float = 0.1,
        temperature: float = 1 / 3,
        node_texts: Any = None,
        taxonomy_root: str | None = None,
        abstention_precision: float = 0.0,
        input_key: str = "image",
        label_key: str = "label",
        id_key: str = "id",
        num_examples: int = 16,
        *,
        every_n_epochs: int | None = None,
        every_n_steps: int | None = None,
        dataloader: str | DataLoader | Callable[[], DataLoader] = "val_dataloader",
        prefix: str = "hierarchy",
        **kwargs: Any,
    ) -> None:
        try:
            self.taxonomy: Taxonomy = load_taxonomy(taxonomy, root=taxonomy_root)
        except ValueError as err:
            raise ValueError(f"`taxonomy`: {err}") from None
        self.abstention_precision = check_abstention_precision(abstention_precision)
        if source not in SOURCES:
            raise ValueError(f"`source` must be one of {SOURCES}, got {source!r}.")
        check_method_paths(predict_method=predict_method, text_method=text_method)
        check_names(input_key=input_key, label_key=label_key, id_key=id_key)
        check_int_at_least(num_examples, "num_examples", 0)
        self.source = source
        self.predict_method, self.text_method = predict_method, text_method
        self.class_names = list(class_names) if class_names is not None else None
        if self.class_names is not None:
            self.taxonomy.indices(self.class_names)  # unknown names fail here, not at the first evaluation
        self.include_root = include_root
        self.encoder = encoder
        self.mapper_options = {
            "top_k": top_k,
            "rules": rules if isinstance(rules, str) else tuple(rules),  # a string is refused by TextToNode
            "ngram_orders": tuple(ngram_orders),
            "context": context,
            "lca_gap": lca_gap,
            "temperature": temperature,
            "node_texts": load_node_texts(node_texts, self.taxonomy) if source == "text" else None,
        }
        self.input_key, self.label_key, self.id_key = input_key, label_key, id_key
        self.num_examples = num_examples
        self._mapper: TextToNode | None = None
        if source == "text" and encoder != "module":
            encode, encoder_key = text_encoder(encoder)
            self._mapper = TextToNode(self.taxonomy, encoder=encode, encoder_key=encoder_key, **self.mapper_options)
        elif source == "text":
            TextToNode(self.taxonomy, **self.mapper_options)  # validates the options now
        self._class_nodes: torch.Tensor | None = None
        self._examples: dict[int, dict[str, Any]] = {}
        super().__init__(
            every_n_epochs=every_n_epochs, every_n_steps=every_n_steps, dataloader=dataloader, prefix=prefix, **kwargs
        )

    def build_metric(self) -> HierarchicalPrecisionRecall:
        return HierarchicalPrecisionRecall(
            self.taxonomy, include_root=self.include_root, abstention_precision=self.abstention_precision
        )

    @classmethod
    def examples(cls) -> list[dict[str, Any]]:
        plain = {"taxonomy": Taxonomy({"A": "root", "a0": "A", "a1": "A"}, root="root")}
        return [plain, {**plain, "predict_method": "classify"}, {**plain, "source": "text"}]

    def state_key_parts(self) -> dict[str, Any]:
        method = self.predict_method if self.source == "labels" else self.text_method
        return {"source": self.source, "method": method}

    def check_module(self, pl_module: LightningModule) -> None:
        if self.source == "labels":
            self.check_methods(pl_module, predict_method="returns class indices")
        else:
            self.check_methods(pl_module, text_method="returns free-text answers")
        if self.source == "text" and self.encoder == "module" and not callable(getattr(pl_module, "encode_text", None)):
            raise AttributeError(
                f"{type(pl_module).__name__} has no encode_text method for encoder='module'; set "
                "HierarchyEvalCallback(encoder=...) to 'hashing', 'sentence-transformers:<name>', "
                "'open_clip:<model>', a {_target_: ...} config or an encoder object"
            )

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        names = self.class_names
        if names is None:
            names = getattr(trainer.datamodule, "class_names", None) if trainer.datamodule is not None else None
        self._class_nodes = self.taxonomy.indices(list(names)) if names is not None else None

    # ---- one batch ---------------------------------------------------------------------------------------------------
    def _to_nodes(self, values: Any, what: str, device: torch.device) -> torch.Tensor:
        """Node indices of class indices (through ``class_names``) or of node names."""
        if isinstance(values, (list, tuple)) and values and all(isinstance(v, str) for v in values):
            try:
                return self.taxonomy.indices(list(values)).to(device)
            except ValueError as err:
                raise ValueError(f"{what}: {err}") from None
        classes = torch.as_tensor(values).to(device)
        if classes.dim() != 1 or classes.is_floating_point() or classes.dtype == torch.bool:
            raise ValueError(
                f"{what} must be class indices [B] or node names, got {tuple(classes.shape)} {classes.dtype}"
            )
        if self._class_nodes is None:
            raise ValueError(
                f"{what} are class indices but no class names are known; pass HierarchyEvalCallback(class_names=[...]) "
                "(the node of every class index) or give the datamodule a `class_names` attribute"
            )
        table = self._class_nodes.to(device)
        if classes.numel() and (int(classes.min()) < 0 or int(classes.max()) >= table.numel()):
            raise ValueError(
                f"{what} hold class indices outside [0, {table.numel()}) (the {table.numel()} class names)"
            )
        return table[classes.long()]

    def _text_mapper(self, trainer: Trainer, pl_module: LightningModule) -> TextToNode:
        if self.encoder != "module":
            assert self._mapper is not None
            return self._mapper
        key = ("module", trainer.global_step)  # the weights change with the step: node texts are embedded again
        if self._mapper is None:
            self._mapper = TextToNode(self.taxonomy, encoder=pl_module, encoder_key=key, **self.mapper_options)
        else:
            self._mapper.set_encoder(pl_module, encoder_key=key)
        return self._mapper

    def feed(self, pl_module: LightningModule, batch: Any) -> None:
        inputs, labels, given_ids = self.unpack(batch)
        inputs = self.to_device(inputs, pl_module)
        device = pl_module.device
        gt = self._to_nodes(labels, "labels", device)
        answers: list[str] | None = None
        rules: list[str] | None = None
        if self.source == "labels":
            pred = self._to_nodes(
                self.call_module(pl_module, self.predict_method, inputs), f"{self.predict_method}()", device
            )
        else:
            answers = self.call_module(pl_module, self.text_method, inputs)
            if (
                isinstance(answers, str)
                or not isinstance(answers, (list, tuple))
                or not all(isinstance(a, str) for a in answers)
            ):
                raise TypeError(f"{self.text_method}() must return a list of strings, got {type(answers).__name__}")
            with self.module_context() if self.encoder == "module" else contextlib.nullcontext():  # the module encodes
                index, rules = self._text_mapper(self.eval_trainer, pl_module).map_indices(list(answers))
            pred = index.to(device)
        if pred.numel() != gt.numel():
            raise ValueError(f"the module gave {pred.numel()} predictions for a batch of {gt.numel()} samples")
        ids = self.take_ids(gt.numel(), given_ids)
        self.metric.update(pred, gt, ids)
        if self.num_examples and len(self._examples) < self.num_examples:
            names = self.taxonomy.nodes
            for row, sample_id in enumerate(ids.tolist()[: self.num_examples - len(self._examples)]):
                self._examples[int(sample_id)] = {
                    "answer": answers[row] if answers is not None else names[int(pred[row])],
                    "mapped_node": names[int(pred[row])],
                    "rule": rules[row] if rules is not None else "class",
                    "ground_truth": names[int(gt[row])],
                }

    def on_evaluation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._examples = {}

    # ---- media (rank 0) ----------------------------------------------------------------------------------------------
    def describe_media(self, trainer: Trainer, results: dict[str, Any], media: EvaluationMedia) -> None:
        per_query = results["per_query"]
        if self.num_examples and self._examples:
            position = {int(q): i for i, q in enumerate(per_query["query_id"].tolist())}
            rows = []
            for sample_id, example in sorted(self._examples.items()):
                i = position.get(sample_id)
                if i is None:
                    continue
                rows.append(
                    {
                        "input_image": self.thumbnail(sample_id),
                        **example,
                        "p_n": float(per_query["hP"][i]),
                        "r_n": float(per_query["hR"][i]),
                        "id": sample_id,
                    }
                )
            columns = ["input_image", "answer", "mapped_node", "rule", "ground_truth", "p_n", "r_n", "id"]
            media.table("examples", columns, rows)
        self._describe_scatter(results, media)

    def _describe_scatter(self, results: dict[str, Any], media: EvaluationMedia) -> None:
        """The per-class mean hP and hR: a table and its scatter plot."""
        from beyondlabels.reporting.media_figures import scatter_figure

        means = per_class_means(results["per_query"], ("hP", "hR"))
        names = self.taxonomy.nodes
        rows = [
            [names[int(n)], float(p), float(r), int(c)]
            for n, p, r, c in zip(
                means["node"].tolist(), means["hP"].tolist(), means["hR"].tolist(), means["count"].tolist()
            )
        ]
        media.table("per_class_hp_hr", ["class", "hP", "hR", "count"], rows)
        title = f"{self.prefix}: hP vs hR per class (step {media.step})"
        media.figure(
            "hp_hr_per_class",
            scatter_figure([r[2] for r in rows], [r[1] for r in rows], [r[0] for r in rows], "hR", "hP", title),
            caption="mean hierarchical precision and recall of each true class",
        )
