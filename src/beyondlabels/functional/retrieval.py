"""Retrieval metrics of an embedding gallery, computed from one exact search and a relevance definition.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning. The search (scores,
exclusion, ranking and ties, depth, shares) is :func:`beyondlabels.functional.search.search_neighbors`; its definitions apply.

Relevance
    Binary: a gallery item is relevant to a query when their labels are equal. ``R`` of a query is the number of
    relevant gallery items available to it (the excluded item left out): in leave-one-out use, the number of *other*
    items that share its label. Graded (optional, any number of :class:`~beyondlabels.functional.relevance.ClassGains`
    matrices): the gain of an item is ``gains[class(query), class(item)]``; binary metrics are unaffected by it.

Lone queries
    Queries with ``R == 0`` are excluded from every metric (binary and graded) and only counted in
    ``num_lone_queries``. When every query is lone, every metric is NaN and ``num_queries`` is 0.

Metrics (per query, then averaged)
    - ``precision@k`` = (#relevant in the top k) / k; ``recall@k`` = (#relevant in the top k) / R;
      ``hit@k`` = 1 if a relevant item is in the top k.
    - ``r_precision`` = (#relevant in the top R) / R.
    - ``map@r`` = (1/R) * sum over i <= R of P(i) * rel(i) (pytorch-metric-learning's MAP@R).
    - ``ndcg@k`` (binary, linear gain): DCG@k / IDCG@k with DCG@k = sum over i <= k of rel(i) / log2(i + 1) and the
      ideal DCG of min(R, k) relevant items at the top.
    - ``first_relevant_rank``: the 1-based rank of the best-ranked relevant item, exact over the whole gallery
      (``mean_first_relevant_rank``, ``median_first_relevant_rank``: the mean of the two middle values for even counts).
    - graded, for each matrix named ``g``: ``g_precision@k`` = (sum of gains in the top k) / k and ``g_ndcg@k`` with
      linear gains, the same discount, and the ideal DCG of the best possible order of the available gallery.
    - ``precision_curve[i]`` = ``precision@(i + 1)`` for ``i = 0 .. curve_max_k - 1``.

    Micro averages (the plain keys) are the mean over non-lone queries. Macro averages (``macro_*``) first average
    the queries of each label, then average over labels. Every mean is a float64 sum in query order, so the values
    do not depend on chunking or on how queries were shared between processes.

Per-query values
    ``per_query`` holds one float64 vector per metric (NaN for lone queries), plus ``query_id``, ``label`` and
    ``num_relevant``: the input of confidence intervals and paired tests.

Example:
    >>> emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
    >>> labels = torch.tensor([0, 0, 1, 1, 2])
    >>> m = embedding_retrieval_metrics(emb, labels, ks=(1, 2))
    >>> m["precision@1"], m["num_queries"], m["num_lone_queries"]
    (tensor(1., dtype=torch.float64), tensor(4), tensor(1))
    >>> m["per_query"]["r_precision"]
    tensor([1., 1., 1., 1., nan], dtype=torch.float64)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from beyondlabels._internal.checks import (
    check_deep_metrics,
    check_int_vector,
    check_ks,
    check_non_negative_int,
    check_positive_int,
    check_precision,
    check_seed,
)
from beyondlabels.functional._search import Neighbors, available, search_normalized
from beyondlabels.functional._topk import mask_excluded, score_block
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.functional.search import exclusion_index, normalize_rows
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "aggregate_retrieval",
    "embedding_retrieval_metrics",
    "retrieval_output_schema",
    "retrieval_per_query",
    "sample_queries",
]


def retrieval_output_schema(
    ks: Sequence[int],
    graded: Sequence[str] = (),
    sampled: bool = False,
    mistake_stats: Mapping[str, Sequence[str]] | None = None,
    deep_metrics: bool = True,
) -> OutputSchema:
    """The output schema of :func:`embedding_retrieval_metrics` for cut-offs ``ks`` and graded matrix names; with
    ``sampled`` (a query sample, ``max_queries``) also ``num_query_pool`` and the standard error ``<key>_se`` of
    every micro-averaged metric; without ``deep_metrics`` (see :func:`embedding_retrieval_metrics`) none of the
    keys that need a search past ``max(ks)``.

    Example:
        >>> s = retrieval_output_schema((1, 5))
        >>> s["precision@5"].higher_is_better, s["mean_first_relevant_rank"].higher_is_better, s["num_queries"].count
        (True, False, True)
        >>> s.per_query["first_relevant_rank"].higher_is_better, s.headline
        (False, ['precision@1', 'r_precision', 'map@r', 'ndcg@5'])
    """
    ks = check_ks(ks)
    deep_metrics = check_deep_metrics(deep_metrics)
    up, down = KeySpec("scalar", True), KeySpec("scalar", False)
    keys: dict[str, KeySpec] = {}
    per_query: dict[str, KeySpec] = {}
    for family in ("precision", "recall", "hit", "ndcg"):
        for k in ks:
            keys[f"{family}@{k}"] = up
            per_query[f"{family}@{k}"] = KeySpec("per_query", True)
    for name in graded:
        for family in ("precision", "ndcg"):
            for k in ks:
                keys[f"{name}_{family}@{k}"] = up
                per_query[f"{name}_{family}@{k}"] = KeySpec("per_query", True)
    for name, stats in (mistake_stats or {}).items():
        for stat in stats:
            keys[f"{name}_mistake_{stat}"] = up
            per_query[f"{name}_mistake_{stat}"] = KeySpec("per_query", True)
    if deep_metrics:
        keys["r_precision"] = up
        keys["map@r"] = up
        per_query["r_precision"] = per_query["map@r"] = KeySpec("per_query", True)
        keys["mean_first_relevant_rank"] = keys["median_first_relevant_rank"] = down
        per_query["first_relevant_rank"] = KeySpec("per_query", False)
    for k in ks:
        keys[f"macro_precision@{k}"] = up
    if deep_metrics:
        keys["macro_r_precision"] = keys["macro_map@r"] = up
    keys["num_queries"] = keys["num_lone_queries"] = KeySpec("scalar", None, count=True)
    keys["precision_curve"] = KeySpec("curve", True)
    per_query["num_relevant"] = KeySpec("per_query", None, count=True)
    per_query["query_id"] = per_query["label"] = KeySpec("per_query", None)
    if sampled:
        for key in _micro_keys(ks, graded, deep_metrics):
            keys[f"{key}_se"] = KeySpec("scalar", None)
        keys["num_query_pool"] = KeySpec("scalar", None, count=True)
    # read by: precision at the smallest cut-off, R-precision and MAP@R (deep), nDCG at the largest cut-off
    if deep_metrics:
        headline = [f"precision@{ks[0]}", "r_precision", "map@r"]
    else:
        headline = [f"precision@{k}" for k in dict.fromkeys((ks[0], ks[-1]))]
    return OutputSchema(keys, per_query, headline=[*headline, f"ndcg@{ks[-1]}"])


def _micro_keys(ks: Sequence[int], graded: Sequence[str], deep_metrics: bool = True) -> list[str]:
    """The keys that are plain means over (non-lone) queries, in output order."""
    keys = [f"{family}@{k}" for family in ("precision", "recall", "hit", "ndcg") for k in ks]
    keys += [f"{name}_{family}@{k}" for name in graded for family in ("precision", "ndcg") for k in ks]
    return keys + (["r_precision", "map@r", "mean_first_relevant_rank"] if deep_metrics else [])


def sample_queries(ids: Tensor, max_queries: int, seed: int = 0) -> Tensor:
    """Positions of a fixed, seeded sample of ``max_queries`` queries, chosen by their ids alone.

    Each id gets a pseudo-random 64-bit key from ``(seed, id)`` (SplitMix64); the ``max_queries`` smallest keys are
    the sample. The same ids are therefore chosen at every evaluation, on any world size, batch size or sample order,
    and a sample of a larger pool keeps the ids of a smaller one that it contains. All positions when
    ``max_queries >= len(ids)``.

    Args:
        ids: Int tensor ``[N]`` of unique sample ids.
        max_queries: Sample size (positive).
        seed: The sample's seed.

    Returns:
        int64 positions into ``ids``, ascending.

    Example:
        >>> ids = torch.arange(100, 110)
        >>> chosen = ids[sample_queries(ids, 3, seed=1)]
        >>> shuffled = ids[torch.randperm(10, generator=torch.Generator().manual_seed(0))]
        >>> torch.equal(torch.sort(shuffled[sample_queries(shuffled, 3, seed=1)]).values, chosen)
        True
        >>> sample_queries(ids, 20).tolist() == list(range(10))
        True
    """
    max_queries, seed = check_positive_int(max_queries, "max_queries"), check_seed(seed)
    if max_queries >= ids.numel():
        return torch.arange(ids.numel(), device=ids.device)
    with np.errstate(over="ignore"):
        x = ids.detach().cpu().numpy().astype(np.uint64) ^ np.uint64(seed % 2**64)
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    order = np.lexsort((ids.detach().cpu().numpy(), x))[:max_queries]
    return torch.from_numpy(np.sort(order)).to(device=ids.device, dtype=torch.long)


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


def _first_relevant_rank_full(g: Tensor, q: Tensor, q_labels: Tensor, g_labels: Tensor, excl: Tensor | None) -> Tensor:
    """Exact 1-based rank of the best-ranked relevant item among the unit gallery rows ``g``, counted over the whole
    gallery (for a few rows)."""
    s = score_block(q, g)
    mask_excluded(s, excl)
    relevant = g_labels.unsqueeze(0) == q_labels.unsqueeze(1)
    rel_scores = s.masked_fill(~relevant, float("-inf"))
    best = rel_scores.max(dim=1, keepdim=True).values
    cols = torch.arange(s.shape[1], device=s.device).unsqueeze(0)
    best_idx = torch.where(rel_scores == best, cols, s.shape[1]).min(dim=1, keepdim=True).values
    before = (s > best) | ((s == best) & (cols < best_idx))
    return before.sum(dim=1).to(torch.float64) + 1.0


# Shallow mode joins the search's chunks into blocks of up to this many neighbours for the metric code (see `_joined`).
_SHALLOW_JOIN_ELEMENTS = 2**19


def _joined(chunks: Iterator[Neighbors], max_elements: int) -> Iterator[Neighbors]:
    """Consecutive chunks of equal depth joined into chunks of at most ``max_elements`` neighbours (or one chunk).

    Shallow lists are short, so the metric code would otherwise run many small steps per chunk. Every per-query
    value is computed row by row, so joining chunks changes no value.
    """
    pending: list[Neighbors] = []
    size = 0
    for chunk in chunks:
        if pending and (chunk.depth != pending[0].depth or size + chunk.indices.numel() > max_elements):
            yield _join(pending)
            pending, size = [], 0
        pending.append(chunk)
        size += chunk.indices.numel()
    if pending:
        yield _join(pending)


def _join(parts: list[Neighbors]) -> Neighbors:
    if len(parts) == 1:
        return parts[0]
    return Neighbors(
        torch.cat([p.rows for p in parts]), torch.cat([p.scores for p in parts]), torch.cat([p.indices for p in parts])
    )


@dataclass(frozen=True)
class _Problem:
    """A validated retrieval problem: unit fp32 gallery rows ``gn`` with ``g_labels``, the query rows ``qn`` (None:
    leave-one-out, the gallery is the query set) with ``q_labels``, the excluded item of each query ``excl`` (None:
    none), ``r`` (the relevant items available to each query) and ``lone`` (``r == 0``)."""

    gn: Tensor
    g_labels: Tensor
    qn: Tensor | None
    q_labels: Tensor
    excl: Tensor | None
    r: Tensor
    lone: Tensor

    @property
    def queries(self) -> Tensor:
        return self.gn if self.qn is None else self.qn


def _check_graded(graded: Sequence[ClassGains]) -> tuple[ClassGains, ...]:
    graded = tuple(graded)
    for g in graded:
        if not isinstance(g, ClassGains):
            raise ValueError(f"`graded` must hold ClassGains matrices, got {type(g).__name__}.")
    names = [g.name for g in graded]
    if len(set(names)) != len(names):
        raise ValueError(f"`graded` matrices need distinct names, got {names}.")
    return graded


def _problem(
    embeddings: Tensor,
    labels: Tensor,
    ids: Tensor | None,
    query_embeddings: Tensor | None,
    query_labels: Tensor | None,
    query_ids: Tensor | None,
) -> _Problem:
    """The validated problem of :func:`retrieval_per_query`'s inputs, with ``R`` per query."""
    gn = normalize_rows(embeddings, "embeddings")
    device = gn.device
    g_labels = check_int_vector(labels, "labels", gn.shape[0], device)
    gid = None if ids is None else check_int_vector(ids, "ids", gn.shape[0], device)
    if query_embeddings is None:
        if query_labels is not None or query_ids is not None:
            raise ValueError("`query_labels` / `query_ids` need `query_embeddings`; omit them for leave-one-out.")
        if gid is not None:
            exclusion_index(gid, gid, device, "ids")  # rejects duplicated ids
        qn, q_labels, excl = None, g_labels, torch.arange(gn.shape[0], device=device)
    else:
        qn = normalize_rows(query_embeddings, "query_embeddings")
        if qn.device != device:
            raise ValueError(f"`query_embeddings` is on {qn.device} but `embeddings` on {device}; use one device.")
        if qn.shape[1] != gn.shape[1]:
            raise ValueError(f"`query_embeddings` has dimension {qn.shape[1]} but `embeddings` has {gn.shape[1]}; they must match.")
        if query_labels is None:
            raise ValueError("`query_labels` is required with `query_embeddings` (relevance = same label).")
        q_labels = check_int_vector(query_labels, "query_labels", qn.shape[0], device)
        qid = None if query_ids is None else check_int_vector(query_ids, "query_ids", qn.shape[0], device)
        if qid is not None and gid is None:
            raise ValueError("`query_ids` needs gallery `ids` to exclude matching items; pass both or neither.")
        excl = None
        if qid is not None:
            if qid.numel() > 1 and bool((torch.sort(qid).values[1:] == torch.sort(qid).values[:-1]).any()):
                raise ValueError("`query_ids` contains duplicated ids; each query needs its own id.")
            excl = exclusion_index(qid, gid, device, "ids")
    r = _num_relevant(g_labels, q_labels, excl)
    return _Problem(gn, g_labels, qn, q_labels, excl, r, r == 0)


