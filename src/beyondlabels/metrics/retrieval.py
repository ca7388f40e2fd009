"""torchmetrics class for leave-one-out retrieval metrics of an embedding gallery."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import (
    check_deep_metrics,
    check_distance,
    check_int,
    check_positive_int,
)
from beyondlabels.functional.audit import AuditSettings, LabelAudit, audit_label_shares, audit_neighbors
from beyondlabels.functional.labels import encode_labels
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.functional.retrieval import (
    aggregate_retrieval,
    retrieval_output_schema,
    retrieval_per_query,
    sample_queries,
)
from beyondlabels.functional.search import Neighbors, normalize_rows
from beyondlabels.metrics._shares import shared_rows
from beyondlabels.metrics.base import GatheredSamples, PerSampleMetric
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = ["EmbeddingRetrieval", "example_embeddings"]


def example_embeddings(n: int = 24, dim: int = 6, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``(embeddings [n, dim], labels [n])`` of the retrieval examples: 3 seeded class centres, unit noise of scale
    0.7, label ``i % 3``."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 3
    centres = torch.randn(3, dim, generator=g)
    return centres[labels] + 0.7 * torch.randn(n, dim, generator=g), labels


class EmbeddingRetrieval(PerSampleMetric):
    """How often do an item's nearest neighbours share its label? Leave-one-out retrieval over all seen embeddings.

    Every sample passed to :meth:`update` becomes both a gallery item and a query against all *other* samples,
    ranked by cosine similarity (or, with ``distance``, by Euclidean distance or inner product); a neighbour is
    relevant when it carries the query's label, and earns graded credit through optional class-gain matrices.
    :meth:`compute` runs one exact, chunked search and returns every metric from it (definitions, ties, R, lone
    queries: :mod:`beyondlabels.functional.retrieval`).

    Distributed use: samples are gathered and deduplicated by id (:class:`~beyondlabels.metrics.base.PerSampleMetric`),
    then ordered by id, so ties are broken by the smaller id and results are identical for any world size and
    sharding. With ``distributed_search=True`` (default) the processes split the search: the leave-one-out search
    computes each score of its symmetric blocks on one process, which hands the top lists of the rows it does not own
    to their owners (``docs/search.md``, "Shares"); a sampled or separate query set is split by queries; the audit's
    per-item values are split by items. The per-query values are then gathered: W processes do the work of one
    search, not W.

    Memory: the states hold ``N x D`` embeddings plus ``N`` labels and ids, and every process holds the whole gathered
    set at :meth:`compute`; the search peaks at ``chunk_size x N`` scores (plus, for leave-one-out, top lists or
    candidate buffers of at most 512 MB at a time).

    Args:
        ks: Cut-offs for every ``@k`` metric.
        chunk_size: Queries scored per block in :meth:`compute`.
        precision: ``"fp32"`` (default), ``"bf16"`` or ``"fp16"``: low-precision candidate search with exact fp32
            rescoring, same values as fp32 (faster only where low-precision products are much faster: GPUs).
        curve_max_k: Length of ``precision_curve``; defaults to ``max(ks)``.
        graded: :class:`~beyondlabels.functional.relevance.ClassGains` matrices (taxonomy-, profile-derived or hand
            made) for ``<name>_precision@k`` and ``<name>_ndcg@k``; their ``classes`` are coded like the labels.
        return_neighbors: When ``n > 0``, :meth:`compute` also returns ``neighbors``: ``ids``, ``labels``, ``scores``
            (``[Q, n]``, queries in id order) for inspection (e.g. the worst label mismatches).
        max_queries: Search only a fixed sample of this many queries (chosen by id and ``query_seed``: the same ids
            at every evaluation and on any world size) against the whole gallery; the output then holds
            ``num_query_pool`` and the standard error ``<key>_se`` of every mean. None (default): every sample.
        query_seed: Seed of the query sample.
        distributed_search: Split the search between processes (see above).
        validate_args: Check embeddings for NaN/Inf in every update (a host sync per batch).
        deep_metrics: Also compute ``r_precision``, ``map@r`` and ``first_relevant_rank`` (and their means), which
            need a search past ``max(ks)``; False is the shallow mode of
            :func:`~beyondlabels.functional.retrieval.embedding_retrieval_metrics` (those keys are absent).
        audit: :class:`~beyondlabels.functional.audit.AuditSettings` (or a mapping of its fields, or True for the
            defaults): also audit the labels from the neighbours of the same search (no second search; definitions in
            :mod:`beyondlabels.functional.audit`); see :meth:`audit_schema` for the keys. ``k`` is capped at
            ``N - 1``. Needs every sample as a query (not with ``max_queries``). With ``exclude_suspects`` the scalar
            retrieval metrics are computed again without the items of cross-label duplicate pairs (a second search
            of the remaining items), as ``clean/<key>``. None (default): off, and nothing else changes. The
            search's neighbours are handed to :func:`~beyondlabels.functional.audit.audit_neighbors` (one search for
            both). ``compute()`` is a function of the states alone, so ``audit_suspect_overlap`` (the stability of
            the top suspects against the previous evaluation's) is NaN here: whoever keeps the previous list fills
            it in with :func:`~beyondlabels.functional.audit.suspect_overlap` (the retrieval callback does, and
            checkpoints the list). Its thresholds are cosines: it needs ``distance="cosine"``.
        distance: ``"cosine"`` (default), ``"euclidean"`` (ascending L2 distance of the embeddings as given, not
            normalised: pytorch-metric-learning's ``AccuracyCalculator`` default) or ``"dot"`` (descending inner
            product); ties by the smaller id under each (:mod:`beyondlabels.functional.search`). The neighbours'
            ``scores`` are then minus the distances, or the inner products.
        kwargs: Passed to :class:`torchmetrics.Metric` (e.g. ``sync_on_compute``, ``process_group``).

    Inputs of :meth:`update`:
        ``embeddings`` float ``[B, D]``; ``labels`` ``[B]`` as an integer tensor or array, or a list of ints or
        strings (one coding rule: :func:`~beyondlabels.functional.labels.encode_labels`); optional ``ids`` ``[B]``
        (required under distributed training; on one process the arrival position is the id).

    Returns (from :meth:`compute`):
        The kernel's dict (keys and directions: :meth:`output_schema`) plus ``num_duplicates`` (copies of an id that
        were dropped), ``per_query`` (one vector per metric, with ``query_id`` and ``label``) and ``label_names``
        (``{code: label}`` of the string labels seen on any process; empty for integer labels).

    Examples:
        >>> metric = EmbeddingRetrieval(ks=(1, 2))
        >>> metric.update(torch.tensor([[1.0, 0.0], [0.9, 0.1]]), ["arch", "arch"], torch.tensor([10, 11]))
        >>> metric.update(torch.tensor([[0.0, 1.0], [0.1, 0.9]]), ["dome", "dome"], torch.tensor([12, 13]))
        >>> out = metric.compute()
        >>> out["precision@1"], out["precision@2"], out["num_duplicates"]
        (tensor(1., dtype=torch.float64), tensor(0.5000, dtype=torch.float64), tensor(0))
        >>> out["per_query"]["query_id"]
        tensor([10, 11, 12, 13])
        >>> sorted(out["label_names"].values())
        ['arch', 'dome']
    """

    embeddings: list[Tensor]
    labels: list[Tensor]

    def __init__(
        self,
        ks: Sequence[int] = (1, 5, 10),
        chunk_size: int = 1024,
        precision: str = "fp32",
        curve_max_k: int | None = None,
        graded: Sequence[ClassGains] = (),
        return_neighbors: int = 0,
        max_queries: int | None = None,
        query_seed: int = 0,
        distributed_search: bool = True,
        validate_args: bool = True,
        deep_metrics: bool = True,
        audit: AuditSettings | Any = None,
        distance: str = "cosine",
        **kwargs: Any,
    ) -> None:
        super().__init__(validate_args=validate_args, **kwargs)
        self.audit = AuditSettings.of(audit)
        self.distance = check_distance(distance)
        if self.audit is not None and max_queries is not None:
            raise ValueError("`audit` needs every sample as a query; drop `max_queries` or the audit.")
        if self.audit is not None and self.distance != "cosine":
            raise ValueError(
                f"`audit` reads cosine scores (its duplicate threshold is a cosine), so it needs distance='cosine', "
                f"got distance={self.distance!r}; drop the audit or evaluate it with a cosine metric."
            )
        self.keep_search_settings(ks, chunk_size, precision, return_neighbors, distributed_search)
        # The kernel's own argument checks, run here so that a bad config fails at construction, not at compute().
        if curve_max_k is not None:
            check_positive_int(curve_max_k, "curve_max_k")
        if max_queries is not None:
            check_positive_int(max_queries, "max_queries")
        check_int(query_seed, "query_seed")
        check_deep_metrics(deep_metrics)
        graded = tuple(graded)
        for g in graded:
            if not isinstance(g, ClassGains):
                raise ValueError(f"`graded` must hold ClassGains matrices, got {type(g).__name__}.")
        if len({g.name for g in graded}) != len(graded):
            raise ValueError(f"`graded` matrices need distinct names, got {[g.name for g in graded]}.")
        self.curve_max_k = curve_max_k
        self.graded = graded
        self.max_queries = max_queries
        self.query_seed = query_seed
        self.deep_metrics = deep_metrics
        self._label_names: dict[int, str] = {}  # code -> string label seen by this process (kept until `reset`)
        self.add_sample_state("embeddings")
        self.add_sample_state("labels", agree=True)

    @classmethod
    def example(cls) -> EmbeddingRetrieval:
        """24 seeded embeddings of 3 classes, ``ks=(1, 3)`` (see :meth:`PerSampleMetric.example`)."""
        metric = cls(ks=(1, 3))
        metric.update(*example_embeddings())
        return metric

    def output_schema(self) -> OutputSchema:
        schema = retrieval_output_schema(
            self.ks,
            [g.name for g in self.graded],
            sampled=self.max_queries is not None,
            mistake_stats={g.name: list(g.mistake_stats) for g in self.graded if g.mistake_stats},
            deep_metrics=self.deep_metrics,
        )
        schema = schema.merged(OutputSchema({"num_duplicates": self.count_spec()}))
        if self.audit is not None:
            schema = schema.merged(self.audit_schema())
        return schema

    def audit_schema(self) -> OutputSchema:
        """The keys the audit adds: counts ``audit_num_suspects``, ``audit_num_outliers``,
        ``audit_num_cross_label_duplicates``, ``audit_num_same_label_duplicates``, ``audit_k``,
        ``audit_suspect_overlap``; per-query ``audit_label_quality``, ``audit_own_share``, ``audit_suggested_label``,
        ``audit_suggested_share``, ``audit_outlier_score``, ``audit_is_suspect``, ``audit_is_outlier``; with
        ``exclude_suspects`` ``audit_num_excluded`` and ``clean/<key>`` for every scalar retrieval key. The non-scalar
        ``audit`` entry of the output holds ``suspects`` (ranked; ``ids``, ``labels``, ``suggested_labels``,
        ``suggested_shares``, ``label_quality``), ``outliers`` (the ``top`` highest outlier scores: ``ids``, ``labels``,
        ``scores``), ``duplicates`` (``ids`` and ``labels`` ``[P, 2]``, ``scores``, ``cross_label``) and ``per_class``
        (``label``, ``items``, ``suspects``, ``outliers``)."""
        fewer = KeySpec("scalar", False, count=True)
        keys = {
            "audit_num_suspects": fewer,
            "audit_num_outliers": fewer,
            "audit_num_cross_label_duplicates": fewer,
            "audit_num_same_label_duplicates": KeySpec("scalar", None, count=True),
            "audit_k": KeySpec("scalar", None, count=True),
            "audit_suspect_overlap": KeySpec("scalar", None),
        }
        per_query = {
            "audit_label_quality": KeySpec("per_query", True),
            "audit_own_share": KeySpec("per_query", True),
            "audit_suggested_label": KeySpec("per_query", None),
            "audit_suggested_share": KeySpec("per_query", None),
            "audit_outlier_score": KeySpec("per_query", False),
            "audit_is_suspect": KeySpec("per_query", False),
            "audit_is_outlier": KeySpec("per_query", False),
        }
        if self.audit is not None and self.audit.exclude_suspects:
            keys["audit_num_excluded"] = KeySpec("scalar", None, count=True)
            plain = retrieval_output_schema(self.ks, [g.name for g in self.graded], deep_metrics=self.deep_metrics)
            for key in plain.scalar_keys():
                keys[f"clean/{key}"] = plain[key]
        # the counts a run summary shows on the family's note line, as "<value> <label>"
        notes = {
            "audit_num_suspects": "suspected label errors",
            "audit_num_outliers": "outliers",
            "audit_num_cross_label_duplicates": "cross-label duplicates",
        }
        return OutputSchema(keys, per_query, notes=notes)

    def update(self, embeddings: Tensor, labels: Any, ids: Any = None) -> None:
        """Add a batch of samples (see the class docstring for the inputs)."""
        if not isinstance(embeddings, Tensor) or embeddings.dim() != 2 or not embeddings.is_floating_point():
            shape = tuple(embeddings.shape) if isinstance(embeddings, Tensor) else type(embeddings).__name__
            raise ValueError(f"`embeddings` must be a 2-D float tensor [B, D], got {shape}.")
        n = embeddings.shape[0]
        if embeddings.shape[1] == 0:
            raise ValueError("`embeddings` has zero columns; pass vectors of dimension >= 1.")
        if (
            self.embeddings
            and isinstance(self.embeddings, list)
            and self.embeddings[-1].shape[1] != embeddings.shape[1]
        ):
            raise ValueError(
                f"`embeddings` has dimension {embeddings.shape[1]} but earlier updates had "
                f"{self.embeddings[-1].shape[1]}; every update must use the same embedding size."
            )
        if self.validate_args and not bool(torch.isfinite(embeddings).all()):
            raise ValueError("`embeddings` contains NaN or Inf values; check the model outputs.")
        if isinstance(labels, Tensor):  # integer tensors pass as they are (no host sync)
            if labels.dim() != 1 or labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
                raise ValueError(
                    "`labels` must be 1-D integer class ids (or a list of strings), "
                    f"got {tuple(labels.shape)} {labels.dtype}."
                )
            codes = labels.long()
        else:
            codes, names = encode_labels(labels, "labels")
            self._label_names.update(names)
        if codes.shape[0] != n:
            raise ValueError(f"`labels` has {codes.shape[0]} entries for {n} embeddings; they must match.")
        self.note_label_kinds(labels)
        ids = self.check_ids(ids, n, embeddings.device)
        self.append_samples(ids, embeddings=embeddings.detach().to(torch.float32), labels=codes.to(embeddings.device))

    def compute(self) -> dict[str, Any]:
        """Deduplicate the gathered samples by id and return all metrics from one search (cosine: the gathered rows
        are replaced by their unit rows, so that the search holds one copy of the set)."""
        if self.distance != "cosine":
            return self.results_of(self.gathered_samples())
        return self.results_of(self.gathered_samples(prepare={"embeddings": normalize_rows}), normalized=True)

    def results_of(self, samples: GatheredSamples, normalized: bool = False) -> dict[str, Any]:
        """Every metric of the deduplicated ``samples`` from one search (the body of :meth:`compute`;
        ``normalized``: their embeddings are already the unit rows of
        :func:`~beyondlabels.functional.search.normalize_rows`, cosine only)."""
        emb, labels, ids = samples.values["embeddings"], samples.values["labels"], samples.ids
        share = self.work_share() if self.distributed_search else None
        query_rows = None if self.max_queries is None else sample_queries(ids, self.max_queries, self.query_seed)
        audit_k = 0 if self.audit is None else min(self.audit.k, ids.numel() - 1)
        if self.audit is not None and audit_k < 1:
            raise ValueError(
                f"the audit needs at least 2 samples, got {ids.numel()}; feed more samples or turn `audit` off."
            )
        out = self._retrieval(emb, labels, ids, share, query_rows, max(self.return_neighbors, audit_k), normalized)
        out["num_duplicates"] = torch.tensor(samples.num_duplicates, dtype=torch.long, device=emb.device)
        if self.audit is not None:
            self._add_audit(out, emb, labels, ids, share, audit_k, normalized)
        if "neighbors" in out:
            idx = out["neighbors"]["indices"]
            out["neighbors"] = {"ids": ids[idx], "labels": labels[idx], "scores": out["neighbors"]["scores"]}
        out["label_names"] = self.gathered_label_names()
        return out

    def _retrieval(
        self,
        emb: Tensor,
        labels: Tensor,
        ids: Tensor,
        share: Any,
        query_rows: Tensor | None,
        return_neighbors: int,
        normalized: bool,
    ) -> dict[str, Any]:
        rows = retrieval_per_query(
            emb,
            labels,
            ids,
            ks=self.ks,
            chunk_size=self.chunk_size,
            precision=self.precision,
            curve_max_k=self.curve_max_k,
            graded=self.graded,
            return_neighbors=return_neighbors,
            share=share,
            query_rows=query_rows,
            deep_metrics=self.deep_metrics,
            distance=self.distance,
            exchange=None if share is None else self.exchange(),
            normalized=normalized,
        )
        rows = self.gather_rows(rows) if share is not None else rows
        out = aggregate_retrieval(
            rows,
            labels,
            ks=self.ks,
            curve_max_k=self.curve_max_k,
            graded=[g.name for g in self.graded],
            query_ids=ids,
            query_pool=None if self.max_queries is None else ids.numel(),
            deep_metrics=self.deep_metrics,
        )
        return out

    def _add_audit(
        self, out: dict[str, Any], emb: Tensor, labels: Tensor, ids: Tensor, share: Any, k: int, normalized: bool
    ) -> None:
        """The audit from the searched neighbours in ``out`` (trimmed back to ``return_neighbors`` afterwards)."""
        settings = self.audit
        found = out["neighbors"]
        n = ids.numel()
        nb = Neighbors(torch.arange(n, device=ids.device), found["scores"][:, :k], found["indices"][:, :k])
        per_item = shared_rows(self, lambda part: audit_label_shares(nb, labels, k=k, share=part), share is not None)
        a = audit_neighbors(
            nb,
            labels,
            k=k,
            quality_threshold=settings.quality_threshold,
            outlier_threshold=settings.outlier_threshold,
            duplicate_threshold=settings.duplicate_threshold,
            label_shares=per_item,
        )
        if self.return_neighbors:
            out["neighbors"] = {key: value[:, : self.return_neighbors] for key, value in found.items()}
        else:
            del out["neighbors"]
        device = emb.device

        def count(value: int) -> Tensor:
            return torch.tensor(int(value), dtype=torch.long, device=device)

        out["audit_num_suspects"] = count(a.suspects.numel())
        out["audit_num_outliers"] = count(a.is_outlier.sum())
        out["audit_num_cross_label_duplicates"] = count(a.cross_label.sum())
        out["audit_num_same_label_duplicates"] = count((~a.cross_label).sum())
        out["audit_k"] = count(k)
        # Against the previous evaluation's suspects: not in the states, so left to whoever keeps that list.
        out["audit_suspect_overlap"] = torch.tensor(float("nan"), dtype=torch.float64, device=device)
        out["per_query"].update(_audit_per_query(a))
        top_outliers = torch.argsort(-a.outlier_score, stable=True)[: settings.top]
        pairs = a.duplicate_pairs
        out["audit"] = {
            "suspects": {
                "ids": ids[a.suspects],
                "labels": labels[a.suspects],
                "suggested_labels": a.suggested_label[a.suspects],
                "suggested_shares": a.suggested_share[a.suspects],
                "label_quality": a.label_quality[a.suspects],
            },
            "outliers": {
                "ids": ids[top_outliers],
                "labels": labels[top_outliers],
                "scores": a.outlier_score[top_outliers],
            },
            "duplicates": {
                "ids": ids[pairs],
                "labels": labels[pairs],
                "scores": a.duplicate_scores,
                "cross_label": a.cross_label,
            },
            "per_class": {
                "label": a.classes,
                "items": a.class_items,
                "suspects": a.class_suspects,
                "outliers": a.class_outliers,
            },
        }
        if settings.exclude_suspects:
            drop = torch.zeros(n, dtype=torch.bool, device=ids.device)
            drop[pairs[a.cross_label].flatten()] = True
            keep = torch.nonzero(~drop).flatten()
            out["audit_num_excluded"] = count(n - keep.numel())
            clean = self._retrieval(emb[keep], labels[keep], ids[keep], share, None, 0, normalized)
            schema = retrieval_output_schema(self.ks, [g.name for g in self.graded], deep_metrics=self.deep_metrics)
            for key in schema.scalar_keys():
                out[f"clean/{key}"] = clean[key]

    def gathered_label_names(self) -> dict[int, str]:
        """``{code: label}`` of the string labels every process has seen (gathered when the states were)."""
        names = dict(self._label_names)
        if self.work_share() is not None:
            every: list[Any] = [None] * torch.distributed.get_world_size(self.process_group)
            torch.distributed.all_gather_object(every, names, group=self.process_group)
            for other in every:
                names.update(other)
        return dict(sorted(names.items()))

    def reset(self) -> None:
        super().reset()
        self._label_names = {}

    def state_dict(
        self, destination: dict[str, Any] | None = None, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, Any]:
        """torchmetrics' ``state_dict``; with the states persistent (``metric.persistent(True)``) it also holds the
        names of string labels (``label_names``: ``{code: label}``), so a restored metric names them again."""
        destination = super().state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        if self._persistent["labels"]:
            destination[prefix + "label_names"] = dict(self._label_names)
        return destination

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        names = state_dict.pop(prefix + "label_names", None)
        if names is not None:
            if not isinstance(names, dict) or not all(
                isinstance(k, int) and isinstance(v, str) for k, v in names.items()
            ):
                raise ValueError(
                    f"`{prefix}label_names` in the state dict must map label codes (int) to names (str), "
                    f"got {type(names).__name__}."
                )
            self._label_names = dict(names)
        elif prefix + "labels" in state_dict:  # labels restored without names (saved by an older version): unnamed
            self._label_names = {}
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


def _audit_per_query(a: LabelAudit) -> dict[str, Tensor]:
    """The audit's per-item values under their per-query keys (items in query order)."""
    return {
        "audit_label_quality": a.label_quality,
        "audit_own_share": a.own_share,
        "audit_suggested_label": a.suggested_label,
        "audit_suggested_share": a.suggested_share,
        "audit_outlier_score": a.outlier_score,
        "audit_is_suspect": a.is_suspect.long(),
        "audit_is_outlier": a.is_outlier.long(),
    }
