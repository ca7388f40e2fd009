"""Opening and walking files that came from elsewhere (internal: shared by every reader of the package, not part of
the public API).

Rules:

- **Regular files only.** A file is opened without blocking (``O_NONBLOCK``, so a named pipe with no writer opens at
  once instead of waiting forever) and then checked with ``fstat`` on the open descriptor: a named pipe, a device, a
  socket or a folder is refused with a ``ValueError`` naming it. The check is made on what was opened, so a file
  swapped for a pipe between a check and the open cannot make a reader hang.
- **A byte limit per reader.** Each reader says how many bytes it reads at most; a larger file is a ``ValueError``
  naming it, found from ``fstat`` before anything is read (and again while reading, for a file that grows).
- **Walks are iterative and bounded.** :func:`walk` visits a folder tree without recursion (``os.walk`` recurses on
  Python 3.10 and 3.11: a tree 1,100 folders deep is a ``RecursionError`` there), follows no symbolic link, and does
  not descend below ``max_depth`` levels; what it left out is reported to the caller.

A missing file is a ``FileNotFoundError`` (an ``OSError``) as from ``open``: callers tell "not there" from "not
usable".

Examples:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.json").write_text("{}")
    >>> read_file(folder / "a.json", "the report")
    b'{}'
    >>> os.mkfifo(folder / "pipe")
    >>> read_file(folder / "pipe", "the report")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the report .../pipe is a named pipe (FIFO), not a regular file: it is not read
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_WALK_DEPTH",
    "fd_path",
    "load_tensors",
    "open_file",
    "read_file",
    "walk",
]

MAX_FILE_BYTES = 1 << 30  # 1 GiB: the default limit of one reader (a 10^7-line qrels file is about 300 MB)
MAX_WALK_DEPTH = 32  # levels below the folder walked: a run folder nests 4 deep, a multirun 6

_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _describe(path: str | os.PathLike[str], what: str | None) -> str:
    return f"{what} {path}" if what else str(path)


@contextlib.contextmanager
def open_file(
    path: str | os.PathLike[str], what: str | None = None, max_bytes: int | None = MAX_FILE_BYTES
) -> Iterator[BinaryIO]:
    """A binary handle of ``path`` once it is known to be a regular file of at most ``max_bytes`` bytes (None: no
    limit); closed when the block ends.

    Args:
        path: The file.
        what: What the file is, for messages (``"the qrels file"``); the path follows it.
        max_bytes: The most bytes this reader reads.

    Raises:
        FileNotFoundError: if there is no such file (and the other ``OSError`` of ``open``: no permission, ...).
        ValueError: naming the file, if it is not a regular file or is larger than ``max_bytes``.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:  # Windows; POSIX opens a folder and fstat tells
        raise ValueError(f"{_describe(path, what)} is a folder, not a regular file: it is not read") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{_describe(path, what)} is {_kind(info.st_mode)}, not a regular file: it is not read")
        if max_bytes is not None and info.st_size > max_bytes:
            raise ValueError(
                f"{_describe(path, what)} has {info.st_size} bytes, more than the {max_bytes} this reader reads"
            )
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_file(path: str | os.PathLike[str], what: str | None = None, max_bytes: int | None = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` (:func:`open_file`'s checks), at most ``max_bytes`` of them.

    Raises:
        FileNotFoundError: if there is no such file.
        ValueError: naming the file, if it is not a regular file or holds more than ``max_bytes`` bytes.
    """
    limit = (1 << 62) if max_bytes is None else max_bytes
    with open_file(path, what, max_bytes) as handle:
        # as many bytes as fstat says it has (read(n) sets n bytes aside at once), then the rest of a file that grew
        data = handle.read(min(os.fstat(handle.fileno()).st_size, limit) + 1)
        parts = [data]
        while data and sum(map(len, parts)) <= limit:
            data = handle.read(min(16 << 20, limit + 1 - sum(map(len, parts))))
            parts.append(data)
    data = parts[0] if len(parts) == 2 and not parts[1] else b"".join(parts)
    if len(data) > limit:
        raise ValueError(f"{_describe(path, what)} holds more than the {max_bytes} bytes this reader reads")
    return data


def fd_path(handle: BinaryIO, path: str | os.PathLike[str]) -> str:
    """A path that names the file already open in ``handle``, for a library that takes only a path (``torch.load``
    with ``mmap``): ``/proc/self/fd/<n>`` where the system has it (the very file that was checked), else ``path``."""
    proc = f"/proc/self/fd/{handle.fileno()}"
    return proc if os.path.exists(proc) else os.fspath(path)


def _weights_error(exc: BaseException) -> str:
    """What ``torch.load(weights_only=True)`` found wrong, without its advice to load with ``weights_only=False``
    (which would run whatever code the file holds)."""
    text = " ".join(str(exc).split())
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
        for advice in ("Please use", "Check the documentation"):  # how to let the file's code run: never given
            text = text.split(advice, 1)[0]
        text = text.strip()
    if "weights_only" in text or "safe_globals" in text:
        text = ""
    return f"{type(exc).__name__}" + (f": {text[:300]}" if text else "")


def load_tensors(path: str | os.PathLike[str], what: str, *, mmap: bool = False) -> Any:
    """``torch.load(weights_only=True)`` of a regular file (:func:`open_file`'s checks): tensors and plain containers
    only, never code. With ``mmap`` the tensors stay on disk until used (the file opened and checked is the one mapped,
    through :func:`fd_path`).

    Raises:
        FileNotFoundError: if there is no such file.
        ValueError: naming ``what`` and the file, for anything that is not such a file (a pickle that names code, a
            file cut short, not a torch file); the message never suggests loading it with ``weights_only=False``.
    """
    import torch

    with open_file(path, what, max_bytes=None) as handle:
        try:
            if mmap:
                return torch.load(fd_path(handle, path), map_location="cpu", weights_only=True, mmap=True)
            return torch.load(handle, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - the unpickler raises many types for a file it refuses
            problem = _weights_error(exc)
    raise ValueError(
        f"{what} {path} is not a file of tensors that can be read safely ({problem}). Only tensors and plain "
        "containers are read (torch.load with weights_only=True): a file that needs more names code to run, which "
        "is never done. Save the weights as a state dict: torch.save(model.state_dict(), path)."  # atomic: advice
    )


def walk(
    root: str | os.PathLike[str],
    *,
    max_depth: int = MAX_WALK_DEPTH,
    on_too_deep: Callable[[Path], None] | None = None,
) -> Iterator[tuple[Path, list[str], list[str]]]:
    """``(folder, sub-folder names, file names)`` for ``root`` and every folder below it, top-down, like ``os.walk``
    (the caller may prune the sub-folder list in place), without recursion and without following symbolic links
    (as ``os.walk(followlinks=False)``: a link to a folder is listed among the sub-folders but not entered).

    Args:
        root: The folder to walk.
        max_depth: Folders more than this many levels below ``root`` are not entered; ``on_too_deep`` is called once
            with the first such folder (by default nothing is said).
        on_too_deep: Told the first folder not entered for being too deep.

    A folder that cannot be listed (no permission, removed meanwhile) is skipped, as ``os.walk`` skips it.
    """
    stack: list[tuple[Path, int]] = [(Path(root), 0)]
    told = False
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        dirs, files, links = [], [], set()
        for entry in entries:
            try:
                is_dir = entry.is_dir()
                if is_dir and entry.is_symlink():
                    links.add(entry.name)
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(entry.name)
        dirs.sort()
        files.sort()
        yield folder, dirs, files
        entered = [name for name in dirs if name not in links]
        if depth >= max_depth:
            if entered and not told and on_too_deep is not None:
                on_too_deep(folder / entered[0])
                told = True
            continue
        stack.extend((folder / name, depth + 1) for name in reversed(entered))
