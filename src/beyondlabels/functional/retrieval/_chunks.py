"""The searched chunks of a retrieval problem and the collector their per-query rows are written into."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from beyondlabels.functional._pair_shares import Exchange
from beyondlabels.functional._search_paths import Neighbors, search_space
from beyondlabels.functional.retrieval._inputs import _Problem

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


def _searched_chunks(
    p: _Problem,
    depths: Tensor,
    query_rows: Tensor | None,
    share: tuple[int, int] | None,
    chunk_size: int,
    lowp: torch.dtype | None,
    exchange: Exchange | None = None,
) -> tuple[_RowCollector, Iterator[Neighbors]]:
    """The search of every query (or of ``query_rows``, rows then given as query positions) and a collector sized
    for its rows."""
    if query_rows is None:
        return _RowCollector(p.q_labels.shape[0]), search_space(
            p.space, depths, p.excl, share, chunk_size, lowp, exchange
        )
    n_queries = p.q_labels.shape[0]
    if not isinstance(query_rows, Tensor) or query_rows.dim() != 1 or query_rows.is_floating_point():
        raise ValueError("`query_rows` must be a 1-D integer tensor of query positions.")
    query_rows = query_rows.to(device=p.gn.device, dtype=torch.long)
    if query_rows.numel() and (int(query_rows.min()) < 0 or int(query_rows.max()) >= n_queries):
        raise ValueError(f"`query_rows` must hold positions in 0..{n_queries - 1}.")
    subset = p.space.subset(query_rows)
    sub_excl = None if p.excl is None else p.excl[query_rows]
    chunks = (
        type(c)(query_rows[c.rows], c.scores, c.indices)
        for c in search_space(subset, depths[query_rows], sub_excl, share, chunk_size, lowp)
    )
    return _RowCollector(query_rows.numel()), chunks


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
