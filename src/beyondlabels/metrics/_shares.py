"""Internal to :mod:`beyondlabels.metrics`: a family's per-query rows computed share by share across the processes.

After a distributed sync every process holds the same gathered samples. :func:`shared_rows` has each process compute
the rows of its share of the queries (the kernel's ``share=(rank, world_size)``), decides a failure together (a
kernel that raises on one process only, such as a query short of distractors found in that process's share, must not
leave the others waiting in the gather), and gathers the rows rank by rank, so every process ends with every row.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from beyondlabels.metrics.base import PerSampleMetric

__all__ = ["shared_rows"]

Rows = dict[str, Tensor]


def shared_rows(metric: PerSampleMetric, rows_of: Callable[[tuple[int, int] | None], Rows], split: bool = True) -> Rows:
    """Every query's rows: ``rows_of(None)`` on one process (or with ``split=False``, or when the states were not
    synced), else ``rows_of((rank, world_size))`` on each process, concatenated rank by rank.

    Raises:
        The same error on every process when ``rows_of`` raised on any: the error of the lowest rank that failed
        (itself where that is this process; a ``ValueError`` with its message elsewhere, a ``RuntimeError`` naming
        the rank for an error of another kind).
    """
    share = metric.work_share() if split else None
    if share is None:
        return rows_of(None)
    failure: Exception | None = None
    try:
        rows = rows_of(share)
    except Exception as exc:  # decided together below, then raised on every process
        failure, rows = exc, {}
    _raise_together(failure, share, metric.process_group)
    return metric.gather_rows(rows)


def _raise_together(failure: Exception | None, share: tuple[int, int], group: object) -> None:
    """Tell every process whether any failed; raise the lowest failing rank's error everywhere."""
    mine = None if failure is None else (isinstance(failure, ValueError), f"{type(failure).__name__}: {failure}")
    every: list[tuple[bool, str] | None] = [None] * share[1]
    torch.distributed.all_gather_object(every, mine, group=group)
    failed = [(rank, entry) for rank, entry in enumerate(every) if entry is not None]
    if not failed:
        return
    rank, (is_value_error, message) = failed[0]
    if rank == share[0] and failure is not None:
        raise failure
    if is_value_error:
        raise ValueError(message.removeprefix("ValueError: ")) from failure
    raise RuntimeError(f"rank {rank} failed while computing its share of the queries: {message}") from failure
