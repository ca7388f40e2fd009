"""Terminal tables (rich) of metrics, and side-by-side comparison of runs.

A comparison is a JSON-ready dict (what ``evaluate.py task=compare output=PATH.json`` saves)::

    {"which": "final" | "best",
     "runs": {label: {"path": str, "source": "files" | "wandb", "overrides": [str], "failed_evaluations": int,
                      "complete": bool}},
     "common_overrides": [str],
     "metrics": {key: {"direction": "max" | "min" | None, "count": bool,
                       "values": {label: float | int | None}, "steps": {label: int | None}}}}

``runs`` is in column order (labels are ``name (overrides)`` without the Hydra overrides every run shares, which are
listed in ``common_overrides``), ``metrics`` in row order; a value is None when the run does not have the key (NaN when
the run logged NaN). ``direction`` comes from the output schema (None: no direction, e.g. counts, or no schema).
With ``which="best"`` each value is the best over the run's evaluations under that direction, and ``steps`` says
where; keys without a direction show their last value. Tables never truncate or merge metric names: the metric column
never wraps, and the run columns are split over several tables when they do not fit the terminal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from beyondlabels._internal.checks import check_choice, is_number
from beyondlabels.io.run_files import EvaluationRun
from beyondlabels.io.wandb_offline import OfflineRun
from beyondlabels.reporting._console import print_fitting
from beyondlabels.reporting.prefixes import LOGGED_PREFIXES
from beyondlabels.schema import OutputSchema

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "ARROWS",
    "compare_evaluation_runs",
    "compare_wandb_runs",
    "format_value",
    "print_comparison",
    "print_metrics_table",
]

WHICH = ("final", "best")
ARROWS = {"max": "↑", "min": "↓", None: ""}
_MISSING = "—"
_LABEL_WIDTH = 14  # run labels longer than this wrap inside their column header


def format_value(value: Any, count: bool = False) -> str:
    """How a table shows one value: ``—`` when missing, ``nan``, an int for counts, else 4 decimals.

    Examples:
        >>> format_value(None), format_value(float("nan")), format_value(12.0, count=True), format_value(0.123456)
        ('—', 'nan', '12', '0.1235')
    """
    if not is_number(value):
        return _MISSING
    if math.isnan(value):
        return "nan"
    if count and float(value).is_integer():
        return f"{int(value):d}"
    return f"{int(value):d}" if isinstance(value, int) else f"{value:.4f}"


def _console(console: Console | None) -> Console:
    from rich.console import Console

    return console if console is not None else Console()


def print_metrics_table(
    metrics: Mapping[str, Any],
    title: str = "metrics",
    schema: OutputSchema | None = None,
    console: Console | None = None,
) -> None:
    """Print scalar metrics as a table (metric, direction, value); metric names are never wrapped or cut.

    With ``schema``, its scalar keys are printed in schema order with their direction (↑/↓) and counts as ints;
    without, every numeric entry of ``metrics``. A key whose ``<key>_ci_low`` and ``<key>_ci_high`` are both there
    shows them in its own row, ``value  [low, high]`` (as ``train.py``'s summary does), not as rows of their own.

    Examples:
        >>> import io
        >>> from rich.console import Console
        >>> console = Console(width=60, record=True, file=io.StringIO(), color_system=None)
        >>> print_metrics_table({"p@1": 0.5, "p@1_ci_low": 0.25, "p@1_ci_high": 0.75, "n": 4}, console=console)
        >>> [line.strip("│ ") for line in console.export_text().splitlines() if "p@1" in line]
        ['p@1    │   │ 0.5000  [0.2500, 0.7500]']
    """
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    if schema is not None:
        rows = [(k, schema.mode(k), schema[k].count) for k in schema.scalar_keys() if k in metrics]
    else:
        rows = [(k, None, isinstance(v, int)) for k, v in metrics.items() if is_number(v)]
    present = {k for k, _, _ in rows}
    bounds = {k for k, _, _ in rows if f"{k}_ci_low" in present and f"{k}_ci_high" in present}
    shown = {f"{k}_ci_{side}" for k in bounds for side in ("low", "high")}
    cells = []
    for key, mode, count in rows:
        if key in shown:
            continue
        text = format_value(metrics[key], count)
        if key in bounds:
            text += f"  [{format_value(metrics[f'{key}_ci_low'])}, {format_value(metrics[f'{key}_ci_high'])}]"
        cells.append((key, ARROWS[mode], text))
    console = _console(console)
    key_width = max([len("metric"), *(len(k) for k, _, _ in cells)])
    value_width = max([len("value"), *(cell_len(text) for _, _, text in cells)])
    caption = Text("[low, high]: <key>_ci_low, <key>_ci_high") if bounds else None  # Text: brackets are not markup
    table = Table(title=title, caption=caption)
    table.add_column("metric", no_wrap=True, min_width=key_width)
    table.add_column("", no_wrap=True, width=1)
    table.add_column("value", justify="right", no_wrap=True)
    for key, arrow, text in cells:
        table.add_row(key, arrow, Text(text))
    print_fitting(console, table, key_width + 1 + value_width + 3 * 3 + 1)


# ---- building comparisons ------------------------------------------------------------------------------------------


class _Column:
    """One run of a comparison: its values by (prefixed) key."""

    def __init__(
        self, name: str, path: Path, source: str, failed: int = 0, complete: bool = True, overrides: Sequence[str] = ()
    ) -> None:
        self.name = name
        self.label = name
        self.overrides = list(overrides)
        self.path = path
        self.source = source
        self.failed = failed
        self.complete = complete
        self.values: dict[str, tuple[Any, int | None]] = {}
        self.directions: dict[str, str | None] = {}
        self.counts: dict[str, bool] = {}
        self.default_keys: list[str] = []


def _check_which(which: str) -> None:
    check_choice(which, "which", WHICH)


def _files_column(path: Path, runs: Sequence[EvaluationRun], which: str) -> _Column:
    first = runs[0]
    suffix = f" ({', '.join(first.overrides)})" if first.overrides else ""
    name = first.name[: -len(suffix)] if suffix and first.name.endswith(suffix) else first.name
    column = _Column(name, path, "files", failed=sum(len(r.failures) for r in runs), overrides=first.overrides)
    for run in runs:
        last = run.last()
        final = run.final()
        for key in run.scalar_keys():
            logged = f"{run.prefix}/{key}"
            mode = run.schema.mode(key) if run.schema is not None else None
            column.directions[logged] = mode
            column.counts[logged] = bool(run.schema is not None and key in run.schema and run.schema[key].count)
            if key in final:
                column.default_keys.append(logged)
            value, step = final.get(key), (int(last["step"]) if last is not None and key in final else None)
            if which == "best" and mode is not None:
                best = run.best(key)
                value, step = (None, None) if best is None else (float(best[key]), int(best["step"]))
            column.values[logged] = (value, step)
    return column


def _label_columns(columns: Sequence[_Column]) -> list[str]:
    """Label each column ``name (overrides)``, leaving out the overrides every column shares (returned)."""
    common: list[str] = []
    if len(columns) > 1 and all(c.overrides for c in columns):
        shared = set.intersection(*(set(c.overrides) for c in columns))
        common = [o for o in columns[0].overrides if o in shared]
    for column in columns:
        rest = [o for o in column.overrides if o not in common]
        column.label = f"{column.name} ({', '.join(rest)})" if rest else column.name
        if not column.complete:
            column.label += " (incomplete)"
    _unique_labels(columns)
    return common


def _unique_labels(columns: Sequence[_Column]) -> None:
    """Make column labels unique by prefixing parent folder names (then a counter) to the duplicates."""
    base = {id(c): c.label for c in columns}
    for depth in range(1, 4):
        seen: dict[str, list[_Column]] = {}
        for column in columns:
            seen.setdefault(column.label, []).append(column)
        dups = [c for group in seen.values() if len(group) > 1 for c in group]
        if not dups:
            return
        for column in dups:
            parents = column.path.parts[-1 - depth : -1]
            column.label = "/".join([*parents, base[id(column)]])
    counts: dict[str, int] = {}
    for column in columns:
        n = counts[column.label] = counts.get(column.label, 0) + 1
        if n > 1:
            column.label = f"{column.label} #{n}"


def _assemble(columns: list[_Column], keys: Sequence[str] | None, which: str) -> dict[str, Any]:
    common = _label_columns(columns)
    if keys is None:
        ordered: dict[str, None] = {}
        for column in columns:
            ordered.update(dict.fromkeys(column.default_keys))
        keys = list(ordered)
    else:
        keys = list(keys)
        known = {k for c in columns for k in c.values}
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise ValueError(f"metrics {unknown} are in none of the runs; their keys: {sorted(known)}")
    metrics: dict[str, Any] = {}
    for key in keys:
        direction = next((c.directions[key] for c in columns if c.directions.get(key) is not None), None)
        count = any(c.counts.get(key, False) for c in columns)
        values = {c.label: c.values.get(key, (None, None))[0] for c in columns}
        steps = {c.label: c.values.get(key, (None, None))[1] for c in columns}
        metrics[key] = {"direction": direction, "count": count, "values": values, "steps": steps}
    runs = {
        c.label: {
            "path": str(c.path),
            "source": c.source,
            "overrides": c.overrides,
            "failed_evaluations": c.failed,
            "complete": c.complete,
        }
        for c in columns
    }
    return {"which": which, "runs": runs, "common_overrides": common, "metrics": metrics}


def compare_evaluation_runs(
    runs: Sequence[EvaluationRun], keys: Sequence[str] | None = None, which: str = "final"
) -> dict[str, Any]:
    """Compare runs read from the project's evaluation files (see the module docstring for the result).

    The callbacks of one run folder share one column; keys are prefixed (``retrieval/precision@1``). Without
    ``keys``, every scalar of the schemas that some run has, in schema order.

    Raises:
        ValueError: for an unknown ``which``, or ``keys`` that no run has (the message lists the keys there are).
    """
    _check_which(which)
    groups: dict[tuple[str, Path], list[EvaluationRun]] = {}
    for run in runs:
        groups.setdefault((run.name, run.run_folder or run.path), []).append(run)
    columns = [_files_column(folder, group, which) for (_name, folder), group in groups.items()]
    return _assemble(columns, keys, which)


def compare_wandb_runs(
    runs: Sequence[OfflineRun],
    keys: Sequence[str] | None = None,
    which: str = "final",
    *,
    schemas: Sequence[OutputSchema | None] | None = None,
    labels: Sequence[str] | None = None,
    overrides: Sequence[Sequence[str]] | None = None,
    paths: Sequence[Path] | None = None,
    prefixes: Sequence[str] = LOGGED_PREFIXES,
) -> dict[str, Any]:
    """Compare offline W&B runs (see the module docstring for the result).

    Args:
        runs: The runs, read with :func:`beyondlabels.io.read_offline_run`.
        keys: The (logged) keys to compare. Default: the scalar keys of the run's schema when one is given, else
            every numeric summary key starting with one of ``prefixes``.
        which: ``"final"`` (summary values) or ``"best"`` (best history value under the schema's direction).
        schemas: Per run, the output schema of its logged (prefixed) keys, or None; gives directions.
        labels: Per run, its name (default ``name (id)``); incomplete runs get `` (incomplete)``.
        overrides: Per run, its Hydra overrides (added to the label, except those every run shares).
        paths: Per run, the folder shown as its path (default the ``.wandb`` file).
    """
    _check_which(which)
    columns = []
    for index, run in enumerate(runs):
        schema = schemas[index] if schemas is not None else None
        label = labels[index] if labels is not None else f"{run.name} ({run.run_id})"
        column = _Column(
            label,
            paths[index] if paths is not None else run.path,
            "wandb",
            complete=run.complete,
            overrides=overrides[index] if overrides is not None else (),
        )
        summary = run.summary
        if schema is not None:
            column.default_keys = [k for k in schema.scalar_keys() if is_number(summary.get(k))]
        else:
            column.default_keys = sorted(
                k for k, v in summary.items() if k.startswith(tuple(prefixes)) and is_number(v)
            )
        final_step = summary.get("trainer/global_step", summary.get("_step"))
        for key, value in summary.items():
            if not is_number(value):
                continue
            mode = schema.mode(key) if schema is not None else None
            column.directions[key] = mode
            column.counts[key] = bool(schema is not None and key in schema and schema[key].count)
            step = final_step
            if which == "best" and mode is not None:
                value, step = None, None
                for row in run.history:
                    v = row.get(key)
                    if not is_number(v) or math.isnan(v):
                        continue
                    if value is None or (v > value if mode == "max" else v < value):
                        value, step = v, row.get("trainer/global_step", row.get("_step"))
            column.values[key] = (float(value) if is_number(value) and not column.counts[key] else value, step)
        columns.append(column)
    return _assemble(columns, keys, which)


# ---- printing ------------------------------------------------------------------------------------------------------


def _chunks(widths: Sequence[int], fixed: int, limit: int) -> list[list[int]]:
    """Split run columns (their cell widths) into consecutive groups whose tables fit ``limit`` characters."""
    groups: list[list[int]] = []
    current: list[int] = []
    used = fixed
    for index, width in enumerate(widths):
        if current and used + width + 3 > limit:
            groups.append(current)
            current, used = [], fixed
        current.append(index)
        used += width + 3
    if current:
        groups.append(current)
    return groups


def print_comparison(table: Mapping[str, Any], title: str | None = None, console: Console | None = None) -> None:
    """Print a comparison: one row per metric (with ↑/↓ from the schema), one column per run.

    Metric names are printed whole on one line, whatever the terminal width: the metric column never wraps, run
    columns that do not fit are continued in further tables, and a table that cannot fit even with one run is printed
    at its full width without cropping.
    """
    from rich.cells import cell_len
    from rich.table import Table

    console = _console(console)
    which = table.get("which", "final")
    title = title or ("best value per run" if which == "best" else "final metrics per run")
    labels = list(table["runs"])
    metrics: Mapping[str, Any] = table["metrics"]
    cells = {
        key: [format_value(spec["values"].get(label), spec.get("count", False)) for label in labels]
        for key, spec in metrics.items()
    }
    key_width = max([len("metric"), *(cell_len(k) for k in metrics)])
    # run columns: wide enough for every value, and for the label up to 14 characters (longer labels wrap)
    value_widths = [max([1, *(cell_len(cells[k][i]) for k in metrics)]) for i in range(len(labels))]
    widths = [max(value_widths[i], min(cell_len(label), _LABEL_WIDTH)) for i, label in enumerate(labels)]
    fixed = 1 + (key_width + 3) + (1 + 3)  # left edge, metric column, direction column (each + padding and border)
    groups = _chunks(widths, fixed, console.width) if labels else [[]]
    for part, group in enumerate(groups):
        suffix = f" ({part + 1}/{len(groups)})" if len(groups) > 1 else ""
        out = Table(title=title + suffix)
        out.add_column("metric", no_wrap=True, min_width=key_width)
        out.add_column("", no_wrap=True, width=1)
        for index in group:
            out.add_column(
                labels[index], justify="right", overflow="fold", min_width=value_widths[index], max_width=widths[index]
            )
        for key, spec in metrics.items():
            out.add_row(key, ARROWS.get(spec.get("direction")), *(cells[key][i] for i in group))
        print_fitting(console, out, fixed + sum(widths[i] + 3 for i in group))
    notes = []
    if table.get("common_overrides"):
        notes.append(f"every run: {', '.join(table['common_overrides'])}")
    if which == "best":
        notes.append("best over each run's evaluations (↑ max, ↓ min); keys without a direction show their last value")
    for label, info in table["runs"].items():
        if info.get("failed_evaluations"):
            notes.append(f"{label}: {info['failed_evaluations']} failed evaluation(s) left out")
    for note in notes:
        console.print(note, highlight=False, soft_wrap=True)
