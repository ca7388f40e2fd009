"""The scores of (query, candidate) pairs, the core's Score of each pair, in bounded pieces."""

from __future__ import annotations

import torch
from torch import Tensor

from beyondlabels.functional._topk import MIN_BLOCK, Workspace, score_block

# Distinct queries per product of `_pair_scores` (at least the core's smallest block side).
_QUERY_BLOCK = MIN_BLOCK
# Candidates per product of `_pair_scores`: a run of queries with more is scored in pieces (bounded memory).
_MAX_PAIRS = 1 << 15


def _pair_scores(
    left: Tensor, right: Tensor, li: Tensor, ri: Tensor, queries_left: bool = True, extra_left: Tensor | None = None
) -> Tensor | tuple[Tensor, Tensor]:
    """Scores ``[P]`` of the pairs ``(left[li[p]], right[ri[p]])`` (the core's Score, ``left`` rows on the left).

    The query side (``li`` with ``queries_left``, else ``ri``) must be non-decreasing. Pairs are scored in one
    product per run of 16 distinct queries against the candidates of that run (in pieces of at most ``_MAX_PAIRS``),
    and each pair's entry is read out: 16 is the core's smallest block side, so every entry equals the Score of its
    pair, whatever the runs hold. With
    ``extra_left`` (queries on the left only) the pairs ``(extra_left[li[p]], right[ri[p]])`` are scored too, as more
    rows of the same products (the gathered candidates are shared), and both score vectors are returned.
    """
    q, g = (li, ri) if queries_left else (ri, li)
    out = torch.empty(q.shape[0], dtype=torch.float32, device=left.device)
    extra = None if extra_left is None else torch.empty_like(out)
    if q.numel() == 0:
        return out if extra is None else (out, extra)
    distinct, sizes = torch.unique_consecutive(q, return_counts=True)
    local = torch.repeat_interleave(torch.arange(distinct.numel(), device=q.device) % _QUERY_BLOCK, sizes)
    ends = torch.cumsum(sizes, 0)
    bounds = [0, *ends[_QUERY_BLOCK - 1 :: _QUERY_BLOCK].tolist()]
    if bounds[-1] != q.numel():
        bounds.append(q.numel())
    pieces = [
        (block, lo, min(lo + _MAX_PAIRS, hi))
        for block, (start, hi) in enumerate(zip(bounds[:-1], bounds[1:]))
        for lo in range(start, hi, _MAX_PAIRS)
    ]
    ws = Workspace(left.device)
    at = torch.arange(min(q.numel(), _MAX_PAIRS), device=q.device)
    d = left.shape[1]
    for block, lo, hi in pieces:
        queries = distinct[block * _QUERY_BLOCK : (block + 1) * _QUERY_BLOCK]
        m = queries.numel()
        cands = ws.get("cands", (hi - lo, d), left.dtype)
        if queries_left:
            side = ws.get("queries", (m if extra is None else 2 * m, d), left.dtype)
            torch.index_select(left, 0, queries, out=side[:m])
            if extra is not None:
                torch.index_select(extra_left, 0, queries, out=side[m:])
            scores = score_block(side, torch.index_select(right, 0, g[lo:hi], out=cands), ws)  # [queries, candidates]
            flat = local[lo:hi] * scores.shape[1] + at[: hi - lo]
            torch.index_select(scores[:m].reshape(-1), 0, flat, out=out[lo:hi])
            if extra is not None:
                torch.index_select(scores[m:].reshape(-1), 0, flat, out=extra[lo:hi])
        else:
            side = torch.index_select(right, 0, queries, out=ws.get("queries", (m, d), right.dtype))
            scores = score_block(torch.index_select(left, 0, g[lo:hi], out=cands), side, ws)  # [candidates, queries]
            flat = at[: hi - lo] * scores.shape[1] + local[lo:hi]
            torch.index_select(scores.reshape(-1), 0, flat, out=out[lo:hi])
    return out if extra is None else (out, extra)


def _candidate_scores(img: Tensor, txt: Tensor, rows: Tensor, direction: str, first: int = 0) -> Tensor:
    """Scores ``[c, R]`` of the queries at pool positions ``first .. first + c − 1`` (``rows``: their ``[c, R − 1]``
    distractor rows): column 0 the ground truth, then the distractors."""
    n = rows.shape[0]
    queries = torch.arange(first, first + n, device=img.device)
    cands = torch.cat([queries.unsqueeze(1), rows], dim=1)
    q = queries.repeat_interleave(cands.shape[1])
    if direction == "image_to_text":
        return _pair_scores(img, txt, q, cands.flatten()).view(n, cands.shape[1])
    return _pair_scores(img, txt, cands.flatten(), q, queries_left=False).view(n, cands.shape[1])


def _ranks(scores: Tensor) -> Tensor:
    """1-based rank of column 0 with ties counted against it (the strict rule)."""
    return 1 + (scores[:, 1:] >= scores[:, :1]).sum(dim=1)


# ----------------------------------------------------------------------------------------------------------------------
# the metric
# ----------------------------------------------------------------------------------------------------------------------
