"""The per-query values of one searched chunk (binary, deep and graded) and the output dict they make."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from beyondlabels.functional._euclidean import L2Gallery
from beyondlabels.functional._search_paths import Neighbors
from beyondlabels.functional._topk import mask_excluded, score_block
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.functional.retrieval._chunks import _RowCollector
from beyondlabels.functional.retrieval._inputs import _Problem


def _ideal_dcg(
    gains: Tensor, query_class: Tensor, excluded_class: Tensor, class_counts: Tensor, kmax: int, discount: Tensor
) -> Tensor:
    """Ideal DCG@1..kmax ``[Q, kmax]`` of each query: the available gallery sorted by gain (linear gains).

    ``class_counts[c]`` gallery items have class ``c``; a query whose excluded item has class ``e >= 0`` has one fewer
    of class ``e``. Computed once per distinct (query class, excluded class) pair.
    """
    pairs, inverse = torch.unique(torch.stack([query_class, excluded_class]), dim=1, return_inverse=True)
    rows = gains[pairs[0]]  # [P, C]
    counts = class_counts.unsqueeze(0).repeat(pairs.shape[1], 1)
    has = pairs[1] >= 0
    counts[has, pairs[1][has]] -= 1
    sorted_gains, order = torch.sort(rows, dim=1, descending=True, stable=True)
    ends = torch.cumsum(torch.gather(counts, 1, order), dim=1)
    positions = torch.arange(kmax, device=gains.device).unsqueeze(0).expand(pairs.shape[1], kmax).contiguous()
    slot = torch.searchsorted(ends, positions, right=True)
    ideal = torch.where(slot < rows.shape[1], torch.gather(sorted_gains, 1, slot.clamp(max=rows.shape[1] - 1)), 0.0)
    return torch.cumsum(ideal * discount, dim=1)[inverse]


def _first_relevant_rank_full(p: _Problem, rows: Tensor, q_labels: Tensor, excl: Tensor | None) -> Tensor:
    """Exact 1-based rank of the best-ranked relevant item of the query rows ``rows``, counted over the whole gallery
    (for a few rows)."""
    if p.space.distance == "euclidean":
        return L2Gallery(p.gn, p.space.l2, p.queries, None).first_relevant_rank(rows, q_labels, p.g_labels, excl)
    g_labels = p.g_labels
    s = score_block(p.queries[rows], p.gn)
    mask_excluded(s, excl)
    relevant = g_labels.unsqueeze(0) == q_labels.unsqueeze(1)
    rel_scores = s.masked_fill(~relevant, float("-inf"))
    best = rel_scores.max(dim=1, keepdim=True).values
    cols = torch.arange(s.shape[1], device=s.device).unsqueeze(0)
    best_idx = torch.where(rel_scores == best, cols, s.shape[1]).min(dim=1, keepdim=True).values
    before = (s > best) | ((s == best) & (cols < best_idx))
    return before.sum(dim=1).to(torch.float64) + 1.0


@dataclass(frozen=True)
class _Cutoffs:
    """The cut-offs ``ks`` (ascending) as positions ``index = k - 1``, the discounts ``1 / log2(i + 1)`` of ranks
    ``i = 1..max(ks)`` and the ideal binary DCG of ``i`` relevant items at the top."""

    ks: tuple[int, ...]
    index: Tensor
    discount: Tensor
    binary_ideal: Tensor

    @classmethod
    def of(cls, ks: tuple[int, ...], device: torch.device) -> _Cutoffs:
        discount = 1.0 / torch.log2(torch.arange(2, ks[-1] + 2, device=device, dtype=torch.float64))
        return cls(ks, torch.tensor([k - 1 for k in ks], device=device), discount, torch.cumsum(discount, dim=0))

    @property
    def kmax(self) -> int:
        return self.ks[-1]


@dataclass(frozen=True)
class _GradedState:
    """One gain matrix prepared for a problem: its gains on the device, the class of every gallery item and query,
    the gallery's class counts, the class of each query's excluded item (``-1``: none) and its mistake tables."""

    name: str
    gains: Tensor
    g_cls: Tensor
    q_cls: Tensor
    counts: Tensor
    e_cls: Tensor
    stats: dict[str, Tensor]

    @classmethod
    def of(cls, g: ClassGains, p: _Problem) -> _GradedState:
        device = p.gn.device
        gains = g.gains.to(device)
        g_cls = g.class_index(p.g_labels, "labels")
        q_cls = g_cls if p.qn is None else g.class_index(p.q_labels, "query_labels")
        counts = torch.bincount(g_cls, minlength=g.num_classes)
        if p.excl is None:
            e_cls = torch.full_like(q_cls, -1)
        else:
            e_cls = torch.where(p.excl >= 0, g_cls[p.excl.clamp(min=0)], -1)
        return cls(g.name, gains, g_cls, q_cls, counts, e_cls, {k: v.to(device) for k, v in g.mistake_stats.items()})


def _put_deep_values(
    out: _RowCollector, p: _Problem, rows: Tensor, ql: Tensor, rel: Tensor, cum: Tensor, rq: Tensor, ok: Tensor
) -> None:
    """``r_precision``, ``map@r`` and ``first_relevant_rank`` of a chunk (NaN for lone queries)."""
    nan = float("nan")
    depth = rel.shape[1]
    rq_safe = rq.clamp(min=1)
    rank = torch.arange(1, depth + 1, device=rel.device, dtype=torch.float64)
    within_r = rank.unsqueeze(0) <= rq.unsqueeze(1)
    in_r = torch.gather(cum, 1, (rq_safe - 1).unsqueeze(1)).squeeze(1).to(torch.float64)
    prec_terms = torch.where(rel & within_r, cum.to(torch.float64) / rank, 0.0)
    # A running sum read at rank R: the summation order does not depend on the chunk's depth.
    ap = torch.gather(torch.cumsum(prec_terms, dim=1), 1, (rq_safe - 1).unsqueeze(1)).squeeze(1) / rq_safe
    out.put("r_precision", torch.where(ok, in_r / rq_safe, nan))
    out.put("map@r", torch.where(ok, ap, nan))

    found = rel.any(dim=1)
    first = torch.argmax(rel.to(torch.uint8), dim=1).to(torch.float64) + 1.0
    missing = ok & ~found
    if bool(missing.any()):
        m = torch.nonzero(missing).flatten()
        ex = None if p.excl is None else p.excl[rows[m]]
        first[m] = _first_relevant_rank_full(p, rows[m], ql[m], ex)
    out.put("first_relevant_rank", torch.where(ok, first, nan))


def _put_graded_values(
    out: _RowCollector,
    state: _GradedState,
    cut: _Cutoffs,
    p: _Problem,
    rows: Tensor,
    idx: Tensor,
    ql: Tensor,
    ok: Tensor,
) -> None:
    """The graded precision and nDCG at every cut-off of a chunk, and the top-1 mistake statistics."""
    nan = float("nan")
    if state.stats:
        first_cls = state.g_cls[idx[:, 0]]
        miss = ok & (p.g_labels[idx[:, 0]] != ql)
        for stat, table in state.stats.items():
            value = torch.where(miss, table[state.q_cls[rows], first_cls], nan)
            out.put(f"{state.name}_mistake_{stat}", value)
    gain = state.gains[state.q_cls[rows].unsqueeze(1), state.g_cls[idx[:, : cut.kmax]]]
    cum_gain = torch.cumsum(gain, dim=1)
    ks_f = cut.index.to(torch.float64) + 1.0
    g_prec = cum_gain[:, cut.index] / ks_f
    g_dcg = torch.cumsum(gain * cut.discount, dim=1)[:, cut.index]
    g_ideal = _ideal_dcg(state.gains, state.q_cls[rows], state.e_cls[rows], state.counts, cut.kmax, cut.discount)[
        :, cut.index
    ]
    out.put(f"{state.name}_precision", torch.where(ok.unsqueeze(1), g_prec, nan))
    out.put(f"{state.name}_ndcg", torch.where(ok.unsqueeze(1), g_dcg / g_ideal, nan))


@dataclass(frozen=True)
class _Plan:
    """What the values of every chunk and the output dict depend on: the problem, the cut-offs, the width of ``hits``,
    whether the deep metrics are computed, the prepared gain matrices and the neighbours returned per query."""

    p: _Problem
    cut: _Cutoffs
    hits_k: int
    deep_metrics: bool
    graded_state: Sequence[_GradedState]
    return_neighbors: int


def _put_chunk(out: _RowCollector, chunk: Neighbors, plan: _Plan) -> None:
    """Every per-query value of one searched chunk, written into ``out``."""
    p, cut, hits_k, return_neighbors = plan.p, plan.cut, plan.hits_k, plan.return_neighbors
    rows, vals, idx = chunk.rows, chunk.scores, chunk.indices
    # index_select, not x[rows]: the same values without a parallel region.
    ql, rq, ok = p.q_labels.index_select(0, rows), p.r.index_select(0, rows), ~p.lone.index_select(0, rows)
    rel = (p.g_labels.index_select(0, idx.reshape(-1)).view(idx.shape) == ql.unsqueeze(1)) & torch.isfinite(vals)
    cum = torch.cumsum(rel, dim=1, dtype=torch.int32)
    out.next_rows(rows.shape[0])
    out.put("query_index", rows)
    out.put("hits", cum[:, :hits_k])
    if plan.deep_metrics:
        _put_deep_values(out, p, rows, ql, rel, cum, rq, ok)
    rq_safe = rq.clamp(min=1)
    dcg = torch.cumsum(rel[:, : cut.kmax].to(torch.float64) * cut.discount, dim=1)
    ideal = cut.binary_ideal[torch.minimum(rq_safe.unsqueeze(1), cut.index.unsqueeze(0) + 1) - 1]
    out.put("ndcg", torch.where(ok.unsqueeze(1), dcg[:, cut.index] / ideal, float("nan")))
    for state in plan.graded_state:
        _put_graded_values(out, state, cut, p, rows, idx, ql, ok)
    if return_neighbors:
        out.put("neighbor_indices", idx[:, :return_neighbors])
        out.put("neighbor_scores", vals[:, :return_neighbors])


def _collected(out: _RowCollector, plan: _Plan) -> dict[str, Tensor]:
    """The output dict of :func:`~beyondlabels.functional.retrieval.retrieval_per_query` from the rows collected in
    ``out``."""
    p, cut, return_neighbors = plan.p, plan.cut, plan.return_neighbors
    device = p.gn.device

    def get(key: str, empty_shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        return out.get(key, torch.empty(empty_shape, dtype=dtype, device=device))

    rows_all = get("query_index", (0,), torch.long)
    result = {
        "query_index": rows_all,
        "num_relevant": p.r.index_select(0, rows_all),
        "hits": get("hits", (0, plan.hits_k), torch.int32).to(torch.long),
    }
    if plan.deep_metrics:
        for key in ("r_precision", "map@r", "first_relevant_rank"):
            result[key] = get(key, (0,), torch.float64)
    ndcg_all = get("ndcg", (0, len(cut.ks)), torch.float64)
    for j, k in enumerate(cut.ks):
        result[f"ndcg@{k}"] = ndcg_all[:, j]
    for state in plan.graded_state:
        for stat in state.stats:
            key = f"{state.name}_mistake_{stat}"
            result[key] = get(key, (0,), torch.float64)
        for family in ("precision", "ndcg"):
            values = get(f"{state.name}_{family}", (0, len(cut.ks)), torch.float64)
            for j, k in enumerate(cut.ks):
                result[f"{state.name}_{family}@{k}"] = values[:, j]
    if return_neighbors:
        result["neighbor_indices"] = get("neighbor_indices", (0, return_neighbors), torch.long)
        result["neighbor_scores"] = get("neighbor_scores", (0, return_neighbors), torch.float32)
    return result
