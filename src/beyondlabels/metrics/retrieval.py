"""torchmetrics class for leave-one-out retrieval metrics of an embedding gallery."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from beyondlabels.functional.retrieval import (
    _check_ks,
    _check_non_negative_int,
    _check_positive_int,
    _check_precision,
    embedding_retrieval_metrics,
)

__all__ = ["EmbeddingRetrieval"]


def _distributed_world_size() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1


class EmbeddingRetrieval(Metric):
    """How often do an item's nearest neighbours share its label? Leave-one-out retrieval over all seen embeddings.

    Every sample passed to :meth:`update` becomes both a gallery item and a query against all *other* samples,
    ranked by cosine similarity; a neighbour is relevant when it carries the query's label. :meth:`compute` runs one
    exact, chunked search (:func:`beyondlabels.functional.embedding_retrieval_metrics`, where every definition is
    stated: ties, R, lone queries, each metric) and returns all metrics from it.

    Distributed use: states are per-sample tensors gathered with ``"cat"``. Lightning's ``DistributedSampler`` repeats
    samples to even out ranks, so after gathering the samples are deduplicated by ``ids``: one copy per id is kept
    (samples are ordered by id, and among copies of an id the first one gathered is kept; copies are expected to carry
    the same embedding) and copies of one id with different labels raise an error. The gallery is then ordered by id,
    so ties (equal scores) are broken by the smaller id and results are identical for any world size and any
    sharding. ``ids`` are therefore required when more than one process is used; on a single process they may be
    omitted and are assigned in the order samples arrive (restarting at 0 after :meth:`reset`).

    Memory: the states hold ``N x D`` embeddings plus ``N`` labels and ids; nothing ``N x N`` is ever stored, and the
    search itself peaks at ``chunk_size x N`` scores.

    Args:
        ks: Cut-offs for ``precision@k``, ``recall@k``, ``hit@k`` and ``macro_precision@k``.
        chunk_size: Queries scored per block in :meth:`compute`.
        precision: ``"fp32"`` (default), ``"bf16"`` or ``"fp16"``: low-precision candidate search with exact fp32
            rescoring, same values as fp32 (faster only where the low-precision product is fast, see the functional
            module).
        curve_max_k: Length of ``precision_curve``; defaults to ``max(ks)``.
        return_neighbors: When ``n > 0``, :meth:`compute` also returns per-query tensors for inspection (e.g. worst
            label mismatches): ``query_ids``, ``query_labels`` (``[Q]``), ``neighbor_ids``, ``neighbor_labels``,
            ``neighbor_scores`` (``[Q, n]``), ``per_query_num_relevant``, ``per_query_r_precision``,
            ``per_query_map@r``, ``per_query_first_relevant_rank`` (``[Q]``, NaN for lone queries). Queries are in id
            order.
        kwargs: Passed to :class:`torchmetrics.Metric` (e.g. ``sync_on_compute``, ``process_group``).

    Returns (from :meth:`compute`):
        A dict with 0-d tensors ``precision@{k}``, ``recall@{k}``, ``hit@{k}``, ``macro_precision@{k}`` for each k,
        ``r_precision``, ``map@r``, ``macro_r_precision``, ``macro_map@r``, ``mean_first_relevant_rank``,
        ``median_first_relevant_rank``, ``num_queries``, ``num_lone_queries``, and the 1-D ``precision_curve``.

    Raises:
        ValueError: In ``__init__`` for bad arguments (naming the argument); in :meth:`update` for bad shapes,
            non-finite embeddings, non-integer labels or ids, mixing updates with and without ids, or missing ids
            under distributed training; in :meth:`compute` when nothing was seen, when one id carries two labels, or
            when a k exceeds the gallery.

    Example:
        >>> metric = EmbeddingRetrieval(ks=(1, 2))
        >>> metric.update(torch.tensor([[1.0, 0.0], [0.9, 0.1]]), torch.tensor([0, 0]), torch.tensor([10, 11]))
        >>> metric.update(torch.tensor([[0.0, 1.0], [0.1, 0.9]]), torch.tensor([1, 1]), torch.tensor([12, 13]))
        >>> out = metric.compute()
        >>> out["precision@1"], out["precision@2"], out["map@r"]
        (tensor(1., dtype=torch.float64), tensor(0.5000, dtype=torch.float64), tensor(1., dtype=torch.float64))
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    embeddings: list[Tensor]
    labels: list[Tensor]
    ids: list[Tensor]

    def __init__(
        self,
        ks: Sequence[int] = (1, 5, 10),
        chunk_size: int = 1024,
        precision: str = "fp32",
        curve_max_k: int | None = None,
        return_neighbors: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ks = _check_ks(ks)
        # The kernel's own argument checks, run here so that a bad config fails at construction, not at compute().
        _check_positive_int(chunk_size, "chunk_size")
        _check_precision(precision)
        if curve_max_k is not None:
            _check_positive_int(curve_max_k, "curve_max_k")
        _check_non_negative_int(return_neighbors, "return_neighbors")
        self.chunk_size = chunk_size
        self.precision = precision
        self.curve_max_k = curve_max_k
        self.return_neighbors = return_neighbors
        self.add_state("embeddings", default=[], dist_reduce_fx="cat")
        self.add_state("labels", default=[], dist_reduce_fx="cat")
        self.add_state("ids", default=[], dist_reduce_fx="cat")
        self._next_id = 0
        self._ids_given: bool | None = None
        self._dim: int | None = None

    def update(self, embeddings: Tensor, labels: Tensor, ids: Tensor | None = None) -> None:
        """Add a batch of samples.

        Args:
            embeddings: Float tensor ``[B, D]`` (any float dtype; stored as fp32, detached).
            labels: Integer tensor ``[B]``.
            ids: Integer tensor ``[B]`` of global sample ids; required under distributed training.
        """
        if not isinstance(embeddings, Tensor) or embeddings.dim() != 2 or not embeddings.is_floating_point():
            shape = tuple(embeddings.shape) if isinstance(embeddings, Tensor) else type(embeddings).__name__
            raise ValueError(f"`embeddings` must be a 2-D float tensor [B, D], got {shape}.")
        n = embeddings.shape[0]
        if embeddings.shape[1] == 0:
            raise ValueError("`embeddings` has zero columns; pass vectors of dimension >= 1.")
        if self._dim is not None and embeddings.shape[1] != self._dim:
            raise ValueError(
                f"`embeddings` has dimension {embeddings.shape[1]} but earlier updates had {self._dim}; "
                "every update must use the same embedding size."
            )
        if not bool(torch.isfinite(embeddings).all()):
            raise ValueError("`embeddings` contains NaN or Inf values; check the model outputs.")
        if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError("`labels` must be a 1-D integer tensor [B]; map other label types to ints first.")
        if labels.shape[0] != n:
            raise ValueError(f"`labels` has {labels.shape[0]} entries for {n} embeddings; they must match.")
        if ids is None:
            if _distributed_world_size() > 1:
                raise ValueError(
                    "`ids` is required under distributed training: samples are deduplicated by id after gathering."
                )
            if self._ids_given:
                raise ValueError("`ids` were passed in earlier updates; pass them in every update or in none.")
            ids = torch.arange(self._next_id, self._next_id + n, device=embeddings.device)
            self._next_id += n
            self._ids_given = False
        else:
            if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
                raise ValueError("`ids` must be a 1-D integer tensor [B] of global sample ids.")
            if ids.shape[0] != n:
                raise ValueError(f"`ids` has {ids.shape[0]} entries for {n} embeddings; they must match.")
            if self._ids_given is False:
                raise ValueError("earlier updates had no `ids`; pass them in every update or in none.")
            self._ids_given = True
        self._dim = embeddings.shape[1]
        self.embeddings.append(embeddings.detach().to(torch.float32))
        self.labels.append(labels.detach().to(torch.long))
        self.ids.append(ids.detach().to(device=embeddings.device, dtype=torch.long))

    def compute(self) -> dict[str, Tensor]:
        """Deduplicate the gathered samples by id and return all metrics from one search."""
        # After a distributed sync the list states arrive already concatenated into one tensor.
        if isinstance(self.ids, list) and sum(t.numel() for t in self.ids) == 0:
            raise ValueError("EmbeddingRetrieval.compute() was called before any sample was passed to `update`.")
        emb = dim_zero_cat(self.embeddings)
        labels = dim_zero_cat(self.labels)
        ids = dim_zero_cat(self.ids)
        order = torch.argsort(ids, stable=True)
        ids_sorted = ids[order]
        first = torch.ones_like(ids_sorted, dtype=torch.bool)
        first[1:] = ids_sorted[1:] != ids_sorted[:-1]
        labels_sorted = labels[order]
        group = torch.cumsum(first, dim=0) - 1
        conflict = labels_sorted != labels_sorted[first][group]
        if bool(conflict.any()):
            bad = ids_sorted[conflict][:5].tolist()
            raise ValueError(
                f"`labels` disagree between copies of the same sample id (ids {bad}); every copy of an id must carry "
                "one label."
            )
        keep = order[first]
        kept_ids = ids[keep]
        out = embedding_retrieval_metrics(
            emb[keep],
            labels[keep],
            kept_ids,
            ks=self.ks,
            chunk_size=self.chunk_size,
            precision=self.precision,
            curve_max_k=self.curve_max_k,
            return_neighbors=self.return_neighbors,
        )
        if self.return_neighbors:
            out.pop("neighbor_indices")
            out["query_ids"] = kept_ids
            out["query_labels"] = labels[keep]
        return out

    def reset(self) -> None:
        """Clear the states and restart automatic ids at 0."""
        super().reset()
        self._next_id = 0
        self._ids_given = None
        self._dim = None
