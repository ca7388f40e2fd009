"""Checkpoint selection in words and in a picture: the lines the run summary, ``evaluate.py task=select`` and the
HTML report show from a ``selection.json`` (:mod:`beyondlabels.io.selection_file`), and the set drawn over the curve.

Examples:
    >>> from pathlib import Path
    >>> from beyondlabels.io.selection_file import Selection
    >>> found = Selection(Path("selection.json"), "precision@1", "retrieval/precision@1", "max", 0.9, [96, 192, 288],
    ...                   [0.7, 0.88, 0.889], [0.0, 0.6, 1.0], [192, 288], 288, 0.889, 0.881, 0.86, 0.90, 0.95)
    >>> selection_lines(found)[0]
    'steps as good as the best (90%): 192, 288; best precision@1 0.889, corrected 0.881 [0.86, 0.90]'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from beyondlabels.io.selection_file import Selection

__all__ = ["selection_figure", "selection_lines"]

_STEPS_SHOWN = 8


def _steps(steps: list[int]) -> str:
    if len(steps) <= _STEPS_SHOWN:
        return ", ".join(str(s) for s in steps)
    head = ", ".join(str(s) for s in steps[: _STEPS_SHOWN - 2])
    return f"{head}, …, {steps[-1]} ({len(steps)} steps)"


def _two(value: float) -> str:
    return f"{value:.2f}" if math.isfinite(value) else "nan"


def _three(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else "nan"


def selection_lines(selection: Selection) -> list[str]:
    """The set and the corrected best value, then (where known) what got worse from the best evaluation to the latest
    and which saved checkpoints hold a step of the set."""
    level = f"{100 * selection.level:g}%"
    lines = [
        f"steps as good as the best ({level}): {_steps(selection.set_steps)}; best {selection.key} "
        f"{_three(selection.best_value)}, corrected {_three(selection.estimate)} "
        f"[{_two(selection.ci_low)}, {_two(selection.ci_high)}]"
    ]
    latest = selection.latest_step
    if latest is not None and latest != selection.best_step:
        parts = []
        if math.isfinite(selection.negative_flip_rate):
            parts.append(f"negative flips {100 * selection.negative_flip_rate:.1f}% of the queries")
        if selection.regressed:
            labels = ", ".join(str(row["label"]) for row in selection.regressed[:6])
            more = f" and {len(selection.regressed) - 6} more" if len(selection.regressed) > 6 else ""
            parts.append(f"regressed classes {labels}{more}")
        elif selection.data.get("classes"):
            parts.append("no class regressed")
        if parts:
            lines.append(f"since the best (step {selection.best_step}) to step {latest}: " + "; ".join(parts))
    checkpoints = selection.checkpoints
    if checkpoints:
        kept = [f"{Path(c['file']).name} (step {c['step']})" for c in checkpoints if c["in_set"] is True]
        worse = sum(1 for c in checkpoints if c["in_set"] is False)
        unknown = sum(1 for c in checkpoints if c["in_set"] is None)
        text = f"saved checkpoints in the set: {', '.join(kept)}" if kept else "no saved checkpoint in the set"
        text += f"; {worse} worse" if worse else ""
        text += f"; {unknown} at steps not considered" if unknown else ""
        lines.append(text)
    return lines


def selection_figure(selection: Selection, curve: Sequence[tuple[int, float]] = (), title: str = "") -> Any:
    """The metric over the steps (``curve``: every evaluation's ``(step, value)``, e.g. from the history; the
    evaluations the selection considered are drawn over it) with the steps of the set marked, and the best step's
    corrected estimate with its interval.

    Examples:
        >>> from beyondlabels.io.selection_file import Selection
        >>> found = Selection(Path("s.json"), "p@1", "r/p@1", "max", 0.9, [1, 2, 3], [0.5, 0.7, 0.69], [0.0, 1.0, 0.6],
        ...                   [2, 3], 2, 0.7, 0.69, 0.65, 0.73, 0.95)
        >>> len(selection_figure(found).axes)
        1
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 3.6), dpi=100)
    ax = fig.add_subplot()
    if curve:
        ax.plot([s for s, _ in curve], [v for _, v in curve], color="#b8c2cc", lw=1, label="every evaluation")
    in_set = set(selection.set_steps)
    steps, means = selection.steps, selection.means
    outside = [(s, m) for s, m in zip(steps, means) if s not in in_set]
    inside = [(s, m) for s, m in zip(steps, means) if s in in_set]
    if outside:
        ax.plot(*zip(*outside), "o", color="#8a96a3", ms=4, label="considered, worse")
    if inside:
        ax.plot(*zip(*inside), "o", color="#1f7a3f", ms=6, label=f"as good as the best ({100 * selection.level:g}%)")
    low, high = selection.ci_low, selection.ci_high
    ax.errorbar(
        [selection.best_step],
        [selection.estimate],
        yerr=[[selection.estimate - low], [high - selection.estimate]],
        fmt="D",
        color="#c0392b",
        ms=5,
        capsize=4,
        label=f"best, corrected [{100 * selection.confidence:g}%]",
    )
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("step")
    ax.set_ylabel(selection.key)
    ax.set_title(title or f"{selection.monitor}: checkpoints as good as the best", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
