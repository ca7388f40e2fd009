"""The selection steps of the search on CPU: positions of the scores reaching bounds, row sorts and row top-k.

Each function returns exactly what the torch expression in its docstring returns. For CPU tensors the work is done by
numpy (whose sorts and selections use SIMD kernels; `benchmarks/bench_retrieval.py` times both), split by rows over as
many threads as torch uses, at most the CPUs the process may run on (numpy releases the GIL in these loops). The threads
are this module's own pools; nothing here changes torch's thread settings. Tensors on any other device use the torch
expression itself. Results share no memory with the inputs unless stated.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

# Below this many elements one thread does the work (a thread hand-off costs tens of microseconds).
_MIN_PARALLEL_ELEMENTS = 1 << 17

_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool)


def usable_cpus() -> int:
    """The CPUs this process may run on: its scheduler affinity (what a SLURM job or ``taskset`` grants), else the
    machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity API (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def worker_threads() -> int:
    """Threads the selection steps use at most: torch's intra-op thread count, capped by :func:`usable_cpus`."""
    return max(1, min(torch.get_num_threads(), usable_cpus()))


def _executor() -> ThreadPoolExecutor:
    """This process's pool: at most :func:`usable_cpus` threads, started only as work needs them (so as many as
    :func:`worker_threads` asks for). A pool inherited through ``fork`` has no threads, so a child makes its own."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (
                os.getpid(),
                ThreadPoolExecutor(max_workers=usable_cpus(), thread_name_prefix="beyondlabels-select"),
            )
        return _pool[1]


def _on_cpu(*tensors: Tensor) -> bool:
    return all(t.device.type == "cpu" for t in tensors)


def _row_slices(rows: int, numel: int) -> list[slice]:
    parts = min(worker_threads(), rows) if numel >= _MIN_PARALLEL_ELEMENTS else 1
    parts = max(parts, 1)
    edges = [rows * i // parts for i in range(parts + 1)]
    return [slice(edges[i], edges[i + 1]) for i in range(parts)]


def _by_rows(work: Callable[[slice], object], rows: int, numel: int) -> list[object]:
    """``work`` on each row slice, the first in this thread and the rest in the pool; results in slice order."""
    slices = _row_slices(rows, numel)
    if len(slices) == 1:
        return [work(slices[0])]
    pool = _executor()
    futures = [pool.submit(work, s) for s in slices[1:]]
    first = work(slices[0])
    return [first] + [f.result() for f in futures]


# Bytes of scores in a tile of `flat_reaching`: its masks and values stay in a core's cache (the scores are read
# from memory once).
_TILE_BYTES = 1 << 20


def flat_reaching(
    scores: Tensor, row_bound: Tensor | None, col_bound: Tensor | None
) -> tuple[tuple[Tensor, Tensor] | None, tuple[Tensor, Tensor] | None]:
    """The entries of a 2-D ``scores`` reaching their row's bound, and those reaching their column's bound, each as
    ``(flat positions, values)``: the ascending positions (int64)
    ``torch.nonzero((scores >= row_bound[:, None]).reshape(-1)).flatten()`` (with ``col_bound[None, :]`` for the
    second) and the scores there; ``None`` for a bound given as ``None``.

    On CPU the scores are read once, in tiles of a few rows whose masks and values stay in cache.
    """

    def reaching(bound: Tensor | None, dim: int) -> tuple[Tensor, Tensor] | None:
        if bound is None:
            return None
        flat = torch.nonzero((scores >= bound.unsqueeze(dim)).reshape(-1)).flatten()
        return flat, scores.reshape(-1).index_select(0, flat)

    if not _on_cpu(*(t for t in (scores, row_bound, col_bound) if t is not None)) or not scores.is_contiguous():
        return reaching(row_bound, 1), reaching(col_bound, 0)
    s = scores.numpy()
    rows_n, width = s.shape
    bounds = [
        None if row_bound is None else row_bound.numpy()[:, None],
        None if col_bound is None else col_bound.numpy(),
    ]
    tile = max(1, _TILE_BYTES // max(1, width * s.itemsize))

    def work(r: slice) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        found: list[list[tuple[np.ndarray, np.ndarray]]] = [[], []]
        mask = np.empty((min(tile, r.stop - r.start), width), dtype=bool)
        for t0 in range(r.start, r.stop, tile):
            t1 = min(t0 + tile, r.stop)
            for side, bound in enumerate(bounds):
                if bound is not None:
                    per_row = bound[t0:t1] if side == 0 else bound
                    positions = np.flatnonzero(np.greater_equal(s[t0:t1], per_row, out=mask[: t1 - t0]))
                    values = s[t0:t1].ravel().take(positions)
                    found[side].append((np.add(positions, t0 * width, out=positions), values))
        return found

    parts = _by_rows(work, rows_n, s.size)
    nothing = (np.empty(0, dtype=np.int64), np.empty(0, dtype=s.dtype))  # a matrix without rows has no tiles
    return tuple(  # type: ignore[return-value]
        None
        if bounds[side] is None
        else tuple(
            torch.from_numpy(np.concatenate([nothing[which]] + [t[which] for p in parts for t in p[side]]))
            for which in (0, 1)
        )
        for side in (0, 1)
    )


def sort_rows_descending(x: Tensor, in_place: bool = False) -> Tensor:
    """``torch.sort(x, dim=1, descending=True).values`` for a 2-D int64 or float tensor without NaN; with
    ``in_place`` the rows of ``x`` itself are sorted (on CPU without any temporary) and ``x`` is returned."""
    if not _on_cpu(x) or x.dim() != 2 or x.dtype not in (torch.int64, torch.float32) or not x.is_contiguous():
        values = torch.sort(x, dim=1, descending=True).values
        return x.copy_(values) if in_place else values
    if not in_place:
        x = x.clone()
    a = x.numpy()
    # Ascending sort of an order-reversing image: ~v for integers (exact), -v for floats (exact, no NaN).
    flip = np.invert if a.dtype.kind == "i" else np.negative

    def work(r: slice) -> None:
        rows = a[r]
        flip(rows, out=rows)
        rows.sort(axis=1)
        flip(rows, out=rows)

    _by_rows(work, a.shape[0], a.size)
    return x


def top_rows(x: Tensor, k: int) -> Tensor:
    """``torch.topk(x, k, dim=1, sorted=False).values`` as a set: the ``k`` largest of each row, in no order.

    For rows of distinct values (the search's keys) the set is the one torch picks; with repeated values the
    multiset of values is the same.
    """
    if not _on_cpu(x) or x.dim() != 2 or x.dtype not in (torch.int64, torch.float32):
        return torch.topk(x, k, dim=1, largest=True, sorted=False).values
    a = x.numpy()
    n = a.shape[1]
    if k >= n:
        return x.clone()
    out = np.empty((a.shape[0], k), dtype=a.dtype)

    def work(r: slice) -> None:
        out[r] = np.partition(a[r], n - k, axis=1)[:, n - k :]

    _by_rows(work, a.shape[0], a.size)
    return torch.from_numpy(out)


def ragged_rows(x: Tensor, counts: Tensor) -> Tensor:
    """``x[torch.arange(x.shape[1]) < counts[:, None]]`` for a 2-D ``x`` (a view will do) and int64 ``counts``: the
    first ``counts[r]`` entries of each row, row after row, in one 1-D tensor."""
    if not _on_cpu(x, counts) or x.dim() != 2:
        return torch.masked_select(x, torch.arange(x.shape[1], device=x.device) < counts.unsqueeze(1))
    a = x.numpy()
    return torch.from_numpy(a[np.arange(a.shape[1]) < counts.numpy()[:, None]])


def put_ragged(out: Tensor, start: Tensor, counts: Tensor, values: Tensor) -> None:
    """Write ``values`` (``counts[r]`` values for each row ``r``, row after row) to ``out[r, start[r] : start[r] +
    counts[r]]`` for a contiguous 2-D ``out``: ``out.masked_scatter_(mask, values)``, ``mask`` the positions
    ``start[r] <= j < start[r] + counts[r]`` of each row."""
    cols = torch.arange(out.shape[1], device=out.device)
    if not _on_cpu(out, start, counts, values) or out.dim() != 2 or not out.is_contiguous():
        mask = (cols >= start.unsqueeze(1)) & (cols < (start + counts).unsqueeze(1))
        out.masked_scatter_(mask, values)
        return
    c, first = cols.numpy(), start.numpy()[:, None]
    mask = c >= first
    mask &= c < first + counts.numpy()[:, None]
    out.numpy()[mask] = values.numpy()


def stable_group_order(groups: Tensor, n_groups: int) -> Tensor:
    """``torch.sort(groups, stable=True).indices`` for a 1-D tensor of values in ``0 .. n_groups - 1`` (int64)."""
    if not _on_cpu(groups) or groups.dim() != 1:
        return torch.sort(groups, stable=True).indices
    g = groups.numpy()
    if n_groups <= np.iinfo(np.int16).max:
        g = g.astype(np.int16)  # numpy sorts 16-bit integers stably by radix, in linear time
    return torch.from_numpy(np.argsort(g, kind="stable").astype(np.int64, copy=False))
