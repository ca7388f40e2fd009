"""Leave-one-out search split between processes: each score of the symmetric blocks is computed by one process.

Internal. The block grid is that of the single search (:mod:`beyondlabels.functional._leave_one_out`); process ``i``
of ``W`` multiplies the i-th of ``W`` even slices of the rows of every block pair ``(a, b)``, ``a <= b``, so every
process multiplies ``N^2 / (2 W)`` scores (one process multiplies ``N^2 / 2``) and none is multiplied twice. The rows
are cut into ``W`` even shares (the candidate search: each run of rows is), share ``i`` owned by process ``i``; the
candidate search's processes share one process's buffer budget. A process keeps top lists (running lists, or
the candidate buffers of deep searches) for every row its slices touch, then hands each owner the lists of the
owner's rows (:class:`Exchange`); the owner merges them. The merged lists are the exact top of each row (the top
``d`` of the union of lists that each hold either every item reaching the row's bound or their own top ``d``), and
a pair's score is the product the single search computes (with BLAS libraries whose dot products do not depend on
the block position, as the row-chunk search assumes: ``docs/search.md``), so the rows are bitwise those of one
process. The derivations are in ``docs/search.md`` ("Shares").

The processes meet only through the :class:`Exchange` they are given: this module holds no collective.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from beyondlabels.functional import _select
from beyondlabels.functional._leave_one_out import (
    _BUFFER_BYTES,
    _COMPACTION_ROWS,
    _LOWEST_KEY,
    CandidateBuffers,
    Part,
    _candidate_cap,
    _chunk_depths,
    _sampled_bounds,
    block_search,
    collect_candidates,
    leave_one_out_keys,
    search_plan,
    searched_again,
)
from beyondlabels.functional._topk import from_keys

__all__ = ["Exchange", "shared_block_search"]


class Exchange(Protocol):
    """How the processes of one search pass tensors to each other (every process calls each method together).

    Attributes:
        rank: This process's share index.
        world: The number of processes.
    """

    rank: int
    world: int

    def all_gather(self, value: Tensor) -> list[Tensor]:
        """Every process's ``value`` (the same shape and dtype on every process), in rank order."""
        ...

    def all_to_all(self, parts: list[Tensor], shapes: list[tuple[int, ...]]) -> list[Tensor]:
        """Send ``parts[k]`` to process ``k``; return what each process sent here, in rank order (process ``k``'s
        part has the shape ``shapes[k]``, the dtype and device of ``parts``)."""
        ...


