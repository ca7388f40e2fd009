"""``LabelMismatchAnalysis``: how similar the classes a retrieval model confuses are, against a frequency-aware null.

Every definition is in :mod:`beyondlabels.functional.mismatch`; this class holds per-query states (query label,
retrieved label, optionally the query's embedding), gathers and deduplicates them by id across processes, and calls
:func:`~beyondlabels.functional.mismatch.mismatch_analysis`. The null's seed is a parameter, so world size 1 and 2
give identical numbers.

Examples:
    >>> import torch
    >>> from beyondlabels.functional.relevance import ClassGains
    >>> gains = ClassGains([[1.0, 0.8, 0.1], [0.8, 1.0, 0.2], [0.1, 0.2, 1.0]], [0, 1, 2], name="shape")
    >>> metric = LabelMismatchAnalysis(gains, num_trials=500, seed=0)
    >>> metric.update(torch.tensor([0, 0, 1, 2]), torch.tensor([1, 0, 0, 2]))
    >>> out = metric.compute()
    >>> int(out["num_mismatches"]), float(out["mean_similarity"]), bool(out["p_value"] < 0.5)
    (2, 0.8, True)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_bool, check_int, check_int_at_least
from beyondlabels.functional.mismatch import PERCENTILE_KINDS, mismatch_analysis, mismatch_output_schema
from beyondlabels.functional.profiles import profile_class_gains
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.functional.retrieval import sample_queries
from beyondlabels.metrics.base import PerSampleMetric
from beyondlabels.metrics.retrieval import EmbeddingRetrieval, example_embeddings
from beyondlabels.profiles import FeatureProfiles
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = ["LabelMismatchAnalysis", "RetrievalWithMismatch", "retrieval_metric"]

# The class similarity of the examples: classes 0 and 1 alike, 2 apart.
_EXAMPLE_GAINS = ClassGains([[1.0, 0.6, 0.1], [0.6, 1.0, 0.3], [0.1, 0.3, 1.0]], [0, 1, 2], name="profile")


def _as_gains(similarity: Any, labels: Any) -> ClassGains:
    if isinstance(similarity, ClassGains):
        if labels is not None:
            raise ValueError(
                "`labels` applies to FeatureProfiles similarity only; a ClassGains already lists its classes."
            )
        return similarity
    if isinstance(similarity, FeatureProfiles):
        return profile_class_gains(similarity, name="profile", labels=labels)
    if isinstance(similarity, (str, bytes)) or not hasattr(similarity, "__len__"):
        raise ValueError(
            "`similarity` must be a ClassGains, FeatureProfiles or a [C, C] matrix (with `labels`), got "
            f"{type(similarity).__name__}."
        )
    if labels is None:
        raise ValueError("`labels` is required with a plain similarity matrix: the label of each row, in matrix order.")
    return ClassGains(similarity, labels, name="similarity")


class LabelMismatchAnalysis(PerSampleMetric):
    """Mismatch similarity, percentile ranks, the frequency-aware Monte Carlo null and (with embeddings) Spearman.

    Args:
        similarity: a :class:`~beyondlabels.functional.relevance.ClassGains` (matrix + class labels), a
            :class:`~beyondlabels.profiles.FeatureProfiles` (``M_feature``), or a ``[C, C]`` matrix with ``labels``.
        labels: with FeatureProfiles, the label each class carries (None: the class names; ``"index"``: ``0..C-1``);
            with a plain matrix, the label of each row.
        counts: optional ``[C]`` class counts for the null (default: the counts of the query labels seen).
        num_trials: ``B``, trials of the null (default 10,000).
        seed: seed of the null.
        percentile_kind: ``"weak"`` (default: ``scipy.stats.percentileofscore(kind="weak")``; scipy's own default is
            ``"rank"``), ``"strict"``, ``"mean"`` or ``"rank"``.
        with_embeddings: ``update`` also takes each query's embedding, and the result adds ``spearman_rho``,
            ``spearman_p`` and ``spearman_pairs``.
        kwargs: :class:`~beyondlabels.metrics.PerSampleMetric` options.

    :meth:`compute` also returns ``null_distribution``, the ``[B]`` trial statistics (for histograms).

    Raises:
        ValueError: naming the argument, for a bad similarity, counts, trials, seed or kind; labels outside the
            matrix's classes (at compute).
    """

    labels_query: list[Tensor]
    labels_retrieved: list[Tensor]
    embeddings: list[Tensor]

    def __init__(
        self,
        similarity: Any,
        labels: Any = None,
        *,
        counts: Any = None,
        num_trials: int = 10_000,
        seed: int = 0,
        percentile_kind: str = "weak",
        with_embeddings: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.gains = _as_gains(similarity, labels)
        check_int_at_least(num_trials, "num_trials", 1)
        check_int(seed, "seed")
        if percentile_kind not in PERCENTILE_KINDS:
            raise ValueError(f"`percentile_kind` must be one of {PERCENTILE_KINDS}, got {percentile_kind!r}.")
        check_bool(with_embeddings, "with_embeddings")
        if counts is not None:
            c = torch.as_tensor(counts, dtype=torch.float64).flatten()
            if c.numel() != self.gains.num_classes or not bool(torch.isfinite(c).all()) or bool((c < 0).any()):
                raise ValueError(
                    f"`counts` must hold {self.gains.num_classes} finite counts >= 0, one per class, "
                    f"got {c.numel()} values."
                )
            counts = c
        self.counts = counts
        self.num_trials, self.seed, self.percentile_kind = num_trials, seed, percentile_kind
        self.with_embeddings = with_embeddings
        self.add_sample_state("labels_query", agree=True)
        self.add_sample_state("labels_retrieved", agree=True)
        if with_embeddings:
            self.add_sample_state("embeddings")

    @classmethod
    def example(cls) -> LabelMismatchAnalysis:
        """The top-1 labels of 24 seeded queries of 3 classes, a 3-class similarity, 200 trials (see
        :meth:`PerSampleMetric.example`)."""
        g = torch.Generator().manual_seed(5)
        labels = torch.arange(24) % 3
        retrieved = torch.where(torch.rand(24, generator=g) < 0.4, (labels + 1) % 3, labels)
        metric = cls(_EXAMPLE_GAINS, num_trials=200)
        metric.update(labels, retrieved, torch.arange(24))
        return metric

    def output_schema(self) -> OutputSchema:
        extra = OutputSchema({"num_duplicates": self.count_spec()}, {"query_id": KeySpec("per_query", None)})
        return mismatch_output_schema(spearman=self.with_embeddings).merged(extra)

    def update(
        self, query_labels: Tensor, retrieved_labels: Tensor, ids: Any = None, embeddings: Tensor | None = None
    ) -> None:
        """Add a batch: each query's label and the label retrieved at rank 1 (int label codes, ``[B]``), optional
        global ids, and (with ``with_embeddings``) the queries' embeddings ``[B, D]``."""
        for value, name in ((query_labels, "query_labels"), (retrieved_labels, "retrieved_labels")):
            if (
                not isinstance(value, Tensor)
                or value.dim() != 1
                or value.is_floating_point()
                or value.dtype == torch.bool
            ):
                raise ValueError(
                    f"`{name}` must be a 1-D integer tensor of label codes, got {getattr(value, 'shape', type(value))}."
                )
        if query_labels.shape != retrieved_labels.shape:
            raise ValueError(
                "`query_labels` and `retrieved_labels` must have one entry per query, "
                f"got {query_labels.numel()} and {retrieved_labels.numel()}."
            )
        ids = self.check_ids(ids, query_labels.numel(), query_labels.device)
        states = {"labels_query": query_labels.long(), "labels_retrieved": retrieved_labels.long()}
        if self.with_embeddings:
            if (
                not isinstance(embeddings, Tensor)
                or embeddings.dim() != 2
                or embeddings.shape[0] != query_labels.numel()
            ):
                raise ValueError(
                    "`embeddings` must be a [B, D] tensor with one row per query (with_embeddings=True), "
                    f"got {getattr(embeddings, 'shape', None)}."
                )
            if self.validate_args and not bool(torch.isfinite(embeddings).all()):
                raise ValueError("`embeddings` holds NaN or infinite values.")
            states["embeddings"] = embeddings.detach().float()
        elif embeddings is not None:
            raise ValueError("`embeddings` given but the metric was built with with_embeddings=False.")
        self.append_samples(ids, **states)

    def compute(self) -> dict[str, Any]:
        samples = self.gathered_samples()
        q = self.gains.class_index(samples.values["labels_query"].cpu(), "query_labels")
        r = self.gains.class_index(samples.values["labels_retrieved"].cpu(), "retrieved_labels")
        extra = {}
        if self.with_embeddings:
            extra = {"embeddings": samples.values["embeddings"].cpu(), "embedding_classes": q}
        out = mismatch_analysis(
            q,
            r,
            self.gains.gains,
            counts=self.counts,
            num_trials=self.num_trials,
            seed=self.seed,
            percentile_kind=self.percentile_kind,
            **extra,
        )
        null = out.pop("null")
        out["num_duplicates"] = samples.num_duplicates
        per_query = out.pop("per_query")
        per_query["query_id"] = samples.ids
        # scalars as 0-d tensors, like every metric's compute(): counts int64, the rest float64
        result: dict[str, Any] = {
            key: torch.tensor(value, dtype=torch.long if isinstance(value, int) else torch.float64)
            for key, value in out.items()
        }
        result["per_query"] = per_query
        result["null_distribution"] = null
        return result


