"""The retrieval metrics of an embedding gallery in one call: the per-query values of one exact search, then their
means (definitions: :mod:`beyondlabels.functional.retrieval`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_deep_metrics
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.functional.retrieval.aggregate import aggregate_retrieval
from beyondlabels.functional.retrieval.per_query import retrieval_per_query
from beyondlabels.functional.retrieval.sampling import sample_queries

__all__ = ["embedding_retrieval_metrics"]


# Over 80 lines for its docstring, the one definition of every argument (60 lines); the body is two calls and the
# query sample, and splitting it would only repeat the argument list.
def embedding_retrieval_metrics(
    embeddings: Tensor,
    labels: Tensor,
    ids: Tensor | None = None,
    *,
    ks: Sequence[int] = (1, 5, 10),
    chunk_size: int = 1024,
    precision: str = "fp32",
    curve_max_k: int | None = None,
    query_embeddings: Tensor | None = None,
    query_labels: Tensor | None = None,
    query_ids: Tensor | None = None,
    graded: Sequence[ClassGains] = (),
    return_neighbors: int = 0,
    max_queries: int | None = None,
    query_seed: int = 0,
    deep_metrics: bool = True,
    distance: str = "cosine",
) -> dict[str, Tensor | dict[str, Tensor]]:
    """Retrieval metrics of an embedding gallery from one exact search (definitions: module docstring).

    By default this is leave-one-out evaluation: every item of ``embeddings`` is a query against all the *other*
    items. With ``query_embeddings`` a separate query set is searched against the gallery (e.g. text -> image);
    self-exclusion then applies only when both ``query_ids`` and ``ids`` are given.

    Args:
        embeddings: Gallery embeddings ``[N, D]`` (floating point, finite, non-zero rows).
        labels: Int tensor ``[N]`` of gallery labels (see :func:`~beyondlabels.functional.labels.encode_labels`).
        ids: Optional unique int tensor ``[N]`` of sample ids (reported as ``per_query["query_id"]``).
        ks: Cut-offs for every ``@k`` metric.
        chunk_size: Queries scored per block; peak memory is ``O(chunk_size * N)`` scores.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (fast mode with identical results).
        curve_max_k: Length of ``precision_curve``; defaults to ``max(ks)``.
        query_embeddings: Optional separate queries ``[Q, D]``.
        query_labels: Int tensor ``[Q]``; required with ``query_embeddings``.
        query_ids: Optional int tensor ``[Q]``; with ``ids`` excludes the gallery item sharing a query's id.
        graded: :class:`~beyondlabels.functional.relevance.ClassGains` matrices for graded metrics.
        return_neighbors: When ``n > 0``, also return ``neighbors``: ``indices`` (int64) and ``scores`` (fp32), both
            ``[Q, n]`` in query order.
        max_queries: Search only a fixed, seeded sample of this many queries (:func:`sample_queries`, chosen by id —
            by position without ids), each against the whole gallery; adds ``num_query_pool`` and the standard error
            ``<key>_se`` of every micro-averaged metric. None (default): every query.
        query_seed: Seed of the query sample.
        deep_metrics: Also compute the metrics that need a search past ``K = max(max(ks), curve_max_k,
            return_neighbors)``: ``r_precision`` and ``map@r`` (each query searched to depth ``max(R, K)``), their
            ``macro_*`` versions, and ``first_relevant_rank`` (exact over the whole gallery: queries without a
            relevant item in their searched list get a full row of products) with its mean and median. False
            (shallow mode) searches every query to depth ``K`` only and leaves those keys out of the outputs, the
            schema, ``per_query`` and the ``_se`` / interval keys; every other value is bitwise the one of
            ``deep_metrics=True``. On data with large ``R`` shallow mode costs little more than the products.
        distance: How neighbours are ranked (:mod:`beyondlabels.functional.search`): ``"cosine"`` (default),
            ``"euclidean"`` (ascending L2 distance of the raw embeddings, as pytorch-metric-learning's
            ``AccuracyCalculator`` ranks by default; zero rows allowed; neighbour scores are minus the distances) or
            ``"dot"`` (descending inner product of the raw embeddings).

    Returns:
        A dict of 0-d tensors (float64 metrics; int64 ``num_queries``, ``num_lone_queries``), the 1-D float64
        ``precision_curve``, and ``per_query`` (a dict of ``[Q]`` vectors). Keys and directions:
        :func:`retrieval_output_schema`.

    Raises:
        ValueError: On empty, non-finite, zero-norm (cosine) or wrongly shaped embeddings; labels or ids whose length
            does not match; non-integer labels; duplicated ids; bad ``ks`` / ``curve_max_k`` (non-positive, or larger
            than the gallery available to a query); labels missing from a gain matrix; bad ``chunk_size``,
            ``precision``, ``return_neighbors``, ``deep_metrics`` (not a bool) or ``distance``.

    Examples:
        >>> emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> m = embedding_retrieval_metrics(emb, torch.tensor([0, 0, 1, 1]), ks=(1, 2))
        >>> m["precision@1"], m["precision@2"], m["ndcg@2"]
        (tensor(1., dtype=torch.float64), tensor(0.5000, dtype=torch.float64), tensor(1., dtype=torch.float64))
        >>> shallow = embedding_retrieval_metrics(emb, torch.tensor([0, 0, 1, 1]), ks=(1, 2), deep_metrics=False)
        >>> (shallow["precision@2"] == m["precision@2"], "map@r" in shallow,
        ...  "first_relevant_rank" in shallow["per_query"])
        (tensor(True), False, False)
    """
    deep_metrics = check_deep_metrics(deep_metrics)
    q_labels = labels if query_embeddings is None else query_labels
    q_ids = ids if query_embeddings is None else query_ids
    rows, pool = None, None
    if max_queries is not None:
        if q_labels is None:
            raise ValueError("`query_labels` is required with `query_embeddings` (relevance = same label).")
        pool = q_labels.shape[0]
        rows = sample_queries(q_ids if q_ids is not None else torch.arange(pool), max_queries, query_seed)
    per_query = retrieval_per_query(
        embeddings,
        labels,
        ids,
        ks=ks,
        chunk_size=chunk_size,
        precision=precision,
        curve_max_k=curve_max_k,
        query_embeddings=query_embeddings,
        query_labels=query_labels,
        query_ids=query_ids,
        graded=graded,
        return_neighbors=return_neighbors,
        query_rows=rows,
        deep_metrics=deep_metrics,
        distance=distance,
    )
    return aggregate_retrieval(
        per_query,
        q_labels,
        ks=ks,
        curve_max_k=curve_max_k,
        graded=[g.name for g in graded],
        query_ids=q_ids,
        query_pool=None if max_queries is None else pool,
        deep_metrics=deep_metrics,
    )
