"""Files written whole or not at all: every file the project writes goes through here.

Each function writes into a temporary file in the destination's folder (a hidden name, ``.<name>.<random>.tmp``, that
no reader or glob of the project matches) and moves it over the destination with ``os.replace``, which is atomic on
POSIX and Windows within one file system. A failure at any point (a full disk, a quota, a kill between the two
steps) leaves the destination as it was (the previous complete version, or nothing) and removes the temporary; the
exception propagates so that the caller can log it and try again later (an ``OSError`` names the destination: a full
disk's ``ENOSPC`` names no file by itself). Nothing is ``fsync``-ed: the guarantee is
against failing writes and killed processes, not against a power cut of the machine.

The one file the project appends to instead, an evaluation history (``history.jsonl``), is written by
:class:`beyondlabels.io.run_files.HistoryLog`, whose reader ignores a cut last line.

Examples:
    >>> import json, tempfile
    >>> path = Path(tempfile.mkdtemp()) / "report.json"
    >>> write_json(path, {"map@r": 0.5})
    >>> json.loads(path.read_text()), sorted(p.name for p in path.parent.iterdir())
    ({'map@r': 0.5}, ['report.json'])
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from beyondlabels._internal.checks import check_choice
from beyondlabels._internal.files import walk

__all__ = [
    "atomic_file",
    "remove_stale_temporaries",
    "save_figure",
    "save_npz",
    "save_torch",
    "temporary_name",
    "write_json",
    "write_text",
]

_TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$")


def temporary_name(path: str | os.PathLike[str]) -> Path:
    """A fresh temporary path beside ``path`` (same folder, so ``os.replace`` stays on one file system)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")


def remove_stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries that writes killed before their ``os.replace`` left in ``folder`` and its sub-folders
    (only names :func:`temporary_name` makes); returns what was removed. A folder that does not exist holds none."""
    removed = []
    for dirpath, _, filenames in walk(folder):  # no recursion, no link followed, depth bounded
        for name in filenames:
            if _TEMPORARY.match(name):
                path = Path(dirpath) / name
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed.append(path)
    return removed


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; when the block ends without an exception it replaces
    ``path``, otherwise it is removed and ``path`` is untouched. Creates the parent folder.

    Args:
        path: The destination.
        mode: ``"wb"`` or ``"w"`` (text; ``encoding`` defaults to UTF-8).
        encoding: Text encoding for ``mode="w"``.
    """
    check_choice(mode, "mode", ("w", "wb"), what="'w' or 'wb'", hint="a file is written whole")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        with open(tmp, mode, encoding=(encoding or "utf-8") if mode == "w" else None) as handle:
            yield handle
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename is None or exc.filename == str(tmp):  # a full disk's error names no file: name the one
            exc.filename = str(path)
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_file(path, "w") as handle:
        handle.write(text)


def write_json(path: str | os.PathLike[str], data: Any, indent: int | None = 2, **kwargs: Any) -> None:
    """Write ``data`` as JSON (a trailing newline) to ``path`` atomically; ``kwargs`` go to ``json.dumps``."""
    write_text(path, json.dumps(data, indent=indent, **kwargs) + "\n")


def save_npz(path: str | os.PathLike[str], arrays: Mapping[str, Any], compressed: bool = True) -> None:
    """Write ``arrays`` as an ``.npz`` archive (zlib-compressed unless ``compressed=False``) to ``path`` atomically."""
    import numpy as np

    with atomic_file(path) as handle:
        (np.savez_compressed if compressed else np.savez)(handle, **arrays)


def save_figure(fig: Any, path: str | os.PathLike[str], **kwargs: Any) -> Path:
    """``fig.savefig`` into ``path`` atomically (the format from the suffix, e.g. ``.png``); returns ``path``."""
    path = Path(path)
    kwargs.setdefault("format", path.suffix.lstrip(".") or "png")
    with atomic_file(path) as handle:
        fig.savefig(handle, **kwargs)
    return path


def save_torch(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save(obj)`` into ``path`` atomically. Written through a file object, so the archive's inner name is
    ``archive`` whatever the temporary is called: equal objects give equal bytes."""
    import torch

    with atomic_file(path) as handle:
        torch.save(obj, handle)
