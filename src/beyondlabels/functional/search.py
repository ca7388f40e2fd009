"""Exact cosine nearest-neighbour search over an embedding gallery: the one search every metric family uses.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning. The derivations
behind the leave-one-out block search and the low-precision fast mode are in ``docs/search.md``.

Definitions (stated once here; every function of the package refers to them):

Score
    The cosine similarity of two rows: the fp32 matrix product of the rows after each was L2-normalised once in fp32
    (:func:`normalize_rows`). Rows must be finite and non-zero. Products are never thinner than 16 rows or columns,
    so a pair gets the same fp32 score whatever the chunk size or candidate set.

Exclusion
    ``exclude[q]`` is a gallery index that query ``q`` never retrieves (``-1``: none). :func:`exclusion_index` builds it
    from ids (a query never retrieves the gallery item that carries its own id). Leave-one-out search (no separate
    query set) always excludes the query itself, so ``N - 1`` items are available to each query.

Ranking and ties
    Gallery items are ranked by descending score; items with *equal* scores are ranked by ascending gallery index.
    This total order is applied exactly, also across the last searched position: when the k-th and (k+1)-th scores
    are equal, the item with the smaller gallery index is the one inside the top k. Callers that want results
    independent of input order order the gallery canonically (the metrics sort it by sample id). Scores that differ
    only by fp32 rounding noise are ranked as the fp32 product orders them; exact duplicates always tie exactly.

Depth
    :func:`search_neighbors` takes one depth or one depth per query. Queries are visited in ascending order of depth (stable),
    in chunks of ``chunk_size``; a chunk is searched as deep as the deepest of its queries, so each query gets at
    least its own depth. The top ``d`` under the ranking order is a prefix of any deeper top list, so reading a
    prefix of a deeper result is exact.

Shares
    ``share=(i, n)`` searches only the i-th of n disjoint shares of the queries (the union of all shares is every
    query, each exactly once). Distributed evaluation gives each rank one share; a query's neighbours and scores are
    bitwise the same whatever the share count.

Precision
    ``"fp32"`` (default) is exact. ``"bf16"`` / ``"fp16"`` search a low-precision copy first and rescore the
    candidates within a proven error margin in fp32: rankings, scores and metric values equal the fp32 search.
    It pays off only where low-precision products are much faster than fp32 (GPUs) and candidates are few.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from beyondlabels.functional._checks import (
    check_embeddings,
    check_int_vector,
    check_positive_int,
    check_precision,
)
from beyondlabels.functional import _select

__all__ = ["Neighbors", "cosine_topk", "exclusion_index", "normalize_rows", "search_neighbors"]

_OUT_ROUNDING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
# Smallest block side given to the matrix product (see `_scores`).
_MIN_BLOCK = 16
# Leave-one-out search keeps the running top `depth` of every searched row as int64 keys; it is used while they fit.
_SYMMETRIC_BUFFER_BYTES = 512 * 2**20
# Largest block side of the leave-one-out search (larger blocks only add memory, the merges are already cheap).
_SYMMETRIC_MAX_BLOCK = 4096
_LOW32 = (1 << 32) - 1
# Column stride of the sample that gives the candidate search its first bounds (`_sampled_bounds`).
_CANDIDATE_STRIDE = 16
# Margin of the sampled bound, in standard deviations of the sampled count (`_candidate_strides`).
_CANDIDATE_SIGMAS = 3.0
# The candidate search is used when the deepest depth is at least the minimum and at most 1 / ratio of the gallery
# (shallower searches do not repay the sample's products, 1/8 of the symmetric ones).
_CANDIDATE_MIN_DEPTH = 64
_CANDIDATE_DEPTH_RATIO = 8
# Rows compacted at once (bounds the temporaries of a compaction to a few times this many buffer rows).
_COMPACTION_ROWS = 512


def normalize_rows(x: Tensor, name: str = "embeddings") -> Tensor:
    """L2-normalise the rows of ``x`` in fp32, validating them first.

    Args:
        x: Float tensor of shape ``[N, D]``.
        name: Argument name used in error messages.

    Returns:
        A new fp32 tensor of shape ``[N, D]`` whose rows have unit L2 norm.

    Raises:
        ValueError: If ``x`` is not 2-D, is empty, contains non-finite values, or has an all-zero row.

    Example:
        >>> normalize_rows(torch.tensor([[3.0, 4.0]]))
        tensor([[0.6000, 0.8000]])
    """
    x = check_embeddings(x, name)
    x = x.to(torch.float32)
    finite = torch.isfinite(x).all(dim=1)
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten()[:5].tolist()
        raise ValueError(f"`{name}` contains NaN or Inf values (rows {bad}...); remove or fix those rows.")
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    zero = norms.squeeze(1) == 0
    if bool(zero.any()):
        bad = torch.nonzero(zero).flatten()[:5].tolist()
        raise ValueError(
            f"`{name}` has all-zero rows (rows {bad}...), which have no direction and cannot be normalised; "
            "drop them before evaluation."
        )
    return x / norms



def exclusion_index(
    query_ids: Tensor | None, gallery_ids: Tensor | None, device: torch.device | None = None, gallery_name: str = "gallery_ids"
) -> Tensor | None:
    """For each query, the index of the gallery item that carries the query's id (``-1`` when none).

    Args:
        query_ids: Int tensor ``[Q]`` or None.
        gallery_ids: Int tensor ``[N]`` of unique ids, or None.
        device: Device of the result (default: that of ``query_ids``).
        gallery_name: Argument name used in error messages.

    Returns:
        An int64 tensor ``[Q]``, or None when both ids are None (nothing is excluded).

    Raises:
        ValueError: If only one of the two is given, or ``gallery_ids`` holds duplicates.

    Example:
        >>> exclusion_index(torch.tensor([7, 3, 9]), torch.tensor([3, 5, 7]))
        tensor([ 2,  0, -1])
    """
    if device is None and query_ids is not None:
        device = query_ids.device
    if query_ids is None and gallery_ids is None:
        return None
    if query_ids is None or gallery_ids is None:
        raise ValueError("pass both `query_ids` and `gallery_ids` for self-exclusion, or neither.")
    sorted_ids, order = torch.sort(gallery_ids)
    if sorted_ids.numel() > 1 and bool((sorted_ids[1:] == sorted_ids[:-1]).any()):
        dup = sorted_ids[1:][sorted_ids[1:] == sorted_ids[:-1]][:5].tolist()
        raise ValueError(
            f"`{gallery_name}` contains duplicated ids {dup}; ids used for self-exclusion must be unique "
            "(deduplicate the samples first)."
        )
    pos = torch.searchsorted(sorted_ids, query_ids).clamp_(max=sorted_ids.numel() - 1)
    found = sorted_ids[pos] == query_ids
    return torch.where(found, order[pos], torch.full_like(pos, -1)).to(device)



# ----------------------------------------------------------------------------------------------------------------------
# search internals
# ----------------------------------------------------------------------------------------------------------------------


class _Gallery:
    """A normalised gallery, ready to be searched chunk by chunk (and its low-precision copy in fast mode)."""

    def __init__(self, gallery: Tensor, lowp: torch.dtype | None) -> None:
        self.g = gallery  # [N, D] fp32, unit rows
        self.n, self.d = gallery.shape
        self.lowp = lowp
        self.gamma = self.d * 2.0**-24 / (1.0 - self.d * 2.0**-24)  # fp32 accumulation over D terms
        if lowp is not None:
            self.g_low = gallery.to(lowp)
            self.err_g = float(_rounding_error(gallery, self.g_low).max())
            self.out_rounding = _OUT_ROUNDING[lowp]

    def margin(self, q: Tensor, q_low: Tensor) -> Tensor:
        """Per-query bound ``eps`` on |coarse score - fp32 score| (see the module docstring)."""
        e_q = _rounding_error(q, q_low)
        big_e = self.err_g
        grow = (1.0 + e_q) * (1.0 + big_e)
        eps = e_q * (1.0 + big_e) + (1.0 + 1e-6) * big_e + (2.0 * self.gamma + self.out_rounding) * grow
        return eps * 1.01 + 1e-7


def _scores(q: Tensor, g: Tensor, ws: _Workspace | None = None) -> Tensor:
    """fp32 score block ``q @ g.T`` (written into a reused buffer of ``ws`` when given).

    Blocks are padded to at least ``_MIN_BLOCK`` rows and columns: BLAS libraries switch to differently ordered
    kernels for very thin products (MKL does below 12 rows or a few columns), and the padding keeps every score equal
    to the one the same pair gets inside a full-size block, whatever the chunk size or candidate set.
    """
    m, n = q.shape[0], g.shape[0]
    if m < _MIN_BLOCK:
        q = torch.cat([q, q.new_zeros((_MIN_BLOCK - m, q.shape[1]))])
    if n < _MIN_BLOCK:
        g = torch.cat([g, g.new_zeros((_MIN_BLOCK - n, g.shape[1]))])
    if ws is not None and m >= _MIN_BLOCK and n >= _MIN_BLOCK:
        return torch.mm(q, g.T, out=ws.get("scores", (m, n), q.dtype))
    out = q @ g.T
    if m < _MIN_BLOCK or n < _MIN_BLOCK:
        out = out[:m, :n].contiguous()
    return out


class _Workspace:
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


def _rounding_error(x: Tensor, x_low: Tensor) -> Tensor:
    # x_low - x is exact in fp32 (the two are within a factor 2); the norm's own error is covered by the 1% inflation.
    return torch.linalg.vector_norm(x_low.to(torch.float32) - x, dim=1)


def _to_keys(
    vals: Tensor, idx: Tensor, col0: int = 0, out: Tensor | None = None, ws: _Workspace | None = None
) -> Tensor:
    """int64 keys whose descending order is the ranking order (descending score, then ascending index < 2**32).

    The item of column ``idx`` has index ``col0 + idx``. The high word is the fp32 score mapped to an int32 of the
    same order, the low word ``2**32 - 1 - index``; keys of distinct items are distinct, so a plain ``torch.topk``
    over keys applies the tie rule exactly. Written into ``out`` when given (intermediates then go to ``ws``).
    """
    if out is None:
        out = torch.empty(vals.shape, dtype=torch.int64, device=vals.device)
    if ws is None:
        ws = _Workspace(vals.device)
    bits = ws.get("key_bits", vals.shape, torch.float32)
    torch.add(vals, 0.0, out=bits)  # + 0.0 turns -0.0 into +0.0: equal scores get equal high words
    bits = bits.view(torch.int32)
    ordered = ws.get("key_ordered", vals.shape, torch.int32)
    torch.bitwise_right_shift(bits, 31, out=ordered)
    ordered.bitwise_and_(0x7FFFFFFF).bitwise_xor_(bits)
    out.copy_(ordered)
    out.bitwise_left_shift_(32).add_(_LOW32 - col0).sub_(idx)
    return out


def _from_keys(keys: Tensor) -> tuple[Tensor, Tensor]:
    """Scores and indices back from `_to_keys` keys."""
    ordered = (keys >> 32).to(torch.int32)
    bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
    return bits.view(torch.float32), _LOW32 - (keys & _LOW32)


def _topk_keys(
    scores: Tensor,
    depth: int,
    col0: int = 0,
    transposed: bool = False,
    best: Tensor | None = None,
    ws: _Workspace | None = None,
) -> Tensor:
    """Keys (`_to_keys`) of the top ``depth`` of each row, in no particular order; column ``j`` has index ``col0 + j``.

    With ``transposed`` the rows are the columns of ``scores`` (read in place, without a transposed copy). With
    ``best`` (keys ``[rows, depth]`` of items seen before) the result is the top ``depth`` of both together. ``ws``
    holds the intermediates; the result is a new tensor.

    Wide rows are pre-filtered by group maxima: with ``w = n // G`` for a group count ``G``, group ``j`` holds columns
    ``j, j + w, ..., j + (G - 1) w`` (columns past ``G * w`` are always candidates); let ``f`` be the ``depth``-th
    largest group maximum. Only the ``depth`` groups of largest maxima are kept; an item left out lies in a group
    whose maximum is ``<= f``, so it scores ``<= f``, and ``< f`` unless more than ``depth`` groups reach ``f``. When
    the ``depth``-th best kept item scores ``> f``, or no group left out reaches ``f``, no item left out can be in the
    top ``depth``. A float ``torch.topk`` then picks ``depth`` kept items; the pick is the exact set unless another
    kept item ties with its lowest score. Rows failing either test (only possible with ties) are recomputed over all
    their keys.

    With ``best``, items scoring below the worst of ``best`` cannot enter, so a row needs only the groups whose
    maximum reaches that worst score; when most rows need fewer than ``depth`` groups, only that many are kept, and
    rows needing more are recomputed over all their keys.
    """
    rows_view = scores.T if transposed else scores
    c, n = rows_view.shape
    device = scores.device
    ws = ws if ws is not None else _Workspace(device)
    groups_n = math.isqrt(n // depth) if depth < n else 1
    if groups_n < 2:
        return _keys_of_rows(rows_view, depth, col0, best)
    w = n // groups_n
    n0 = w * groups_n
    if transposed:  # reduce along the contiguous rows of `scores`
        group_max = ws.get("group_max", (w, c), scores.dtype)
        torch.amax(scores[:n0].unflatten(0, (groups_n, w)), dim=0, out=group_max)
        group_max = group_max.T
    else:
        group_max = ws.get("group_max", (c, w), scores.dtype)
        torch.amax(scores[:, :n0].unflatten(1, (groups_n, w)), dim=1, out=group_max)
    kept = depth
    if best is not None:
        # Items scoring below the worst of `best` cannot enter: a row needs only its groups whose maximum reaches it.
        # Keep as many groups as almost every row needs; the few rows needing more are recomputed whole.
        lowest_best = _from_keys(best.amin(dim=1))[0]
        lowest_best[torch.isnan(lowest_best)] = float("-inf")  # rows that have not seen `depth` items yet
        passing = torch.ge(group_max, lowest_best.unsqueeze(1), out=ws.get("passing", (c, w), torch.bool))
        need = passing.sum(dim=1)
        kept = max(1, min(depth, int(torch.sort(need).values[(c * 49) // 50])))
    if kept < depth:
        # The groups reaching the worst of `best`, packed to the left of `kept` slots in ascending order (a running
        # count gives each its slot); slots past a row's count are padding, whose items are masked to -inf below.
        slot = torch.cumsum(passing, dim=1, out=ws.get("slot", (c, w), torch.int64)).sub_(1)
        slot.masked_fill_(slot >= kept, kept).masked_fill_(~passing, kept)
        packed = ws.get("packed", (c, kept + 1), torch.int64).fill_(0)
        packed.scatter_(1, slot, torch.arange(w, device=device).expand(c, w))
        groups = packed[:, :kept]
    else:
        top_groups = ws.get("top_groups", (c, kept), scores.dtype)
        groups = ws.get("groups", (c, kept), torch.int64)
        torch.topk(group_max, kept, dim=1, largest=True, sorted=False, out=(top_groups, groups))
    m = groups_n * kept + n - n0
    cols = ws.get("cols", (c, m), torch.int64)
    torch.add(
        groups.unsqueeze(1),
        torch.arange(0, n0, w, device=device).unsqueeze(1),
        out=cols[:, : groups_n * kept].view(c, groups_n, kept),
    )
    cand = ws.get("cand", (c, m), scores.dtype)
    torch.gather(rows_view, 1, cols[:, : groups_n * kept], out=cand[:, : groups_n * kept])
    if n0 < n:
        cols[:, groups_n * kept :] = torch.arange(n0, n, device=device)
        cand[:, groups_n * kept :] = rows_view[:, n0:]
    if kept < depth:
        # In a row needing at most `kept` groups every group holding an item >= the worst of `best` is kept, so the
        # top `depth` of `best` and the kept items is exact (padding items score -inf, below all of `best`).
        padding = torch.arange(kept, device=device).unsqueeze(0) >= need.unsqueeze(1)
        cand[:, : groups_n * kept].view(c, groups_n, kept).masked_fill_(padding.unsqueeze(1), float("-inf"))
        both = ws.get("both", (c, depth + m), torch.int64)
        both[:, :depth] = best
        _to_keys(cand, cols, col0, out=both[:, depth:], ws=ws)
        keys = torch.topk(both, depth, dim=1, largest=True, sorted=False).values
        over = need > kept
        if bool(over.any()):
            rows = torch.nonzero(over).flatten()
            keys[rows] = _keys_of_rows(rows_view[rows], depth, col0, best[rows])
        return keys
    floor = top_groups.amin(dim=1)
    vals = ws.get("vals", (c, depth), scores.dtype)
    pos = ws.get("pos", (c, depth), torch.int64)
    torch.topk(cand, depth, dim=1, largest=True, sorted=False, out=(vals, pos))
    lowest = vals.amin(dim=1)
    redo = ~(lowest > floor)
    if bool(redo.any()):  # exact all the same when no group left out reaches the floor
        at_floor = torch.nonzero(redo).flatten()
        redo[at_floor] = (group_max[at_floor] >= floor[at_floor].unsqueeze(1)).sum(dim=1) > depth
    redo |= torch.ge(cand, lowest.unsqueeze(1), out=ws.get("ge", (c, m), torch.bool)).sum(dim=1) > depth
    if best is None:
        keys = _to_keys(vals, torch.gather(cols, 1, pos), col0)
    else:
        both = ws.get("both", (c, 2 * depth), torch.int64)
        both[:, :depth] = best
        _to_keys(vals, torch.gather(cols, 1, pos), col0, out=both[:, depth:], ws=ws)
        keys = torch.topk(both, depth, dim=1, largest=True, sorted=False).values
    if bool(redo.any()):
        rows = torch.nonzero(redo).flatten()
        keys[rows] = _keys_of_rows(rows_view[rows], depth, col0, None if best is None else best[rows])
    return keys


def _keys_of_rows(scores: Tensor, depth: int, col0: int, best: Tensor | None) -> Tensor:
    """`_topk_keys` by one topk over all the keys of each row."""
    c, n = scores.shape
    keys = _to_keys(scores, torch.arange(n, device=scores.device).expand(c, n), col0)
    if best is not None:
        keys = torch.cat([best, keys], dim=1)
    return torch.topk(keys, min(depth, keys.shape[1]), dim=1, largest=True, sorted=False).values


def _exact_topk(scores: Tensor, depth: int, ws: _Workspace | None = None) -> tuple[Tensor, Tensor]:
    """Top ``depth`` of each row of ``scores`` under the (descending score, ascending index) order, sorted."""
    return _from_keys(torch.sort(_topk_keys(scores, depth, ws=ws), dim=1, descending=True).values)


def _mask_excluded(scores: Tensor, excl: Tensor | None) -> None:
    if excl is None:
        return
    has = excl >= 0
    if bool(has.any()):
        rows = torch.nonzero(has).flatten()
        scores[rows, excl[rows]] = float("-inf")


def _search_chunk(
    gal: _Gallery, q: Tensor, excl: Tensor | None, depth: int, ws: _Workspace | None = None
) -> tuple[Tensor, Tensor]:
    """Exact top-``depth`` (fp32 scores, gallery indices) for one chunk of normalised queries."""
    if gal.lowp is None:
        scores = _scores(q, gal.g, ws)
        _mask_excluded(scores, excl)
        return _exact_topk(scores, depth, ws)

    q_low = q.to(gal.lowp)
    coarse = q_low @ gal.g_low.T  # low precision [c, N]
    _mask_excluded(coarse, excl)
    kth = torch.topk(coarse, depth, dim=1, largest=True, sorted=False).values.amin(dim=1, keepdim=True)
    threshold = kth.to(torch.float32) - 2.0 * gal.margin(q, q_low).unsqueeze(1)
    candidates = (coarse >= threshold) & (coarse > float("-inf"))
    del coarse
    cols = torch.nonzero(candidates.any(dim=0)).flatten()  # ascending: positions order ties like gallery indices
    if 2 * cols.numel() > gal.n:
        # The chunk's candidates cover most of the gallery: rescore it whole.
        scores = _scores(q, gal.g)
        scores.masked_fill_(~candidates, float("-inf"))
        return _exact_topk(scores, depth)
    scores = _scores(q, gal.g[cols])
    scores.masked_fill_(~candidates[:, cols], float("-inf"))
    vals, pos = _exact_topk(scores, depth)
    return vals, cols[pos]


def _symmetric_block(n: int, chunk_size: int) -> int:
    """Block side of the leave-one-out search: a block of scores holds no more than ``chunk_size * n`` of them."""
    side = max(chunk_size, min(math.isqrt(chunk_size * n), _SYMMETRIC_MAX_BLOCK))
    blocks = -(-n // side)
    block = -(-n // blocks)  # equal blocks
    aligned = -(-block // 32) * 32  # BLAS kernels run markedly slower on some odd sizes (3334 against 3360)
    return min(n, aligned) if aligned <= side else block


def _symmetric_blocks(
    g: Tensor, block: int, lo: int, hi: int, ws: _Workspace
) -> Iterator[tuple[int, int, int, int, bool, bool, Tensor]]:
    """The score blocks ``(a, b)``, ``a <= b``, of ``g @ g.T`` (diagonal at -inf) that touch rows ``lo:hi``, each
    computed once: ``(a, a_end, b, b_end, a_owned, b_owned, scores)``, where ``a_owned`` says the rows of block ``a``
    lie in ``lo:hi`` and ``b_owned`` that the transposed block updates the rows of block ``b``. A pair's score comes
    from the same block product whatever ``lo:hi`` is. ``scores`` lives in ``ws`` until the next block."""
    n = g.shape[0]
    for a in range(0, n, block):
        a_end = min(a + block, n)
        a_owned = lo <= a < hi
        for b in range(a, n, block):
            b_end = min(b + block, n)
            b_owned = lo <= b < hi and a != b
            if not (a_owned or b_owned):
                continue
            scores = _scores(g[a:a_end], g[b:b_end], ws)
            if a == b:
                scores.fill_diagonal_(float("-inf"))
            yield a, a_end, b, b_end, a_owned, b_owned, scores


def _leave_one_out_topk(g: Tensor, depth: int, block: int, lo: int, hi: int) -> tuple[Tensor, Tensor]:
    """Exact top ``depth`` of rows ``lo:hi`` of ``g @ g.T`` with the diagonal excluded, each block pair computed once.

    The score matrix is symmetric, so only blocks ``(a, b)`` with ``a <= b`` are multiplied; block ``(a, b)`` updates
    the rows of ``a`` and, transposed, those of ``b`` — those inside ``lo:hi`` (both multiples of ``block``, or
    ``hi == n``). Every row keeps its running top ``depth`` as int64 keys (`_to_keys`), whose order is the exact
    ranking order, so merging a block into it is one ``torch.topk``. A pair's score comes from the same block
    product whatever ``lo:hi`` is, so a share gives bitwise the rows the whole search gives.
    """
    best = torch.full((hi - lo, depth), torch.iinfo(torch.int64).min, dtype=torch.int64, device=g.device)
    ws = _Workspace(g.device)

    def merge(start: int, stop: int, scores: Tensor, col0: int, transposed: bool) -> None:
        rows = slice(start - lo, stop - lo)
        best[rows] = _topk_keys(scores, depth, col0, transposed, best[rows], ws)

    for a, a_end, b, b_end, a_owned, b_owned, scores in _symmetric_blocks(g, block, lo, hi, ws):
        if a_owned:
            merge(a, a_end, scores, b, False)
        if b_owned:
            merge(b, b_end, scores, a, True)
    return _from_keys(torch.sort(best, dim=1, descending=True).values)


def _candidate_strides(need: Tensor, stride: int) -> Tensor:
    """Per row, how many sampled scores must reach a bound for ``need`` items of the whole row to reach it (whp)."""
    per = need.to(torch.float64) / stride
    return (torch.ceil(per + _CANDIDATE_SIGMAS * torch.sqrt(per)) + 1).to(torch.long)


def _sampled_bounds(g: Tensor, need: Tensor, block: int, lo: int, hi: int) -> Tensor:
    """Lower-bound guesses ``L`` for rows ``lo:hi``: the k-th largest score over the columns ``0, s, 2s, ...``.

    ``k`` (`_candidate_strides`) makes it likely that at least ``need`` items of the whole row score ``>= L``. Only a
    guess: rows for which it is too high are found and searched again (see `_leave_one_out_candidates`). Rows whose
    ``k`` exceeds the sample get the lowest finite fp32 (every item survives, the excluded self at ``-inf`` does not).
    """
    s = _CANDIDATE_STRIDE
    sample = g[::s]
    m = sample.shape[0]
    lowest = torch.finfo(torch.float32).min
    bound = torch.full((hi - lo,), lowest, dtype=torch.float32, device=g.device)
    k = _candidate_strides(need, s)
    for a in range(lo, hi, block):
        a_end = min(a + block, hi)
        kr = k[a - lo : a_end - lo]
        usable = kr <= m - 1  # the row itself may be one of the sampled columns
        if not bool(usable.any()):
            continue
        scores = _scores(g[a:a_end], sample)
        rows = torch.arange(a, a_end, device=g.device)
        own = torch.nonzero(rows % s == 0).flatten()
        scores[own, rows[own] // s] = float("-inf")
        top = _select.sort_rows_descending(_select.top_rows(scores, min(int(kr[usable].max()), m)), in_place=True)
        kth = top.gather(1, (kr.clamp(max=top.shape[1]) - 1).unsqueeze(1)).squeeze(1)
        bound[a - lo : a_end - lo] = torch.where(usable & (kth > float("-inf")), kth, lowest)
    return bound


def _leave_one_out_candidates(
    g: Tensor, depths: Tensor, block: int, lo: int, hi: int, chunk_size: int
) -> Iterator[Neighbors]:
    """Exact top ``need[r]`` of rows ``lo:hi`` of ``g @ g.T`` (diagonal excluded) by thresholds and candidate lists.

    Block pairs are visited as in `_leave_one_out_topk`, so a pair's score is the same block product. Each row ``r``
    has a bound ``L[r]`` (first a guess from a sample of columns, `_sampled_bounds`) and a buffer of ``cap`` keys
    (`_to_keys`): a block adds to it the row's items scoring ``>= L[r]``. When they would not fit, the row is compacted:
    its buffer and the new items are cut to the top ``depth = max(need)`` keys and ``L[r]`` is raised to the lowest
    of them — every item left out then ranks below ``depth`` items already seen, so it is not in the final top. After
    the pass a row holds every item scoring ``>= L[r]``; if it was compacted, or holds at least ``need[r]`` items, its
    ``need[r]``-th best scores ``>= L[r]``, so its top ``need[r]`` keys among the buffer are the exact top (ties
    included: equal scores all pass the bound and the keys order them by index). The remaining rows (the guess was
    above the row's ``need[r]``-th score) are searched again against the whole gallery (`_search_chunk`).
    Rows are yielded in chunks of ``chunk_size`` in ascending order of ``depths`` (local to ``lo:hi``); ``need[r]`` is
    the deepest depth of row ``r``'s chunk.
    """
    device = g.device
    rows_n = hi - lo
    # Chunks of rows in ascending order of depth; each row is searched as deep as its chunk's deepest.
    order = torch.argsort(depths, stable=True)
    ends = (torch.arange(rows_n, device=device) // chunk_size + 1).mul_(chunk_size).clamp_(max=rows_n) - 1
    need = torch.empty_like(depths)
    need[order] = depths[order][ends]
    depth = int(need.max())
    cap = _candidate_cap(depth, rows_n)
    lowest_key = torch.iinfo(torch.int64).min
    bound = _sampled_bounds(g, need, block, lo, hi)
    _select.release_free_memory(device)
    # One more slot at the end takes the items of compacted rows, which are written nowhere else.
    flat_buf = torch.full((rows_n * cap + 1,), lowest_key, dtype=torch.int64, device=device)
    buf, trash = flat_buf[:-1].view(rows_n, cap), rows_n * cap
    fill = torch.zeros(rows_n, dtype=torch.int64, device=device)
    compacted = torch.zeros(rows_n, dtype=torch.bool, device=device)
    ws = _Workspace(device)

    def insert(r0: int, nrows: int, row: Tensor, keys: Tensor) -> None:
        """Append ``keys`` to rows ``r0 + row`` (``row`` ascending, local to ``r0:r0 + nrows``)."""
        m = row.numel()
        if m == 0:
            return
        edges = torch.searchsorted(row, torch.arange(nrows + 1, dtype=row.dtype, device=device))
        start, counts = edges[:-1], edges[1:] - edges[:-1]
        f = fill[r0 : r0 + nrows]
        pos = ((r0 + torch.arange(nrows, device=device)) * cap + f - start).index_select(0, row)
        pos += torch.arange(m, device=device)
        over = f + counts > cap
        if bool(over.any()):
            overflowing = torch.nonzero(over).flatten()
            for part in overflowing.split(_COMPACTION_ROWS):
                compact(r0 + part, start.index_select(0, part), counts.index_select(0, part), keys)
            f[overflowing] = depth
            pos.masked_fill_(over.index_select(0, row), trash)  # their items are in the buffer already
            counts = counts.masked_fill(over, 0)
        flat_buf.index_copy_(0, pos, keys)
        f += counts

    def compact(rows: Tensor, start: Tensor, counts: Tensor, keys: Tensor) -> None:
        """Cut buffer rows ``rows`` and their new items ``keys[start : start + counts]`` to their top ``depth`` keys."""
        n_rows = rows.numel()
        width = cap + int(counts.max())
        union = torch.full((n_rows, width), lowest_key, dtype=torch.int64, device=device)
        union[:, :cap] = buf.index_select(0, rows)
        first = torch.cumsum(counts, 0) - counts
        slot = torch.repeat_interleave(torch.arange(n_rows, device=device), counts)
        within = torch.arange(slot.numel(), device=device) - first.index_select(0, slot)
        src = start.index_select(0, slot) + within
        union.view(-1).index_copy_(0, slot * width + cap + within, keys.index_select(0, src))
        top = _select.top_rows(union, depth)
        del union
        buf[rows, :depth] = top
        buf[rows, depth:] = lowest_key
        bound[rows] = _from_keys(top.amin(dim=1))[0]
        compacted[rows] = True

    def row_and_col(flat: Tensor, nb: int) -> tuple[Tensor, Tensor]:
        """int32 row and column of flat positions in a block of ``nb`` columns (fewer than 2**31 scores)."""
        flat = flat.to(torch.int32)
        row = torch.div(flat, nb, rounding_mode="floor")
        return row, flat.sub_(row * nb)

    def side_a(reaching: tuple[Tensor, Tensor], nb: int, a: int, a_end: int, b: int) -> None:
        flat, vals = reaching
        row, col = row_and_col(flat, nb)
        insert(a - lo, a_end - a, row, _survivor_keys(vals, col, b))

    def side_b(reaching: tuple[Tensor, Tensor], nb: int, a: int, b: int, b_end: int) -> None:
        flat, vals = reaching
        i, col = row_and_col(flat, nb)
        # Group by column (the rows of block b), keeping the ascending rows of block a within a column.
        perm = _select.stable_group_order(col, nb)
        keys = _survivor_keys(vals.index_select(0, perm), i.index_select(0, perm), a)
        insert(b - lo, b_end - b, col.index_select(0, perm), keys)

    for a, a_end, b, b_end, a_owned, b_owned, scores in _symmetric_blocks(g, block, lo, hi, ws):
        # One read of the block finds the entries reaching the bound of their row (rows of block a) and those
        # reaching the bound of their column (rows of block b).
        reaching_a, reaching_b = _select.flat_reaching(
            scores, bound[a - lo : a_end - lo] if a_owned else None, bound[b - lo : b_end - lo] if b_owned else None
        )
        nb = scores.shape[1]
        # One side after the other: since the block is read once for both, running them side by side (two threads,
        # torch's threads split between them) measured no faster, and splitting them needs torch.set_num_threads.
        if a_owned:
            side_a(reaching_a, nb, a, a_end, b)
        if b_owned:
            side_b(reaching_b, nb, a, b, b_end)
    ws = scores = reaching_a = reaching_b = None  # the final steps need none of the pass's buffers
    # Rows whose guess was too high, searched again against the whole gallery, all together; their buffer then
    # holds exactly their top keys.
    short = torch.nonzero(~compacted & (fill < need)).flatten()
    gal = _Gallery(g, None)
    for start in range(0, short.numel(), chunk_size):
        rows = short[start : start + chunk_size]
        d = int(need[rows].max())
        vals, idx = _search_chunk(gal, g[lo + rows], lo + rows, d)
        buf[rows] = lowest_key
        buf[rows, :d] = _to_keys(vals, idx)
    for start in range(0, rows_n, chunk_size):
        local = order[start : start + chunk_size]
        d = int(need[local].max())
        vals, idx = _from_keys(_select.sort_rows_descending(buf.index_select(0, local), in_place=True)[:, :d])
        yield Neighbors(local + lo, vals, idx)
    flat_buf = buf = None  # the buffers go before the heap is trimmed
    _select.release_free_memory(device)


def _survivor_keys(vals: Tensor, cols: Tensor, col0: int) -> Tensor:
    """`_to_keys` of a 1-D ``vals`` (a fresh tensor, overwritten) with int32 columns ``cols`` (offset ``col0``)."""
    bits = vals.add_(0.0).view(torch.int32)  # + 0.0 turns -0.0 into +0.0
    ordered = (bits >> 31).bitwise_and_(0x7FFFFFFF).bitwise_xor_(bits)
    return ordered.to(torch.int64).bitwise_left_shift_(32).add_(_LOW32 - col0).sub_(cols)


def _candidate_cap(depth: int, rows: int = 0) -> int:
    """Keys a row of the candidate search holds before it is compacted to ``depth``: at least
    ``depth + max(depth // 4, 64)``, and up to ``depth * 3 / 2 + 64`` while ``rows`` such rows fit the buffer budget
    (fewer rows overflow the sampled guess, so fewer are compacted)."""
    least = depth + max(depth // 4, 64)
    fits = _SYMMETRIC_BUFFER_BYTES // (8 * max(rows, 1))
    return max(least, min(depth + depth // 2 + 64, fits))


def _available(n_gallery: int, excl: Tensor | None) -> int:
    """The smallest number of gallery items any query may retrieve."""
    if excl is None:
        return n_gallery
    return n_gallery - int(bool((excl >= 0).any()))



@dataclass(frozen=True)
class Neighbors:
    """The searched neighbours of one chunk of queries.

    Attributes:
        rows: int64 ``[c]`` positions of the chunk's queries (in the query set, or the gallery for leave-one-out).
        scores: fp32 ``[c, depth]`` scores, each row in ranking order (descending score, then ascending index).
        indices: int64 ``[c, depth]`` gallery indices of the neighbours.
    """

    rows: Tensor
    scores: Tensor
    indices: Tensor

    @property
    def depth(self) -> int:
        return self.indices.shape[1]


def _check_share(share: object) -> tuple[int, int]:
    if share is None:
        return 0, 1
    if (
        not isinstance(share, (tuple, list))
        or len(share) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in share)
        or not 0 <= share[0] < share[1]
    ):
        raise ValueError(f"`share` must be (index, count) with 0 <= index < count, got {share!r}.")
    return int(share[0]), int(share[1])


def _depths(depth: int | Tensor, n_queries: int, limit: int, device: torch.device) -> Tensor:
    if isinstance(depth, Tensor):
        if depth.dim() != 1 or depth.shape[0] != n_queries or depth.is_floating_point() or depth.dtype == torch.bool:
            raise ValueError(f"`depth` as a tensor must be 1-D integer with one entry per query ({n_queries}), got {tuple(depth.shape)} {depth.dtype}.")
        depths = depth.to(device=device, dtype=torch.long)
        if n_queries and int(depths.min()) < 1:
            raise ValueError("`depth` must be >= 1 for every query.")
    else:
        check_positive_int(depth, "depth")
        depths = torch.full((n_queries,), depth, dtype=torch.long, device=device)
    if n_queries and int(depths.max()) > limit:
        raise ValueError(f"`depth` {int(depths.max())} exceeds the {limit} gallery items available to a query; lower it.")
    return depths


def search_neighbors(
    gallery: Tensor,
    depth: int | Tensor,
    *,
    queries: Tensor | None = None,
    exclude: Tensor | None = None,
    share: tuple[int, int] | None = None,
    chunk_size: int = 1024,
    precision: str = "fp32",
    normalized: bool = False,
) -> Iterator[Neighbors]:
    """Exact cosine top-``depth`` search, yielded chunk by chunk (definitions in the module docstring).

    Without ``queries`` this is leave-one-out search: every gallery row is a query that never retrieves itself, and
    the score matrix is computed in symmetric blocks (half the products): for depths from 64 to ``N / 8`` by per-row
    bounds and candidate lists (in runs of rows whose lists fit in 512 MB), otherwise while the running top lists
    fit in 512 MB (``docs/search.md``). Peak memory is one block of scores plus, for leave-one-out, at most 512 MB of
    int64 keys — never ``N x N``.

    Args:
        gallery: Float tensor ``[N, D]``.
        depth: Neighbours per query: an int, or an int64 tensor ``[Q]`` (one depth per query).
        queries: Optional separate query set ``[Q, D]`` on the gallery's device.
        exclude: Optional int64 ``[Q]`` gallery index each query must not retrieve (``-1``: none); see
            :func:`exclusion_index`. Ignored (the diagonal is excluded) for leave-one-out search.
        share: ``(i, n)`` to search only the i-th of n disjoint shares of the queries (distributed evaluation).
        chunk_size: Queries per chunk; peak memory of a chunk is ``O(chunk_size * N)`` scores.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (same results; see the module docstring).
        normalized: Set True when the rows are already unit fp32 rows from :func:`normalize_rows` (skips the copy).

    Yields:
        :class:`Neighbors`, one per chunk. Every query of the share appears in exactly one chunk, at least as deep as
        its own depth.

    Raises:
        ValueError: On bad embeddings, depths larger than the available gallery, or bad ``share`` / ``chunk_size`` /
            ``precision``.

    Example:
        >>> g = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
        >>> [(c.rows.tolist(), c.indices.tolist()) for c in search_neighbors(g, 2)]
        [([0, 1, 2, 3], [[3, 2], [2, 0], [0, 1], [0, 2]])]
    """
    check_positive_int(chunk_size, "chunk_size")
    lowp = check_precision(precision)
    gn = gallery if normalized else normalize_rows(gallery, "gallery")
    qn = None
    if queries is not None:
        qn = queries if normalized else normalize_rows(queries, "queries")
        if qn.device != gn.device:
            raise ValueError(f"`queries` is on {qn.device} but `gallery` is on {gn.device}; put them on one device.")
        if qn.shape[1] != gn.shape[1]:
            raise ValueError(f"`queries` has dimension {qn.shape[1]} but `gallery` has {gn.shape[1]}; they must match.")
    if exclude is not None and queries is not None:
        exclude = check_int_vector(exclude, "exclude", qn.shape[0], gn.device)
    yield from _search_normalized(gn, depth, qn, exclude, _check_share(share), chunk_size, lowp)


def _search_normalized(
    gn: Tensor,
    depth: int | Tensor,
    qn: Tensor | None,
    excl: Tensor | None,
    share: tuple[int, int] | None,
    chunk_size: int,
    lowp: torch.dtype | None,
) -> Iterator[Neighbors]:
    n = gn.shape[0]
    device = gn.device
    index, count = share or (0, 1)
    leave_one_out = qn is None
    n_queries = n if leave_one_out else qn.shape[0]
    if leave_one_out:
        excl = torch.arange(n, device=device)
    depths = _depths(depth, n_queries, _available(n, excl), device)
    if n_queries == 0:
        return
    if leave_one_out and lowp is None:
        # Shares are whole runs of blocks. The path is chosen from every share's size, so all shares take the same one.
        block = _symmetric_block(n, chunk_size)
        n_blocks = -(-n // block)
        bounds = [min(n, (i * n_blocks // count) * block) for i in range(count + 1)]
        deepest = int(depths.max())
        if _CANDIDATE_MIN_DEPTH <= deepest and _CANDIDATE_DEPTH_RATIO * deepest <= n:
            # Candidate search, in runs of blocks whose candidate buffers fit the budget.
            run = block * max(1, _SYMMETRIC_BUFFER_BYTES // (_candidate_cap(deepest) * 8 * block))
            for lo in range(bounds[index], bounds[index + 1], run):
                hi = min(lo + run, bounds[index + 1])
                yield from _leave_one_out_candidates(gn, depths[lo:hi], block, lo, hi, chunk_size)
            return
        fits = all(
            (bounds[i + 1] - bounds[i]) * int(depths[bounds[i] : bounds[i + 1]].max()) * 8 <= _SYMMETRIC_BUFFER_BYTES
            for i in range(count)
            if bounds[i + 1] > bounds[i]
        )
        if fits:
            lo, hi = bounds[index], bounds[index + 1]
            if hi <= lo:
                return
            vals, idx = _leave_one_out_topk(gn, int(depths[lo:hi].max()), block, lo, hi)
            order = torch.argsort(depths[lo:hi], stable=True)
            for start in range(0, hi - lo, chunk_size):
                local = order[start : start + chunk_size]
                d = int(depths[lo + local].max())
                yield Neighbors(local + lo, vals[local, :d], idx[local, :d])
            return
    # Row chunks, in ascending order of depth; shares interleave that order so that each gets deep and shallow rows.
    order = torch.argsort(depths, stable=True)[index::count]
    queries = gn if leave_one_out else qn
    gal = _Gallery(gn, lowp)
    ws = _Workspace(device)
    for start in range(0, order.numel(), chunk_size):
        rows = order[start : start + chunk_size]
        d = int(depths[rows].max())
        vals, idx = _search_chunk(gal, queries[rows], None if excl is None else excl[rows], d, ws)
        yield Neighbors(rows, vals, idx)


def cosine_topk(
    queries: Tensor,
    gallery: Tensor,
    k: int,
    *,
    query_ids: Tensor | None = None,
    gallery_ids: Tensor | None = None,
    chunk_size: int = 1024,
    precision: str = "fp32",
) -> tuple[Tensor, Tensor]:
    """Exact top-k cosine search of ``queries`` against ``gallery``, chunked over queries.

    Rows are L2-normalised once; each chunk of ``chunk_size`` queries is scored against the whole gallery, so peak
    memory is ``O(chunk_size * N)``, never ``O(Q * N)``. Runs on the device of the inputs. Ranking, ties,
    self-exclusion and the fast mode follow the definitions in the module docstring: equal scores are ordered by
    ascending gallery index, also across the k-th position.

    Args:
        queries: Float tensor ``[Q, D]``.
        gallery: Float tensor ``[N, D]`` on the same device.
        k: Number of neighbours per query; at most the gallery size (minus one when self-exclusion removes an item).
        query_ids: Optional int tensor ``[Q]``; with ``gallery_ids`` excludes the gallery item sharing the id.
        gallery_ids: Optional int tensor ``[N]`` of unique ids.
        chunk_size: Queries scored per block.
        precision: ``"fp32"`` (default), or ``"bf16"`` / ``"fp16"`` for a low-precision coarse search followed by
            exact fp32 rescoring (same results as fp32).

    Returns:
        ``(scores, indices)``: fp32 ``[Q, k]`` cosine scores in descending order and int64 ``[Q, k]`` gallery indices.

    Raises:
        ValueError: On empty, non-finite, zero-norm or wrongly shaped inputs, mismatched lengths, duplicated
            ``gallery_ids``, a non-positive ``k`` or one larger than the available gallery, or a bad ``chunk_size``
            or ``precision``.

    Example:
        >>> g = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
        >>> scores, idx = cosine_topk(g, g, 2, query_ids=torch.arange(4), gallery_ids=torch.arange(4))
        >>> idx  # query 0 ties with item 3 (score 1): excluded itself, it retrieves 3, then 2
        tensor([[3, 2],
                [2, 0],
                [0, 1],
                [0, 2]])
        >>> scores[0]
        tensor([1.0000, 0.7071])
    """
    check_positive_int(k, "k")
    check_positive_int(chunk_size, "chunk_size")
    lowp = check_precision(precision)
    qn = normalize_rows(queries, "queries")
    gn = normalize_rows(gallery, "gallery")
    if qn.device != gn.device:
        raise ValueError(f"`queries` is on {qn.device} but `gallery` is on {gn.device}; put them on one device.")
    if qn.shape[1] != gn.shape[1]:
        raise ValueError(
            f"`queries` has dimension {qn.shape[1]} but `gallery` has {gn.shape[1]}; embeddings must share a dimension."
        )
    qid = None if query_ids is None else check_int_vector(query_ids, "query_ids", qn.shape[0], qn.device)
    gid = None if gallery_ids is None else check_int_vector(gallery_ids, "gallery_ids", gn.shape[0], gn.device)
    excl = exclusion_index(qid, gid, gn.device)
    avail = _available(gn.shape[0], excl)
    if k > avail:
        raise ValueError(
            f"`k`={k} exceeds the {avail} gallery items available to a query"
            + (" (self excluded)" if avail < gn.shape[0] else "")
            + "; lower k or enlarge the gallery."
        )
    out_v = torch.empty((qn.shape[0], k), dtype=torch.float32, device=qn.device)
    out_i = torch.empty((qn.shape[0], k), dtype=torch.long, device=qn.device)
    for chunk in _search_normalized(gn, k, qn, excl, None, chunk_size, lowp):
        out_v[chunk.rows] = chunk.scores[:, :k]
        out_i[chunk.rows] = chunk.indices[:, :k]
    return out_v, out_i

