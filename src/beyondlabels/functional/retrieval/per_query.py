"""The per-query values of the retrieval metrics: one exact search, the values of every query of a share
(definitions: :mod:`beyondlabels.functional.retrieval`)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from beyondlabels._internal.checks import (
    check_deep_metrics,
    check_distance,
    check_ks,
    check_non_negative_int,
    check_positive_int,
    check_precision,
)
from beyondlabels.functional._pair_shares import Exchange
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.functional.retrieval._chunks import _SHALLOW_JOIN_ELEMENTS, _joined, _search_depths, _searched_chunks
from beyondlabels.functional.retrieval._inputs import _check_depth_limits, _check_graded, _problem
from beyondlabels.functional.retrieval._values import _collected, _Cutoffs, _GradedState, _Plan, _put_chunk

__all__ = ["retrieval_per_query"]


def retrieval_per_query(
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
    share: tuple[int, int] | None = None,
    query_rows: Tensor | None = None,
    deep_metrics: bool = True,
    distance: str = "cosine",
    exchange: Exchange | None = None,
    normalized: bool = False,
) -> dict[str, Tensor]:
    """Per-query values of the queries in ``share`` (all by default), the input of
    :func:`~beyondlabels.functional.retrieval.aggregate_retrieval`.

    Arguments are those of :func:`~beyondlabels.functional.retrieval.embedding_retrieval_metrics`, plus
    ``share=(i, n)``: compute only the i-th of n disjoint shares of the queries (see
    :func:`~beyondlabels.functional.search.search_neighbors`). Concatenating the results of all shares and passing them
    to :func:`~beyondlabels.functional.retrieval.aggregate_retrieval` gives exactly the values of a single call.
    ``query_rows`` (int64 positions, e.g. from :func:`~beyondlabels.functional.retrieval.sample_queries`) searches only
    those queries, each against the whole gallery; shares then split them. ``exchange`` (with ``share``; the
    processes that each call this function for one share, passing tensors between them) splits a leave-one-out search
    by block pairs instead of rows, so that no pair of samples is multiplied twice (``docs/search.md``, "Shares"); the
    rows returned are the same. ``normalized=True`` (cosine only): ``embeddings`` (and ``query_embeddings``) are
    already the fp32 unit rows of :func:`~beyondlabels.functional.search.normalize_rows`, searched as they are with no
    second copy; the values are those of the raw rows.

    Returns:
        A dict of tensors with one row per query of the share: ``query_index`` (position in the query set),
        ``hits`` (int64 ``[c, K]``: relevant items within the top 1..K, ``K = max(curve_max_k, max(ks))``),
        ``num_relevant`` and float64 ``ndcg@{k}``, the graded ``{name}_precision@{k}`` / ``{name}_ndcg@{k}`` and, with
        ``deep_metrics``, ``r_precision``, ``map@r``, ``first_relevant_rank`` (NaN for lone queries); with
        ``return_neighbors=n`` also ``neighbor_indices`` and ``neighbor_scores`` ``[c, n]``.
    """
    ks_t = check_ks(ks)
    check_positive_int(chunk_size, "chunk_size")
    lowp = check_precision(precision)
    curve_max_k = ks_t[-1] if curve_max_k is None else check_positive_int(curve_max_k, "curve_max_k")
    check_non_negative_int(return_neighbors, "return_neighbors")
    deep_metrics = check_deep_metrics(deep_metrics)
    graded = _check_graded(graded)
    p = _problem(
        embeddings, labels, ids, query_embeddings, query_labels, query_ids, check_distance(distance), normalized
    )
    avail = _check_depth_limits(p, ks_t, curve_max_k, return_neighbors)
    hits_k = max(curve_max_k, ks_t[-1])
    depths = _search_depths(p.r, max(hits_k, return_neighbors), avail, deep_metrics)
    graded_state = [_GradedState.of(g, p) for g in graded]
    plan = _Plan(p, _Cutoffs.of(ks_t, p.gn.device), hits_k, deep_metrics, graded_state, return_neighbors)
    out, chunks = _searched_chunks(p, depths, query_rows, share, chunk_size, lowp, exchange)
    if not deep_metrics:
        chunks = _joined(chunks, _SHALLOW_JOIN_ELEMENTS)
    for chunk in chunks:
        _put_chunk(out, chunk, plan)
    return _collected(out, plan)