def _num_relevant(g_labels: Tensor, q_labels: Tensor, excl: Tensor | None) -> Tensor:
    """R per query: gallery items sharing the label, minus the excluded item when it shares the label."""
    classes, g_codes = torch.unique(g_labels, return_inverse=True)
    g_counts = torch.bincount(g_codes, minlength=classes.numel())
    pos = torch.searchsorted(classes, q_labels).clamp_(max=classes.numel() - 1)
    r = torch.where(classes[pos] == q_labels, g_counts[pos], torch.zeros_like(pos))
    if excl is not None:
        has = excl >= 0
        same = torch.zeros_like(has)
        same[has] = g_labels[excl[has]] == q_labels[has]
        r = r - same.long()
    return r


def _check_depth_limits(p: _Problem, ks: tuple[int, ...], curve_max_k: int, return_neighbors: int) -> int:
    """The gallery items available to every query (:func:`available`), after checking that the cut-offs fit in it."""
    n_gallery = p.gn.shape[0]
    avail = available(n_gallery, p.excl)
    if ks[-1] > avail:
        raise ValueError(
            f"`ks` contains {ks[-1]} but only {avail} gallery items are available to a query"
            + (" (self excluded)" if avail < n_gallery else "")
            + "; lower k or enlarge the gallery."
        )
    if curve_max_k > avail:
        raise ValueError(f"`curve_max_k`={curve_max_k} exceeds the {avail} gallery items available to a query; lower it.")
    if return_neighbors > avail:
        raise ValueError(f"`return_neighbors`={return_neighbors} exceeds the {avail} gallery items available; lower it.")
    return avail


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


