"""The one check of every path the project builds from a name or reads from a file that came from elsewhere.

Run folders, reports and evaluator files travel between people, so a name inside them (a prefix, a manifest's
``"file"``, a history record's ``"per_query_file"``) must not lead anywhere the person who opens them did not mean.

Name
    One component of a path: a non-empty string that is not ``.`` or ``..``, holds no ``/``, ``\\`` or NUL, and
    has at most 255 bytes in UTF-8 (the longest file name of common file systems). :func:`check_name` checks it
    (callback prefixes, media names).

Inside
    ``folder / relative`` is *inside* ``folder`` when ``relative`` is not absolute, has no ``..`` component, and the
    path it names, with every symbolic link followed, lies in ``folder`` with every symbolic link followed. A link
    from one file of the folder to another stays inside; a link (or a linked sub-folder) to anywhere else does not.
    :func:`inside` returns the path or raises :class:`UnsafePathError` (a ``ValueError``) naming ``what`` it was.

Examples:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> inside(root, "media/a.png").relative_to(root).as_posix()
    'media/a.png'
    >>> inside(root, "../a.png", "the figure's file")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    beyondlabels.io.paths.UnsafePathError: the figure's file '../a.png' leaves its folder ...: '..' is not allowed
    >>> check_name("..", "prefix")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    beyondlabels.io.paths.UnsafePathError: `prefix` must be one file name ...; got '..'
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["NAME_MAX", "UnsafePathError", "check_name", "inside", "is_inside"]

NAME_MAX = 255  # bytes of one file name (ext4, XFS, btrfs, APFS, NTFS in UTF-16 units)


class UnsafePathError(ValueError):
    """A name or path that would leave the folder it belongs to (or cannot name one file)."""


def check_name(name: Any, what: str) -> str:
    """``name`` when it is one file name (the module's definition), else an :class:`UnsafePathError` naming ``what``.

    Examples:
        >>> check_name("retrieval", "prefix")
        'retrieval'
    """
    problem = None
    if not isinstance(name, str) or not name:
        problem = "an empty name" if name == "" else f"a {type(name).__name__}"
    elif name in (".", ".."):
        problem = f"{name!r} names a folder itself"
    elif any(c in name for c in "/\\\x00"):
        problem = "it holds a path separator ('/' or '\\\\') or NUL"
    elif (size := len(name.encode("utf-8", "surrogatepass"))) > NAME_MAX:
        problem = f"it has {size} bytes in UTF-8, more than the {NAME_MAX} of a file name"
    if problem is None:
        return name
    shown = name if not isinstance(name, str) or len(name) <= 80 else name[:77] + "..."
    raise UnsafePathError(
        f"`{what}` must be one file name (not '.' or '..', no '/', '\\' or NUL, at most {NAME_MAX} bytes): "
        f"{problem}; got {shown!r}"
    )


def inside(folder: str | os.PathLike[str], relative: Any, what: str = "path") -> Path:
    """``folder / relative`` when it stays inside ``folder`` (the module's definition), symbolic links followed.

    Args:
        folder: The folder the path must stay in (need not exist).
        relative: A relative path (``str`` or path-like; ``/`` separates its parts).
        what: What the path is, for the error message (e.g. ``"retrieval/media/media.json, figure 'x'"``).

    Raises:
        UnsafePathError: when ``relative`` is not a non-empty relative path, holds ``..`` or NUL, or leads (through a
            symbolic link) out of ``folder``; the message names ``what``, the path and ``folder``.
    """
    folder = Path(folder)
    text = os.fspath(relative) if isinstance(relative, (str, os.PathLike)) else None
    shown = (
        repr(text if text is None or len(text) <= 120 else text[:117] + "...") if text is not None else repr(relative)
    )

    def refuse(reason: str) -> UnsafePathError:
        return UnsafePathError(f"{what} {shown} leaves its folder {folder}: {reason}")

    if not isinstance(text, str) or not text:
        raise refuse("it is not a non-empty relative path")
    if "\x00" in text:
        raise refuse("it holds NUL")
    parts = PurePosixPath(text).parts
    if PurePosixPath(text).is_absolute() or Path(text).is_absolute():
        raise refuse("an absolute path is not allowed")
    if ".." in parts:
        raise refuse("'..' is not allowed")
    path = folder.joinpath(*parts)
    try:
        root, target = folder.resolve(), path.resolve()
    except (OSError, RuntimeError) as exc:  # a symbolic-link loop
        raise refuse(f"it cannot be resolved ({exc})") from None
    if target != root and root not in target.parents:
        raise refuse("a symbolic link leads out of it")
    return path


def is_inside(folder: str | os.PathLike[str], relative: Any) -> bool:
    """Whether :func:`inside` accepts ``relative`` under ``folder``.

    Examples:
        >>> is_inside("/tmp", "a/b"), is_inside("/tmp", "/etc/passwd")
        (True, False)
    """
    try:
        inside(folder, relative)
    except UnsafePathError:
        return False
    return True
