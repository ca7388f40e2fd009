"""The media folder of an evaluation callback: the last evaluation's figures, tables and curves as files that any
reader (an HTML report, a person) can use without a logger.

Layout, under ``<callback folder>/media/``:

- ``media.json`` (UTF-8 JSON, written atomically, replaced at every evaluation; it describes the last one)::

    {"format": 1, "prefix": "retrieval", "step": 384, "epoch": 7,
     "figures": [{"name": "embedding_projection", "file": "embedding_projection.png", "caption": "..."}],
     "tables":  [{"name": "worst_mismatches", "columns": ["query_image", "query_label", ...],
                  "rows": [[{"image": "tables/worst_mismatches/r000_query_image.png"}, "circle", ...], ...]}],
     "curves":  [{"name": "precision_curve", "xname": "k", "x": [1, 2, ...], "y": [0.9, 0.85, ...]}]}

- the PNG files it names: figures at ``<name>.png``, table images at ``tables/<table>/r<row, 3 digits>_<column>.png``.

Every ``file`` / ``image`` path is relative to the ``media/`` folder, and the file exists when the manifest names it.
A table cell is a JSON scalar, null, or ``{"image": path}``. The folder holds the manifest and its files only: each
evaluation's folder is written whole beside the previous one and then takes its place (:func:`write_media_folder`),
so files of earlier evaluations that the new manifest does not name are gone, and a failed write leaves the previous
folder as it was. Only a folder that holds ``media.json`` (or an empty one) is ever replaced: a ``media/`` of the
user's own, or a symbolic link in its place, is refused and left untouched.

Examples:
    >>> import json, tempfile
    >>> import numpy as np
    >>> folder = Path(tempfile.mkdtemp()) / "media"
    >>> pixel = np.zeros((1, 1, 3), dtype=np.uint8)
    >>> manifest = write_media_folder(folder, prefix="demo", step=3, epoch=0, figures=[],
    ...                               tables=[("pairs", ["img", "label"], [[pixel, "cat"]])], curves=[])
    >>> manifest["tables"][0]["rows"]
    [[{'image': 'tables/pairs/r000_img.png'}, 'cat']]
    >>> sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    ['media.json', 'tables/pairs/r000_img.png']
"""

from __future__ import annotations

import io
import math
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from beyondlabels.io.atomic import atomic_file, write_json
from beyondlabels.io.paths import UnsafePathError, inside

__all__ = [
    "MANIFEST_FILE",
    "MEDIA_FORMAT",
    "MEDIA_NAME",
    "check_media_name",
    "encode_png",
    "table_image_path",
    "write_media_folder",
]

MANIFEST_FILE = "media.json"
MEDIA_FORMAT = 1
# A figure, table or column name: it becomes part of a file name and of logger keys.
MEDIA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")


def check_media_name(name: Any, what: str) -> str:
    """``name`` when it is a valid media name (letters, digits, ``_ . @ -``, not starting with a sign), else a
    ``ValueError`` that names ``what``."""
    if not isinstance(name, str) or not MEDIA_NAME.match(name) or name in (MANIFEST_FILE, "tables"):
        raise ValueError(
            f"`{what}` must be a name of letters, digits and '_', '.', '@', '-' (starting with a letter or digit; "
            f"not 'tables' or {MANIFEST_FILE!r}), got {name!r}."
        )
    return name


def table_image_path(table: str, row: int, column: str) -> str:
    """Where the image cell of ``row`` (0-based) and ``column`` of ``table`` lies, relative to the ``media/`` folder.

    Examples:
        >>> table_image_path("worst_mismatches", 0, "query_image")
        'tables/worst_mismatches/r000_query_image.png'
    """
    return f"tables/{table}/r{row:03d}_{column}.png"


def encode_png(image: Any) -> bytes:
    """An ``H×W×C`` uint8 array (C = 1, 3 or 4) as PNG bytes."""
    from PIL import Image

    array = image[..., 0] if image.shape[-1] == 1 else image
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def _json_cell(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # numpy and torch scalars
        value = value.item()
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


def write_media_folder(
    folder: str | os.PathLike[str],
    *,
    prefix: str,
    step: int,
    epoch: int,
    figures: Sequence[tuple[str, bytes, str]],
    tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[Any]]]],
    curves: Sequence[tuple[str, str, Sequence[float], Sequence[float]]],
) -> dict[str, Any]:
    """Write one evaluation's media into ``folder`` (the layout: the module docstring) and return the manifest.

    Everything is checked and encoded in memory first, then written into a fresh staging folder beside ``folder``
    (``.<name>.staging``), which then takes the place of ``folder`` (two renames; for the moment between them the
    previous folder lies at ``.<name>.previous``, and a write that finds it there without ``folder`` puts it back
    first). A reader therefore finds a complete previous folder, a complete new one, or (between the renames) none.

    Args:
        folder: The ``media/`` folder (created when missing).
        prefix, step, epoch: The evaluation's prefix, ``trainer.global_step`` and epoch.
        figures: ``(name, PNG bytes, caption)`` per figure.
        tables: ``(name, columns, rows)`` per table; a cell is a scalar, None, or an ``H×W×C`` uint8 array (an
            image; anything with ``ndim == 3``, C = 1, 3 or 4; its column must be a valid name). Numpy and torch
            scalars become Python numbers, non-finite floats null, other objects their ``str``.
        curves: ``(name, xname, x, y)`` per curve.

    Raises:
        ValueError: for an invalid or repeated name (figures, tables and curves share one namespace; image columns),
            a row whose length is not the table's column count, or an image cell that is not ``H×W×C`` uint8; when
            ``folder`` is a symbolic link, a file, or a non-empty folder without ``media.json`` (a folder this
            project did not write is never replaced).
        OSError: when a file cannot be written or the folders cannot be swapped.

        On either error the previous manifest and the files it names are untouched.
    """
    folder = Path(folder)
    staging, previous = _sibling(folder, "staging"), _sibling(folder, "previous")
    if previous.is_dir() and not previous.is_symlink() and not folder.exists():  # killed between the two renames
        os.replace(previous, folder)
    _check_replaceable(folder)
    manifest, files = _encode(prefix, step, epoch, figures, tables, curves)
    _discard(staging)
    _discard(previous)
    try:
        for relative, data in files.items():
            with atomic_file(inside(staging, relative, "a media file")) as handle:
                handle.write(data)
        write_json(staging / MANIFEST_FILE, manifest, ensure_ascii=False)
    except BaseException:
        _discard(staging)
        raise
    _swap(staging, folder, previous)
    return manifest


