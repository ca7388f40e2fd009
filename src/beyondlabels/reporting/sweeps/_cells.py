"""The cells, marks and footnote shared by the sweep's terminal, Markdown and LaTeX tables."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from beyondlabels.reporting.sweeps.comparison import DAGGER
from beyondlabels.reporting.tables import ARROWS


def _fmt(value: float | None, digits: int = 4, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _cell(summary: Mapping[str, Any], digits: int = 4) -> str:
    """``mean [low, high]`` of the across-seed t interval (the bare mean for one seed)."""
    t = summary["t"]
    if summary["n"] < 2 or t["low"] is None or math.isnan(t["low"]):
        return _fmt(summary["mean"], digits)
    return f"{_fmt(summary['mean'], digits)} [{_fmt(t['low'], digits)}, {_fmt(t['high'], digits)}]"


def _significant(table: Mapping[str, Any]) -> set[tuple[str, str]]:
    base = table.get("baseline")
    if not base:
        return set()
    return {(c["group"], c["metric"]) for c in base["comparisons"] if c["decision"] in ("better", "worse")}


def _best(table: Mapping[str, Any], key: str) -> set[str]:
    direction = table["metrics"][key]["direction"]
    if direction is None:
        return set()
    means = {name: g["metrics"][key]["seeds"]["mean"] for name, g in table["groups"].items()}
    finite = {n: m for n, m in means.items() if m is not None and not math.isnan(m)}
    if len(finite) < 2:
        return set()
    target = max(finite.values()) if direction == "max" else min(finite.values())
    return {n for n, m in finite.items() if m == target}


def _footnote(table: Mapping[str, Any]) -> str:
    conf = f"{table['confidence']:.0%}"
    text = f"Mean over seeds [{conf} t interval across seeds]; n = seeds."
    base = table.get("baseline")
    if base:
        text += (
            f" {DAGGER}: differs from the baseline ({base['group']}) at level {base['level']} after "
            f"{base['correction']} adjustment over {base['family_size']} comparisons ({base['test']})."
        )
    return text


def _rows(table: Mapping[str, Any], bold: Any, mark: str, escape: Any) -> tuple[list[str], list[list[str]]]:
    keys = list(table["metrics"])
    marks = _significant(table)
    base_name = table["baseline"]["group"] if table.get("baseline") else None
    best = {k: _best(table, k) for k in keys}
    rows = []
    for name, group in table["groups"].items():
        label = escape(name) + (" (baseline)" if name == base_name else "")
        row = [label, str(len(group["jobs"]))]
        for k in keys:
            text = _cell(group["metrics"][k]["seeds"])
            text = bold(text) if name in best[k] else text
            row.append(text + (mark if (name, k) in marks else ""))
        rows.append(row)
    header = [
        "setting",
        "n",
        *(escape(f"{k} {ARROWS.get(table['metrics'][k]['direction'], '')}".strip()) for k in keys),
    ]
    return header, rows
