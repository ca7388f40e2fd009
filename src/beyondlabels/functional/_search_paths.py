"""The search of :mod:`beyondlabels.functional.search` over prepared rows: the path each search takes.

Internal. Leave-one-out fp32 searches go to the symmetric-block search (:mod:`beyondlabels.functional._leave_one_out`;
the Euclidean distance's coarse pass, then its exact rescoring) while it applies; every other search (separate query
sets, the fast mode, running lists too large for the budget) goes chunk by chunk of queries
(:func:`~beyondlabels.functional._low_precision.search_chunk`, :class:`~beyondlabels.functional._euclidean.L2Gallery`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_depths
from beyondlabels.functional._distances import Space
from beyondlabels.functional._euclidean import L2Gallery
from beyondlabels.functional._low_precision import Gallery, search_chunk
from beyondlabels.functional._pair_shares import Exchange, shared_block_search
from beyondlabels.functional._topk import Workspace


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


def available(n_gallery: int, excl: Tensor | None) -> int:
    """The smallest number of gallery items any query may retrieve."""
    if excl is None:
        return n_gallery
    return n_gallery - int(bool((excl >= 0).any()))


ChunkSearch = Callable[[Tensor, "Tensor | None", int, Workspace], "tuple[Tensor, Tensor]"]


def _chunk_search(space: Space, lowp: torch.dtype | None) -> ChunkSearch:
    """``(query rows, their exclusions, depth, workspace) -> (scores, indices)`` of one chunk of ``space``."""
    queries = space.query_rows
    if space.distance == "euclidean":
        return L2Gallery(space.gallery, space.l2, queries, lowp).search
    gallery = Gallery(space.gallery, lowp)
    return lambda rows, excl, depth, ws: search_chunk(gallery, queries[rows], excl, depth, ws)


def search_space(
    space: Space,
    depth: int | Tensor,
    excl: Tensor | None,
    share: tuple[int, int] | None,
    chunk_size: int,
    lowp: torch.dtype | None,
    exchange: Exchange | None = None,
) -> Iterator[Neighbors]:
    """:func:`~beyondlabels.functional.search.search_neighbors` of the prepared rows ``space``, exclusions ``excl``
    and the low-precision dtype ``lowp`` (None: fp32); scores in the user's units (:meth:`Space.user_scores`). With
    ``exchange`` the processes of ``share`` split a leave-one-out fp32 search by block pairs
    (:mod:`beyondlabels.functional._pair_shares`)."""
    gn = space.gallery
    n = gn.shape[0]
    device = gn.device
    index, count = share or (0, 1)
    leave_one_out = space.queries is None
    n_queries = n if leave_one_out else space.queries.shape[0]
    if leave_one_out:
        excl = torch.arange(n, device=device)
    depths = check_depths(depth, n_queries, available(n, excl), device)
    if n_queries == 0:
        return
    if leave_one_out and lowp is None:
        if space.distance == "euclidean":
            parts = L2Gallery(gn, space.l2, gn, None).leave_one_out(depths, (index, count), chunk_size, exchange)
        else:
            parts = shared_block_search(gn, depths, (index, count), chunk_size, exchange=exchange)
        if parts is not None:
            for rows, vals, idx in parts:
                yield Neighbors(rows, space.user_scores(vals), idx)
            return
    # Row chunks, in ascending order of depth; shares interleave that order so that each gets deep and shallow rows.
    order = torch.argsort(depths, stable=True)[index::count]
    chunk = _chunk_search(space, lowp)
    ws = Workspace(device)
    for start in range(0, order.numel(), chunk_size):
        rows = order[start : start + chunk_size]
        d = int(depths[rows].max())
        vals, idx = chunk(rows, None if excl is None else excl[rows], d, ws)
        yield Neighbors(rows, space.user_scores(vals), idx)
