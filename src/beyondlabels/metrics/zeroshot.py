"""torchmetrics class for (zero-shot) classification from class scores: top-k, balanced accuracy, confusion matrix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_index_vector, check_ks, check_positive_int
from beyondlabels.functional.zeroshot import (
    aggregate_classification,
    classification_per_query,
    topk_classes,
    zeroshot_output_schema,
)
from beyondlabels.metrics._shares import shared_rows
from beyondlabels.metrics.base import PerSampleMetric
from beyondlabels.schema import OutputSchema

__all__ = ["ZeroShotClassification"]


class ZeroShotClassification(PerSampleMetric):
    """Top-k accuracy, balanced accuracy and the confusion matrix of class scores, e.g. image-to-prompt cosines.

    :meth:`update` takes each sample's scores for the ``num_classes`` classes (zero-shot: the cosine of the image
    with every class embedding, :func:`~beyondlabels.functional.zeroshot.zeroshot_scores` of the prompt-ensembled
    classes of :func:`~beyondlabels.functional.zeroshot.prompt_ensemble`) and its true class. Only the ``max(ks)``
    best-ranked classes of a sample are kept (ties: the smaller class index first). :meth:`compute` gathers and
    deduplicates samples by id (:class:`~beyondlabels.metrics.base.PerSampleMetric`; under DDP each process computes
    the per-sample values of its share, which are gathered, so every process returns the numbers of one process, bit
    for bit) and returns the values of
    :func:`~beyondlabels.functional.zeroshot.classification_metrics`, whose ``per_query["prediction"]`` (each
    sample's top-1 class) is what label-based families (hierarchical precision / recall) read.

    A batch has an accuracy of its own, so ``metric(scores, labels)`` returns the batch's values while accumulating.

    Args:
        num_classes: The number of classes ``C`` (scores are ``[B, C]``; labels in ``[0, C)``).
        ks: The k of every ``top{k}`` key; at most ``num_classes``.
        validate_args: Check that labels are class indices in every update (a host sync per batch); NaN scores are
            always an error (they have no rank).
        kwargs: Passed to :class:`torchmetrics.Metric`.

    Examples:
        >>> metric = ZeroShotClassification(num_classes=3, ks=(1, 2))
        >>> metric.update(torch.tensor([[0.9, 0.5, 0.1], [0.2, 0.3, 0.8]]), torch.tensor([0, 1]), torch.tensor([4, 5]))
        >>> out = metric.compute()
        >>> out["top1"], out["top2"], out["balanced_accuracy"]
        (tensor(0.5000, dtype=torch.float64), tensor(1., dtype=torch.float64), tensor(0.5000, dtype=torch.float64))
        >>> out["per_query"]["prediction"], out["confusion_matrix"][1]
        (tensor([0, 2]), tensor([0, 0, 1]))
    """

    batch_value = True
    predictions: list[Tensor]
    labels: list[Tensor]

    def __init__(self, num_classes: int, ks: Sequence[int] = (1, 5), validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(validate_args=validate_args, **kwargs)
        self.num_classes = check_positive_int(num_classes, "num_classes")
        self.ks = check_ks(ks)
        if self.ks[-1] > num_classes:
            raise ValueError(
                f"`ks` contains {self.ks[-1]} but there are only {num_classes} classes; lower it (e.g. ks=[1])."
            )
        self.add_sample_state("predictions")
        self.add_sample_state("labels", agree=True)

    @classmethod
    def example(cls) -> ZeroShotClassification:
        """Seeded scores of 30 samples for 5 classes, ``ks=(1, 3)`` (see :meth:`PerSampleMetric.example`)."""
        g = torch.Generator().manual_seed(2)
        labels = torch.randint(0, 5, (30,), generator=g)
        scores = torch.randn(30, 5, generator=g) + 1.5 * torch.nn.functional.one_hot(labels, 5)
        metric = cls(num_classes=5, ks=(1, 3))
        metric.update(scores, labels, torch.arange(30))
        return metric

    def output_schema(self) -> OutputSchema:
        return self.schema_for(self.ks)

    @classmethod
    def schema_for(cls, ks: Sequence[int]) -> OutputSchema:
        """The output schema of a metric with these ``ks``, without building one (it depends on nothing else)."""
        return zeroshot_output_schema(check_ks(ks)).merged(OutputSchema({"num_duplicates": cls.count_spec()}))

    def update(self, scores: Tensor, labels: Any, ids: Any = None) -> None:
        """Add a batch: ``scores`` float ``[B, C]``, ``labels`` ``[B]`` class indices, optional ``ids`` ``[B]``."""
        if not isinstance(scores, Tensor) or scores.dim() != 2 or not scores.is_floating_point():
            shape = tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
            raise ValueError(f"`scores` must be a 2-D float tensor [B, num_classes], got {shape}.")
        if scores.shape[1] != self.num_classes:
            raise ValueError(
                f"`scores` has {scores.shape[1]} columns but num_classes={self.num_classes}; pass one score per class."
            )
        labels = check_index_vector(
            labels,
            "labels",
            scores.shape[0],
            scores.device,
            items="integer class indices",
            vector="1-D integer class indices",
            rows=f"{scores.shape[0]} score rows",
        )
        if self.validate_args and labels.numel() and bool(((labels < 0) | (labels >= self.num_classes)).any()):
            bad = labels[(labels < 0) | (labels >= self.num_classes)][:5].tolist()
            raise ValueError(f"`labels` must be class indices in [0, {self.num_classes}), got {bad}.")
        ids = self.check_ids(ids, scores.shape[0], scores.device)
        self.append_samples(ids, predictions=topk_classes(scores.detach(), self.ks[-1]), labels=labels)

    def compute(self) -> dict[str, Any]:
        """Deduplicate samples by id; top-k, balanced accuracy, confusion matrix and per-sample values (under DDP each
        process computes the per-sample values of its share, which are gathered)."""
        samples = self.gathered_samples()

        def rows_of(share: tuple[int, int] | None) -> dict[str, Tensor]:
            return classification_per_query(
                samples.values["predictions"],
                samples.values["labels"],
                num_classes=self.num_classes,
                ks=self.ks,
                ids=samples.ids,
                share=share,
            )

        out = aggregate_classification(shared_rows(self, rows_of), num_classes=self.num_classes, ks=self.ks)
        out["num_duplicates"] = torch.tensor(samples.num_duplicates, dtype=torch.long, device=samples.ids.device)
        return out
