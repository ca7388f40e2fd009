"""Shares of a set of queries or samples: what each process computes of a per-sample kernel under DDP.

A kernel given ``share=(i, n)`` computes the rows of the i-th of n contiguous near-equal runs of its (ordered)
queries; the metrics gather the shares' rows in share order, which is the order of one call.
"""

from __future__ import annotations

from beyondlabels._internal.checks import check_share

__all__ = ["share_span"]


def share_span(n: int, share: tuple[int, int] | None) -> tuple[int, int]:
    """The positions ``[lo, hi)`` of the ``i``-th of ``count`` contiguous near-equal runs of ``n`` items
    (``share=(i, count)``; None: all of them). Runs ``0, 1, ..., count − 1`` cover ``0..n−1`` in order; with more
    shares than items some runs are empty.

    Examples:
        >>> [share_span(10, (i, 3)) for i in range(3)], share_span(2, (3, 4)), share_span(5, None)
        ([(0, 3), (3, 6), (6, 10)], (1, 2), (0, 5))
    """
    index, count = check_share(share)
    return index * n // count, (index + 1) * n // count
