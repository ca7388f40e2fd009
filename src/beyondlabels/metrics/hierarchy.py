"""torchmetrics class for hierarchical precision / recall / F over a class tree."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_bool, check_positive_int
from beyondlabels.functional.hierarchy import (
    DEFAULT_CHUNK,
    aggregate_hierarchy,
    check_abstention_precision,
    hierarchy_output_schema,
    hierarchy_per_query,
    node_indices,
)
from beyondlabels.io.taxonomy_files import load_taxonomy
from beyondlabels.metrics._shares import shared_rows
from beyondlabels.metrics.base import PerSampleMetric
from beyondlabels.schema import OutputSchema
from beyondlabels.taxonomy import Taxonomy

__all__ = ["HierarchicalPrecisionRecall"]


class HierarchicalPrecisionRecall(PerSampleMetric):
    """Is a wrong answer wrong, or correct but unspecific? hP, hR and hF of predicted nodes against true nodes.

    Each sample is a predicted node and a true node of ``taxonomy``; :meth:`compute` gathers every sample (deduplicated
    by id across processes), and returns the instance means ``hP``, ``hR`` and their harmonic mean ``hF`` (as in
    "Taxonomy-Aware Evaluation of Vision-Language Models", CVPR 2025), the mean of per-sample F ``hF_sample_mean``,
    the pooled ``micro_hP`` / ``micro_hR`` / ``micro_hF``, ``exact_match``, the depth of the LCA of each error
    (``error_lca_depth_fraction``, ``mean_error_lca_depth``), the predictions at the root (``abstentions``,
    ``abstention_rate``) and per-sample values. Definitions (root excluded by default, an abstention worth no
    precision by default, ...): :mod:`beyondlabels.functional.hierarchy`. Under DDP each process computes the
    per-sample values of its share of the samples and they are gathered: every process returns the numbers of one
    process, bit for bit.

    Args:
        taxonomy: a :class:`~beyondlabels.taxonomy.Taxonomy`, or what
            :func:`~beyondlabels.io.taxonomy_files.load_taxonomy` reads (a YAML/JSON/TSV path, a ``{root, parent}``
            mapping, ``"wordnet"``).
        include_root: count the root in every ancestor set.
        chunk_size: pairs per block of the LCA computation.
        abstention_precision: the precision of a prediction at the root, in ``[0, 1]`` (default 0: an abstention earns
            nothing).
        validate_args: check node indices in every update (a host sync per batch).
        kwargs: passed to :class:`torchmetrics.Metric` (``sync_on_compute``, ``process_group``, ...).

    Inputs of :meth:`update`:
        ``pred_nodes`` and ``gt_nodes``: ``[B]`` node indices (integer tensors) or lists of node names; optional
        ``ids`` ``[B]`` (required under distributed training; on one process the arrival position is the id).

    Examples:
        >>> from beyondlabels.taxonomy import Taxonomy
        >>> tax = Taxonomy({"object": "entity", "artifact": "object", "transport": "artifact", "train": "transport",
        ...                 "bus": "transport"}, root="entity")
        >>> metric = HierarchicalPrecisionRecall(tax)
        >>> metric.update(["transport", "bus"], ["train", "train"])
        >>> out = metric.compute()
        >>> float(out["hP"]), float(out["hR"]), float(out["exact_match"]), out["error_lca_depth_fraction"].tolist()
        (0.875, 0.75, 0.0, [0.0, 0.0, 0.0, 1.0, 0.0])
    """

    pred: list[Tensor]
    gt: list[Tensor]

    def __init__(
        self,
        taxonomy: Any,
        include_root: bool = False,
        chunk_size: int = DEFAULT_CHUNK,
        validate_args: bool = True,
        abstention_precision: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(validate_args=validate_args, **kwargs)
        try:
            self.taxonomy: Taxonomy = load_taxonomy(taxonomy)
        except ValueError as err:
            raise ValueError(f"`taxonomy`: {err}") from None
        check_bool(include_root, "include_root")
        self.include_root = include_root
        self.abstention_precision = check_abstention_precision(abstention_precision)
        self.chunk_size = check_positive_int(chunk_size, "chunk_size")
        self.add_sample_state("pred")
        self.add_sample_state("gt", agree=True)

    @classmethod
    def example(cls) -> HierarchicalPrecisionRecall:
        """Seeded predictions of 30 samples on a tree of 6 nodes (see :meth:`PerSampleMetric.example`)."""
        tree = Taxonomy({"b": "a", "c": "a", "d": "b", "e": "b", "f": "c"}, root="a")
        g = torch.Generator().manual_seed(1)
        metric = cls(tree)
        metric.update(
            torch.randint(0, 6, (30,), generator=g), torch.randint(1, 6, (30,), generator=g), torch.arange(30)
        )
        return metric

    def output_schema(self) -> OutputSchema:
        return hierarchy_output_schema().merged(OutputSchema({"num_duplicates": self.count_spec()}))

    def _nodes(self, nodes: Any, name: str) -> Tensor:
        if isinstance(nodes, Tensor) and not self.validate_args:
            if nodes.dim() != 1 or nodes.is_floating_point() or nodes.dtype == torch.bool:
                raise ValueError(f"`{name}` must be a 1-D tensor of node indices or a list of node names.")
            return nodes.long()
        return node_indices(self.taxonomy, nodes, name)

    def update(self, pred_nodes: Any, gt_nodes: Any, ids: Any = None) -> None:
        """Add a batch of (prediction, ground truth) pairs (see the class docstring for the inputs)."""
        pred = self._nodes(pred_nodes, "pred_nodes")
        gt = self._nodes(gt_nodes, "gt_nodes")
        if pred.numel() != gt.numel():
            raise ValueError(f"`pred_nodes` has {pred.numel()} entries and `gt_nodes` {gt.numel()}; they must match.")
        device = (
            pred.device
            if isinstance(pred_nodes, Tensor)
            else (gt.device if isinstance(gt_nodes, Tensor) else self.device)
        )
        pred, gt = pred.to(device), gt.to(device)
        if self.validate_args and not self.include_root and bool((gt == 0).any()):
            raise ValueError(
                f"`gt_nodes` holds the root {self.taxonomy.root!r}; with the root excluded it has nothing to recall. "
                "Use a more specific node or set include_root=True."
            )
        ids = self.check_ids(ids, gt.numel(), device)
        self.append_samples(ids, pred=pred, gt=gt)

    def compute(self) -> dict[str, Any]:
        """Deduplicate the gathered samples by id and return every metric (keys: :meth:`output_schema`); under DDP
        each process computes its share of the per-sample values and they are gathered."""
        samples = self.gathered_samples()

        def rows_of(share: tuple[int, int] | None) -> dict[str, Tensor]:
            return hierarchy_per_query(
                samples.values["pred"],
                samples.values["gt"],
                self.taxonomy,
                include_root=self.include_root,
                chunk_size=self.chunk_size,
                abstention_precision=self.abstention_precision,
                share=share,
            )

        out = aggregate_hierarchy(
            shared_rows(self, rows_of),
            self.taxonomy,
            include_root=self.include_root,
            abstention_precision=self.abstention_precision,
        )
        out["num_duplicates"] = torch.tensor(samples.num_duplicates, dtype=torch.long, device=samples.ids.device)
        out["per_query"]["query_id"] = samples.ids
        return out
