"""The grouped comparison as a LaTeX table with booktabs rules (format: :mod:`beyondlabels.reporting.sweeps`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from beyondlabels.reporting.sweeps._cells import _footnote, _rows
from beyondlabels.reporting.sweeps.comparison import DAGGER

__all__ = ["sweep_latex"]

_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _latex_escape(text: str) -> str:
    return (
        re.sub(r"[\\&%$#_{}~^]", lambda m: _LATEX[m.group()], text)
        .replace("↑", r"$\uparrow$")
        .replace("↓", r"$\downarrow$")
        .replace("–", "--")
    )


def sweep_latex(table: Mapping[str, Any]) -> str:
    """The grouped table as a LaTeX ``table`` with booktabs rules (``\\usepackage{booktabs}``), formatted as
    :func:`sweep_markdown` (bold: ``\\textbf``; the mark: ``$^\\dagger$``), the footnote under the tabular.

    Examples:
        >>> t = {"confidence": 0.95, "baseline": None, "metrics": {"r/p_1": {"direction": "min"}},
        ...      "groups": {"a": {"jobs": [{}], "metrics": {"r/p_1": {"seeds": {"mean": 0.5, "n": 1, "t": {}}}}},
        ...                 "b": {"jobs": [{}], "metrics": {"r/p_1": {"seeds": {"mean": 0.7, "n": 1, "t": {}}}}}}}
        >>> [line for line in sweep_latex(t).splitlines() if "textbf" in line or "toprule" in line]
        ['\\\\toprule', 'a & 1 & \\\\textbf{0.5000} \\\\\\\\']
    """
    header, rows = _rows(table, lambda s: f"\\textbf{{{s}}}", "$^\\dagger$", _latex_escape)
    lines = [
        "\\begin{table}[t]",
        "\\centering",
        "\\begin{tabular}{l" + "r" * (len(header) - 1) + "}",
        "\\toprule",
        " & ".join(header) + " \\\\",
        "\\midrule",
        *(" & ".join(row) + " \\\\" for row in rows),
        "\\bottomrule",
        "\\end{tabular}",
        "\\par\\smallskip{\\footnotesize " + _latex_escape(_footnote(table)).replace(DAGGER, "$^\\dagger$") + "}",
        "\\end{table}",
    ]
    return "\n".join(lines) + "\n"


# ---- picture --------------------------------------------------------------------------------------------------------
