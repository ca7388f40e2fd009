"""Handing freed memory back to the system, for the search's kernels and the metrics' syncs alike."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import torch


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None


_malloc_trim = _load_malloc_trim()


def release_free_memory(device: torch.device) -> None:
    """After CPU work, hand the heap's free pages back to the system (glibc ``malloc_trim``; elsewhere nothing).

    glibc keeps the memory of freed mid-sized blocks (a few MB up to 32 MB) in its heap for reuse; the search frees
    many such temporaries of varying sizes, and without an occasional trim the process would keep several times the
    memory the search actually holds at once.
    """
    if _malloc_trim is not None and device.type == "cpu":
        _malloc_trim(0)
