"""PNG figures of the feature-profile family: the class similarity heatmap and the observed-vs-null histogram
(matplotlib's Agg backend; no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from beyondlabels._internal.charts import plain_text
from beyondlabels.reporting._figures import png_figure

__all__ = ["save_null_histogram_png", "save_similarity_heatmap_png"]


@plain_text
def save_similarity_heatmap_png(
    similarity: Any, classes: Sequence[str], path: str | Path, title: str = "class similarity (M_feature)"
) -> Path:
    """Draw the ``[C, C]`` matrix as a heatmap (0..1 colour scale, class names on both axes) into ``path``.

    Raises:
        ValueError: for a non-square matrix or ``classes`` of the wrong length.
    """
    m = np.asarray(similarity, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] != len(classes):
        raise ValueError(f"`similarity` must be [C, C] with C = len(classes) = {len(classes)}, got shape {m.shape}.")
    path = Path(path)
    size = min(14.0, 2.5 + 0.35 * len(classes))
    with png_figure(path, figsize=(size, size * 0.85), dpi=110) as (fig, ax):
        image = ax.imshow(m, vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_xticks(range(len(classes)), labels=list(classes), rotation=90, fontsize=7)
        ax.set_yticks(range(len(classes)), labels=list(classes), fontsize=7)
        ax.set_title(title)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return path


@plain_text
def save_null_histogram_png(
    null: Any,
    observed: float,
    path: str | Path,
    p_value: float | None = None,
    title: str = "mismatch similarity vs null",
) -> Path:
    """Histogram of the null's trial statistics with the observed mean similarity as a vertical line.

    Raises:
        ValueError: for an empty or non-finite null.
    """
    values = np.asarray(null, dtype=float).ravel()
    if values.size == 0 or not np.isfinite(values).all():
        raise ValueError("`null` must hold at least one finite trial statistic.")
    path = Path(path)
    with png_figure(path, figsize=(5.5, 3.5), dpi=120) as (_, ax):
        ax.hist(values, bins=50, color="0.6", label=f"null ({values.size} trials)")
        ax.axvline(float(observed), color="crimson", lw=2, label=f"observed {float(observed):.3f}")
        ax.set_xlabel("mean similarity of the mismatches")
        ax.set_ylabel("trials")
        ax.set_title(title + (f"  (p = {p_value:.2g})" if p_value is not None else ""))
        ax.legend(fontsize=8)
    return path
