"""Leave-one-out search in symmetric blocks: every gallery row a query that never retrieves itself.

Internal. The score matrix of the gallery with itself is symmetric, so only its blocks ``(a, b)`` with ``a <= b`` are
multiplied; block ``(a, b)`` updates the rows of ``a`` and, read transposed, those of ``b``. A pair's score comes
from the same block product whatever rows a share or run owns, so a share gives bitwise the rows the whole search
gives. Two ways keep the top of each row:

- running top lists: every row keeps its running top ``depth`` as ranking keys, merged with each block
  (:func:`~beyondlabels.functional._topk.topk_keys`);
- candidate search (deep searches): per-row bounds, first guessed from a sample of columns, and buffers of the
  items reaching them, compacted when full; rows whose guess was too high are searched again.

:func:`block_search` chooses between them. The derivations (exactness, budgets, shares) are in ``docs/search.md``.
With ``sq`` (the rows' squared norms) every block is turned into the Euclidean coarse scores ``2 q.g - |g|^2 - |q|^2``
(:func:`~beyondlabels.functional._topk.to_l2`), symmetric as the products are: the coarse pass of the Euclidean
search (:mod:`beyondlabels.functional._euclidean`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor

from beyondlabels._internal.memory import release_free_memory
from beyondlabels.functional import _select
from beyondlabels.functional._low_precision import Gallery, search_chunk
from beyondlabels.functional._topk import (
    Workspace,
    exact_topk,
    flat_keys,
    from_keys,
    score_block,
    to_keys,
    to_l2,
    topk_keys,
)

# A chunk of searched rows: their positions, scores and gallery indices (the fields of `Neighbors`).
Part = tuple[Tensor, Tensor, Tensor]

# Memory budget of the per-row keys: the running top lists are used while they fit, the candidate search runs over
# runs of rows whose buffers fit.
_BUFFER_BYTES = 512 * 2**20
# Largest block side (larger blocks only add memory: the merges are already cheap at this size).
_MAX_BLOCK = 4096
# Column stride of the sample that gives the candidate search its first bounds (`_sampled_bounds`).
_CANDIDATE_STRIDE = 16
# Scores of one product of the sampled bounds (rows times sampled columns: 16 MB of fp32), whatever the gallery size.
_SAMPLED_SCORES = 2**22
# Margin of the sampled bound, in standard deviations of the sampled count (`_candidate_strides`).
_CANDIDATE_SIGMAS = 3.0
# The candidate search is used when the deepest depth is at least the minimum and at most 1 / ratio of the gallery
# (shallower searches do not repay the sample's products, 1/8 of the symmetric ones).
_CANDIDATE_MIN_DEPTH = 64
_CANDIDATE_DEPTH_RATIO = 8
# Rows compacted at once (bounds the temporaries of a compaction to a few times this many buffer rows).
_COMPACTION_ROWS = 512
_LOWEST_KEY = torch.iinfo(torch.int64).min


def block_search(
    gn: Tensor, depths: Tensor, share: tuple[int, int], chunk_size: int, sq: Tensor | None = None
) -> Iterator[Part] | None:
    """The leave-one-out search of the rows of share ``share = (i, n)`` of the unit rows ``gn`` (with ``sq``: of the
    Euclidean coarse scores of the rows ``gn``), each row ``r`` at least ``depths[r]`` deep, in chunks of
    ``chunk_size`` rows in ascending order of depth; None when the running top lists would not fit the budget and the
    depths do not suit the candidate search (search in row chunks then).

    Shares are whole runs of blocks; each multiplies every block pair that touches its rows (processes that search
    together split the pairs instead: :mod:`beyondlabels.functional._pair_shares`). The path is chosen from every
    share's size, so all shares take the same one.
    """
    n = gn.shape[0]
    index, count = share
    block, candidates = search_plan(n, depths, chunk_size)
    n_blocks = -(-n // block)
    bounds = [min(n, (i * n_blocks // count) * block) for i in range(count + 1)]
    if candidates:
        return _candidate_runs(gn, depths, block, bounds[index], bounds[index + 1], chunk_size, sq)
    fits = all(
        (bounds[i + 1] - bounds[i]) * int(depths[bounds[i] : bounds[i + 1]].max()) * 8 <= _BUFFER_BYTES
        for i in range(count)
        if bounds[i + 1] > bounds[i]
    )
    if fits:
        return _running_lists(gn, depths, block, bounds[index], bounds[index + 1], chunk_size, sq)
    return None


def search_plan(n: int, depths: Tensor, chunk_size: int) -> tuple[int, bool]:
    """The block side of the leave-one-out search of ``n`` rows and whether it takes the candidate search (deepest
    depth from ``_CANDIDATE_MIN_DEPTH`` to ``n / _CANDIDATE_DEPTH_RATIO``) rather than running top lists."""
    deepest = int(depths.max())
    return _symmetric_block(n, chunk_size), _CANDIDATE_MIN_DEPTH <= deepest and _CANDIDATE_DEPTH_RATIO * deepest <= n


def _symmetric_block(n: int, chunk_size: int) -> int:
    """Block side of the leave-one-out search: a block of scores holds no more than ``chunk_size * n`` of them.

    Block sides are rounded up to a multiple of 32 where that stays within the limit (BLAS kernels run at full speed
    on such sizes, slower on some others).
    """
    side = max(chunk_size, min(math.isqrt(chunk_size * n), _MAX_BLOCK))
    blocks = -(-n // side)
    block = -(-n // blocks)  # equal blocks
    aligned = -(-block // 32) * 32
    return min(n, aligned) if aligned <= side else block


def _symmetric_blocks(
    g: Tensor,
    block: int,
    lo: int,
    hi: int,
    ws: Workspace,
    sq: Tensor | None = None,
    part: tuple[int, int] | None = None,
) -> Iterator[tuple[int, int, int, int, bool, bool, Tensor]]:
    """The score blocks ``(a, b)``, ``a <= b``, of ``g @ g.T`` (diagonal at -inf) that touch rows ``lo:hi``, each
    computed once: ``(a, a_end, b, b_end, a_owned, b_owned, scores)``, where ``a_owned`` says the rows of block ``a``
    lie in ``lo:hi`` and ``b_owned`` that the transposed block updates the rows of block ``b``. A pair's score comes
    from the same block product whatever ``lo:hi`` is. ``scores`` lives in ``ws`` until the next block. With
    ``part = (i, n)`` only the i-th of n even slices of the rows of each block ``a`` is multiplied (``a:a_end`` is
    that slice; with BLAS libraries whose dot products do not depend on the block position, the scores are those of
    the whole block)."""
    n = g.shape[0]
    index, count = part or (0, 1)
    for start in range(0, n, block):
        stop = min(start + block, n)
        a, a_end = start + index * (stop - start) // count, start + (index + 1) * (stop - start) // count
        a_owned = lo <= start < hi
        if a_end <= a:
            continue
        for b in range(start, n, block):
            b_end = min(b + block, n)
            b_owned = lo <= b < hi and start != b
            if not (a_owned or b_owned):
                continue
            scores = score_block(g[a:a_end], g[b:b_end], ws)
            if sq is not None:
                to_l2(scores, sq[a:a_end], sq[b:b_end])
            if start == b:
                scores.diagonal(a - start).fill_(float("-inf"))
            yield a, a_end, b, b_end, a_owned, b_owned, scores


# ----------------------------------------------------------------------------------------------------------------------
# running top lists
# ----------------------------------------------------------------------------------------------------------------------


def _running_lists(
    gn: Tensor, depths: Tensor, block: int, lo: int, hi: int, chunk_size: int, sq: Tensor | None = None
) -> Iterator[Part]:
    """Rows ``lo:hi`` searched by `_leave_one_out_topk`, in chunks in ascending order of depth."""
    if hi <= lo:
        return
    vals, idx = _leave_one_out_topk(gn, int(depths[lo:hi].max()), block, lo, hi, sq)
    order = torch.argsort(depths[lo:hi], stable=True)
    for start in range(0, hi - lo, chunk_size):
        local = order[start : start + chunk_size]
        d = int(depths[lo + local].max())
        yield local + lo, vals[local, :d], idx[local, :d]


def _leave_one_out_topk(
    g: Tensor, depth: int, block: int, lo: int, hi: int, sq: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Exact top ``depth`` of rows ``lo:hi`` of ``g @ g.T`` with the diagonal excluded, each block pair computed once.

    Block ``(a, b)`` updates the rows of ``a`` and, transposed, those of ``b`` that lie inside ``lo:hi`` (both
    multiples of ``block``, or ``hi == n``). Every row keeps its running top ``depth`` as ranking keys (`to_keys`),
    so merging a block into it is one ``torch.topk``.
    """
    best = leave_one_out_keys(g, depth, block, lo, hi, sq)
    return from_keys(torch.sort(best, dim=1, descending=True).values)


