"""Figures of an evaluation's media that every logger can show: a confusion matrix, a labelled scatter and curves
(each a :class:`matplotlib.figure.Figure` made without ``pyplot``: no global figure state, nothing to close;
:func:`figure_png` renders one to PNG bytes), and the pictures of a table with their row's other cells as captions
(:func:`table_images_grid`, an image drawn with PIL).

Examples:
    >>> fig = confusion_matrix_figure([[3, 1], [0, 2]], ["cat", "dog"], title="confusion")
    >>> figure_png(fig)[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from beyondlabels._internal.charts import plain_text

__all__ = ["confusion_matrix_figure", "curves_figure", "figure_png", "scatter_figure", "table_images_grid"]

# Above this many classes a confusion matrix or scatter drops its per-class labels (they would overlap).
MAX_LABELLED_CLASSES = 30


def _figure(width: float, height: float, dpi: int = 100) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=dpi)


def _finish(fig: Any, ax: Any, xname: str, yname: str, title: str) -> Any:
    """Axis names, title and grid of a one-axes figure, laid out."""
    ax.set_xlabel(xname)
    ax.set_ylabel(yname)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


@plain_text
def figure_png(fig: Any, dpi: int | None = None) -> bytes:
    """The PNG bytes of a matplotlib figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi or fig.dpi)  # atomic: an in-memory buffer, no file
    return buffer.getvalue()