class RetrievalWithMismatch(EmbeddingRetrieval):
    """:class:`~beyondlabels.metrics.EmbeddingRetrieval` plus graded credit and the label-mismatch analysis of its
    top-1 neighbours against a class similarity, from the same search (the retrieval callback's ``profiles`` option).

    Adds ``gains`` to ``graded`` (``<gains.name>_precision@k``, ``<gains.name>_ndcg@k``) and, for every scalar of
    :func:`~beyondlabels.functional.mismatch.mismatch_output_schema`, ``mismatch_<key>`` computed by
    :func:`~beyondlabels.functional.mismatch.mismatch_analysis` from each query's label and its top-1 neighbour's
    (the null's class frequencies: the queries' labels), including ``mismatch_spearman_rho``, ``mismatch_spearman_p``
    and ``mismatch_spearman_pairs`` between ``gains`` and the mean embedding cosine of each pair of classes
    (:func:`~beyondlabels.functional.mismatch.class_pair_spearman`) over every evaluation embedding (the whole
    gallery, also when ``max_queries`` samples the queries). :meth:`compute` also returns ``null_distribution``
    (``[B]``), ``mismatch_pairs`` (``{"query", "retrieved"}``: the class indices of each query and its top-1
    neighbour, for tables) and ``projection_sample``. Every rank computes the same numbers.

    Args:
        gains: the class similarity with the labels of its classes (e.g.
            :func:`~beyondlabels.functional.profiles.profile_class_gains`).
        num_trials: the null's ``B``.
        seed: the null's seed.
        projection_points: :meth:`compute`'s ``projection_sample`` is ``{"embeddings": [n, D] float32, "labels":
            label codes [n]}`` on the CPU for a picture of the embeddings (e.g.
            :func:`~beyondlabels.functional.projection.pca_projection`), ``n = min(N, projection_points)``: a fixed
            sample chosen by id and ``projection_seed`` (:func:`~beyondlabels.functional.retrieval.sample_queries`:
            the same ids at every evaluation and on any world size), in id order. 0: ``projection_sample`` is None.
        projection_seed: seed of that sample.
        kwargs: :class:`~beyondlabels.metrics.EmbeddingRetrieval` options (``return_neighbors`` is at least 1).

    Examples:
        >>> gains = ClassGains([[1.0, 0.6], [0.6, 1.0]], [0, 1], name="profile")
        >>> metric = RetrievalWithMismatch(gains, ks=(1,), num_trials=100, projection_points=3)
        >>> metric.update(torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.8, 0.3]]), torch.tensor([0, 0, 1, 1]))
        >>> out = metric.compute()
        >>> (float(out["profile_precision@1"]), int(out["mismatch_num_mismatches"]),
        ...  float(out["mismatch_mean_similarity"]))
        (0.9, 1, 0.6)
        >>> # one pair: too few for a rho
        >>> int(out["mismatch_spearman_pairs"]), out["projection_sample"]["embeddings"].shape
        (1, torch.Size([3, 2]))
    """

    def __init__(
        self,
        gains: ClassGains,
        *,
        num_trials: int = 10_000,
        seed: int = 0,
        projection_points: int = 5000,
        projection_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        if not isinstance(gains, ClassGains):
            raise ValueError(
                f"`gains` must be a ClassGains (e.g. profile_class_gains(profiles)), got {type(gains).__name__}."
            )
        check_int_at_least(num_trials, "num_trials", 1)
        check_int(seed, "seed")
        check_int(projection_seed, "projection_seed")
        check_int_at_least(projection_points, "projection_points", 0, hint="0: no projection sample")
        kwargs["graded"] = (*tuple(kwargs.get("graded", ())), gains)
        kwargs["return_neighbors"] = max(1, int(kwargs.get("return_neighbors", 0)))
        super().__init__(**kwargs)
        self.mismatch_gains, self.num_trials, self.seed = gains, num_trials, seed
        self.projection_points, self.projection_seed = projection_points, projection_seed

    @classmethod
    def example(cls) -> RetrievalWithMismatch:
        """24 seeded embeddings of 3 classes graded by a 3-class similarity, ``ks=(1,)`` (see
        :meth:`PerSampleMetric.example`)."""
        metric = cls(_EXAMPLE_GAINS, ks=(1,), num_trials=50, projection_points=0)
        metric.update(*example_embeddings())
        return metric

    def output_schema(self) -> OutputSchema:
        mismatch = mismatch_output_schema(spearman=True)
        return (
            super().output_schema().merged(OutputSchema({f"mismatch_{k}": mismatch[k] for k in mismatch.scalar_keys()}))
        )

    def compute(self) -> dict[str, Any]:
        samples = self.gathered_samples()  # gathered and deduplicated once, for the search and the analysis
        out = self.results_of(samples)
        embeddings, labels, ids = samples.values["embeddings"], samples.values["labels"], samples.ids
        q = self.mismatch_gains.class_index(out["per_query"]["label"].cpu(), "labels")
        r = self.mismatch_gains.class_index(out["neighbors"]["labels"][:, 0].cpu(), "labels")
        analysis = mismatch_analysis(
            q,
            r,
            self.mismatch_gains.gains,
            num_trials=self.num_trials,
            seed=self.seed,
            embeddings=embeddings,
            embedding_classes=self.mismatch_gains.class_index(labels, "labels"),
        )
        out["null_distribution"] = analysis.pop("null")
        out["mismatch_pairs"] = {"query": q, "retrieved": r}
        out["projection_sample"] = None
        if self.projection_points:
            rows = sample_queries(ids, self.projection_points, self.projection_seed)
            out["projection_sample"] = {"embeddings": embeddings[rows].detach().cpu(), "labels": labels[rows].cpu()}
        for key in mismatch_output_schema(spearman=True).scalar_keys():
            value = analysis[key]
            out[f"mismatch_{key}"] = torch.tensor(value, dtype=torch.long if isinstance(value, int) else torch.float64)
        return out


def retrieval_metric(
    gains: ClassGains | None = None,
    *,
    num_trials: int = 10_000,
    seed: int = 0,
    projection_points: int = 5000,
    **options: Any,
) -> EmbeddingRetrieval:
    """The retrieval family's metric, chosen in this one place (the retrieval callback and ``task=retrieval`` both
    ask here): :class:`~beyondlabels.metrics.EmbeddingRetrieval` with ``options``, or, given the class ``gains`` of
    feature profiles, :class:`RetrievalWithMismatch` (graded credit and the label-mismatch analysis from the same
    search; ``num_trials``, ``seed`` and ``projection_points`` are its null's and its projection sample's).

    Examples:
        >>> type(retrieval_metric(ks=(1,))).__name__
        'EmbeddingRetrieval'
        >>> gains = ClassGains([[1.0, 0.6], [0.6, 1.0]], [0, 1], name="profile")
        >>> type(retrieval_metric(gains, ks=(1,), num_trials=100)).__name__
        'RetrievalWithMismatch'
    """
    if gains is None:
        return EmbeddingRetrieval(**options)
    return RetrievalWithMismatch(
        gains, num_trials=num_trials, seed=seed, projection_points=projection_points, **options
    )
