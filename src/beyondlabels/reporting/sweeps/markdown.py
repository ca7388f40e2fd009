"""The grouped comparison as a Markdown table (format: :mod:`beyondlabels.reporting.sweeps`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beyondlabels.reporting.sweeps._cells import _footnote, _rows
from beyondlabels.reporting.sweeps.comparison import DAGGER

__all__ = ["sweep_markdown"]


def sweep_markdown(table: Mapping[str, Any]) -> str:
    """The grouped table as Markdown: a row per group, a column per key, ``mean [low, high]`` across seeds, the best
    mean of each column (under the key's direction) in bold, :data:`DAGGER` where the difference to the baseline
    survives the correction, and a footnote naming it.

    Examples:
        >>> t = {"confidence": 0.95, "baseline": None, "metrics": {"r/p@1": {"direction": "max"}},
        ...      "groups": {"lr=1": {"jobs": [{}], "metrics": {"r/p@1": {"seeds": {"mean": 0.5, "n": 1, "t": {}}}}},
        ...                 "lr=2": {"jobs": [{}], "metrics": {"r/p@1": {"seeds": {"mean": 0.7, "n": 1, "t": {}}}}}}}
        >>> print(sweep_markdown(t).splitlines()[3])
        | lr=2 | 1 | **0.7000** |
    """
    header, rows = _rows(table, lambda s: f"**{s}**", DAGGER, lambda s: s.replace("|", "\\|"))
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---", "--:", *(["--:"] * (len(header) - 2))]) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n\n" + _footnote(table) + "\n"
