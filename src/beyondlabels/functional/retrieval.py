"""Exact cosine k-nearest-neighbour search and leave-one-out retrieval metrics over an embedding gallery.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning.

Definitions used throughout this module (stated once here; the functions refer to them):

Score
    The cosine similarity of two rows: the fp32 matrix product of the rows after each was L2-normalised once in fp32.
    Rows must be finite and non-zero. Products are never thinner than 16 rows or columns (thin products switch BLAS
    kernels and would round differently), so a pair gets the same fp32 score whatever the chunk size or candidate set.

Self-exclusion
    When ``query_ids`` and ``gallery_ids`` are both given, a query never retrieves the gallery item whose id equals
    its own id. Gallery ids must then be unique. In leave-one-out use (the query set *is* the gallery) this removes
    the query itself, so the gallery available to each query has ``N - 1`` items.

Ranking and ties
    Gallery items are ranked by descending score; items with *equal* scores are ranked by ascending gallery index
    (the smaller index first). This total order is applied exactly, including across the k-th position: when the
    k-th and (k+1)-th scores are equal, the item with the smaller gallery index is the one inside the top k. Ties at
    the boundary can change metric values (two tied items may differ in relevance), so the rule is part of the
    definition of every metric here; callers that want results independent of input order should order the gallery
    canonically (the :class:`~beyondlabels.metrics.EmbeddingRetrieval` metric sorts by sample id). Two scores that
    differ only by fp32 rounding noise (about ``D * 2**-24``) are ranked as the fp32 arithmetic of the matrix
    product orders them; exact duplicates of a vector always tie exactly.

Relevance
    A gallery item is relevant to a query when their integer labels are equal. ``R`` of a query is the number of
    relevant gallery items available to it (self excluded): in leave-one-out use, the number of *other* items that
    share its label.

Lone queries
    Queries with ``R == 0`` (no other member of their label in the gallery) are excluded from every metric and only
    counted in ``num_lone_queries``. When every query is lone, every metric is NaN and ``num_queries`` is 0.

Metrics (per query, then averaged)
    - ``precision@k`` = (#relevant in the top k) / k.
    - ``recall@k`` = (#relevant in the top k) / R.
    - ``hit@k`` = 1 if at least one relevant item is in the top k, else 0.
    - ``r_precision`` = (#relevant in the top R) / R.
    - ``map@r`` = (1/R) * sum over i <= R of P(i) * rel(i), where P(i) is the precision at rank i and rel(i) is 1
      when the item at rank i is relevant (pytorch-metric-learning's MAP@R).
    - first relevant rank: the 1-based rank of the best-ranked relevant item. It is exact for every non-lone query:
      when no relevant item is inside the searched depth, the rank is counted over the whole gallery.
      ``mean_first_relevant_rank`` is its mean, ``median_first_relevant_rank`` its median (the mean of the two middle
      values when the count is even).
    - ``precision_curve[i]`` = ``precision@(i + 1)`` for ``i = 0 .. curve_max_k - 1``.

    Micro averages (the plain keys) are the mean over non-lone queries. Macro averages (``macro_*`` keys) first
    average the queries of each label, then average over the labels that have at least one non-lone query.

    R-based metrics are exact: each chunk of queries is searched as deep as the largest R (and the largest k) among
    its queries, never truncated.

Leave-one-out search (fp32, no ``query_embeddings``)
    The score matrix of the gallery with itself is symmetric, so it is computed in square blocks ``(a, b)`` with
    ``a <= b`` only (half the products): block ``(a, b)`` ranks the rows of ``a`` and, read transposed, those of ``b``.
    Every row keeps its running top ``depth`` (``depth`` = the largest of max R and max k over all queries) as int64
    keys that order exactly like the ranking (score, then index), so results follow the tie rule exactly. The score
    of a pair is the fp32 product of its two rows computed once, in the block of the smaller block index; with BLAS
    libraries whose dot products do not depend on the operand order or block position (MKL, which the tests check
    against the row-chunk search) it equals bitwise the score the row-chunk search gives, otherwise it may differ
    from it in the last bit. This path is used while the running lists (``N * depth * 8`` bytes) fit in 512 MB;
    beyond that, and for separate query sets and the fast mode, queries are searched chunk by chunk.

Low-precision fast mode (``precision="bf16"`` or ``"fp16"``)
    A coarse product in low precision selects candidates and only the candidates are rescored with the fp32 product,
    so rankings, scores and metric values equal the fp32 search. Margin rule: let ``x~`` be a unit row rounded to the
    low precision and ``e(x) = ||x~ - x||`` (computed per row). Then
    ``|s_coarse - s_fp32| <= eps(q) = e(q) * (1 + E) + E + (2 * gamma_D + u_out) * (1 + e(q)) * (1 + E)``, inflated by
    1%, where ``E = max_g e(g)``, ``gamma_D = D * 2**-24 / (1 - D * 2**-24)`` bounds the fp32 accumulation error of
    either product, and ``u_out`` is the rounding of the coarse product's output (``2**-8`` for bf16, ``2**-11`` for
    fp16). With ``t`` the coarse score at the needed depth ``d``, every item whose coarse score is ``>= t - 2 * eps(q)``
    is kept and rescored; an item left out scores (in fp32) below each of the ``d`` coarse leaders, so it cannot
    enter the exact top ``d``. Candidates are chosen by this threshold, not by a count, so no query runs short.
    Rescoring is one fp32 product of the chunk against the union of its candidates; when that union covers more than
    half of the gallery the chunk is rescored whole, which makes the fast mode *slower* than fp32. It therefore pays
    off only where the low-precision product is much faster than fp32 (GPUs, CPUs with AVX512-BF16 or AMX for bf16)
    and the candidate union is small: shallow searches (small k, small R) or well separated classes. For deep R on
    hard data (most gallery items within ``2 * eps`` of the R-th score of some query in the chunk) use fp32. On CPUs
    without native fp16 arithmetic ``"fp16"`` is much slower than fp32. The fast mode always searches chunk by chunk,
    so it misses the halving of the products that the fp32 leave-one-out search gets (see above).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

__all__ = [
    "cosine_topk",
    "embedding_retrieval_metrics",
    "encode_labels",
    "normalize_rows",
]

_PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_OUT_ROUNDING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
# Smallest block side given to the matrix product (see `_scores`).
_MIN_BLOCK = 16
# Leave-one-out search keeps the running top `depth` of every row as int64 keys; it is used while they fit here.
_SYMMETRIC_BUFFER_BYTES = 512 * 2**20
# Largest block side of the leave-one-out search (larger blocks only add memory, the merges are already cheap).
_SYMMETRIC_MAX_BLOCK = 4096
_LOW32 = (1 << 32) - 1


# ----------------------------------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------------------------------


def _check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    return value


def _check_non_negative_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be an int >= 0, got {value!r}.")
    return value


def _check_precision(precision: object) -> torch.dtype | None:
    if precision not in _PRECISIONS:
        raise ValueError(f"`precision` must be one of {sorted(_PRECISIONS)}, got {precision!r}.")
    return _PRECISIONS[precision]  # type: ignore[index]


def _check_ks(ks: object) -> tuple[int, ...]:
    if isinstance(ks, int) and not isinstance(ks, bool):
        ks = (ks,)
    if not isinstance(ks, Sequence) or isinstance(ks, str) or len(ks) == 0:
        raise ValueError(f"`ks` must be a non-empty sequence of positive ints, got {ks!r}.")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ValueError(f"`ks` must contain only positive ints, got {k!r} in {ks!r}.")
    return tuple(sorted(set(ks)))


def _check_embeddings(x: object, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor of shape [N, D], got {type(x).__name__}.")
    if x.dim() != 2:
        raise ValueError(f"`{name}` must be 2-D [N, D], got shape {tuple(x.shape)}; reshape it to [N, D].")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(x.shape)}); pass at least one row of at least one dim.")
    if not (x.is_floating_point()):
        raise ValueError(f"`{name}` must be a floating-point tensor, got dtype {x.dtype}.")
    return x


def _check_int_vector(x: object, name: str, length: int, device: torch.device) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(
            f"`{name}` must be a 1-D integer torch.Tensor, got {type(x).__name__}; map other label types to ints "
            "first (see `encode_labels`)."
        )
    if x.dim() != 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {tuple(x.shape)}.")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise ValueError(f"`{name}` must have an integer dtype, got {x.dtype}; map labels to ints first.")
    if x.shape[0] != length:
        raise ValueError(f"`{name}` has {x.shape[0]} entries but the embeddings have {length} rows; they must match.")
    return x.to(device=device, dtype=torch.long)


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
    x = _check_embeddings(x, name)
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


def encode_labels(labels: Sequence[Hashable]) -> tuple[Tensor, list[Hashable]]:
    """Map arbitrary hashable labels (strings, tuples, ...) to contiguous int64 codes.

    Codes follow the order of first appearance, so the mapping is deterministic for a given sequence.

    Args:
        labels: A sequence of hashable labels.

    Returns:
        ``(codes, classes)``: a LongTensor of shape ``[N]`` and the list of distinct labels, where
        ``classes[codes[i]] == labels[i]``.

    Raises:
        ValueError: If ``labels`` is empty.

    Example:
        >>> codes, classes = encode_labels(["cubism", "baroque", "cubism"])
        >>> codes
        tensor([0, 1, 0])
        >>> classes
        ['cubism', 'baroque']
    """
    if len(labels) == 0:
        raise ValueError("`labels` is empty; pass at least one label.")
    index: dict[Hashable, int] = {}
    codes = [index.setdefault(label, len(index)) for label in labels]
    return torch.tensor(codes, dtype=torch.long), list(index)


def _exclusion_index(
    query_ids: Tensor | None, gallery_ids: Tensor | None, device: torch.device, gallery_name: str = "gallery_ids"
) -> Tensor | None:
    """Gallery index to exclude for each query (``-1`` when none), or None when ids are not used."""
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
# search
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


def _leave_one_out_topk(g: Tensor, depth: int, block: int) -> tuple[Tensor, Tensor]:
    """Exact top ``depth`` of every row of ``g @ g.T`` with the diagonal excluded, computing each block pair once.

    The score matrix is symmetric, so only blocks ``(a, b)`` with ``a <= b`` are multiplied; block ``(a, b)`` updates
    the rows of ``a`` and, transposed, those of ``b``. Every row keeps its running top ``depth`` as int64 keys
    (`_to_keys`), whose order is the exact ranking order, so merging a block into it is one ``torch.topk``.
    """
    n = g.shape[0]
    best = torch.full((n, depth), torch.iinfo(torch.int64).min, dtype=torch.int64, device=g.device)

    ws = _Workspace(g.device)

    def merge(rows: slice, scores: Tensor, col0: int, transposed: bool) -> None:
        best[rows] = _topk_keys(scores, depth, col0, transposed, best[rows], ws)

    for a in range(0, n, block):
        rows_a = slice(a, min(a + block, n))
        for b in range(a, n, block):
            rows_b = slice(b, min(b + block, n))
            scores = _scores(g[rows_a], g[rows_b], ws)
            if a == b:
                scores.fill_diagonal_(float("-inf"))
            merge(rows_a, scores, b, False)
            if a != b:
                merge(rows_b, scores, a, True)
    return _from_keys(torch.sort(best, dim=1, descending=True).values)


def _available(n_gallery: int, excl: Tensor | None) -> int:
    """The smallest number of gallery items any query may retrieve."""
    if excl is None:
        return n_gallery
    return n_gallery - int(bool((excl >= 0).any()))


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
    _check_positive_int(k, "k")
    _check_positive_int(chunk_size, "chunk_size")
    lowp = _check_precision(precision)
    qn = normalize_rows(queries, "queries")
    gn = normalize_rows(gallery, "gallery")
    if qn.device != gn.device:
        raise ValueError(f"`queries` is on {qn.device} but `gallery` is on {gn.device}; put them on one device.")
    if qn.shape[1] != gn.shape[1]:
        raise ValueError(
            f"`queries` has dimension {qn.shape[1]} but `gallery` has {gn.shape[1]}; embeddings must share a dimension."
        )
    qid = None if query_ids is None else _check_int_vector(query_ids, "query_ids", qn.shape[0], qn.device)
    gid = None if gallery_ids is None else _check_int_vector(gallery_ids, "gallery_ids", gn.shape[0], gn.device)
    excl = _exclusion_index(qid, gid, gn.device)
    avail = _available(gn.shape[0], excl)
    if k > avail:
        raise ValueError(
            f"`k`={k} exceeds the {avail} gallery items available to a query"
            + (" (self excluded)" if avail < gn.shape[0] else "")
            + "; lower k or enlarge the gallery."
        )
    gal = _Gallery(gn, lowp)
    out_v = torch.empty((qn.shape[0], k), dtype=torch.float32, device=qn.device)
    out_i = torch.empty((qn.shape[0], k), dtype=torch.long, device=qn.device)
    ws = _Workspace(qn.device)
    for start in range(0, qn.shape[0], chunk_size):
        sl = slice(start, start + chunk_size)
        v, i = _search_chunk(gal, qn[sl], None if excl is None else excl[sl], k, ws)
        out_v[sl] = v
        out_i[sl] = i
    return out_v, out_i


# ----------------------------------------------------------------------------------------------------------------------
# metrics
# ----------------------------------------------------------------------------------------------------------------------


def _first_relevant_rank_full(
    gal: _Gallery,
    q: Tensor,
    q_labels: Tensor,
    g_labels: Tensor,
    excl: Tensor | None,
) -> Tensor:
    """Exact 1-based rank of the best-ranked relevant item, counted over the whole gallery (for a few rows)."""
    s = _scores(q, gal.g)
    _mask_excluded(s, excl)
    relevant = g_labels.unsqueeze(0) == q_labels.unsqueeze(1)
    rel_scores = s.masked_fill(~relevant, float("-inf"))
    best = rel_scores.max(dim=1, keepdim=True).values
    # smallest index among relevant items holding the best score
    cols = torch.arange(s.shape[1], device=s.device).unsqueeze(0)
    best_idx = torch.where(rel_scores == best, cols, s.shape[1]).min(dim=1, keepdim=True).values
    before = (s > best) | ((s == best) & (cols < best_idx))
    return before.sum(dim=1).to(torch.float64) + 1.0


def _class_mean(values: Tensor, classes: Tensor, n_classes: int) -> Tensor:
    sums = torch.zeros(n_classes, dtype=torch.float64, device=values.device).index_add_(0, classes, values)
    counts = torch.zeros(n_classes, dtype=torch.float64, device=values.device).index_add_(
        0, classes, torch.ones_like(values)
    )
    present = counts > 0
    return (sums[present] / counts[present]).mean()


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
    return_neighbors: int = 0,
) -> dict[str, Tensor]:
    """Retrieval metrics of an embedding gallery from one exact cosine search.

    By default this is leave-one-out evaluation: every item of ``embeddings`` is a query against all the *other*
    items, and an item is relevant when it shares the query's label. Self-exclusion uses ``ids`` when given and the
    row position otherwise (the query set is the gallery). With ``query_embeddings`` a separate query set is searched
    against the gallery (e.g. text -> image); self-exclusion then applies only when both ``query_ids`` and ``ids``
    are given. Every definition (ties, R, lone queries, each metric) is in the module docstring.

    Args:
        embeddings: Gallery embeddings ``[N, D]`` (floating point, finite, non-zero rows).
        labels: Int tensor ``[N]`` of gallery labels.
        ids: Optional unique int tensor ``[N]`` of sample ids.
        ks: Cut-offs for ``precision@k``, ``recall@k``, ``hit@k`` and ``macro_precision@k``.
        chunk_size: Queries scored per block; peak memory is ``O(chunk_size * N)``. The leave-one-out search uses
            square blocks of at most ``chunk_size * N`` scores (side at least ``chunk_size``, at most 4096 unless
            ``chunk_size`` is larger) plus the running lists.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (fast mode; identical results, see module docstring).
        curve_max_k: Length of ``precision_curve``; defaults to ``max(ks)``.
        query_embeddings: Optional separate queries ``[Q, D]``.
        query_labels: Int tensor ``[Q]``; required with ``query_embeddings``.
        query_ids: Optional int tensor ``[Q]``; with ``ids`` excludes the gallery item sharing a query's id.
        return_neighbors: When ``n > 0``, also return per-query tensors: ``neighbor_indices`` (int64 ``[Q, n]``
            gallery indices), ``neighbor_scores`` (fp32 ``[Q, n]``), ``neighbor_labels`` (``[Q, n]``),
            ``per_query_num_relevant`` (R, int64 ``[Q]``; 0 for lone queries), and float64 ``[Q]`` tensors
            ``per_query_r_precision``, ``per_query_map@r`` and ``per_query_first_relevant_rank`` (NaN for lone
            queries). With ids, ``neighbor_ids`` (``[Q, n]``) as well.

    Returns:
        A dict of 0-d float64 tensors ``precision@{k}``, ``recall@{k}``, ``hit@{k}``, ``macro_precision@{k}`` for each
        k, ``r_precision``, ``map@r``, ``macro_r_precision``, ``macro_map@r``, ``mean_first_relevant_rank``,
        ``median_first_relevant_rank``; 0-d int64 ``num_queries`` (non-lone queries evaluated) and
        ``num_lone_queries``; and the 1-D float64 ``precision_curve`` (index i holds precision@(i+1)). Plus the
        per-query tensors described under ``return_neighbors``.

    Raises:
        ValueError: On empty, non-finite, zero-norm or wrongly shaped embeddings; labels or ids whose length does not
            match; non-integer labels; duplicated ``ids``; bad ``ks`` / ``curve_max_k`` (non-positive, or larger than
            the gallery available to a query); bad ``chunk_size``, ``precision`` or ``return_neighbors``.

    Example:
        >>> emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
        >>> labels = torch.tensor([0, 0, 1, 1, 2])
        >>> m = embedding_retrieval_metrics(emb, labels, ks=(1, 2))
        >>> m["precision@1"], m["r_precision"], m["num_queries"], m["num_lone_queries"]
        (tensor(1., dtype=torch.float64), tensor(1., dtype=torch.float64), tensor(4), tensor(1))
        >>> m["precision_curve"]
        tensor([1.0000, 0.5000], dtype=torch.float64)
    """
    ks_t = _check_ks(ks)
    _check_positive_int(chunk_size, "chunk_size")
    lowp = _check_precision(precision)
    if curve_max_k is None:
        curve_max_k = ks_t[-1]
    _check_positive_int(curve_max_k, "curve_max_k")
    _check_non_negative_int(return_neighbors, "return_neighbors")

    gn = normalize_rows(embeddings, "embeddings")
    device = gn.device
    g_labels = _check_int_vector(labels, "labels", gn.shape[0], device)
    gid = None if ids is None else _check_int_vector(ids, "ids", gn.shape[0], device)

    if query_embeddings is None:
        if query_labels is not None or query_ids is not None:
            raise ValueError("`query_labels` / `query_ids` need `query_embeddings`; omit them for leave-one-out.")
        qn, q_labels = gn, g_labels
        if gid is None:
            excl = torch.arange(gn.shape[0], device=device)
        else:
            excl = _exclusion_index(gid, gid, device, "ids")  # also rejects duplicated ids
        qid = gid
    else:
        qn = normalize_rows(query_embeddings, "query_embeddings")
        if qn.device != device:
            raise ValueError(f"`query_embeddings` is on {qn.device} but `embeddings` on {device}; use one device.")
        if qn.shape[1] != gn.shape[1]:
            raise ValueError(
                f"`query_embeddings` has dimension {qn.shape[1]} but `embeddings` has {gn.shape[1]}; they must match."
            )
        if query_labels is None:
            raise ValueError("`query_labels` is required with `query_embeddings` (relevance = same label).")
        q_labels = _check_int_vector(query_labels, "query_labels", qn.shape[0], device)
        qid = None if query_ids is None else _check_int_vector(query_ids, "query_ids", qn.shape[0], device)
        if qid is not None and gid is not None:
            if qid.numel() > 1 and bool((torch.sort(qid).values[1:] == torch.sort(qid).values[:-1]).any()):
                raise ValueError("`query_ids` contains duplicated ids; each query needs its own id.")
            excl = _exclusion_index(qid, gid, device, "ids")
        elif qid is not None:
            raise ValueError("`query_ids` needs gallery `ids` to exclude matching items; pass both or neither.")
        else:
            excl = None

    n_gallery = gn.shape[0]
    n_queries = qn.shape[0]
    avail = _available(n_gallery, excl)
    if ks_t[-1] > avail:
        raise ValueError(
            f"`ks` contains {ks_t[-1]} but only {avail} gallery items are available to a query"
            + (" (self excluded)" if avail < n_gallery else "")
            + "; lower k or enlarge the gallery."
        )
    if curve_max_k > avail:
        raise ValueError(f"`curve_max_k`={curve_max_k} exceeds the {avail} gallery items available to a query.")
    if return_neighbors > avail:
        raise ValueError(f"`return_neighbors`={return_neighbors} exceeds the {avail} gallery items available.")

    # R per query: gallery items sharing the label, minus the excluded item when it shares the label.
    classes, g_codes = torch.unique(g_labels, return_inverse=True)
    g_counts = torch.bincount(g_codes, minlength=classes.numel())
    pos = torch.searchsorted(classes, q_labels).clamp_(max=classes.numel() - 1)
    in_gallery = classes[pos] == q_labels
    r = torch.where(in_gallery, g_counts[pos], torch.zeros_like(pos))
    if excl is not None:
        has = excl >= 0
        same = torch.zeros_like(has)
        same[has] = g_labels[excl[has]] == q_labels[has]
        r = r - same.long()
    lone = r == 0

    base_depth = max(ks_t[-1], curve_max_k, return_neighbors)
    gal = _Gallery(gn, lowp)
    kmax = ks_t[-1]

    # per-query results (float64; NaN for lone queries)
    hits_at = torch.zeros((n_queries, len(ks_t)), dtype=torch.float64, device=device)
    curve_sum = torch.zeros(curve_max_k, dtype=torch.float64, device=device)
    r_prec = torch.full((n_queries,), float("nan"), dtype=torch.float64, device=device)
    map_r = torch.full_like(r_prec, float("nan"))
    first_rank = torch.full_like(r_prec, float("nan"))
    if return_neighbors:
        nb_idx = torch.empty((n_queries, return_neighbors), dtype=torch.long, device=device)
        nb_scores = torch.empty((n_queries, return_neighbors), dtype=torch.float32, device=device)

    # Queries are searched grouped by label: a chunk's depth (its largest R) then fits its queries, and in fast mode
    # neighbouring queries share candidates. Per-query results do not depend on the grouping; they are written back
    # in input order.
    order = torch.argsort(q_labels, stable=True)
    ks_index = torch.tensor([k - 1 for k in ks_t], device=device)
    # Leave-one-out in fp32: one symmetric search of the whole gallery; each chunk reads a prefix of its rows (the
    # top `depth` under the total ranking order is a prefix of any deeper top list).
    full_depth = min(max(base_depth, int(r.max())), n_gallery)
    symmetric = query_embeddings is None and lowp is None and n_gallery * full_depth * 8 <= _SYMMETRIC_BUFFER_BYTES
    ws = _Workspace(device)
    if symmetric:
        all_vals, all_idx = _leave_one_out_topk(gn, full_depth, _symmetric_block(n_gallery, chunk_size))
    for start in range(0, n_queries, chunk_size):
        rows = order[start : start + chunk_size]
        q = qn[rows]
        ql = q_labels[rows]
        rq = r[rows]
        ex = None if excl is None else excl[rows]
        depth = min(max(base_depth, int(rq.max())), n_gallery)
        if symmetric:
            vals, idx = all_vals[rows, :depth], all_idx[rows, :depth]
        else:
            vals, idx = _search_chunk(gal, q, ex, depth, ws)
        rel = (g_labels[idx] == ql.unsqueeze(1)) & torch.isfinite(vals)
        cum = torch.cumsum(rel, dim=1, dtype=torch.int32)

        hits_at[rows] = cum[:, ks_index].to(torch.float64)
        ok = ~lone[rows]
        curve_sum += (cum[ok, :curve_max_k].to(torch.float64)).sum(dim=0)

        rq_safe = rq.clamp(min=1)
        rank = torch.arange(1, depth + 1, device=device, dtype=torch.float64)
        within_r = rank.unsqueeze(0) <= rq.unsqueeze(1)
        in_r = torch.gather(cum, 1, (rq_safe - 1).unsqueeze(1)).squeeze(1).to(torch.float64)
        prec_terms = torch.where(rel & within_r, cum.to(torch.float64) / rank, 0.0)
        # A running sum read at rank R: the summation order does not depend on the chunk's depth.
        ap = torch.gather(torch.cumsum(prec_terms, dim=1), 1, (rq_safe - 1).unsqueeze(1)).squeeze(1) / rq_safe
        r_prec[rows] = torch.where(ok, in_r / rq_safe, float("nan"))
        map_r[rows] = torch.where(ok, ap, float("nan"))

        found = rel.any(dim=1)
        fr = torch.argmax(rel.to(torch.uint8), dim=1).to(torch.float64) + 1.0
        missing = ok & ~found
        if bool(missing.any()):
            m = torch.nonzero(missing).flatten()
            fr[m] = _first_relevant_rank_full(gal, q[m], ql[m], g_labels, None if ex is None else ex[m])
        first_rank[rows] = torch.where(ok, fr, float("nan"))
        if return_neighbors:
            nb_idx[rows] = idx[:, :return_neighbors]
            nb_scores[rows] = vals[:, :return_neighbors]

    ok = ~lone
    n_ok = int(ok.sum())
    out: dict[str, Tensor] = {}
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=device)
    hits = hits_at[ok]
    r_ok = r[ok].to(torch.float64)
    codes = torch.unique(q_labels[ok], return_inverse=True)[1] if n_ok else None
    n_classes = int(codes.max()) + 1 if n_ok else 0
    for j, k in enumerate(ks_t):
        out[f"precision@{k}"] = (hits[:, j] / k).mean() if n_ok else nan
    for j, k in enumerate(ks_t):
        out[f"recall@{k}"] = (hits[:, j] / r_ok).mean() if n_ok else nan
    for j, k in enumerate(ks_t):
        out[f"hit@{k}"] = (hits[:, j] > 0).to(torch.float64).mean() if n_ok else nan
    out["r_precision"] = r_prec[ok].mean() if n_ok else nan
    out["map@r"] = map_r[ok].mean() if n_ok else nan
    out["mean_first_relevant_rank"] = first_rank[ok].mean() if n_ok else nan
    out["median_first_relevant_rank"] = torch.quantile(first_rank[ok], 0.5) if n_ok else nan
    for j, k in enumerate(ks_t):
        out[f"macro_precision@{k}"] = _class_mean(hits[:, j] / k, codes, n_classes) if n_ok else nan
    out["macro_r_precision"] = _class_mean(r_prec[ok], codes, n_classes) if n_ok else nan
    out["macro_map@r"] = _class_mean(map_r[ok], codes, n_classes) if n_ok else nan
    out["num_queries"] = torch.tensor(n_ok, dtype=torch.long, device=device)
    out["num_lone_queries"] = torch.tensor(n_queries - n_ok, dtype=torch.long, device=device)
    rank = torch.arange(1, curve_max_k + 1, device=device, dtype=torch.float64)
    out["precision_curve"] = curve_sum / rank / n_ok if n_ok else torch.full_like(rank, float("nan"))
    if return_neighbors:
        out["neighbor_indices"] = nb_idx
        out["neighbor_scores"] = nb_scores
        out["neighbor_labels"] = g_labels[nb_idx]
        if gid is not None:
            out["neighbor_ids"] = gid[nb_idx]
        out["per_query_num_relevant"] = r
        out["per_query_r_precision"] = r_prec
        out["per_query_map@r"] = map_r
        out["per_query_first_relevant_rank"] = first_rank
    return out
