"""PNG plots written without a display (matplotlib's Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def save_precision_curve_png(curves: Mapping[str, Sequence[float]], path: str | Path, title: str = "precision@k") -> Path:
    """Plot one precision@k-vs-k line per entry of ``curves`` (``name -> [p@1, p@2, ...]``) into ``path``."""
    return save_curves_png(curves, path, title=title, ylabel="precision@k")


def save_curves_png(
    curves: Mapping[str, Sequence[float]], path: str | Path, title: str, ylabel: str, xlabel: str = "k"
) -> Path:
    """Plot one line per entry of ``curves`` (``name -> [y at x=1, y at x=2, ...]``) into ``path``; integer x ticks."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    try:
        for name, curve in curves.items():
            ks = range(1, len(curve) + 1)
            ax.plot(ks, list(curve), marker="o", markersize=3, label=name)
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0.0, 1.02)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if len(curves) > 1:
            ax.legend()
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