@plain_text
def confusion_matrix_figure(matrix: Any, class_names: Sequence[str], title: str = "confusion matrix") -> Any:
    """A ``[K, K]`` matrix of counts (row: true class, column: predicted class) as a heatmap with the counts written
    in the cells (up to :data:`MAX_LABELLED_CLASSES` classes; beyond that, no labels).

    Raises:
        ValueError: for a matrix that is not ``[K, K]`` with ``K = len(class_names)``.
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] != len(class_names):
        raise ValueError(
            f"`matrix` must be [K, K] with K = len(class_names) = {len(class_names)}, got shape {m.shape}."
        )
    k = len(class_names)
    size = min(14.0, 3.0 + 0.4 * k)
    fig = _figure(size, size * 0.85, dpi=100)
    ax = fig.add_subplot()
    image = ax.imshow(m, cmap="Blues")
    if k <= MAX_LABELLED_CLASSES:
        ax.set_xticks(range(k), labels=list(class_names), rotation=90, fontsize=7)
        ax.set_yticks(range(k), labels=list(class_names), fontsize=7)
        high = m.max() if m.size else 0.0
        for i in range(k):
            for j in range(k):
                colour = "white" if high and m[i, j] > high / 2 else "black"
                ax.text(j, i, f"{m[i, j]:g}", ha="center", va="center", fontsize=7, color=colour)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


@plain_text
def scatter_figure(
    x: Sequence[float], y: Sequence[float], labels: Sequence[str], xname: str, yname: str, title: str = ""
) -> Any:
    """One point per ``(x[i], y[i])``, annotated with ``labels[i]`` (up to :data:`MAX_LABELLED_CLASSES` points), on
    axes from 0 to 1 (the values are rates).

    Raises:
        ValueError: for ``x``, ``y`` and ``labels`` of different lengths.
    """
    if not len(x) == len(y) == len(labels):
        raise ValueError(
            f"`x`, `y` and `labels` must have one entry per point, got {len(x)}, {len(y)} and {len(labels)}."
        )
    fig = _figure(6.0, 5.0)
    ax = fig.add_subplot()
    ax.scatter(list(x), list(y), s=18)
    if len(labels) <= MAX_LABELLED_CLASSES:
        for xi, yi, label in zip(x, y, labels):
            ax.annotate(str(label), (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlim(-0.02, 1.05)
    ax.set_ylim(-0.02, 1.05)
    return _finish(fig, ax, xname, yname, title)


@plain_text
def curves_figure(
    x: Sequence[float], ys: Mapping[str, Sequence[float]], xname: str, yname: str = "", title: str = ""
) -> Any:
    """Lines ``ys[name]`` over ``x`` (one per name, with a legend when there are several).

    Raises:
        ValueError: for a line whose length is not ``len(x)``.
    """
    fig = _figure(6.0, 4.0)
    ax = fig.add_subplot()
    for name, values in ys.items():
        if len(values) != len(x):
            raise ValueError(f"line {name!r} has {len(values)} values for {len(x)} x values; give one value per x.")
        ax.plot(list(x), list(values), marker="." if len(x) <= 50 else None, label=name)
    if len(ys) > 1:
        ax.legend(fontsize=7)
    return _finish(fig, ax, xname, yname, title)


def _caption(columns: Sequence[str], row: Sequence[Any], image_columns: Sequence[int], width: int) -> str:
    parts = []
    for index, (column, value) in enumerate(zip(columns, row)):
        if index in image_columns or value is None:
            continue
        parts.append(f"{column}={value:.4g}" if isinstance(value, float) else f"{column}={value}")
    return textwrap.fill(", ".join(parts), width)


def table_images_grid(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "", size: int = 96
) -> np.ndarray:
    """The pictures of a table as one ``H×W×3`` uint8 image: each row's image cells side by side (each under its
    column's name, scaled to fit ``size`` pixels, small ones by pixel repetition) with the row's other cells as their
    caption; rows follow each other, several per line (six pictures a line). Drawn with PIL: milliseconds for a
    table of thumbnails. Image cells are ``H×W×C`` uint8 arrays (C = 1, 3 or 4) or None ("no image").

    Raises:
        ValueError: for a row whose length is not ``len(columns)``, or a table without an image cell.

    Examples:
        >>> grid = table_images_grid(["query_image", "label"], [[np.zeros((4, 4, 3), np.uint8), "cat"]], size=32)
        >>> grid.dtype, grid.shape[2], grid.shape[1] >= 32
        (dtype('uint8'), 3, True)
    """
    from PIL import Image, ImageDraw, ImageFont

    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"every row must have one cell per column ({len(columns)}), got a row of {len(row)}.")
    is_image = lambda v: isinstance(v, np.ndarray) and v.ndim == 3  # noqa: E731
    image_columns = [j for j in range(len(columns)) if any(is_image(row[j]) for row in rows)]
    if not image_columns:
        raise ValueError("the table has no image cell; give H×W×C uint8 arrays in at least one column.")
    font = ImageFont.load_default()
    line_height, char_width, pad = 12, 6, 6
    width = len(image_columns)
    block_width = width * (size + pad)
    captions = [
        textwrap.wrap(_caption(columns, row, image_columns, 10_000), max(8, block_width // char_width)) or [""]
        for row in rows
    ]
    block_height = line_height + size + pad + line_height * max(len(c) for c in captions) + pad
    per_line = max(1, 6 // width)
    lines = -(-len(rows) // per_line) if rows else 1
    top = line_height + pad if title else 0
    canvas = Image.new("RGB", (per_line * block_width + pad, top + lines * block_height + pad), "white")
    draw = ImageDraw.Draw(canvas)
    if title:
        draw.text((pad, 2), title, fill="black", font=font)
    for i, row in enumerate(rows):
        line, place = divmod(i, per_line)
        x0, y0 = pad + place * block_width, top + line * block_height
        for slot, j in enumerate(image_columns):
            x = x0 + slot * (size + pad)
            draw.text((x, y0), str(columns[j])[: size // char_width], fill="black", font=font)
            cell = row[j]
            box = (x, y0 + line_height, x + size - 1, y0 + line_height + size - 1)
            if is_image(cell):
                picture = Image.fromarray(cell[..., 0] if cell.shape[-1] == 1 else cell).convert("RGB")
                scale = size / max(picture.size)
                fitted = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
                resample = Image.Resampling.NEAREST if scale >= 1 else Image.Resampling.BILINEAR
                canvas.paste(picture.resize(fitted, resample), box[:2])
            else:
                draw.rectangle(box, outline="grey")
                draw.text((x + 4, y0 + line_height + size // 2), "no image", fill="grey", font=font)
        for k, text in enumerate(captions[i]):
            draw.text((x0, y0 + line_height + size + pad // 2 + k * line_height), text, fill="black", font=font)
    return np.asarray(canvas)
