"""Leave-one-out search split between processes: each score of the symmetric blocks is computed by one process.

Internal. The block grid is that of the single search (:mod:`beyondlabels.functional._leave_one_out`); process ``i``
of ``W`` multiplies the i-th of ``W`` even slices of the rows of every block pair ``(a, b)``, ``a <= b``, so every
process multiplies ``N^2 / (2 W)`` scores (one process multiplies ``N^2 / 2``) and none is multiplied twice. Each
row has one owner: in the candidate search (deep searches, run by run; the processes share one process's buffer
budget) the process that multiplies it as a block row, so process ``i`` owns the i-th slice of every block of a
run; with running top lists (shallow searches) share ``i`` of ``W`` even shares of the rows. A process keeps top
lists (running lists, or candidate buffers) for every row its slices touch, then hands each other owner the lists
of the owner's rows (:class:`Exchange`); the owner merges them with its own. The merged lists are the exact top of
each row (the top ``d`` of the union of lists that each hold either every item reaching the row's bound or their
own top ``d``), and a pair's score is the product the single search computes (with BLAS libraries whose dot
products do not depend on the block position, as the row-chunk search assumes: ``docs/search.md``), so the rows are
bitwise those of one process. The derivations are in ``docs/search.md`` ("Shares").

The processes meet only through the :class:`Exchange` they are given: this module holds no collective.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from beyondlabels._internal.memory import release_free_memory
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

# Rows of an owner's union laid out and sorted at a time (`_union_top`): at N = 20,000, W = 4 groups of 256 rows sort
# 2.2M keys and padding a process where one width for all its rows sorted 3.6M (its keys: 1.6M).
_UNION_ROWS = 256


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
    one process) split by slices of the blocks as in the module docstring: the rows this process owns (by candidate
    lists, the i-th slice of every block of each run; by running top lists, share ``i`` of ``n`` even shares), as
    the single search chooses (None when the running lists of all ``N`` rows would not fit the budget: search in row
    chunks then), in chunks of ``chunk_size`` rows in ascending order of depth."""
    index, count = share
    if exchange is None or count == 1:
        return block_search(gn, depths, share, chunk_size, sq)
    if (exchange.rank, exchange.world) != (index, count):
        raise ValueError(f"`share` {share} is not the exchange's (rank {exchange.rank} of {exchange.world}).")
    n = gn.shape[0]
    block, candidates = search_plan(n, depths, chunk_size)
    # Even shares of the rows: those owned with running lists, and whose bounds each process guesses for candidates.
    bounds = [i * n // count for i in range(count + 1)]
    split = _Split(gn, sq, block, bounds, chunk_size, exchange)
    if candidates:
        return _candidate_search(split, depths)
    if n * int(depths.max()) * 8 > _BUFFER_BYTES:
        return None
    return _running_search(split, depths)


@dataclass(frozen=True)
class _Split:
    """One process's part of a search split by slices: the unit rows ``gn`` (Euclidean coarse scores with their
    squared norms ``sq``), the block side, the even shares of the rows (``bounds[k]:bounds[k + 1]``, `own`), the
    chunk size of what is yielded and the exchange between the processes."""

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
        """This process's even share of the rows: those it owns with running lists, and those whose bounds it guesses
        in the candidate search."""
        return self.bounds[self.exchange.rank], self.bounds[self.exchange.rank + 1]


Spans = list[list[tuple[int, int]]]
"""The rows each process owns, ``spans[k]`` for process ``k``: runs ``(a, b)`` of rows ``a:b``, ascending."""


def _owned_rows(spans: list[tuple[int, int]], device: torch.device) -> Tensor:
    """The rows of ``spans`` (one process's), in order, as an int64 tensor."""
    if not spans:
        return torch.empty(0, dtype=torch.int64, device=device)
    return torch.cat([torch.arange(a, b, dtype=torch.int64, device=device) for a, b in spans])


def _merged(exchange: Exchange, lists: list[Tensor], lo: int, owned: Spans, depth: int) -> Tensor:
    """This process's rows (``owned[rank]``, in order) of the top lists ``lists = [keys, held]`` (emptied; rows
    ``lo:lo + len(keys)``, row ``r`` holding its ``held[r]`` keys first, then ``_LOWEST_KEY``) of every process,
    merged: the top ``depth`` keys of each row, in ranking order (``_LOWEST_KEY`` after the keys a row has). Only
    the keys the rows hold cross (`_exchanged`); this process's own lists of its rows do not cross at all, and are
    copied out before the union is laid out, so ``keys`` can go first (unless the caller holds it)."""
    keys, held = lists
    lists.clear()
    got = _exchanged(exchange, keys, held, lo, owned)
    rows = [slice(a - lo, b - lo) for a, b in owned[exchange.rank]]
    own = torch.cat([keys[r] for r in rows]) if rows else keys[:0]
    own_held = torch.cat([held[r] for r in rows]) if rows else held[:0]
    del keys, held
    return _union_top(got, own, own_held, depth)


def _exchanged(exchange: Exchange, keys: Tensor, held: Tensor, lo: int, owned: Spans) -> list[Tensor]:
    """What every other process holds of this process's rows (``owned[rank]``) of the lists ``keys`` (as in
    `_merged`), in rank order, this process left out: from each process one int64 tensor, its count of keys for
    each of this process's rows, then those keys row after row (ragged: a row's list crosses without the padding of
    the rows it shares a part with). Every part is a copy, so only this process's own rows of ``keys`` must stay
    until the parts are merged."""
    me = exchange.rank
    parts, totals = [], []
    for k, spans in enumerate(owned):
        rows = [slice(a - lo, b - lo) for a, b in spans] if k != me else []
        parts.append(_packed([keys[r] for r in rows], [held[r] for r in rows], keys.device))
        totals.append(parts[-1].numel())
    every = exchange.all_gather(torch.tensor(totals, dtype=torch.int64, device=keys.device))
    got = exchange.all_to_all(parts, [(int(sizes[me]),) for sizes in every])
    del got[me]
    return got


def _packed(keys: list[Tensor], held: list[Tensor], device: torch.device) -> Tensor:
    """Runs of rows ``keys`` (row ``r`` of a run holds its ``held[r]`` keys first) as one int64 tensor: every row's
    count, then each row's keys."""
    counts = [h.to(torch.int64) for h in held]
    lists = [_select.ragged_rows(k, c) for k, c in zip(keys, counts)]
    if not counts:
        return torch.empty(0, dtype=torch.int64, device=device)
    return torch.cat(counts + lists)


def _union_top(got: list[Tensor], own: Tensor, held: Tensor, depth: int) -> Tensor:
    """The top ``depth`` keys of each row of the union of the lists of this process's rows: its own ``own`` (row
    ``r`` holds its ``held[r]`` keys first, then ``_LOWEST_KEY``), and those of the other processes, the packed parts
    ``got`` (`_packed`, of the same rows; emptied), in ranking order, ``_LOWEST_KEY`` after the keys a row has. No
    item is in two lists (each pair's score is computed by one process), so the order of the parts does not
    matter.

    The union is laid out and sorted ``_UNION_ROWS`` rows at a time, each group as wide as its fullest row: a row's
    union varies with its block (a few rows hold twice the average), and one width for all would sort mostly
    padding."""
    rows_n = held.numel()
    out = torch.empty((rows_n, depth), dtype=torch.int64, device=held.device)
    if rows_n == 0:
        got.clear()
        return out
    counts = [part[:rows_n] for part in got]
    total = held + torch.stack(counts).sum(dim=0) if counts else held
    cuts = list(range(0, rows_n, _UNION_ROWS)) + [rows_n]
    widths = torch.stack([t.max() for t in total.split(_UNION_ROWS)]).clamp_(min=depth).tolist()
    # Where each group's keys start in each part (its keys follow its counts).
    starts = [
        (torch.cumsum(count, 0) + rows_n).index_select(0, torch.tensor(cuts[1:], device=count.device) - 1).tolist()
        for count in counts
    ]
    for g, (r0, r1) in enumerate(zip(cuts[:-1], cuts[1:])):
        union = torch.full((r1 - r0, widths[g]), _LOWEST_KEY, dtype=torch.int64, device=held.device)
        union[:, : own.shape[1]] = own[r0:r1]  # every row's own keys first, then the padding that follows them
        free = held[r0:r1].to(torch.int64, copy=True)  # where each row's next keys go
        for part, count, ends in zip(got, counts, starts):
            first = ends[g - 1] if g else rows_n
            _select.put_ragged(union, free, count[r0:r1], part[first : ends[g]])
            free += count[r0:r1]
        # A whole sort of a group (numpy's vectorised sort) costs less than a selection followed by a sort of the top.
        out[r0:r1] = _select.sort_rows_descending(union, in_place=True)[:, :depth]
    got.clear()
    return out


def _in_depth_chunks(keys: Tensor, depths: Tensor, rows: Tensor, chunk_size: int) -> Iterator[Part]:
    """The merged lists ``keys`` of the rows ``rows`` in chunks of ``chunk_size`` in ascending order of depth, each
    chunk as deep as its deepest row."""
    order = torch.argsort(depths, stable=True)
    for start in range(0, order.numel(), chunk_size):
        local = order[start : start + chunk_size]
        vals, idx = from_keys(keys[local, : int(depths[local].max())])
        yield rows.index_select(0, local), vals, idx


def _running_search(split: _Split, depths: Tensor) -> Iterator[Part]:
    """Running top lists of every row over this process's slices, merged by the owners."""
    n, depth = split.gn.shape[0], int(depths.max())
    keys = leave_one_out_keys(split.gn, depth, split.block, 0, n, split.sq, split.part)
    keys = _select.sort_rows_descending(keys, in_place=True)
    owned = [[(a, b)] for a, b in zip(split.bounds[:-1], split.bounds[1:])]
    lists = [keys, (keys != _LOWEST_KEY).sum(dim=1)]
    del keys  # `_merged` frees the lists once its own rows are copied out
    mine = _merged(split.exchange, lists, 0, owned, depth)
    lo, hi = split.own
    rows = torch.arange(lo, hi, dtype=torch.int64, device=split.gn.device)
    yield from _in_depth_chunks(mine, depths[lo:hi], rows, split.chunk_size)


def _run_owners(start: int, stop: int, block: int, world: int) -> Spans:
    """The rows of one run of the candidate search that each process owns: the slices of the run's blocks whose rows
    the process multiplies (`_symmetric_blocks` with ``part``), so each owner merges about ``1 / world`` of the run's
    lists, with rows from every block position alike, and the lists of its rows of early blocks, whose items the
    process itself scores, do not cross."""
    spans: Spans = [[] for _ in range(world)]
    for a in range(start, stop, block):
        b = min(a + block, stop)
        for k in range(world):
            first, last = a + k * (b - a) // world, a + (k + 1) * (b - a) // world
            if last > first:
                spans[k].append((first, last))
    return spans


def _pair_needs(depths: Tensor, run: int, block: int, world: int, chunk_size: int) -> Tensor:
    """Every row's ``need``: the deepest depth of its chunk, chunks formed among the rows one process owns within one
    run (`_run_owners`), in ascending order of depth (as the owner yields them)."""
    n = depths.shape[0]
    need = torch.empty_like(depths)
    for start in range(0, n, run):
        for spans in _run_owners(start, min(start + run, n), block, world):
            rows = _owned_rows(spans, depths.device)
            if rows.numel():
                need[rows] = _chunk_depths(depths[rows], chunk_size)[1]
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
    need = _pair_needs(depths, run, block, world, split.chunk_size)
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
        lists = _partial_lists(buffers, depth)
        buffers = None  # its memory goes once `_merged` has sent the lists and copied out its own rows
        owned = _run_owners(start, stop, block, world)
        mine = _merged(exchange, lists, start, owned, depth)
        rows = _owned_rows(owned[me], gn.device)
        if rows.numel():
            _search_short(gn, mine, need[rows], rows, split.chunk_size, sq)
            yield from _in_depth_chunks(mine, depths[rows], rows, split.chunk_size)
        del mine
        release_free_memory(gn.device)


def _partial_lists(buffers: CandidateBuffers, depth: int) -> list[Tensor]:
    """Each row's top ``depth`` keys of its buffer, its keys first (in no order), and how many keys each row holds,
    as ``[keys, held]`` (a list for `_merged` to empty): ``keys`` is a view of the buffer, whose rows holding more
    than ``depth`` keys are cut to their top ``depth`` in place (a buffer is filled from its start; the buffer is not
    searched again afterwards)."""
    held = buffers.fill.clamp(max=depth)
    over = torch.nonzero(buffers.fill > depth).flatten()
    for rows in over.split(_COMPACTION_ROWS):
        buffers.buf[rows, :depth] = _select.top_rows(buffers.buf.index_select(0, rows), depth)
    return [buffers.buf[:, : int(held.max()) if held.numel() else 0], held]


def _search_short(gn: Tensor, keys: Tensor, need: Tensor, rows: Tensor, chunk_size: int, sq: Tensor | None) -> None:
    """Rows ``rows`` of the merged lists ``keys`` holding fewer than their ``need`` keys: every process's guessed
    bound was above the row's ``need``-th score, so it is searched again against the whole gallery."""
    held = (keys != _LOWEST_KEY).sum(dim=1)
    short = torch.nonzero(held < need).flatten()
    for start in range(0, short.numel(), chunk_size):
        local = short[start : start + chunk_size]
        d = int(need[local].max())
        keys[local] = _LOWEST_KEY
        keys[local, :d] = searched_again(gn, rows.index_select(0, local), d, sq)