def shared_block_search(
    gn: Tensor,
    depths: Tensor,
    share: tuple[int, int],
    chunk_size: int,
    sq: Tensor | None = None,
    exchange: Exchange | None = None,
) -> Iterator[Part] | None:
    """:func:`~beyondlabels.functional._leave_one_out.block_search` of share ``share``; with ``exchange`` (more than
    one process) split by slices of the blocks as in the module docstring: the rows of share ``i`` of ``n`` even
    shares, by candidate lists or running top lists as the single search chooses (None when the running lists of all
    ``N`` rows would not fit the budget: search in row chunks then), in chunks of ``chunk_size`` rows in ascending
    order of depth."""
    index, count = share
    if exchange is None or count == 1:
        return block_search(gn, depths, share, chunk_size, sq)
    if (exchange.rank, exchange.world) != (index, count):
        raise ValueError(f"`share` {share} is not the exchange's (rank {exchange.rank} of {exchange.world}).")
    n = gn.shape[0]
    block, candidates = search_plan(n, depths, chunk_size)
    bounds = [i * n // count for i in range(count + 1)]  # rows owned: any cut will do, an even one balances
    split = _Split(gn, sq, block, bounds, chunk_size, exchange)
    if candidates:
        return _candidate_search(split, depths)
    if n * int(depths.max()) * 8 > _BUFFER_BYTES:
        return None
    return _running_search(split, depths)


@dataclass(frozen=True)
class _Split:
    """One process's part of a search split by slices: the unit rows ``gn`` (Euclidean coarse scores with their
    squared norms ``sq``), the block side, the rows each process owns (``bounds[k]:bounds[k + 1]``), the chunk size
    of what is yielded and the exchange between the processes."""

    gn: Tensor
    sq: Tensor | None
    block: int
    bounds: list[int]
    chunk_size: int
    exchange: Exchange

    @property
    def part(self) -> tuple[int, int]:
        """The slice of every block's rows this process multiplies."""
        return self.exchange.rank, self.exchange.world

    @property
    def own(self) -> tuple[int, int]:
        """The rows this process owns."""
        return self.bounds[self.exchange.rank], self.bounds[self.exchange.rank + 1]


def _merged(exchange: Exchange, keys: Tensor, held: Tensor, lo: int, bounds: list[int], depth: int) -> Tensor:
    """This process's rows of the top lists ``keys`` (rows ``lo:lo + len(keys)``; row ``r`` holds its ``held[r]``
    keys first, then ``_LOWEST_KEY``) of every process, merged: the top ``depth`` keys of each row, in ranking order
    (``_LOWEST_KEY`` after the keys a row has). Only the keys the rows hold cross (`_exchanged`)."""
    me = exchange.rank
    rows_n = max(0, min(lo + keys.shape[0], bounds[me + 1]) - max(lo, bounds[me]))
    return _union_top(_exchanged(exchange, keys, held, lo, bounds), rows_n, depth)


def _exchanged(exchange: Exchange, keys: Tensor, held: Tensor, lo: int, bounds: list[int]) -> list[Tensor]:
    """What every process holds of this process's rows of the lists ``keys`` (as in `_merged`), in rank order: from
    each process one int64 tensor, its count of keys for each of this process's rows, then those keys row after row
    (ragged: a row's list crosses without the padding of the rows it shares a part with). Every part is a copy, so
    ``keys`` can go before the parts are merged."""
    stop = lo + keys.shape[0]
    spans = [(max(lo, bounds[k]), min(stop, bounds[k + 1])) for k in range(exchange.world)]
    parts, totals = [], []
    for a, b in spans:
        rows = slice(max(0, a - lo), max(0, b - lo))
        parts.append(_packed(keys[rows], held[rows]))
        totals.append(parts[-1].numel())
    every = exchange.all_gather(torch.tensor(totals, dtype=torch.int64, device=keys.device))
    me = exchange.rank
    return exchange.all_to_all(parts, [(int(sizes[me]),) for sizes in every])


def _packed(keys: Tensor, held: Tensor) -> Tensor:
    """Rows ``keys`` (row ``r``'s ``held[r]`` keys first) as one int64 tensor: ``held``, then each row's keys."""
    held = held.to(torch.int64)
    return torch.cat([held, _select.ragged_rows(keys, held)])


def _union_top(got: list[Tensor], rows_n: int, depth: int) -> Tensor:
    """The top ``depth`` keys of each of the ``rows_n`` rows of the union of the packed parts ``got`` (`_packed`, of
    the same rows; emptied), in ranking order, ``_LOWEST_KEY`` after the keys a row has. No item is in two parts
    (each pair's score is computed by one process), so the order of the parts does not matter."""
    counts = [part[:rows_n] for part in got]
    total = torch.stack(counts).sum(dim=0)
    width = max(depth, int(total.max()) if rows_n else 0)
    union = torch.full((rows_n, width), _LOWEST_KEY, dtype=torch.int64, device=got[0].device)
    free = torch.zeros_like(total)  # where each row's next keys go
    for part, count in zip(got, counts):
        _select.put_ragged(union, free, count, part[rows_n:])
        free += count
    got.clear()
    del counts
    # A whole sort of the union (numpy's vectorised sort) costs less than a selection followed by a sort of the top.
    return _select.sort_rows_descending(union, in_place=True)[:, :depth]


def _in_depth_chunks(keys: Tensor, depths: Tensor, lo: int, chunk_size: int) -> Iterator[Part]:
    """The merged rows ``lo:lo + len(keys)`` in chunks of ``chunk_size`` in ascending order of depth, each chunk as
    deep as its deepest row."""
    order = torch.argsort(depths, stable=True)
    for start in range(0, order.numel(), chunk_size):
        local = order[start : start + chunk_size]
        vals, idx = from_keys(keys[local, : int(depths[local].max())])
        yield local + lo, vals, idx


def _running_search(split: _Split, depths: Tensor) -> Iterator[Part]:
    """Running top lists of every row over this process's slices, merged by the owners."""
    n, depth = split.gn.shape[0], int(depths.max())
    keys = leave_one_out_keys(split.gn, depth, split.block, 0, n, split.sq, split.part)
    keys = _select.sort_rows_descending(keys, in_place=True)
    lo, hi = split.own
    mine = _merged(split.exchange, keys, (keys != _LOWEST_KEY).sum(dim=1), 0, split.bounds, depth)
    del keys
    yield from _in_depth_chunks(mine, depths[lo:hi], lo, split.chunk_size)


def _run_cuts(start: int, stop: int, world: int) -> list[int]:
    """The rows of one run of the candidate search that each process owns: ``cuts[k]:cuts[k + 1]`` (even slices, so
    every owner merges about ``1 / world`` of the run's lists)."""
    return [start + k * (stop - start) // world for k in range(world + 1)]


def _pair_needs(depths: Tensor, run: int, world: int, chunk_size: int) -> Tensor:
    """Every row's ``need``: the deepest depth of its chunk, chunks formed among the rows one process owns within one
    run (`_run_cuts`), in ascending order of depth (as the owner yields them)."""
    n = depths.shape[0]
    need = torch.empty_like(depths)
    for start in range(0, n, run):
        cuts = _run_cuts(start, min(start + run, n), world)
        for a, b in zip(cuts[:-1], cuts[1:]):
            if b > a:
                need[a:b] = _chunk_depths(depths[a:b], chunk_size)[1]
    return need


def _candidate_search(split: _Split, depths: Tensor) -> Iterator[Part]:
    """Candidate lists over this process's slices, run by run; each owner merges its slice of a run's rows and
    searches again the rows still short of their need.

    The processes share one process's buffer budget, so a run holds ``1 / world`` of the rows one process's run
    holds: the buffers a process keeps fall as ``1 / world``, and its products do not grow (each run multiplies only
    this process's slices of the blocks that touch it)."""
    gn, sq, block, bounds, exchange = split.gn, split.sq, split.block, split.bounds, split.exchange
    n, world, me = gn.shape[0], exchange.world, exchange.rank
    budget = _BUFFER_BYTES // world
    run = block * max(1, budget // (_candidate_cap(int(depths.max())) * 8 * block))
    need = _pair_needs(depths, run, world, split.chunk_size)
    lo, hi = split.own  # the rows whose guessed bounds this process computes
    widest = max(bounds[k + 1] - bounds[k] for k in range(world))
    own = torch.full((widest,), torch.finfo(torch.float32).min, dtype=torch.float32, device=gn.device)
    own[: hi - lo] = _sampled_bounds(gn, need[lo:hi], block, lo, hi, sq)
    every = exchange.all_gather(own)
    bound = torch.cat([every[k][: bounds[k + 1] - bounds[k]] for k in range(world)])
    del every
    for start in range(0, n, run):
        stop = min(start + run, n)
        depth = int(need[start:stop].max())
        cap = _candidate_cap(depth, stop - start, budget)
        buffers = CandidateBuffers(stop - start, depth, cap, bound[start:stop].clone())
        collect_candidates(gn, block, start, stop, buffers, sq, split.part)
        partial, held = _partial_lists(buffers, depth)
        cuts = _run_cuts(start, stop, world)
        got = _exchanged(exchange, partial, held, start, cuts)
        del partial
        buffers = None
        a, b = cuts[me], cuts[me + 1]
        mine = _union_top(got, b - a, depth)
        if b > a:
            _search_short(gn, mine, need[a:b], a, split.chunk_size, sq)
            yield from _in_depth_chunks(mine, depths[a:b], a, split.chunk_size)
        del mine
        _select.release_free_memory(gn.device)


def _partial_lists(buffers: CandidateBuffers, depth: int) -> tuple[Tensor, Tensor]:
    """Each row's top ``depth`` keys of its buffer, its keys first (in no order), and how many keys each row holds:
    a view of the buffer, whose rows holding more than ``depth`` keys are cut to their top ``depth`` in place (a
    buffer is filled from its start; the buffer is not searched again afterwards)."""
    held = buffers.fill.clamp(max=depth)
    over = torch.nonzero(buffers.fill > depth).flatten()
    for rows in over.split(_COMPACTION_ROWS):
        buffers.buf[rows, :depth] = _select.top_rows(buffers.buf.index_select(0, rows), depth)
    return buffers.buf[:, : int(held.max()) if held.numel() else 0], held


def _search_short(gn: Tensor, keys: Tensor, need: Tensor, lo: int, chunk_size: int, sq: Tensor | None) -> None:
    """Rows of the merged lists ``keys`` (rows ``lo:``) holding fewer than their ``need`` keys: every process's
    guessed bound was above the row's ``need``-th score, so it is searched again against the whole gallery."""
    held = (keys != _LOWEST_KEY).sum(dim=1)
    short = torch.nonzero(held < need).flatten()
    for start in range(0, short.numel(), chunk_size):
        rows = short[start : start + chunk_size]
        d = int(need[rows].max())
        keys[rows] = _LOWEST_KEY
        keys[rows, :d] = searched_again(gn, lo + rows, d, sq)