def _encode(
    prefix: str,
    step: int,
    epoch: int,
    figures: Sequence[tuple[str, bytes, str]],
    tables: Sequence[tuple[str, Sequence[str], Sequence[Sequence[Any]]]],
    curves: Sequence[tuple[str, str, Sequence[float], Sequence[float]]],
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and the files it names (path relative to the media folder -> bytes); every check is here."""
    names: set[str] = set()
    for name, what in (
        [(f[0], "figure") for f in figures] + [(t[0], "table") for t in tables] + [(c[0], "curve") for c in curves]
    ):
        if check_media_name(name, f"{what} name") in names:
            raise ValueError(
                f"the media name {name!r} is used twice; give every figure, table and curve its own name "
                "(they share the file names and logger keys <prefix>/<name>)."
            )
        names.add(name)
    files: dict[str, bytes] = {}
    manifest: dict[str, Any] = {
        "format": MEDIA_FORMAT,
        "prefix": prefix,
        "step": int(step),
        "epoch": int(epoch),
        "figures": [],
        "tables": [],
        "curves": [],
    }
    for name, data, caption in figures:
        files[f"{name}.png"] = bytes(data)
        manifest["figures"].append({"name": name, "file": f"{name}.png", "caption": str(caption)})
    for name, columns, rows in tables:
        columns = [str(c) for c in columns]
        cells_out = []
        for r, row in enumerate(rows):
            if len(row) != len(columns):
                raise ValueError(f"table {name!r}: row {r} has {len(row)} cells for {len(columns)} columns.")
            out = []
            for column, cell in zip(columns, row):
                if getattr(cell, "ndim", None) == 3:
                    check_media_name(column, f"image column of table {name!r}")
                    shape, dtype = tuple(getattr(cell, "shape", ())), str(getattr(cell, "dtype", type(cell).__name__))
                    if shape[-1] not in (1, 3, 4) or dtype != "uint8":
                        raise ValueError(
                            f"table {name!r}, row {r}, column {column!r}: an image cell must be an H×W×C uint8 array "
                            f"with C in (1, 3, 4), got shape {shape} of {dtype}; convert it with "
                            "beyondlabels.callbacks.media.to_uint8_image."
                        )
                    relative = table_image_path(name, r, column)
                    files[relative] = encode_png(cell)
                    out.append({"image": relative})
                else:
                    out.append(_json_cell(cell))
            cells_out.append(out)
        manifest["tables"].append({"name": name, "columns": columns, "rows": cells_out})
    for name, xname, x, y in curves:
        manifest["curves"].append(
            {
                "name": name,
                "xname": str(xname),
                "x": [_json_cell(float(v)) if not isinstance(v, int) else v for v in x],
                "y": [_json_cell(float(v)) for v in y],
            }
        )
    return manifest, files


def _check_replaceable(folder: Path) -> None:
    """Refuse to put a new media folder in the place of anything but a media folder this project wrote (one holding
    ``media.json``) or an empty folder: a user's own ``media/`` (``save_dir`` pointed at a folder of theirs) is never
    removed, and a symbolic link is never followed or replaced."""
    if folder.is_symlink():
        raise UnsafePathError(
            f"the media folder {folder} is a symbolic link; the media of an evaluation are written into a folder of "
            "their own, never through a link. Remove the link or choose another save_dir."
        )
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a media folder; move it away or choose another save_dir or prefix.")
    manifest = folder / MANIFEST_FILE
    if (manifest.is_file() and not manifest.is_symlink()) or next(folder.iterdir(), None) is None:
        return
    raise ValueError(
        f"{folder} is not a media folder this project wrote (it holds no {MANIFEST_FILE}) and would be replaced by the "
        "evaluation's media; it is left as it is. Move it away or choose another save_dir or prefix."
    )


def _sibling(folder: Path, role: str) -> Path:
    return folder.with_name(f".{folder.name}.{role}")


def _discard(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _swap(staging: Path, folder: Path, previous: Path) -> None:
    """``staging`` in the place of ``folder``; the old ``folder`` is removed, or put back when the second rename
    fails."""
    had_folder = folder.exists()
    if had_folder:
        os.replace(folder, previous)
    try:
        os.replace(staging, folder)
    except BaseException:
        if had_folder:
            os.replace(previous, folder)
        _discard(staging)
        raise
    _discard(previous)
