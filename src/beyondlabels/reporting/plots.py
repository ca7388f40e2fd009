"""PNG plots written without a display (matplotlib's Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from beyondlabels._internal.charts import plain_text
from beyondlabels._internal.checks import check_positive_int
from beyondlabels.reporting._figures import png_figure, pyplot


def save_precision_curve_png(
    curves: Mapping[str, Sequence[float]], path: str | Path, title: str = "precision@k"
) -> Path:
    """Plot one precision@k-vs-k line per entry of ``curves`` (``name -> [p@1, p@2, ...]``) into ``path``."""
    return save_curves_png(curves, path, title=title, ylabel="precision@k")


@plain_text
def save_curves_png(
    curves: Mapping[str, Sequence[float]], path: str | Path, title: str, ylabel: str, xlabel: str = "k"
) -> Path:
    """Plot one line per entry of ``curves`` (``name -> [y at x=1, y at x=2, ...]``) into ``path``; integer x ticks."""
    path = Path(path)
    with png_figure(path, figsize=(5, 3.5), dpi=120) as (_, ax):
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
    return path


@plain_text
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
            (
                int(h["step"]),
                float(h[key]),
                float(h.get(f"{key}_ci_low", h[key])),
                float(h.get(f"{key}_ci_high", h[key])),
            )
            for h in history
            if isinstance(h.get(key), (int, float)) and "error" not in h
        ]
        if rows:
            series[key] = rows
    if not series:
        return None
    path = Path(path)
    with png_figure(path, figsize=(7.5, 3.8), dpi=120) as (_, ax):
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
    return path


@plain_text
def save_embedding_projection_png(
    coords: object,
    labels: object,
    class_names: Sequence[str],
    explained: Sequence[float],
    path: str | Path,
    title: str = "embedding projection (PCA)",
) -> Path:
    """Scatter 2-D ``coords`` ``[N, 2]`` coloured by class into ``path``: ``labels`` ``[N]`` are indices into
    ``class_names``; with at most 20 classes each gets a colour of its own and a legend entry, beyond that colours
    follow the class index without a legend. ``explained`` holds the explained variance ratio of each axis (e.g. from
    :func:`beyondlabels.functional.projection.pca_projection`), shown as percentages in the title and the axis labels
    ("n/a" for NaN); the full title is also stored as the PNG's ``Title`` text.

    Raises:
        ValueError: naming the argument, for coords not ``[N, 2]`` with N >= 1, labels of another length or outside
            ``0..len(class_names) - 1``, or an ``explained`` that is not two numbers.

    Examples:
        >>> import tempfile
        >>> from PIL import Image
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = save_embedding_projection_png(
        ...         [[0, 0], [1, 1], [2, 0]], [0, 1, 1], ["a", "b"], [0.75, 0.25], f"{tmp}/p.png"
        ...     )
        ...     Image.open(path).text["Title"]
        'embedding projection (PCA)\\nPC1 75.0%, PC2 25.0% of the variance'
    """
    import numpy as np

    xy = np.asarray(coords, dtype=float)
    if xy.ndim != 2 or xy.shape[1] != 2 or xy.shape[0] == 0:
        raise ValueError(f"`coords` must be [N, 2] with N >= 1, got shape {xy.shape}.")
    raw = np.asarray(labels)
    if raw.shape != (xy.shape[0],) or not np.issubdtype(raw.dtype, np.integer):
        raise ValueError(
            f"`labels` must be {xy.shape[0]} integer class indices (one per row of `coords`), "
            f"got {raw.dtype} {raw.shape}."
        )
    names = [str(c) for c in class_names]
    if names == [] or int(raw.min()) < 0 or int(raw.max()) >= len(names):
        raise ValueError(
            f"`labels` must index `class_names` (0..{len(names) - 1}), got values {int(raw.min())}..{int(raw.max())}."
        )
    ratio = np.asarray(explained, dtype=float).ravel()
    if ratio.shape != (2,):
        raise ValueError(f"`explained` must hold the explained variance ratio of the 2 axes, got {ratio.size} values.")
    shares = ["n/a" if not np.isfinite(r) else f"{100 * r:.1f}%" for r in ratio]
    full_title = f"{title}\nPC1 {shares[0]}, PC2 {shares[1]} of the variance"
    path = Path(path)
    num_classes = len(names)
    marker_size = float(np.clip(4000 / xy.shape[0], 2, 30))
    width = 6.5 if num_classes <= 20 else 5.5
    with png_figure(path, figsize=(width, 5), dpi=120, metadata={"Title": full_title}) as (_, ax):
        if num_classes <= 20:
            cmap = pyplot().get_cmap("tab10" if num_classes <= 10 else "tab20")
            for c in np.unique(raw):
                rows = raw == c
                ax.scatter(
                    xy[rows, 0], xy[rows, 1], s=marker_size, color=cmap(int(c)), alpha=0.8, linewidths=0, label=names[c]
                )
            ax.legend(
                fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0), markerscale=max(1.0, 12 / marker_size)
            )
        else:
            ax.scatter(
                xy[:, 0],
                xy[:, 1],
                s=marker_size,
                c=raw,
                cmap="turbo",
                vmin=0,
                vmax=num_classes - 1,
                alpha=0.8,
                linewidths=0,
            )
        ax.set_xlabel(f"PC1 ({shares[0]})")
        ax.set_ylabel(f"PC2 ({shares[1]})")
        ax.set_title(full_title, fontsize=9)
        ax.grid(alpha=0.3)
    return path


@plain_text
def save_image_grid_png(
    images: object, titles: Sequence[str], path: str | Path, columns: int = 4, title: str = ""
) -> Path:
    """Pictures ``[N, 3, H, W]`` with values in [0, 1] in a grid of ``columns`` columns, each under its (wrapped)
    title, saved to ``path``: the generated samples of an evaluation, readable without a W&B server.

    Raises:
        ValueError: for pictures not ``[N, 3, H, W]`` with N >= 1, values outside [0, 1], a ``titles`` of another
            length, or ``columns`` < 1.

    Examples:
        >>> import tempfile, torch
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     save_image_grid_png(torch.zeros(2, 3, 8, 8), ["a square", "a star"], f"{tmp}/g.png").name
        'g.png'
    """
    import textwrap

    import numpy as np

    pictures = np.asarray(images, dtype=float)
    if pictures.ndim != 4 or pictures.shape[1] != 3 or pictures.shape[0] == 0:
        raise ValueError(f"`images` must be [N, 3, H, W] with N >= 1, got shape {pictures.shape}.")
    if not np.isfinite(pictures).all() or pictures.min() < 0.0 or pictures.max() > 1.0:
        raise ValueError("`images` must hold finite values in [0, 1].")
    if len(titles) != pictures.shape[0]:
        raise ValueError(f"`titles` must hold one title per picture ({pictures.shape[0]}), got {len(titles)}.")
    columns = check_positive_int(columns, "columns")
    path = Path(path)
    n = pictures.shape[0]
    cols = min(columns, n)
    rows = -(-n // cols)
    with png_figure(path, rows, cols, figsize=(2.2 * cols, 2.5 * rows), dpi=100, squeeze=False) as (fig, axes):
        for ax in axes.flat:
            ax.axis("off")
        for ax, picture, text in zip(axes.flat, pictures, titles):
            ax.imshow(picture.transpose(1, 2, 0), interpolation="nearest")
            ax.set_title("\n".join(textwrap.wrap(str(text), 26)), fontsize=7)
        if title:
            fig.suptitle(title, fontsize=9)
    return path
