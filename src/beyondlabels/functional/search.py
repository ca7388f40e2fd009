"""Exact nearest-neighbour search over an embedding gallery: the one search every metric family uses.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning. The derivations
behind the leave-one-out block search and the low-precision fast mode are in ``docs/search.md``.

Definitions (stated once here; every function of the package refers to them):

Score (``distance="cosine"``, the default)
    The cosine similarity of two rows: the fp32 matrix product of the rows after each was L2-normalised once in fp32
    (:func:`normalize_rows`, which is scale free: a row of 1e20 or 1e-30 keeps its direction). Rows must be finite
    and non-zero. Products are never thinner than 16 rows or columns, so a pair gets the same fp32 score whatever
    the chunk size or candidate set. The families that take a ``distance`` (the embedding retrieval) also rank by:

    - ``"dot"``: the inner product of the rows as given: the fp32 matrix product, computed on the rows scaled by one
      power of two when one is longer than 1 (exact unless an entry falls below fp32's normal range, 2**-126 times
      the longest row's scale) and scaled back, saturating at fp32's largest finite value. Zero rows are allowed.
      Ties and rounding: as for cosine (the fp32 product orders scores that differ by rounding noise).
    - ``"euclidean"``: minus the L2 distance of the rows as given (not normalised), ``-||q - g||``: each distance is
      computed from the fp32 differences of the two rows (scaled by a power of two so that neither squares nor
      their sum overflow or underflow), their squares and sum, in a buffer of one shape, so it is the same bits
      whatever the chunk or share, and it has no cancellation: its error is relative to the distance itself (at
      most about ``(D + 2) * 2**-24`` of the squared distance, a few units in practice), whatever the rows' norms or
      offset; it saturates at fp32's largest value. A coarse fp32 product of the rows centred on the gallery's mean
      and scaled to norms at most 1 only selects the candidates, within a proven margin (``docs/search.md``). Ties:
      items at *equal computed fp32 distances* (exact duplicates always) are ranked by ascending gallery index;
      distances closer than the error above are ranked as computed. Zero rows are allowed.

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
    :func:`search_neighbors` takes one depth or one depth per query. Queries are visited in ascending order of depth
    (stable), in chunks of ``chunk_size``; a chunk is searched as deep as the deepest of its queries, so each query gets
    at least its own depth. The top ``d`` under the ranking order is a prefix of any deeper top list, so reading a
    prefix of a deeper result is exact.

Shares
    ``share=(i, n)`` searches only the i-th of n disjoint shares of the queries (the union of all shares is every
    query, each exactly once). Distributed evaluation gives each rank one share; a query's neighbours and scores are
    bitwise the same whatever the share count.

Precision
    ``"fp32"`` (default) is exact. ``"bf16"`` / ``"fp16"`` search a low-precision copy first and rescore the
    candidates within a proven error margin in fp32 (Euclidean: exactly, as above): rankings, scores and metric
    values equal the fp32 search. It pays off only where low-precision products are much faster than fp32 (GPUs)
    and candidates are few.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from beyondlabels._internal.checks import (
    check_distance,
    check_int_vector,
    check_positive_int,
    check_precision,
    check_same_space,
    check_share,
)
from beyondlabels.functional._distances import Space, prepare_space, unit_rows
from beyondlabels.functional._pair_shares import Exchange
from beyondlabels.functional._search_paths import Neighbors, available, search_space

__all__ = ["Exchange", "Neighbors", "cosine_topk", "exclusion_index", "normalize_rows", "search_neighbors"]


def normalize_rows(x: Tensor, name: str = "embeddings") -> Tensor:
    """L2-normalise the rows of ``x`` in fp32, validating them first; scale free, as cosine similarity is.

    A row is divided by its fp32 L2 norm, ``x / ||x||``. Where that norm cannot be formed in fp32, i.e. it overflows
    (entries of about 1e19 and more) or lies below ``2^-40`` (its squares underflow), or where ``x`` does not fit fp32
    at all (a float64 row of 1e300), the row is first divided by its largest magnitude in float64, then normalised
    there and rounded to fp32: every non-zero finite row gets its direction. Rows whose norm is in range are
    normalised exactly as ``x / ||x||`` in fp32, bit for bit.

    Args:
        x: Float tensor of shape ``[N, D]``.
        name: Argument name used in error messages.

    Returns:
        A new fp32 tensor of shape ``[N, D]`` whose rows have unit L2 norm.

    Raises:
        ValueError: If ``x`` is not 2-D, is empty, contains non-finite values, or has a row that is exactly zero.

    Examples:
        >>> normalize_rows(torch.tensor([[3.0, 4.0], [3e30, 4e30], [3e-30, 4e-30]]))
        tensor([[0.6000, 0.8000],
                [0.6000, 0.8000],
                [0.6000, 0.8000]])
    """
    return unit_rows(x, name)


def exclusion_index(
    query_ids: Tensor | None,
    gallery_ids: Tensor | None,
    device: torch.device | None = None,
    gallery_name: str = "gallery_ids",
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

    Examples:
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
    distance: str = "cosine",
    exchange: Exchange | None = None,
) -> Iterator[Neighbors]:
    """Exact top-``depth`` search, yielded chunk by chunk (definitions in the module docstring).

    Without ``queries`` this is leave-one-out search: every gallery row is a query that never retrieves itself, and
    the score matrix (Euclidean: of coarse scores) is computed in symmetric blocks (half the products): for depths
    from 64 to ``N / 8`` by per-row bounds and candidate lists (in runs of rows whose lists fit in 512 MB), otherwise
    while the running top lists fit in 512 MB (``docs/search.md``). Peak memory is one block of scores plus, for
    leave-one-out, at most 512 MB of int64 keys — never ``N x N``.

    Args:
        gallery: Float tensor ``[N, D]``.
        depth: Neighbours per query: an int, or an int64 tensor ``[Q]`` (one depth per query).
        queries: Optional separate query set ``[Q, D]`` on the gallery's device.
        exclude: Optional int64 ``[Q]`` gallery index each query must not retrieve (``-1``: none); see
            :func:`exclusion_index`. Ignored (the diagonal is excluded) for leave-one-out search.
        share: ``(i, n)`` to search only the i-th of n disjoint shares of the queries (distributed evaluation).
        exchange: With ``share``, the ``n`` processes that search together (:class:`Exchange`, e.g.
            :class:`beyondlabels.metrics.base.ProcessExchange`): a leave-one-out fp32 search is then split by slices
            of its symmetric blocks, so no score is computed twice (``docs/search.md``, "Shares"); every process must
            call this with the same arguments but its own share. Without it each share computes every block that
            touches its rows.
        chunk_size: Queries per chunk; peak memory of a chunk is ``O(chunk_size * N)`` scores.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (same results; see the module docstring).
        normalized: Set True when the rows are already unit fp32 rows from :func:`normalize_rows` (skips the copy;
            cosine only).
        distance: ``"cosine"`` (default), ``"euclidean"`` or ``"dot"`` (the scores of each: the module docstring).

    Yields:
        :class:`Neighbors`, one per chunk. Every query of the share appears in exactly one chunk, at least as deep as
        its own depth.

    Raises:
        ValueError: On bad embeddings, depths larger than the available gallery, or bad ``share`` / ``chunk_size`` /
            ``precision`` / ``distance``.

    Examples:
        >>> g = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
        >>> [(c.rows.tolist(), c.indices.tolist()) for c in search_neighbors(g, 2)]
        [([0, 1, 2, 3], [[3, 2], [2, 0], [0, 1], [0, 2]])]
        >>> (chunk,) = search_neighbors(torch.tensor([[0.0], [1.0], [2.0], [4.0]]), 2, distance="euclidean")
        >>> chunk.indices.tolist()  # item 1 ties 0 and 2 (distance 1), item 2 ties 0 and 3 (distance 2): index order
        [[1, 2], [0, 2], [1, 0], [2, 1]]
        >>> chunk.scores[2].tolist()  # minus the distances
        [-1.0, -2.0]
    """
    check_positive_int(chunk_size, "chunk_size")
    lowp = check_precision(precision)
    distance = check_distance(distance)
    space = prepare_space(gallery, queries, distance, normalized=normalized)
    gn, qn = space.gallery, space.queries
    if qn is not None:
        check_same_space(qn, "queries", gn, "gallery", width="they must match", device="put them on one device")
    if exclude is not None and queries is not None:
        exclude = check_int_vector(exclude, "exclude", qn.shape[0], gn.device)
    yield from search_space(space, depth, exclude, check_share(share), chunk_size, lowp, exchange)


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

    Examples:
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
    check_same_space(
        qn, "queries", gn, "gallery", width="embeddings must share a dimension", device="put them on one device"
    )
    qid = None if query_ids is None else check_int_vector(query_ids, "query_ids", qn.shape[0], qn.device)
    gid = None if gallery_ids is None else check_int_vector(gallery_ids, "gallery_ids", gn.shape[0], gn.device)
    excl = exclusion_index(qid, gid, gn.device)
    avail = available(gn.shape[0], excl)
    if k > avail:
        raise ValueError(
            f"`k`={k} exceeds the {avail} gallery items available to a query"
            + (" (self excluded)" if avail < gn.shape[0] else "")
            + "; lower k or enlarge the gallery."
        )
    out_v = torch.empty((qn.shape[0], k), dtype=torch.float32, device=qn.device)
    out_i = torch.empty((qn.shape[0], k), dtype=torch.long, device=qn.device)
    for chunk in search_space(Space.cosine(gn, qn), k, excl, None, chunk_size, lowp):
        out_v[chunk.rows] = chunk.scores[:, :k]
        out_i[chunk.rows] = chunk.indices[:, :k]
    return out_v, out_i
