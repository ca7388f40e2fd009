"""The media of one evaluation (figures, tables, curves), described once by the family and the base, then written
to the callback's ``media/`` folder (:mod:`beyondlabels.io.media_files`) and sent to every logger of the trainer
(:mod:`beyondlabels.callbacks._sinks`).

Examples:
    >>> media = EvaluationMedia(prefix="demo", step=12, epoch=1)
    >>> media.table("pairs", ["query_image", "label"], [{"query_image": torch.zeros(3, 2, 2), "label": "cat"}])
    >>> media.curve("precision_curve", [0.9, 0.8])
    >>> media.tables[0].image_columns, media.tables[0].rows[0][0].shape, media.curves[0].x
    (['query_image'], (2, 2, 3), [1, 2])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from beyondlabels.io.media_files import check_media_name

__all__ = [
    "EvaluationMedia",
    "MediaCurve",
    "MediaFigure",
    "MediaTable",
    "dataset_item",
    "thumbnail",
    "to_uint8_image",
]


def dataset_item(dataset: Any, sample_id: int, id_key: str) -> Any | None:
    """The evaluation dataset's item of ``sample_id`` when the dataset is indexed by id (item ``i`` has id ``i``),
    else None. Dict items must carry ``id_key`` equal to the id (so a dataset whose ids are not its indices is never
    misread); tuple items are taken as they are at index ``sample_id``."""
    if dataset is None or not hasattr(dataset, "__getitem__"):
        return None
    try:
        item = dataset[sample_id]
    except Exception:  # noqa: BLE001 - no item is not an error: the table cell stays empty
        return None
    if isinstance(item, dict):
        return item if id_key in item and int(item[id_key]) == sample_id else None
    return item if isinstance(item, (list, tuple)) and item else None


def thumbnail(dataset: Any, sample_id: int, image_key: str, id_key: str) -> torch.Tensor | None:
    """The C×H×W image of ``sample_id`` (:func:`dataset_item`; ``image_key`` of a dict item, the first entry of a
    tuple item), or None.

    Examples:
        >>> data = [{"id": 0, "image": torch.zeros(3, 2, 2)}, {"id": 5, "image": torch.ones(3, 2, 2)}]
        >>> thumbnail(data, 0, "image", "id").shape, thumbnail(data, 1, "image", "id")  # item 1 carries id 5
        (torch.Size([3, 2, 2]), None)
    """
    item = dataset_item(dataset, sample_id, id_key)
    image = item.get(image_key) if isinstance(item, dict) else item[0] if item is not None else None
    return image if isinstance(image, torch.Tensor) and image.ndim == 3 else None


def to_uint8_image(image: Any) -> np.ndarray:
    """A C×H×W tensor or array (C = 1, 3 or 4; floats in [0, 1] or uint8) as an H×W×C uint8 numpy array.

    Raises:
        ValueError: for an image that is not C×H×W with C in (1, 3, 4).
    """
    image = torch.as_tensor(image).detach().cpu()
    if image.ndim != 3 or image.shape[0] not in (1, 3, 4):
        raise ValueError(
            f"an image cell must be a C×H×W tensor or array with C in (1, 3, 4), got shape {tuple(image.shape)}."
        )
    if image.dtype != torch.uint8:
        image = (image.float().nan_to_num(0.0).clamp(0, 1) * 255).round().to(torch.uint8)
    return image.permute(1, 2, 0).contiguous().numpy()


def _cell(value: Any) -> Any:
    """A table cell as a Python scalar (0-d tensors and numpy scalars unwrapped), an H×W×C uint8 image (a C×H×W
    tensor or array), or as given."""
    if getattr(value, "ndim", None) == 3:
        return to_uint8_image(value)
    if isinstance(value, (torch.Tensor, np.generic, np.ndarray)) and getattr(value, "ndim", 0) == 0:
        return value.item()
    return value


@dataclass
class MediaFigure:
    """A figure as PNG bytes; ``to_loggers`` False keeps it in the media folder only (already sent this fit)."""

    name: str
    png: bytes
    caption: str = ""
    to_loggers: bool = True


@dataclass
class MediaTable:
    """A table: ``rows`` are lists in ``columns`` order; image cells are H×W×C uint8 arrays."""

    name: str
    columns: list[str]
    rows: list[list[Any]]
    image_columns: list[str] = field(default_factory=list)


@dataclass
class MediaCurve:
    """A curve ``y`` over ``x`` (x named ``xname``)."""

    name: str
    x: list[float]
    y: list[float]
    xname: str = "k"


class EvaluationMedia:
    """What one evaluation shows besides its scalars: figures, tables and curves, under ``prefix`` at ``step``.

    Names (figures, tables and curves share one namespace) become file names and logger keys ``<prefix>/<name>``:
    letters, digits and ``_ . @ -``. ``step`` (``trainer.global_step``) names the evaluation in files and captions;
    ``log_step`` is the step the loggers get, the one Lightning gives the evaluation's scalars
    (:func:`~beyondlabels.callbacks.packages.logging_step`; default ``step``).
    """

    def __init__(self, prefix: str, step: int, epoch: int, log_step: int | None = None) -> None:
        self.prefix, self.step, self.epoch = prefix, int(step), int(epoch)
        self.log_step = self.step if log_step is None else int(log_step)
        self.figures: list[MediaFigure] = []
        self.tables: list[MediaTable] = []
        self.curves: list[MediaCurve] = []

    def _check_new(self, name: str, what: str) -> None:
        check_media_name(name, what)
        if any(item.name == name for item in (*self.figures, *self.tables, *self.curves)):
            raise ValueError(
                f"`{what}` {name!r} is already a figure, table or curve of this evaluation; give each its own name."
            )

    def figure(self, name: str, source: Any, caption: str = "", to_loggers: bool = True) -> None:
        """Add a figure: a PNG file (path), PNG bytes, or a matplotlib figure (rendered now).

        Raises:
            ValueError: for a bad or repeated ``name``, or a ``source`` that is none of these.
        """
        from beyondlabels.reporting.media_figures import figure_png

        self._check_new(name, "name")
        if isinstance(source, (str, Path)):
            png = Path(source).read_bytes()
        elif isinstance(source, (bytes, bytearray)):
            png = bytes(source)
        elif hasattr(source, "savefig"):
            png = figure_png(source)
        else:
            raise ValueError(
                f"figure {name!r}: `source` must be a PNG path, PNG bytes or a matplotlib figure, got "
                f"{type(source).__name__}."
            )
        if not png.startswith(b"\x89PNG"):
            raise ValueError(f"figure {name!r}: `source` is not a PNG image.")
        self.figures.append(MediaFigure(name, png, str(caption), bool(to_loggers)))

    def table(self, name: str, columns: Sequence[str], rows: Sequence[Mapping[str, Any] | Sequence[Any]]) -> None:
        """Add a table. Each row is a mapping (cells read by column; a missing one is None) or a list in ``columns``
        order; a C×H×W tensor or array cell is an image (:func:`to_uint8_image`).

        Raises:
            ValueError: for a bad or repeated name or column, or a list row of another length than ``columns``.
        """
        self._check_new(name, "name")
        columns = list(columns)
        if not all(isinstance(c, str) and c for c in columns) or len(set(columns)) != len(columns):
            raise ValueError(f"table {name!r}: `columns` must be distinct non-empty strings, got {columns!r}.")
        out = []
        for r, row in enumerate(rows):
            cells = [row.get(c) for c in columns] if isinstance(row, Mapping) else list(row)
            if len(cells) != len(columns):
                raise ValueError(f"table {name!r}: row {r} has {len(cells)} cells for {len(columns)} columns.")
            out.append([_cell(c) for c in cells])
        images = [c for j, c in enumerate(columns) if any(isinstance(row[j], np.ndarray) for row in out)]
        for column in images:  # an image column names its cells' files
            check_media_name(column, f"image column of table {name!r}")
        self.tables.append(MediaTable(name, columns, out, images))

    def curve(self, name: str, y: Sequence[float], x: Sequence[float] | None = None, xname: str = "k") -> None:
        """Add a curve: ``y`` over ``x`` (default 1, 2, ..., as for a curve over k)."""
        self._check_new(name, "curve name")
        y = [float(v) for v in y]
        x = list(range(1, len(y) + 1)) if x is None else list(x)
        if len(x) != len(y):
            raise ValueError(f"curve {name!r}: `x` has {len(x)} values for {len(y)} values of `y`.")
        self.curves.append(MediaCurve(name, x, y, str(xname)))

    def write(self, folder: str | Path) -> dict[str, Any]:
        """Write the media into ``folder`` (a callback's ``media/`` folder,
        :func:`~beyondlabels.io.media_files.write_media_folder`)."""
        from beyondlabels.io.media_files import write_media_folder

        return write_media_folder(
            folder,
            prefix=self.prefix,
            step=self.step,
            epoch=self.epoch,
            figures=[(f.name, f.png, f.caption) for f in self.figures],
            tables=[(t.name, t.columns, t.rows) for t in self.tables],
            curves=[(c.name, c.xname, c.x, c.y) for c in self.curves],
        )

    def table_grid(self, table: MediaTable) -> np.ndarray:
        """The pictures of ``table`` with their rows' other cells as captions, an H×W×3 uint8 image
        (:func:`~beyondlabels.reporting.media_figures.table_images_grid`), drawn once per table."""
        cache = self.__dict__.setdefault("_grids", {})
        if table.name not in cache:
            from beyondlabels.reporting.media_figures import table_images_grid

            cache[table.name] = table_images_grid(
                table.columns, table.rows, title=f"{self.prefix}: {table.name} (step {self.step})"
            )
        return cache[table.name]
