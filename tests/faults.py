"""Injected file-system faults for the tests: a full disk under one folder, and a write killed before its rename."""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_WRITING = set("wax+")


class _HalfWriter:
    """A file whose every ``write`` stores the first half of its data, then fails as a full disk does."""

    def __init__(self, handle: Any, log: list[str]) -> None:
        self._handle, self._log = handle, log

    def write(self, data: Any) -> int:
        view = memoryview(data if not isinstance(data, str) else data.encode()).cast("B")
        half = bytes(view[: len(view) // 2])
        self._handle.write(half if "b" in getattr(self._handle, "mode", "b") else half.decode(errors="ignore"))
        self._handle.flush()
        self._log.append(getattr(self._handle, "name", "?"))
        raise OSError(errno.ENOSPC, "No space left on device (injected)")

    def __enter__(self) -> _HalfWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handle.close()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


@contextlib.contextmanager
def disk_full(folder: str | os.PathLike[str]) -> Iterator[list[str]]:
    """While active, every file opened for writing under ``folder`` writes half of each ``write`` and raises ENOSPC.
    Yields the list of the files a write failed in."""
    root = Path(folder).resolve()
    real_open = builtins.open
    failed: list[str] = []

    def opening(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        if isinstance(file, (str, os.PathLike)) and _WRITING & set(mode):
            path = Path(file).resolve()
            if path == root or root in path.parents:
                return _HalfWriter(handle, failed)
        return handle

    builtins.open = opening
    try:
        yield failed
    finally:
        builtins.open = real_open


@contextlib.contextmanager
def killed_before_rename() -> Iterator[None]:
    """While active, ``os.replace`` fails as if the process died right after writing the temporary file."""
    real_replace = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt(f"killed before renaming {src} to {dst} (injected)")

    os.replace = replace
    try:
        yield
    finally:
        os.replace = real_replace
