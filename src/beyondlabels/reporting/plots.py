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


def save_history_band_png(
    history: Sequence[Mapping[str, object]],
    keys: Sequence[str],
    path: str | Path,
    title: str = "metrics per evaluation",
    max_keys: int = 6,
) -> Path | None:
    """Plot each key's value over the trainer steps of ``history`` (records with ``step``, ``<key>``,
    ``<key>_ci_low`` and ``<key>_ci_high``) with its confidence interval as a shaded band; None when no record has a
    value to draw. Only the first ``max_keys`` distinct keys are drawn, so bands stay readable."""
    series = {}
    for key in list(dict.fromkeys(keys))[:max_keys]:
        rows = [
            (int(h["step"]), float(h[key]), float(h.get(f"{key}_ci_low", h[key])), float(h.get(f"{key}_ci_high", h[key])))
            for h in history
            if isinstance(h.get(key), (int, float)) and "error" not in h
        ]
        if rows:
            series[key] = rows
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 3.8), dpi=120)
    try:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        for key, rows in series.items():
            steps, values, lows, highs = zip(*rows)
            (line,) = ax.plot(steps, values, marker="o", markersize=3, label=key)
            ax.fill_between(steps, lows, highs, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel("trainer step")
        ax.set_ylabel("value (band: 95% bootstrap CI over queries)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