def leave_one_out_keys(
    g: Tensor,
    depth: int,
    block: int,
    lo: int,
    hi: int,
    sq: Tensor | None = None,
    part: tuple[int, int] | None = None,
) -> Tensor:
    """The running top lists of `_leave_one_out_topk` (keys ``[hi - lo, depth]``, in no order; ``_LOWEST_KEY`` where
    a row met fewer than ``depth`` items), over the slice ``part`` of the blocks' rows (`_symmetric_blocks`)."""
    best = torch.full((hi - lo, depth), _LOWEST_KEY, dtype=torch.int64, device=g.device)
    ws = Workspace(g.device)

    def merge(start: int, stop: int, scores: Tensor, col0: int, transposed: bool) -> None:
        rows = slice(start - lo, stop - lo)
        best[rows] = topk_keys(scores, depth, col0, transposed, best[rows], ws)

    for a, a_end, b, b_end, a_owned, b_owned, scores in _symmetric_blocks(g, block, lo, hi, ws, sq, part):
        if a_owned:
            merge(a, a_end, scores, b, False)
        if b_owned:
            merge(b, b_end, scores, a, True)
    return best


# ----------------------------------------------------------------------------------------------------------------------
# candidate search
# ----------------------------------------------------------------------------------------------------------------------


def _candidate_runs(
    gn: Tensor, depths: Tensor, block: int, lo: int, hi: int, chunk_size: int, sq: Tensor | None = None
) -> Iterator[Part]:
    """Rows ``lo:hi`` searched by `_leave_one_out_candidates`, in runs of blocks whose buffers fit the budget."""
    run = block * max(1, _BUFFER_BYTES // (_candidate_cap(int(depths.max())) * 8 * block))
    for start in range(lo, hi, run):
        stop = min(start + run, hi)
        yield from _leave_one_out_candidates(gn, depths[start:stop], block, start, stop, chunk_size, sq)


def _candidate_cap(depth: int, rows: int = 0, budget: int = _BUFFER_BYTES) -> int:
    """Keys a row of the candidate search holds before it is compacted to ``depth``: at least
    ``depth + max(depth // 4, 64)``, and up to ``depth * 3 / 2 + 64`` while ``rows`` such rows fit the buffer budget
    (``budget`` bytes; fewer rows overflow the sampled guess, so fewer are compacted)."""
    least = depth + max(depth // 4, 64)
    fits = budget // (8 * max(rows, 1))
    return max(least, min(depth + depth // 2 + 64, fits))


def _candidate_strides(need: Tensor, stride: int) -> Tensor:
    """Per row, how many sampled scores must reach a bound for ``need`` items of the whole row to reach it (whp)."""
    per = need.to(torch.float64) / stride
    return (torch.ceil(per + _CANDIDATE_SIGMAS * torch.sqrt(per)) + 1).to(torch.long)


def _sampled_bounds(g: Tensor, need: Tensor, block: int, lo: int, hi: int, sq: Tensor | None = None) -> Tensor:
    """Lower-bound guesses ``L`` for rows ``lo:hi``: the k-th largest score over the columns ``0, s, 2s, ...``.

    ``k`` (`_candidate_strides`) makes it likely that at least ``need`` items of the whole row score ``>= L``. Only a
    guess: rows for which it is too high are found and searched again (`_search_short_rows`). Rows whose ``k``
    exceeds the sample get the lowest finite fp32 (every item survives, the excluded self at ``-inf`` does not).
    """
    s = _CANDIDATE_STRIDE
    sample = g[::s].contiguous()  # one copy, not one per product
    m = sample.shape[0]
    lowest = torch.finfo(torch.float32).min
    bound = torch.full((hi - lo,), lowest, dtype=torch.float32, device=g.device)
    k = _candidate_strides(need, s)
    step = max(16, min(block, _SAMPLED_SCORES // max(m, 1)))  # rows a product: its scores stay within the limit
    for a in range(lo, hi, step):
        a_end = min(a + step, hi)
        kr = k[a - lo : a_end - lo]
        usable = kr <= m - 1  # the row itself may be one of the sampled columns
        if not bool(usable.any()):
            continue
        scores = score_block(g[a:a_end], sample)
        if sq is not None:
            to_l2(scores, sq[a:a_end], sq[::s])
        rows = torch.arange(a, a_end, device=g.device)
        own = torch.nonzero(rows % s == 0).flatten()
        scores[own, rows[own] // s] = float("-inf")
        top = _select.sort_rows_descending(_select.top_rows(scores, min(int(kr[usable].max()), m)), in_place=True)
        kth = top.gather(1, (kr.clamp(max=top.shape[1]) - 1).unsqueeze(1)).squeeze(1)
        bound[a - lo : a_end - lo] = torch.where(usable & (kth > float("-inf")), kth, lowest)
    return bound


def _leave_one_out_candidates(
    g: Tensor, depths: Tensor, block: int, lo: int, hi: int, chunk_size: int, sq: Tensor | None = None
) -> Iterator[Part]:
    """Exact top ``need[r]`` of rows ``lo:hi`` of ``g @ g.T`` (diagonal excluded) by bounds and candidate lists.

    Rows are yielded in chunks of ``chunk_size`` in ascending order of ``depths`` (local to ``lo:hi``); ``need[r]`` is
    the deepest depth of row ``r``'s chunk. Steps: bounds guessed from a sample of columns (`_sampled_bounds`); one
    pass over the symmetric blocks collecting each row's items that reach its bound (`_collect_candidates`, with
    compactions that raise the bound); the rows whose guess was too high searched again (`_search_short_rows`); then
    each row's top ``need[r]`` keys of its buffer. Why this is exact: ``docs/search.md``.
    """
    device = g.device
    order, need = _chunk_depths(depths, chunk_size)
    depth = int(need.max())
    bound = _sampled_bounds(g, need, block, lo, hi, sq)
    release_free_memory(device)
    buffers = CandidateBuffers(hi - lo, depth, _candidate_cap(depth, hi - lo), bound)
    collect_candidates(g, block, lo, hi, buffers, sq)
    _search_short_rows(g, buffers, need, lo, chunk_size, sq)
    for start in range(0, hi - lo, chunk_size):
        local = order[start : start + chunk_size]
        vals, idx = buffers.top(local, int(need[local].max()))
        yield local + lo, vals, idx
    buffers = None  # the buffers go before the heap is trimmed
    release_free_memory(device)


def _chunk_depths(depths: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    """The rows in ascending order of depth (stable) and each row's ``need``: the deepest depth of its chunk of
    ``chunk_size`` rows in that order (each row is searched as deep as its chunk's deepest)."""
    rows_n = depths.shape[0]
    order = torch.argsort(depths, stable=True)
    ends = (torch.arange(rows_n, device=depths.device) // chunk_size + 1).mul_(chunk_size).clamp_(max=rows_n) - 1
    need = torch.empty_like(depths)
    need[order] = depths[order][ends]
    return order, need


def _row_and_col(flat: Tensor, nb: int) -> tuple[Tensor, Tensor]:
    """int32 row and column of flat positions in a block of ``nb`` columns (fewer than 2**31 scores)."""
    flat = flat.to(torch.int32)
    row = torch.div(flat, nb, rounding_mode="floor")
    return row, flat.sub_(row * nb)


class CandidateBuffers:
    """The candidate lists of the rows of one run: per row a bound, a buffer of ``cap`` ranking keys, its fill and
    whether it was compacted (cut to its top ``depth`` keys, its bound raised to the lowest of them)."""

    def __init__(self, rows_n: int, depth: int, cap: int, bound: Tensor) -> None:
        device = bound.device
        self.depth, self.cap, self.bound = depth, cap, bound
        # One more slot at the end takes the items of compacted rows, which are written nowhere else.
        self.flat = torch.full((rows_n * cap + 1,), _LOWEST_KEY, dtype=torch.int64, device=device)
        self.buf, self.trash = self.flat[:-1].view(rows_n, cap), rows_n * cap
        self.fill = torch.zeros(rows_n, dtype=torch.int64, device=device)
        self.compacted = torch.zeros(rows_n, dtype=torch.bool, device=device)

    def add_rows(self, reaching: tuple[Tensor, Tensor], nb: int, r0: int, nrows: int, col0: int) -> None:
        """Append the entries of a block of ``nb`` columns that reach their row's bound (flat positions and values):
        block row ``i`` is buffer row ``r0 + i``, block column ``j`` the item ``col0 + j``."""
        flat, vals = reaching
        row, col = _row_and_col(flat, nb)
        self.insert(r0, nrows, row, flat_keys(vals, col, col0))

    def add_columns(self, reaching: tuple[Tensor, Tensor], nb: int, col0: int, r0: int, nrows: int) -> None:
        """Append the entries of a block of ``nb`` columns that reach their column's bound: block column ``j`` is
        buffer row ``r0 + j``, block row ``i`` the item ``col0 + i``."""
        flat, vals = reaching
        i, col = _row_and_col(flat, nb)
        # Group by column (the buffer rows), keeping the ascending block rows within a column.
        perm = _select.stable_group_order(col, nb)
        keys = flat_keys(vals.index_select(0, perm), i.index_select(0, perm), col0)
        self.insert(r0, nrows, col.index_select(0, perm), keys)

    def insert(self, r0: int, nrows: int, row: Tensor, keys: Tensor) -> None:
        """Append ``keys`` to rows ``r0 + row`` (``row`` ascending, local to ``r0:r0 + nrows``); rows that would
        overflow are compacted with their new keys instead."""
        m = row.numel()
        if m == 0:
            return
        device = self.flat.device
        edges = torch.searchsorted(row, torch.arange(nrows + 1, dtype=row.dtype, device=device))
        start, counts = edges[:-1], edges[1:] - edges[:-1]
        f = self.fill[r0 : r0 + nrows]
        pos = ((r0 + torch.arange(nrows, device=device)) * self.cap + f - start).index_select(0, row)
        pos += torch.arange(m, device=device)
        over = f + counts > self.cap
        if bool(over.any()):
            overflowing = torch.nonzero(over).flatten()
            for part in overflowing.split(_COMPACTION_ROWS):
                self.compact(r0 + part, start.index_select(0, part), counts.index_select(0, part), keys)
            f[overflowing] = self.depth
            pos.masked_fill_(over.index_select(0, row), self.trash)  # their items are in the buffer already
            counts = counts.masked_fill(over, 0)
        self.flat.index_copy_(0, pos, keys)
        f += counts

    def compact(self, rows: Tensor, start: Tensor, counts: Tensor, keys: Tensor) -> None:
        """Cut buffer rows ``rows`` and their new items ``keys[start : start + counts]`` to their top ``depth`` keys."""
        device = self.flat.device
        n_rows = rows.numel()
        width = self.cap + int(counts.max())
        union = torch.full((n_rows, width), _LOWEST_KEY, dtype=torch.int64, device=device)
        union[:, : self.cap] = self.buf.index_select(0, rows)
        first = torch.cumsum(counts, 0) - counts
        slot = torch.repeat_interleave(torch.arange(n_rows, device=device), counts)
        within = torch.arange(slot.numel(), device=device) - first.index_select(0, slot)
        src = start.index_select(0, slot) + within
        union.view(-1).index_copy_(0, slot * width + self.cap + within, keys.index_select(0, src))
        top = _select.top_rows(union, self.depth)
        del union
        self.buf[rows, : self.depth] = top
        self.buf[rows, self.depth :] = _LOWEST_KEY
        self.bound[rows] = from_keys(top.amin(dim=1))[0]
        self.compacted[rows] = True

    def top(self, rows: Tensor, d: int) -> tuple[Tensor, Tensor]:
        """Scores and indices of the top ``d`` keys of the buffers of ``rows``, in ranking order."""
        return from_keys(_select.sort_rows_descending(self.buf.index_select(0, rows), in_place=True)[:, :d])


def collect_candidates(
    g: Tensor,
    block: int,
    lo: int,
    hi: int,
    buffers: CandidateBuffers,
    sq: Tensor | None = None,
    part: tuple[int, int] | None = None,
) -> None:
    """One pass over the symmetric blocks touching rows ``lo:hi`` (the slice ``part`` of their rows,
    `_symmetric_blocks`): every row's items reaching its bound go to its buffer."""
    ws = Workspace(g.device)
    bound = buffers.bound
    for a, a_end, b, b_end, a_owned, b_owned, scores in _symmetric_blocks(g, block, lo, hi, ws, sq, part):
        # One read of the block finds the entries reaching the bound of their row (rows of block a) and those
        # reaching the bound of their column (rows of block b).
        reaching_a, reaching_b = _select.flat_reaching(
            scores, bound[a - lo : a_end - lo] if a_owned else None, bound[b - lo : b_end - lo] if b_owned else None
        )
        nb = scores.shape[1]
        if a_owned:
            buffers.add_rows(reaching_a, nb, a - lo, a_end - a, b)
        if b_owned:
            buffers.add_columns(reaching_b, nb, a, b - lo, b_end - b)


def _search_short_rows(
    g: Tensor, buffers: CandidateBuffers, need: Tensor, lo: int, chunk_size: int, sq: Tensor | None = None
) -> None:
    """Rows whose guessed bound was too high (never compacted, fewer than ``need`` items), searched again against
    the whole gallery, all together; their buffer then holds exactly their top keys."""
    short = torch.nonzero(~buffers.compacted & (buffers.fill < need)).flatten()
    for start in range(0, short.numel(), chunk_size):
        rows = short[start : start + chunk_size]
        d = int(need[rows].max())
        buffers.buf[rows] = _LOWEST_KEY
        buffers.buf[rows, :d] = searched_again(g, lo + rows, d, sq)


def searched_again(g: Tensor, rows: Tensor, d: int, sq: Tensor | None = None) -> Tensor:
    """Keys of the exact top ``d`` of the gallery rows ``rows`` against the whole gallery (self excluded), by the
    row-chunk search: for rows whose candidate lists ran short."""
    if sq is None:
        vals, idx = search_chunk(Gallery(g, None), g[rows], rows, d)
    else:
        scores = to_l2(score_block(g[rows], g), sq[rows], sq)
        scores[torch.arange(rows.numel(), device=g.device), rows] = float("-inf")
        vals, idx = exact_topk(scores, d)
    return to_keys(vals, idx)
