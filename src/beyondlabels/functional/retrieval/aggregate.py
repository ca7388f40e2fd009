"""The means of the retrieval metrics from their per-query values: micro and macro averages, the precision curve
and the standard errors of a query sample (definitions: :mod:`beyondlabels.functional.retrieval`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_deep_metrics, check_ks
from beyondlabels.functional.retrieval._keys import micro_keys

__all__ = ["aggregate_retrieval"]


def _class_mean(values: Tensor, classes: Tensor, n_classes: int) -> Tensor:
    sums = torch.zeros(n_classes, dtype=torch.float64, device=values.device).index_add_(0, classes, values)
    counts = torch.zeros(n_classes, dtype=torch.float64, device=values.device).index_add_(
        0, classes, torch.ones_like(values)
    )
    present = counts > 0
    # Summed in ascending order of value: the result does not depend on how labels are coded or ordered.
    return torch.sort(sums[present] / counts[present]).values.sum() / int(present.sum())


def aggregate_retrieval(
    per_query: Mapping[str, Tensor],
    query_labels: Tensor,
    *,
    ks: Sequence[int],
    curve_max_k: int | None = None,
    graded: Sequence[str] = (),
    query_ids: Tensor | None = None,
    query_pool: int | None = None,
    deep_metrics: bool = True,
) -> dict[str, Tensor | dict[str, Tensor]]:
    """Scalars, curve and ``per_query`` dict from the per-query values of every query (see the module docstring).

    With ``query_pool`` (the rows are a sample of that many queries) the output also holds ``num_query_pool`` and,
    for every micro-averaged metric, ``<key>_se``: the standard error of the sample mean, ``sd / sqrt(n)`` with the
    sample standard deviation (ddof 1) of the non-lone sampled queries and the finite-population factor
    ``sqrt((pool - n) / (pool - 1))``, so it is 0 when the sample is the whole pool.

    Args:
        per_query: The (concatenated) output of :func:`retrieval_per_query`; rows in any order.
        query_labels: Int tensor ``[Q]`` of the labels of the whole query set (indexed by ``query_index``).
        ks: As given to :func:`retrieval_per_query`.
        curve_max_k: As given to :func:`retrieval_per_query`.
        graded: Names of the graded matrices given to it.
        query_ids: Optional ``[Q]`` ids reported as ``per_query["query_id"]`` (default: the query position).
        deep_metrics: As given to :func:`retrieval_per_query`.

    Returns:
        The dict described in :func:`embedding_retrieval_metrics`.
    """
    ks_t = check_ks(ks)
    deep_metrics = check_deep_metrics(deep_metrics)
    if deep_metrics and "r_precision" not in per_query:
        raise ValueError("`per_query` was computed with deep_metrics=False; aggregate it with deep_metrics=False too.")
    curve_max_k = ks_t[-1] if curve_max_k is None else curve_max_k
    order = torch.argsort(per_query["query_index"])
    pq = {k: v.index_select(0, order) for k, v in per_query.items()}  # index_select: see retrieval_per_query
    device = pq["hits"].device
    index = pq["query_index"]
    labels = query_labels.to(device=device, dtype=torch.long)[index]
    r = pq["num_relevant"]
    ok = r > 0
    ok_rows = torch.nonzero(ok).flatten()
    n_ok = int(ok_rows.numel())
    hits = pq["hits"].to(torch.float64)
    vectors = _per_query_vectors(pq, hits, r, ok, ks_t, graded, deep_metrics)
    mistakes = {key: pq[key] for key in pq if "_mistake_" in key}
    out = _means(pq, vectors, mistakes, labels, ok_rows, ks_t, deep_metrics)
    out["num_queries"] = torch.tensor(n_ok, dtype=torch.long, device=device)
    out["num_lone_queries"] = torch.tensor(int(index.numel()) - n_ok, dtype=torch.long, device=device)
    rank = torch.arange(1, curve_max_k + 1, device=device, dtype=torch.float64)
    if n_ok:
        out["precision_curve"] = hits.index_select(0, ok_rows)[:, :curve_max_k].contiguous().sum(dim=0) / rank / n_ok
    else:
        out["precision_curve"] = torch.full_like(rank, float("nan"))
    per_query_out = {
        "query_id": index if query_ids is None else query_ids.to(device)[index],
        "label": labels,
        "num_relevant": r,
    }
    per_query_out.update(vectors)
    per_query_out.update(mistakes)
    if deep_metrics:
        per_query_out["first_relevant_rank"] = pq["first_relevant_rank"]
    out["per_query"] = per_query_out
    if query_pool is not None:
        keys = micro_keys(ks_t, graded, deep_metrics)
        out.update(_standard_errors(per_query_out, ok_rows, query_pool, keys))
        out["num_query_pool"] = torch.tensor(query_pool, dtype=torch.long, device=device)
    if "neighbor_indices" in pq:
        out["neighbors"] = {"indices": pq["neighbor_indices"], "scores": pq["neighbor_scores"]}
    return out


def _per_query_vectors(
    pq: Mapping[str, Tensor],
    hits: Tensor,
    r: Tensor,
    ok: Tensor,
    ks: tuple[int, ...],
    graded: Sequence[str],
    deep_metrics: bool,
) -> dict[str, Tensor]:
    """The per-query vector of every averaged metric (NaN for lone queries), in output order."""
    r_f = r.to(torch.float64)
    vectors: dict[str, Tensor] = {}
    for k in ks:
        vectors[f"precision@{k}"] = torch.where(ok, hits[:, k - 1] / k, float("nan"))
    for k in ks:
        vectors[f"recall@{k}"] = torch.where(ok, hits[:, k - 1] / r_f.clamp(min=1), float("nan"))
    for k in ks:
        vectors[f"hit@{k}"] = torch.where(ok, (hits[:, k - 1] > 0).to(torch.float64), float("nan"))
    for k in ks:
        vectors[f"ndcg@{k}"] = pq[f"ndcg@{k}"]
    for name in graded:
        for family in ("precision", "ndcg"):
            for k in ks:
                vectors[f"{name}_{family}@{k}"] = pq[f"{name}_{family}@{k}"]
    if deep_metrics:
        for key in ("r_precision", "map@r"):
            vectors[key] = pq[key]
    return vectors


def _means(
    pq: Mapping[str, Tensor],
    vectors: Mapping[str, Tensor],
    mistakes: Mapping[str, Tensor],
    labels: Tensor,
    ok_rows: Tensor,
    ks: tuple[int, ...],
    deep_metrics: bool,
) -> dict[str, Tensor | dict[str, Tensor]]:
    """The micro means over non-lone queries, the means over top-1 mistakes, the first-rank mean and median and the
    macro means (over labels), in output order."""
    n_ok = int(ok_rows.numel())
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=labels.device)
    codes = torch.unique(labels.index_select(0, ok_rows), return_inverse=True)[1] if n_ok else None
    n_classes = int(codes.max()) + 1 if n_ok else 0
    out: dict[str, Tensor | dict[str, Tensor]] = {}
    for key, value in vectors.items():
        out[key] = value.index_select(0, ok_rows).mean() if n_ok else nan
    for key, value in mistakes.items():  # means over the top-1 mistakes (NaN elsewhere)
        found = ~torch.isnan(value)
        out[key] = value[found].mean() if bool(found.any()) else nan
    if deep_metrics:
        first = pq["first_relevant_rank"]
        out["mean_first_relevant_rank"] = first.index_select(0, ok_rows).mean() if n_ok else nan
        out["median_first_relevant_rank"] = torch.quantile(first.index_select(0, ok_rows), 0.5) if n_ok else nan
    macro = [f"precision@{k}" for k in ks] + (["r_precision", "map@r"] if deep_metrics else [])
    for key in macro:
        out[f"macro_{key}"] = _class_mean(vectors[key].index_select(0, ok_rows), codes, n_classes) if n_ok else nan
    return out


def _standard_errors(
    per_query: Mapping[str, Tensor], ok_rows: Tensor, query_pool: int, keys: Sequence[str]
) -> dict[str, Tensor]:
    """``<key>_se`` of every micro-averaged metric ``keys`` (:func:`micro_keys`) of a sample of ``query_pool`` queries
    (NaN below 2 queries)."""
    n_ok = int(ok_rows.numel())
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=ok_rows.device)
    fpc = math.sqrt(max(query_pool - n_ok, 0) / (query_pool - 1)) if query_pool > 1 else 0.0
    out: dict[str, Tensor] = {}
    for key in keys:
        values = per_query[key.replace("mean_", "")] if key.startswith("mean_") else per_query[key]
        values = values.index_select(0, ok_rows)
        se = values.std(unbiased=True) / math.sqrt(n_ok) * fpc if n_ok > 1 else nan
        out[f"{key}_se"] = se if n_ok > 1 else nan
    return out
