"""Figures drawn without a display (matplotlib's Agg backend) and saved atomically (internal: shared by the PNG
writers of ``reporting``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from beyondlabels.io.atomic import save_figure


def pyplot() -> Any:
    """``matplotlib.pyplot``, on the Agg backend unless a backend is already in use."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def png_figure(
    path: Path, *rows_columns: int, metadata: Mapping[str, str] | None = None, **subplots: Any
) -> Iterator[tuple[Any, Any]]:
    """The figure and axes of ``plt.subplots(*rows_columns, **subplots)`` to draw on in the block; when the block ends
    without an error the figure is laid out tight and saved into ``path`` (its folder made, the file written
    atomically by :func:`~beyondlabels.io.atomic.save_figure`, ``metadata`` the PNG's text). Closed either way."""
    plt = pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(*rows_columns, **subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        save_figure(fig, path, metadata=metadata)
    finally:
        plt.close(fig)
