"""The write-up files of a grouped comparison beside its JSON report (format: :mod:`beyondlabels.reporting.sweeps`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from beyondlabels.reporting.sweeps.latex import sweep_latex
from beyondlabels.reporting.sweeps.markdown import sweep_markdown
from beyondlabels.reporting.sweeps.picture import plot_sweep

__all__ = ["write_sweep_files"]


def write_sweep_files(table: Mapping[str, Any], report: str | Path) -> list[Path]:
    """Beside the JSON report ``<folder>/<stem>.json``: ``<stem>.md``, ``<stem>.tex`` and ``<stem>.<key>.png`` per key
    (:func:`plot_sweep`); returns their paths."""
    from beyondlabels.io.atomic import write_text

    report = Path(report)
    written = []
    for suffix, text in ((".md", sweep_markdown(table)), (".tex", sweep_latex(table))):
        write_text(report.with_suffix(suffix), text)
        written.append(report.with_suffix(suffix))
    return written + plot_sweep(table, report.with_suffix(""))