def _searched_chunks(
    p: _Problem,
    depths: Tensor,
    query_rows: Tensor | None,
    share: tuple[int, int] | None,
    chunk_size: int,
    lowp: torch.dtype | None,
) -> tuple[_RowCollector, Iterator[Neighbors]]:
    """The search of every query (or of ``query_rows``, rows then given as query positions) and a collector sized
    for its rows."""
    if query_rows is None:
        return _RowCollector(p.q_labels.shape[0]), search_normalized(p.gn, depths, p.qn, p.excl, share, chunk_size, lowp)
    n_queries = p.q_labels.shape[0]
    if not isinstance(query_rows, Tensor) or query_rows.dim() != 1 or query_rows.is_floating_point():
        raise ValueError("`query_rows` must be a 1-D integer tensor of query positions.")
    query_rows = query_rows.to(device=p.gn.device, dtype=torch.long)
    if query_rows.numel() and (int(query_rows.min()) < 0 or int(query_rows.max()) >= n_queries):
        raise ValueError(f"`query_rows` must hold positions in 0..{n_queries - 1}.")
    subset = p.queries[query_rows]
    sub_excl = None if p.excl is None else p.excl[query_rows]
    chunks = (
        type(c)(query_rows[c.rows], c.scores, c.indices)
        for c in search_normalized(p.gn, depths[query_rows], subset, sub_excl, share, chunk_size, lowp)
    )
    return _RowCollector(query_rows.numel()), chunks


