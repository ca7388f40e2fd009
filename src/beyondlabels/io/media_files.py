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

Every ``file`` / ``image`` path is relative to the ``media/`` folder, and the file exists when the manifest names it
(the PNGs are written before the manifest). A table cell is a JSON scalar, null, or ``{"image": path}``. Files of
earlier evaluations that the new manifest does not name are removed after it is written.

Example:
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from beyondlabels.io.atomic import atomic_file, write_json

__all__ = ["MANIFEST_FILE", "MEDIA_FORMAT", "MEDIA_NAME", "check_media_name", "encode_png", "table_image_path", "write_media_folder"]

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

    Example:
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


def _write_bytes(path: Path, data: bytes) -> None:
    with atomic_file(path) as handle:
        handle.write(data)


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

    Args:
        folder: The ``media/`` folder (created when missing).
        prefix, step, epoch: The evaluation's prefix, ``trainer.global_step`` and epoch.
        figures: ``(name, PNG bytes, caption)`` per figure.
        tables: ``(name, columns, rows)`` per table; a cell is a scalar, None, or an ``H×W×C`` uint8 array (an
            image; anything with ``ndim == 3``; its column must be a valid name). Numpy and torch scalars become
            Python numbers, non-finite floats null, other objects their ``str``.
        curves: ``(name, xname, x, y)`` per curve.

    Raises:
        ValueError: for an invalid or repeated name (of a figure, table or image column), or a row whose length is
            not the table's column count.
        OSError: when a file cannot be written; the previous manifest and the files it names are then untouched.
    """
    folder = Path(folder)
    names: set[str] = set()
    for name in [f[0] for f in figures] + [t[0] for t in tables]:
        if check_media_name(name, "name") in names:
            raise ValueError(f"the media name {name!r} is used twice; give every figure and table its own name.")
        names.add(name)
    written: set[Path] = set()
    manifest: dict[str, Any] = {"format": MEDIA_FORMAT, "prefix": prefix, "step": int(step), "epoch": int(epoch),
                                "figures": [], "tables": [], "curves": []}  # fmt: skip
    for name, data, caption in figures:
        _write_bytes(folder / f"{name}.png", data)
        written.add(folder / f"{name}.png")
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
                    relative = table_image_path(name, r, column)
                    _write_bytes(folder / relative, encode_png(cell))
                    written.add(folder / relative)
                    out.append({"image": relative})
                else:
                    out.append(_json_cell(cell))
            cells_out.append(out)
        manifest["tables"].append({"name": name, "columns": columns, "rows": cells_out})
    for name, xname, x, y in curves:
        manifest["curves"].append({"name": check_media_name(name, "curve name"), "xname": str(xname),
                                   "x": [_json_cell(float(v)) if not isinstance(v, int) else v for v in x],
                                   "y": [_json_cell(float(v)) for v in y]})  # fmt: skip
    write_json(folder / MANIFEST_FILE, manifest, ensure_ascii=False)
    _remove_unnamed(folder, written | {folder / MANIFEST_FILE})
    return manifest


def _remove_unnamed(folder: Path, keep: set[Path]) -> None:
    """Remove the files under ``folder`` that are not in ``keep``, then the folders left empty."""
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_file() and path not in keep and not path.name.startswith("."):
            path.unlink(missing_ok=True)
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
