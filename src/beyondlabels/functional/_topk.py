"""Exact top-k under the ranking order of :mod:`beyondlabels.functional.search`: the Score product of two blocks of
rows, the int64 ranking keys, and the top ``depth`` of every row of a score block.

Internal: the search paths (row chunks, leave-one-out blocks, low-precision rescoring) and the kernels that score
pairs themselves share these. The group-maxima pre-filter of :func:`topk_keys` is derived in ``docs/search.md``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

# Smallest block side given to the matrix product (see `score_block`).
MIN_BLOCK = 16
_LOW32 = (1 << 32) - 1


def score_block(q: Tensor, g: Tensor, ws: Workspace | None = None) -> Tensor:
    """fp32 score block ``q @ g.T`` (written into a reused buffer of ``ws`` when given).

    Blocks are padded to at least ``MIN_BLOCK`` rows and columns: BLAS libraries switch to differently ordered
    kernels for very thin products (MKL does below 12 rows or a few columns), and the padding keeps every score equal
    to the one the same pair gets inside a full-size block, whatever the chunk size or candidate set.
    """
    m, n = q.shape[0], g.shape[0]
    if m < MIN_BLOCK:
        q = torch.cat([q, q.new_zeros((MIN_BLOCK - m, q.shape[1]))])
    if n < MIN_BLOCK:
        g = torch.cat([g, g.new_zeros((MIN_BLOCK - n, g.shape[1]))])
    if ws is not None and m >= MIN_BLOCK and n >= MIN_BLOCK:
        return torch.mm(q, g.T, out=ws.get("scores", (m, n), q.dtype))
    out = q @ g.T
    if m < MIN_BLOCK or n < MIN_BLOCK:
        out = out[:m, :n].contiguous()
    return out


def to_l2(scores: Tensor, row_sq: Tensor, col_sq: Tensor) -> Tensor:
    """``scores`` (a block of products ``q.g``, overwritten) as the Euclidean coarse scores ``2 q.g - |g|^2 - |q|^2``
    (rows' squared norms ``row_sq``, columns' ``col_sq``): minus the squared distances, up to rounding; the same
    operations in every path, so one error bound holds (``docs/search.md``)."""
    torch.add(col_sq.neg(), scores, alpha=2.0, out=scores)  # fl(2 q.g - |g|^2): doubling is exact, one rounding
    return scores.sub_(row_sq.unsqueeze(1))


class Workspace:
    """Buffers reused across the blocks of one search.

    Fresh large tensors cost a page fault per page on first touch, which on some machines (virtualised ones) is
    comparable to the arithmetic done on them; the search loops therefore write their large intermediates here.
    A tensor handed out stays valid only until the next request under the same name.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.buffers: dict[tuple[str, torch.dtype], Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        numel = math.prod(shape)
        buf = self.buffers.get((name, dtype))
        if buf is None or buf.numel() < numel:
            buf = torch.empty(numel, dtype=dtype, device=self.device)
            self.buffers[(name, dtype)] = buf
        return buf[:numel].view(shape)


def to_keys(vals: Tensor, idx: Tensor, col0: int = 0, out: Tensor | None = None, ws: Workspace | None = None) -> Tensor:
    """int64 keys whose descending order is the ranking order (descending score, then ascending index < 2**32).

    The item of column ``idx`` has index ``col0 + idx``. The high word is the fp32 score mapped to an int32 of the
    same order, the low word ``2**32 - 1 - index``; keys of distinct items are distinct, so a plain ``torch.topk``
    over keys applies the tie rule exactly. Written into ``out`` when given (intermediates then go to ``ws``).
    """
    if out is None:
        out = torch.empty(vals.shape, dtype=torch.int64, device=vals.device)
    if ws is None:
        ws = Workspace(vals.device)
    bits = ws.get("key_bits", vals.shape, torch.float32)
    torch.add(vals, 0.0, out=bits)  # + 0.0 turns -0.0 into +0.0: equal scores get equal high words
    bits = bits.view(torch.int32)
    ordered = ws.get("key_ordered", vals.shape, torch.int32)
    torch.bitwise_right_shift(bits, 31, out=ordered)
    ordered.bitwise_and_(0x7FFFFFFF).bitwise_xor_(bits)
    out.copy_(ordered)
    out.bitwise_left_shift_(32).add_(_LOW32 - col0).sub_(idx)
    return out


def from_keys(keys: Tensor) -> tuple[Tensor, Tensor]:
    """Scores and indices back from `to_keys` keys."""
    ordered = (keys >> 32).to(torch.int32)
    bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
    return bits.view(torch.float32), _LOW32 - (keys & _LOW32)


def topk_keys(
    scores: Tensor,
    depth: int,
    col0: int = 0,
    transposed: bool = False,
    best: Tensor | None = None,
    ws: Workspace | None = None,
) -> Tensor:
    """Keys (`to_keys`) of the top ``depth`` of each row, in no particular order; column ``j`` has index ``col0 + j``.

    With ``transposed`` the rows are the columns of ``scores`` (read in place, without a transposed copy). With
    ``best`` (keys ``[rows, depth]`` of items seen before) the result is the top ``depth`` of both together. ``ws``
    holds the intermediates; the result is a new tensor.

    Wide rows are first cut to the items of the groups of columns ``j, j + w, j + 2w, ...`` with the largest maxima
    (``docs/search.md``, "Top-k of a wide row"); rows whose cut could miss a tied item are recomputed over all their
    keys, so the result is always the exact top ``depth``.
    """
    rows_view = scores.T if transposed else scores
    c, n = rows_view.shape
    ws = ws if ws is not None else Workspace(scores.device)
    groups_n = math.isqrt(n // depth) if depth < n else 1
    if groups_n < 2:
        return _keys_of_rows(rows_view, depth, col0, best)
    w = n // groups_n
    group_max = _group_maxima(scores, transposed, c, groups_n, w, ws)
    kept, need, passing = depth, None, None
    if best is not None:
        # Items scoring below the worst of `best` cannot enter: a row needs only its groups whose maximum reaches it.
        # Keep as many groups as almost every row needs; the few rows needing more are recomputed whole.
        lowest_best = from_keys(best.amin(dim=1))[0]
        lowest_best[torch.isnan(lowest_best)] = float("-inf")  # rows that have not seen `depth` items yet
        passing = torch.ge(group_max, lowest_best.unsqueeze(1), out=ws.get("passing", (c, w), torch.bool))
        need = passing.sum(dim=1)
        kept = max(1, min(depth, int(torch.sort(need).values[(c * 49) // 50])))
    if kept < depth:
        groups = _packed_groups(passing, kept, ws)
        cols, cand = _candidates(rows_view, groups, groups_n, w, ws)
        return _top_of_packed(rows_view, cols, cand, need, groups_n, kept, depth, col0, best, ws)
    top_groups = ws.get("top_groups", (c, kept), scores.dtype)
    groups = ws.get("groups", (c, kept), torch.int64)
    torch.topk(group_max, kept, dim=1, largest=True, sorted=False, out=(top_groups, groups))
    cols, cand = _candidates(rows_view, groups, groups_n, w, ws)
    return _top_of_groups(rows_view, cols, cand, group_max, top_groups.amin(dim=1), depth, col0, best, ws)


def _group_maxima(scores: Tensor, transposed: bool, c: int, groups_n: int, w: int, ws: Workspace) -> Tensor:
    """``[c, w]``: the maximum of each row over the group of columns ``j, j + w, ..., j + (groups_n - 1) w``."""
    n0 = w * groups_n
    if transposed:  # reduce along the contiguous rows of `scores`
        group_max = ws.get("group_max", (w, c), scores.dtype)
        torch.amax(scores[:n0].unflatten(0, (groups_n, w)), dim=0, out=group_max)
        return group_max.T
    group_max = ws.get("group_max", (c, w), scores.dtype)
    torch.amax(scores[:, :n0].unflatten(1, (groups_n, w)), dim=1, out=group_max)
    return group_max


def _packed_groups(passing: Tensor, kept: int, ws: Workspace) -> Tensor:
    """The groups reaching the worst of `best`, packed to the left of `kept` slots in ascending order (a running
    count gives each its slot); slots past a row's count are padding, whose items are masked to -inf later."""
    c, w = passing.shape
    slot = torch.cumsum(passing, dim=1, out=ws.get("slot", (c, w), torch.int64)).sub_(1)
    slot.masked_fill_(slot >= kept, kept).masked_fill_(~passing, kept)
    packed = ws.get("packed", (c, kept + 1), torch.int64).fill_(0)
    packed.scatter_(1, slot, torch.arange(w, device=passing.device).expand(c, w))
    return packed[:, :kept]


def _candidates(rows_view: Tensor, groups: Tensor, groups_n: int, w: int, ws: Workspace) -> tuple[Tensor, Tensor]:
    """The columns ``[c, m]`` of the items of the chosen ``groups`` (then the columns past the last whole group) and
    their scores."""
    c, n = rows_view.shape
    kept, n0, device = groups.shape[1], w * groups_n, rows_view.device
    m = groups_n * kept + n - n0
    cols = ws.get("cols", (c, m), torch.int64)
    torch.add(
        groups.unsqueeze(1),
        torch.arange(0, n0, w, device=device).unsqueeze(1),
        out=cols[:, : groups_n * kept].view(c, groups_n, kept),
    )
    cand = ws.get("cand", (c, m), rows_view.dtype)
    torch.gather(rows_view, 1, cols[:, : groups_n * kept], out=cand[:, : groups_n * kept])
    if n0 < n:
        cols[:, groups_n * kept :] = torch.arange(n0, n, device=device)
        cand[:, groups_n * kept :] = rows_view[:, n0:]
    return cols, cand


def _top_of_packed(
    rows_view: Tensor,
    cols: Tensor,
    cand: Tensor,
    need: Tensor,
    groups_n: int,
    kept: int,
    depth: int,
    col0: int,
    best: Tensor,
    ws: Workspace,
) -> Tensor:
    """The top ``depth`` of ``best`` and the packed groups' items; rows needing more than ``kept`` groups whole.

    In a row needing at most `kept` groups every group holding an item >= the worst of `best` is kept, so the top
    `depth` of `best` and the kept items is exact (padding items score -inf, below all of `best`)."""
    c, m = cand.shape
    padding = torch.arange(kept, device=cand.device).unsqueeze(0) >= need.unsqueeze(1)
    cand[:, : groups_n * kept].view(c, groups_n, kept).masked_fill_(padding.unsqueeze(1), float("-inf"))
    both = ws.get("both", (c, depth + m), torch.int64)
    both[:, :depth] = best
    to_keys(cand, cols, col0, out=both[:, depth:], ws=ws)
    keys = torch.topk(both, depth, dim=1, largest=True, sorted=False).values
    over = need > kept
    if bool(over.any()):
        rows = torch.nonzero(over).flatten()
        keys[rows] = _keys_of_rows(rows_view[rows], depth, col0, best[rows])
    return keys


def _top_of_groups(
    rows_view: Tensor,
    cols: Tensor,
    cand: Tensor,
    group_max: Tensor,
    floor: Tensor,
    depth: int,
    col0: int,
    best: Tensor | None,
    ws: Workspace,
) -> Tensor:
    """The top ``depth`` of the items of each row's ``depth`` best groups (with ``best``, of both together); rows
    whose cut could miss a tied item (``floor``: the smallest kept group maximum) are recomputed over all their keys."""
    c, m = cand.shape
    vals = ws.get("vals", (c, depth), cand.dtype)
    pos = ws.get("pos", (c, depth), torch.int64)
    torch.topk(cand, depth, dim=1, largest=True, sorted=False, out=(vals, pos))
    lowest = vals.amin(dim=1)
    redo = ~(lowest > floor)
    if bool(redo.any()):  # exact all the same when no group left out reaches the floor
        at_floor = torch.nonzero(redo).flatten()
        redo[at_floor] = (group_max[at_floor] >= floor[at_floor].unsqueeze(1)).sum(dim=1) > depth
    redo |= torch.ge(cand, lowest.unsqueeze(1), out=ws.get("ge", (c, m), torch.bool)).sum(dim=1) > depth
    if best is None:
        keys = to_keys(vals, torch.gather(cols, 1, pos), col0)
    else:
        both = ws.get("both", (c, 2 * depth), torch.int64)
        both[:, :depth] = best
        to_keys(vals, torch.gather(cols, 1, pos), col0, out=both[:, depth:], ws=ws)
        keys = torch.topk(both, depth, dim=1, largest=True, sorted=False).values
    if bool(redo.any()):
        rows = torch.nonzero(redo).flatten()
        keys[rows] = _keys_of_rows(rows_view[rows], depth, col0, None if best is None else best[rows])
    return keys


def _keys_of_rows(scores: Tensor, depth: int, col0: int, best: Tensor | None) -> Tensor:
    """`topk_keys` by one topk over all the keys of each row."""
    c, n = scores.shape
    keys = to_keys(scores, torch.arange(n, device=scores.device).expand(c, n), col0)
    if best is not None:
        keys = torch.cat([best, keys], dim=1)
    return torch.topk(keys, min(depth, keys.shape[1]), dim=1, largest=True, sorted=False).values


def exact_topk(scores: Tensor, depth: int, ws: Workspace | None = None) -> tuple[Tensor, Tensor]:
    """Top ``depth`` of each row of ``scores`` under the (descending score, ascending index) order, sorted."""
    return from_keys(torch.sort(topk_keys(scores, depth, ws=ws), dim=1, descending=True).values)


def mask_excluded(scores: Tensor, excl: Tensor | None) -> None:
    """Set ``scores[q, excl[q]]`` to ``-inf`` (in place) for every row ``q`` with an excluded item
    (``excl[q] >= 0``)."""
    if excl is None:
        return
    has = excl >= 0
    if bool(has.any()):
        rows = torch.nonzero(has).flatten()
        scores[rows, excl[rows]] = float("-inf")


def flat_keys(vals: Tensor, cols: Tensor, col0: int) -> Tensor:
    """`to_keys` of a 1-D ``vals`` (a fresh tensor, overwritten) with int32 columns ``cols`` (offset ``col0``)."""
    bits = vals.add_(0.0).view(torch.int32)  # + 0.0 turns -0.0 into +0.0
    ordered = (bits >> 31).bitwise_and_(0x7FFFFFFF).bitwise_xor_(bits)
    return ordered.to(torch.int64).bitwise_left_shift_(32).add_(_LOW32 - col0).sub_(cols)
