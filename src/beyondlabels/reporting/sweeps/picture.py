"""The grouped comparison as one PNG per metric: the value against the swept setting (format:
:mod:`beyondlabels.reporting.sweeps`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from beyondlabels._internal.charts import plain_text
from beyondlabels.io.sweeps import override_name
from beyondlabels.reporting._figures import png_figure
from beyondlabels.reporting.tables import ARROWS

__all__ = ["plot_sweep"]


def _setting_values(table: Mapping[str, Any]) -> tuple[str | None, dict[str, dict[str, str]]]:
    """The swept key (the first differing override key whose values are all numbers, else the first differing key)
    and, per group, ``{override key: value}`` of its differing overrides."""
    common = set(table.get("common_overrides", []))
    values: dict[str, dict[str, str]] = {}
    order: dict[str, None] = {}
    for name, group in table["groups"].items():
        values[name] = {}
        for o in group["overrides"]:
            if o in common:
                continue
            key = override_name(o)
            values[name][key] = o.split("=", 1)[1] if "=" in o else o
            order[key] = None
    keys = list(order)
    numeric = [k for k in keys if all(_is_float(v.get(k)) for v in values.values())]
    return (numeric or keys or [None])[0], values


def _is_float(text: str | None) -> bool:
    try:
        return text is not None and math.isfinite(float(text))
    except ValueError:
        return False


def _slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9@._-]+", "_", key)


@plain_text
def plot_sweep(table: Mapping[str, Any], stem: str | Path) -> list[Path]:
    """One PNG per key, ``<stem>.<key>.png`` (``/`` and other characters unsafe in a file name as ``_``): the value
    against the swept setting (a numeric axis when its values are numbers), a line per combination of the other
    differing overrides, the band the across-seed t interval, the baseline group ringed."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    x_key, settings = _setting_values(table)
    numeric = x_key is not None and all(_is_float(s.get(x_key)) for s in settings.values())
    categories = list(dict.fromkeys(s.get(x_key, n) for n, s in settings.items()))
    base_name = table["baseline"]["group"] if table.get("baseline") else None
    paths = []
    for key, spec in table["metrics"].items():
        lines: dict[str, list[tuple[float, float, float, float, str]]] = {}
        for name, group in table["groups"].items():
            s = settings[name]
            other = ", ".join(f"{k}={v}" for k, v in s.items() if k != x_key) or key
            raw = s.get(x_key, name)
            x = float(raw) if numeric else float(categories.index(raw))
            summary = group["metrics"][key]["seeds"]
            lo, hi = summary["t"].get("low"), summary["t"].get("high")
            lo = summary["mean"] if lo is None or math.isnan(lo) else lo
            hi = summary["mean"] if hi is None or math.isnan(hi) else hi
            lines.setdefault(other, []).append((x, summary["mean"], lo, hi, name))
        path = stem.parent / f"{stem.name}.{_slug(key)}.png"
        with png_figure(path, figsize=(5, 3.4), dpi=100) as (_, ax):
            for label, points in lines.items():
                points.sort()
                xs, ys, los, his, names = zip(*points)
                (line,) = ax.plot(xs, ys, marker="o", markersize=4, label=label)
                ax.fill_between(xs, los, his, alpha=0.2, color=line.get_color(), linewidth=0)
                for x, y, n in zip(xs, ys, names):
                    if n == base_name:
                        ax.plot([x], [y], marker="o", markersize=10, markerfacecolor="none", color="black")
            if numeric:
                xs_all = sorted({p[0] for pts in lines.values() for p in pts})
                if len(xs_all) > 2 and min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 10:
                    ax.set_xscale("log")
                    ax.minorticks_off()
                # a tick at each swept value, labelled as the override wrote it (0.001, not 0.00100)
                ax.set_xticks(xs_all, [f"{v:g}" for v in xs_all], rotation=20 if len(xs_all) > 4 else 0)
            else:
                ax.set_xticks(
                    range(len(categories)), [str(c) for c in categories], rotation=20 if len(categories) > 4 else 0
                )
            ax.set_xlabel(x_key or "group")
            ax.set_ylabel(f"{key} {ARROWS.get(spec['direction'], '')}".strip())
            conf = f"{table['confidence']:.0%}"
            ax.set_title(f"{key}: mean over seeds, {conf} t band", fontsize=9)
            ax.grid(alpha=0.3)
            if len(lines) > 1:
                ax.legend(fontsize=7)
        paths.append(path)
    return paths