def _put_deep_values(out: _RowCollector, p: _Problem, rows: Tensor, ql: Tensor, rel: Tensor, cum: Tensor, rq: Tensor, ok: Tensor) -> None:
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
        first[m] = _first_relevant_rank_full(p.gn, p.queries[rows[m]], ql[m], p.g_labels, ex)
    out.put("first_relevant_rank", torch.where(ok, first, nan))


def _put_graded_values(
    out: _RowCollector, state: _GradedState, cut: _Cutoffs, p: _Problem, rows: Tensor, idx: Tensor, ql: Tensor, ok: Tensor
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
    g_ideal = _ideal_dcg(state.gains, state.q_cls[rows], state.e_cls[rows], state.counts, cut.kmax, cut.discount)[:, cut.index]
    out.put(f"{state.name}_precision", torch.where(ok.unsqueeze(1), g_prec, nan))
    out.put(f"{state.name}_ndcg", torch.where(ok.unsqueeze(1), g_dcg / g_ideal, nan))


def _put_chunk(
    out: _RowCollector,
    chunk: Neighbors,
    p: _Problem,
    cut: _Cutoffs,
    hits_k: int,
    deep_metrics: bool,
    graded_state: Sequence[_GradedState],
    return_neighbors: int,
) -> None:
    """Every per-query value of one searched chunk, written into ``out``."""
    rows, vals, idx = chunk.rows, chunk.scores, chunk.indices
    # index_select, not x[rows]: the same values without a parallel region.
    ql, rq, ok = p.q_labels.index_select(0, rows), p.r.index_select(0, rows), ~p.lone.index_select(0, rows)
    rel = (p.g_labels.index_select(0, idx.reshape(-1)).view(idx.shape) == ql.unsqueeze(1)) & torch.isfinite(vals)
    cum = torch.cumsum(rel, dim=1, dtype=torch.int32)
    out.next_rows(rows.shape[0])
    out.put("query_index", rows)
    out.put("hits", cum[:, :hits_k])
    if deep_metrics:
        _put_deep_values(out, p, rows, ql, rel, cum, rq, ok)
    rq_safe = rq.clamp(min=1)
    dcg = torch.cumsum(rel[:, : cut.kmax].to(torch.float64) * cut.discount, dim=1)
    ideal = cut.binary_ideal[torch.minimum(rq_safe.unsqueeze(1), cut.index.unsqueeze(0) + 1) - 1]
    out.put("ndcg", torch.where(ok.unsqueeze(1), dcg[:, cut.index] / ideal, float("nan")))
    for state in graded_state:
        _put_graded_values(out, state, cut, p, rows, idx, ql, ok)
    if return_neighbors:
        out.put("neighbor_indices", idx[:, :return_neighbors])
        out.put("neighbor_scores", vals[:, :return_neighbors])


def _collected(
    out: _RowCollector,
    p: _Problem,
    cut: _Cutoffs,
    hits_k: int,
    deep_metrics: bool,
    graded_state: Sequence[_GradedState],
    return_neighbors: int,
) -> dict[str, Tensor]:
    """The output dict of :func:`retrieval_per_query` from the rows collected in ``out``."""
    device = p.gn.device

    def get(key: str, empty_shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        return out.get(key, torch.empty(empty_shape, dtype=dtype, device=device))

    rows_all = get("query_index", (0,), torch.long)
    result = {
        "query_index": rows_all,
        "num_relevant": p.r.index_select(0, rows_all),
        "hits": get("hits", (0, hits_k), torch.int32).to(torch.long),
    }
    if deep_metrics:
        for key in ("r_precision", "map@r", "first_relevant_rank"):
            result[key] = get(key, (0,), torch.float64)
    ndcg_all = get("ndcg", (0, len(cut.ks)), torch.float64)
    for j, k in enumerate(cut.ks):
        result[f"ndcg@{k}"] = ndcg_all[:, j]
    for state in graded_state:
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
) -> dict[str, Tensor]:
    """Per-query values of the queries in ``share`` (all by default), the input of :func:`aggregate_retrieval`.

    Arguments are those of :func:`embedding_retrieval_metrics`, plus ``share=(i, n)``: compute only the i-th of n
    disjoint shares of the queries (see :func:`~beyondlabels.functional.search.search_neighbors`). Concatenating the
    results of all shares and passing them to :func:`aggregate_retrieval` gives exactly the values of a single call.
    ``query_rows`` (int64 positions, e.g. from :func:`sample_queries`) searches only those queries, each against the
    whole gallery; shares then split them.

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
    p = _problem(embeddings, labels, ids, query_embeddings, query_labels, query_ids)
    avail = _check_depth_limits(p, ks_t, curve_max_k, return_neighbors)
    hits_k = max(curve_max_k, ks_t[-1])
    depths = _search_depths(p.r, max(hits_k, return_neighbors), avail, deep_metrics)
    cut = _Cutoffs.of(ks_t, p.gn.device)
    graded_state = [_GradedState.of(g, p) for g in graded]
    out, chunks = _searched_chunks(p, depths, query_rows, share, chunk_size, lowp)
    if not deep_metrics:
        chunks = _joined(chunks, _SHALLOW_JOIN_ELEMENTS)
    for chunk in chunks:
        _put_chunk(out, chunk, p, cut, hits_k, deep_metrics, graded_state, return_neighbors)
    return _collected(out, p, cut, hits_k, deep_metrics, graded_state, return_neighbors)


def _search_depths(r: Tensor, shallow: int, avail: int, deep_metrics: bool) -> Tensor:
    """The search depth of each query: ``max(R, shallow)`` (at most ``avail``), or ``shallow`` for every query
    without ``deep_metrics`` (nothing then needs depth R)."""
    shallow_depth = torch.tensor(shallow, device=r.device)
    if deep_metrics:
        return torch.clamp(torch.maximum(r, shallow_depth), max=avail)
    return shallow_depth.expand(r.shape[0])


class _RowCollector:
    """Per-query outputs written chunk by chunk into tensors allocated once for every row to come.

    Appending each chunk's small results to lists would interleave many small long-lived allocations with the large
    short-lived temporaries of the chunks, and the allocator's heap would fragment and grow with every chunk. Rows
    keep the order in which the chunks came.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tensors: dict[str, Tensor] = {}
        self.start = self.stop = 0

    def next_rows(self, count: int) -> None:
        """The following ``put`` calls hold the next ``count`` rows."""
        self.start, self.stop = self.stop, self.stop + count

    def put(self, key: str, value: Tensor) -> None:
        tensor = self.tensors.get(key)
        if tensor is None:
            tensor = torch.empty((self.capacity, *value.shape[1:]), dtype=value.dtype, device=value.device)
            self.tensors[key] = tensor
        tensor[self.start : self.stop] = value

    def get(self, key: str, empty: Tensor) -> Tensor:
        """The rows written so far under ``key`` (``empty`` when none were)."""
        tensor = self.tensors.get(key)
        if tensor is None:
            return empty
        return tensor if self.stop == self.capacity else tensor[: self.stop].clone()


def _class_mean(values: Tensor, classes: Tensor, n_classes: int) -> Tensor:
    sums = torch.zeros(n_classes, dtype=torch.float64, device=values.device).index_add_(0, classes, values)
    counts = torch.zeros(n_classes, dtype=torch.float64, device=values.device).index_add_(0, classes, torch.ones_like(values))
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
        ks, curve_max_k: As given to :func:`retrieval_per_query`.
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
    n_queries = int(index.numel())
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=device)
    hits = pq["hits"].to(torch.float64)
    r_f = r.to(torch.float64)
    out: dict[str, Tensor | dict[str, Tensor]] = {}
    vectors: dict[str, Tensor] = {}
    for k in ks_t:
        vectors[f"precision@{k}"] = torch.where(ok, hits[:, k - 1] / k, float("nan"))
    for k in ks_t:
        vectors[f"recall@{k}"] = torch.where(ok, hits[:, k - 1] / r_f.clamp(min=1), float("nan"))
    for k in ks_t:
        vectors[f"hit@{k}"] = torch.where(ok, (hits[:, k - 1] > 0).to(torch.float64), float("nan"))
    for k in ks_t:
        vectors[f"ndcg@{k}"] = pq[f"ndcg@{k}"]
    for name in graded:
        for family in ("precision", "ndcg"):
            for k in ks_t:
                vectors[f"{name}_{family}@{k}"] = pq[f"{name}_{family}@{k}"]
    if deep_metrics:
        for key in ("r_precision", "map@r"):
            vectors[key] = pq[key]
    mistakes = {key: pq[key] for key in pq if "_mistake_" in key}

    codes = torch.unique(labels.index_select(0, ok_rows), return_inverse=True)[1] if n_ok else None
    n_classes = int(codes.max()) + 1 if n_ok else 0
    for key, value in vectors.items():
        out[key] = value.index_select(0, ok_rows).mean() if n_ok else nan
    for key, value in mistakes.items():  # means over the top-1 mistakes (NaN elsewhere)
        found = ~torch.isnan(value)
        out[key] = value[found].mean() if bool(found.any()) else nan
    if deep_metrics:
        first = pq["first_relevant_rank"]
        out["mean_first_relevant_rank"] = first.index_select(0, ok_rows).mean() if n_ok else nan
        out["median_first_relevant_rank"] = torch.quantile(first.index_select(0, ok_rows), 0.5) if n_ok else nan
    for k in ks_t:
        out[f"macro_precision@{k}"] = _class_mean(vectors[f"precision@{k}"].index_select(0, ok_rows), codes, n_classes) if n_ok else nan
    if deep_metrics:
        out["macro_r_precision"] = _class_mean(vectors["r_precision"].index_select(0, ok_rows), codes, n_classes) if n_ok else nan
        out["macro_map@r"] = _class_mean(vectors["map@r"].index_select(0, ok_rows), codes, n_classes) if n_ok else nan
    out["num_queries"] = torch.tensor(n_ok, dtype=torch.long, device=device)
    out["num_lone_queries"] = torch.tensor(n_queries - n_ok, dtype=torch.long, device=device)
    rank = torch.arange(1, curve_max_k + 1, device=device, dtype=torch.float64)
    if n_ok:
        out["precision_curve"] = hits.index_select(0, ok_rows)[:, :curve_max_k].contiguous().sum(dim=0) / rank / n_ok
    else:
        out["precision_curve"] = torch.full_like(rank, float("nan"))
    per_query_out = {"query_id": index if query_ids is None else query_ids.to(device)[index], "label": labels, "num_relevant": r}
    per_query_out.update(vectors)
    per_query_out.update(mistakes)
    if deep_metrics:
        per_query_out["first_relevant_rank"] = first
    out["per_query"] = per_query_out
    if query_pool is not None:
        fpc = math.sqrt(max(query_pool - n_ok, 0) / (query_pool - 1)) if query_pool > 1 else 0.0
        for key in _micro_keys(ks_t, graded, deep_metrics):
            values = per_query_out[key.replace("mean_", "")] if key.startswith("mean_") else per_query_out[key]
            values = values.index_select(0, ok_rows)
            se = values.std(unbiased=True) / math.sqrt(n_ok) * fpc if n_ok > 1 else nan
            out[f"{key}_se"] = se if n_ok > 1 else nan
        out["num_query_pool"] = torch.tensor(query_pool, dtype=torch.long, device=device)
    if "neighbor_indices" in pq:
        out["neighbors"] = {"indices": pq["neighbor_indices"], "scores": pq["neighbor_scores"]}
    return out


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
) -> dict[str, Tensor | dict[str, Tensor]]:
    """Retrieval metrics of an embedding gallery from one exact cosine search (definitions: module docstring).

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

    Returns:
        A dict of 0-d tensors (float64 metrics; int64 ``num_queries``, ``num_lone_queries``), the 1-D float64
        ``precision_curve``, and ``per_query`` (a dict of ``[Q]`` vectors). Keys and directions:
        :func:`retrieval_output_schema`.

    Raises:
        ValueError: On empty, non-finite, zero-norm or wrongly shaped embeddings; labels or ids whose length does not
            match; non-integer labels; duplicated ids; bad ``ks`` / ``curve_max_k`` (non-positive, or larger than the
            gallery available to a query); labels missing from a gain matrix; bad ``chunk_size``, ``precision``,
            ``return_neighbors`` or ``deep_metrics`` (not a bool).

    Example:
        >>> emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> m = embedding_retrieval_metrics(emb, torch.tensor([0, 0, 1, 1]), ks=(1, 2))
        >>> m["precision@1"], m["precision@2"], m["ndcg@2"]
        (tensor(1., dtype=torch.float64), tensor(0.5000, dtype=torch.float64), tensor(1., dtype=torch.float64))
        >>> shallow = embedding_retrieval_metrics(emb, torch.tensor([0, 0, 1, 1]), ks=(1, 2), deep_metrics=False)
        >>> shallow["precision@2"] == m["precision@2"], "map@r" in shallow, "first_relevant_rank" in shallow["per_query"]
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

