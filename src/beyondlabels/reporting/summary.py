"""The end of a run in one screen: per evaluation family its headline keys, then where everything else is.

Per family (one evaluation callback's folder: ``history.jsonl`` and ``schema.json``), over its successful
evaluations in step order, each key reads

- **last**: the value of the last successful evaluation, with its 95% interval ``[<key>_ci_low, <key>_ci_high]``
  when that evaluation logged one;
- **best (step)**: the best value under the schema's direction (↑ max, ↓ min; NaN skipped, ties to the earliest) and
  the step it came at; keys without a direction (counts, settings) have none;
- **Δ first**: the last value minus the first successful evaluation's (— with a single evaluation).

The keys shown are the family's **headline keys**, declared with its output schema (``OutputSchema(...,
headline=...)``, kept in ``schema.json``); a schema that declares none (a family of one's own, a folder written
before headlines existed) shows its first four scalar keys with a direction and an interval, else with a direction.
Below them, one line each where they exist: the counts the schema lists as ``notes`` (the label audit's
suspects), the checkpoint selection of the family's folder (``selection.json``: the steps as good as the best and
the best value corrected for the selection, :func:`beyondlabels.reporting.selection.selection_lines`), the
convergence events of the family's keys (:func:`beyondlabels.io.metrics_csv.read_convergence_events`, or those a
training passes in), and the failed evaluations. Then the paths: the full table of every key
(:func:`summary_markdown`, ``metrics.md`` in the run folder), ``report.html``, the CSV / TensorBoard / MLflow
locations and the exact ``wandb sync`` command of the offline W&B run (:func:`run_locations`).

The lines fit 80 columns for the project's families; they are printed through a rich ``Console``, which writes colour
codes only to a terminal.

Examples:
    >>> import io, json, tempfile
    >>> from pathlib import Path
    >>> from rich.console import Console
    >>> from beyondlabels.schema import KeySpec, OutputSchema
    >>> run = Path(tempfile.mkdtemp())
    >>> (run / "retrieval").mkdir()
    >>> keys = {"map@r": KeySpec("scalar", True), "n": KeySpec("scalar", None, count=True)}
    >>> schema = OutputSchema(keys, headline=["map@r"])
    >>> _ = (run / "retrieval" / "schema.json").write_text(json.dumps(schema.to_json()))
    >>> records = [{"step": 4, "epoch": 0, "map@r": 0.25, "n": 8},
    ...            {"step": 8, "epoch": 1, "map@r": 0.5, "map@r_ci_low": 0.375, "map@r_ci_high": 0.625, "n": 8}]
    >>> _ = (run / "retrieval" / "history.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in records))
    >>> console = Console(file=io.StringIO(), width=80)
    >>> print_summary(summarize_run_folder(run), console=console, locations=[])
    >>> print(console.file.getvalue().rstrip())
    run summary    last  95% interval      best (step)  Δ first
    retrieval/  2 evaluations, steps 4–8
      map@r ↑    0.5000  [0.3750, 0.6250]   0.5000 (8)  +0.2500
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len, set_cell_size

from beyondlabels._internal.checks import is_number
from beyondlabels.io.atomic import write_text
from beyondlabels.io.metrics_csv import read_convergence_events
from beyondlabels.io.run_files import EvaluationRun
from beyondlabels.io.selection_file import read_selection
from beyondlabels.reporting._runs import read_folder_runs
from beyondlabels.reporting.tables import ARROWS, format_value
from beyondlabels.schema import OutputSchema

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = [
    "TABLE_FILE",
    "ConvergenceEvent",
    "FamilySummary",
    "KeyRow",
    "RunSummary",
    "print_summary",
    "resolve_headline",
    "run_locations",
    "summarize_family",
    "summarize_run_folder",
    "summarize_runs",
    "summary_lines",
    "summary_markdown",
    "write_summary_table",
]

# The full table's file in a run folder.
TABLE_FILE = "metrics.md"
_CI = ("_ci_low", "_ci_high")
_FALLBACK_KEYS = 4
_WIDTH = 80  # what a note line is cut to
_EVENTS_SHOWN = 3


def _number(value: Any) -> float | None:
    return float(value) if is_number(value) else None


@dataclass(frozen=True)
class KeyRow:
    """One key of a family over its successful evaluations (definitions: the module docstring)."""

    key: str
    mode: str | None
    count: bool
    last: float | None
    low: float | None = None
    high: float | None = None
    best: float | None = None
    best_step: int | None = None
    first: float | None = None
    evaluations: int = 0

    @property
    def change(self) -> float | None:
        """``last - first``; None without two evaluations that logged the key."""
        if self.evaluations < 2 or self.last is None or self.first is None:
            return None
        return self.last - self.first


@dataclass(frozen=True)
class ConvergenceEvent:
    """The start of a plateau or a downturn of ``monitor`` (a logged key) at ``step``, with its p-value."""

    monitor: str
    event: str
    step: int | None
    p: float | None = None
    window_mean: float | None = None


@dataclass
class FamilySummary:
    """One evaluation family of a run: its headline rows, every scalar key's row, notes, events and failures."""

    prefix: str
    evaluations: int
    steps: tuple[int, int] | None
    headline: list[KeyRow]
    rows: list[KeyRow]
    notes: list[tuple[str, float]] = field(default_factory=list)
    failures: list[tuple[int, str]] = field(default_factory=list)
    events: list[ConvergenceEvent] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    selection: list[str] = field(default_factory=list)


@dataclass
class RunSummary:
    """A run's families, the convergence events of keys outside them, and the other logged scalars."""

    folder: Path | None
    families: list[FamilySummary]
    events: list[ConvergenceEvent] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


# ---- building -----------------------------------------------------------------------------------------------------


def resolve_headline(schema: OutputSchema | None, logged: Sequence[str]) -> list[str]:
    """The headline keys of a family that logged the scalar keys ``logged`` (see the module docstring).

    Examples:
        >>> from beyondlabels.schema import KeySpec, OutputSchema
        >>> up = KeySpec("scalar", True)
        >>> resolve_headline(OutputSchema({"a": up, "b": up}, headline=["b"]), ["a", "b"])
        ['b']
        >>> logged = ["a", "b", "b_ci_low", "b_ci_high"]
        >>> resolve_headline(OutputSchema(dict.fromkeys(logged, up)), logged)
        ['b']
    """
    present = [k for k in logged if not k.endswith(_CI)]
    if schema is not None and schema.headline:
        declared = [k for k in schema.headline if k in present]
        if declared:
            return declared
    if schema is None:
        return present[:_FALLBACK_KEYS]
    directed = [k for k in present if k in schema and schema.mode(k) is not None]
    with_interval = [k for k in directed if all(f"{k}{s}" in logged for s in _CI)]
    return (with_interval or directed)[:_FALLBACK_KEYS]


def _key_row(run: EvaluationRun, key: str, records: Sequence[Mapping[str, Any]]) -> KeyRow:
    spec = run.schema.get(key) if run.schema is not None else None
    mode = run.schema.mode(key) if run.schema is not None else None
    values = [(int(r["step"]), v) for r in records if (v := _number(r.get(key))) is not None]
    if not values:
        return KeyRow(key, mode, bool(spec and spec.count), None)
    best = best_step = None
    if mode is not None:
        for step, value in values:
            if not math.isnan(value) and (best is None or (value > best if mode == "max" else value < best)):
                best, best_step = value, step
    last_record = records[-1]
    low, high = _number(last_record.get(f"{key}_ci_low")), _number(last_record.get(f"{key}_ci_high"))
    last = _number(last_record.get(key))
    return KeyRow(key, mode, bool(spec and spec.count), last, low, high, best, best_step, values[0][1], len(values))


def summarize_family(run: EvaluationRun) -> FamilySummary:
    """The summary of one family's evaluations (its events are attached by :func:`summarize_runs`)."""
    records = run.records
    logged = [k for k in run.scalar_keys() if any(_number(r.get(k)) is not None for r in records[-1:])]
    rows = [_key_row(run, k, records) for k in logged if not k.endswith(_CI)] if records else []
    by_key = {row.key: row for row in rows}
    summary = FamilySummary(
        prefix=run.prefix,
        evaluations=len(records),
        steps=(int(records[0]["step"]), int(records[-1]["step"])) if records else None,
        headline=[by_key[k] for k in resolve_headline(run.schema, logged) if k in by_key],
        rows=rows,
        failures=[(int(r["step"]), str(r.get("error", ""))) for r in run.failures],
    )
    if run.schema is None:
        summary.problems.append("no schema.json: directions unknown, no best values")
    if records and run.schema is not None:
        last = records[-1]
        summary.notes = [(label, v) for k, label in run.schema.notes.items() if (v := _number(last.get(k))) is not None]
    try:
        selection = read_selection(run.path) if records else None
    except (OSError, ValueError) as exc:
        summary.problems.append(f"checkpoint selection not read: {str(exc).replace(f'{run.path}{os.sep}', '')}")
    else:
        if selection is not None:
            from beyondlabels.reporting.selection import selection_lines

            summary.selection = selection_lines(selection)
    return summary


def _monitor(series: str, families: Sequence[FamilySummary]) -> str:
    """The monitored key of a logged convergence series ``<prefix>/<monitor>``: the family key it ends with, else
    what follows the first ``/``."""
    for family in families:
        for row in family.rows:
            key = f"{family.prefix}/{row.key}"
            if series == key or series.endswith(f"/{key}"):
                return key
    return series.split("/", 1)[1] if "/" in series else series


def _csv_logs(folder: Path) -> list[Path]:
    """The CSV logs of a run folder: ``<name>/metrics.csv`` and ``<name>/<version>/metrics.csv``."""
    found = [*folder.glob("*/metrics.csv"), *folder.glob("*/*/metrics.csv")]
    return sorted(p for p in found if p.is_file() and not p.is_symlink())


def summarize_runs(
    runs: Iterable[EvaluationRun],
    folder: str | os.PathLike[str] | None = None,
    events: Iterable[Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> RunSummary:
    """The summary of a run's families.

    Args:
        runs: The run's evaluation families (one :class:`~beyondlabels.io.EvaluationRun` per callback).
        folder: The run folder (paths, and the CSV logs the convergence events are read from).
        events: Convergence events as ``{"monitor" or "series", "event", "step", "p", "window_mean"}`` (a training's
            monitors); None reads them from the folder's CSV logs.
        extra: Other logged scalars as numbers (``val/loss``, ...): in the full table only; keys under a family's
            prefix are left out.
    """
    folder = Path(folder) if folder is not None else None
    summary = RunSummary(folder, [summarize_family(run) for run in runs])
    if events is None:
        events = []
        for log_file in _csv_logs(folder) if folder is not None and folder.is_dir() else []:
            try:
                events.extend(read_convergence_events(log_file))
            except ValueError as exc:  # "<file>: what" -> "<file in the folder>: what"
                where = log_file.relative_to(folder)
                summary.problems.append(f"convergence events not read from {where}: {str(exc).split(': ', 1)[-1]}")
    by_prefix = {family.prefix: family for family in summary.families}
    for event in events:
        monitor = str(event.get("monitor") or _monitor(str(event.get("series", "")), summary.families))
        step = _number(event.get("step"))
        step = int(step) if step is not None and math.isfinite(step) else None
        p, mean = _number(event.get("p")), _number(event.get("window_mean"))
        record = ConvergenceEvent(monitor, str(event.get("event")), step, p, mean)
        family = by_prefix.get(monitor.split("/", 1)[0]) if "/" in monitor else None
        (family.events if family is not None else summary.events).append(record)
    for key, value in (extra or {}).items():
        number = _number(value)
        if number is not None and not any(key.startswith(f"{prefix}/") for prefix in by_prefix):
            summary.extra[key] = number
    return summary


def summarize_run_folder(
    folder: str | os.PathLike[str],
    events: Iterable[Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> RunSummary:
    """:func:`summarize_runs` of every evaluation history in a run folder (none: a summary with a problem line)."""
    folder = Path(folder)
    try:
        runs, unread = read_folder_runs(folder)
    except FileNotFoundError as exc:
        summary = summarize_runs([], folder, events, extra)
        summary.problems.append(str(exc).split(":", 1)[0])
        return summary
    summary = summarize_runs(runs, folder, events, extra)
    summary.problems.extend(f"{file.parent.name}: not read ({exc})" for file, exc in unread)
    return summary


# ---- the text -----------------------------------------------------------------------------------------------------

_HEADER = ("run summary", "last", "95% interval", "best (step)", "Δ first")
_RIGHT = (False, True, False, True, True)


def _signed(value: float | None, count: bool) -> str:
    if value is None:
        return "—"
    if math.isnan(value):
        return "nan"
    return f"{int(value):+d}" if count and float(value).is_integer() else f"{value:+.4f}"


def _interval(row: KeyRow) -> str:
    if row.low is None or row.high is None:
        return ""
    return f"[{format_value(row.low)}, {format_value(row.high)}]"


def _printable(text: str) -> str:
    """``text`` on one line without control characters (keys and errors come from files: no terminal escapes)."""
    return "".join(c if c.isprintable() else "?" for c in " ".join(str(text).split()))


def _cells(row: KeyRow) -> tuple[str, str, str, str, str]:
    arrow = ARROWS.get(row.mode, "")
    best = f"{format_value(row.best, row.count)} ({row.best_step})" if row.best is not None else ""
    last = format_value(row.last, row.count) if row.mode or row.count or row.evaluations else _general(row.last)
    return (f"  {_printable(row.key)} {arrow}".rstrip(), last, _interval(row), best, _signed(row.change, row.count))


def _general(value: float | None) -> str:
    """A value logged outside the families (a learning rate, a loss): 6 significant digits."""
    return format_value(value) if value is None or math.isnan(value) else f"{value:.6g}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _heading(family: FamilySummary) -> str:
    if family.steps is None:
        text = "no successful evaluation"
    elif family.evaluations == 1:
        text = f"1 evaluation, step {family.steps[1]}"
    else:
        text = f"{family.evaluations} evaluations, steps {family.steps[0]}–{family.steps[1]}"
    return text + (f", {len(family.failures)} failed" if family.failures else "")


def _cut(text: str, width: int = _WIDTH) -> str:
    text = _printable(text)
    return text if cell_len(text) <= width else set_cell_size(text, width - 1) + "…"


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken after its ``"; "`` (and, in a part still too long, after
    its ``", "``)."""
    pieces: list[str] = []
    parts = text.split("; ")
    for number, part in enumerate(parts):
        tail = ";" if number < len(parts) - 1 else ""
        if cell_len(part) + 2 <= width:
            pieces.append(part + tail)
            continue
        items = part.split(", ")
        pieces.extend(item + ("," if i < len(items) - 1 else tail) for i, item in enumerate(items))
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if cell_len(lines[-1]) + 1 + cell_len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return lines


def _events_line(monitor: str, events: Sequence[ConvergenceEvent]) -> str:
    parts = []
    for event in events[:_EVENTS_SHOWN]:
        p = f" (p {event.p:.2g})" if event.p is not None else ""
        parts.append(f"{event.event} at step {event.step}{p}")
    more = f", {len(events) - _EVENTS_SHOWN} more" if len(events) > _EVENTS_SHOWN else ""
    return f"convergence of {monitor}: " + ", ".join(parts) + more


def _grouped_events(events: Sequence[ConvergenceEvent]) -> dict[str, list[ConvergenceEvent]]:
    grouped: dict[str, list[ConvergenceEvent]] = {}
    for event in events:
        grouped.setdefault(event.monitor, []).append(event)
    return grouped


def _family_notes(family: FamilySummary) -> list[tuple[str, str]]:
    """``(style, text)`` of a family's note lines (without indentation)."""
    lines = []
    if family.notes:
        lines.append(("", ", ".join(f"{format_value(v, True)} {label}" for label, v in family.notes)))
    lines.extend(("green", part) for text in family.selection for part in _wrapped(text, _WIDTH - 2))
    for monitor, events in _grouped_events(family.events).items():
        lines.append(("yellow", _events_line(monitor.split("/", 1)[1] if "/" in monitor else monitor, events)))
    if family.failures:
        step, error = family.failures[-1]
        lines.append(("red", f"{_plural(len(family.failures), 'failed evaluation')}, the last at step {step}: {error}"))
    lines.extend(("dim", problem) for problem in family.problems)
    return lines


def summary_lines(summary: RunSummary, full: bool = False) -> list[Text]:
    """The summary's lines (without the paths): a column header, then per family a heading, its headline rows
    (every key with ``full``) and its note lines."""
    from rich.text import Text

    blocks = [(family, family.rows if full else family.headline) for family in summary.families]
    extra = [KeyRow(key, None, False, value) for key, value in summary.extra.items()] if full else []
    cells = [_cells(row) for _, rows in blocks for row in rows] + [_cells(row) for row in extra]
    widths = [max([cell_len(h), *(cell_len(c[i]) for c in cells)]) for i, h in enumerate(_HEADER)]

    def line(values: Sequence[str], style: str = "") -> Text:
        pads = [" " * (w - cell_len(v)) for v, w in zip(values, widths)]
        parts = [pad + v if right else v + pad for v, pad, right in zip(values, pads, _RIGHT)]
        return Text("  ".join(parts).rstrip(), style=style)

    lines = [line(_HEADER, "bold")]
    for family, rows in blocks:
        heading = Text(f"{_printable(family.prefix)}/", style="bold")
        heading.append(f"  {_heading(family)}")
        lines.append(heading)
        lines.extend(line(_cells(row)) for row in rows)
        lines.extend(Text("  " + _cut(text, _WIDTH - 2), style=style) for style, text in _family_notes(family))
    if extra:
        lines.append(Text("other logged values", style="bold"))
        lines.extend(line(_cells(row)) for row in extra)
    for monitor, events in _grouped_events(summary.events).items():
        lines.append(Text(_cut(_events_line(monitor, events)), style="yellow"))
    lines.extend(Text(_printable(problem), style="dim") for problem in summary.problems)
    return lines


def _quote(path: Path | str) -> str:
    return shlex.quote(str(path))


def _wandb_sync(folder: Path) -> str | None:
    """``wandb sync`` of the offline W&B run of a run folder: the segments (``offline-run-<time>-<id>``) of the
    latest run id, in time order (a resumed run adds a segment under the same id)."""
    segments = sorted(p for p in (folder / "wandb").glob("offline-run-*") if p.is_dir() and not p.is_symlink())
    if not segments:
        return None
    run_id = segments[-1].name.rsplit("-", 1)[-1]
    return "wandb sync " + " ".join(_quote(p) for p in segments if p.name.rsplit("-", 1)[-1] == run_id)


def _tensorboard_dirs(folder: Path) -> list[Path]:
    events = [*folder.glob("*/events.out.tfevents.*"), *folder.glob("*/*/events.out.tfevents.*")]
    return sorted({folder / p.relative_to(folder).parts[0] for p in events})


def run_locations(folder: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """``(what, where)`` of what a run folder holds besides the summary: the folder, the full table
    (:data:`TABLE_FILE`), ``report.html``, CSV logs, TensorBoard and MLflow (as the command that opens them),
    checkpoints, and the ``wandb sync`` command of its offline W&B run. Paths are absolute; commands are quoted for a
    POSIX shell.

    Examples:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> (folder / "wandb" / "offline-run-20260101_120000-ab12cd34").mkdir(parents=True)
        >>> [(what, where.replace(str(folder), "<run>")) for what, where in run_locations(folder)][1:]
        [('W&B offline', 'wandb sync <run>/wandb/offline-run-20260101_120000-ab12cd34')]
    """
    folder = Path(folder).absolute()
    found = [("run folder", str(folder))]
    for name, what in ((TABLE_FILE, "every key"), ("report.html", "HTML report")):
        if (folder / name).is_file():
            found.append((what, str(folder / name)))
    found.extend(("CSV log", str(p)) for p in _csv_logs(folder))
    found.extend(("TensorBoard", f"tensorboard --logdir {_quote(p)}") for p in _tensorboard_dirs(folder))
    database = folder / "mlflow.db"
    if database.is_file():
        found.append(("MLflow", f"mlflow ui --backend-store-uri {_quote(f'sqlite:///{database}')}"))
    if (folder / "mlruns").is_dir():
        found.append(("MLflow", f"mlflow ui --backend-store-uri {_quote((folder / 'mlruns').as_uri())}"))
    if (folder / "checkpoints").is_dir():
        found.append(("checkpoints", str(folder / "checkpoints")))
    sync = _wandb_sync(folder)
    if sync is not None:
        found.append(("W&B offline", sync))
    return found


def print_summary(
    summary: RunSummary,
    console: Console | None = None,
    full: bool = False,
    locations: Sequence[tuple[str, str]] | None = None,
) -> None:
    """Print :func:`summary_lines` (every key with ``full``), then ``locations`` (default: :func:`run_locations` of
    the summary's folder); no line is wrapped by the printer, so a log holds each whole and paths can be copied."""
    from rich.console import Console
    from rich.text import Text

    console = console if console is not None else Console()
    for line in summary_lines(summary, full):  # never wrapped by rich: a line too wide for a terminal wraps there
        console.print(line, soft_wrap=True)
    if locations is None:
        locations = run_locations(summary.folder) if summary.folder is not None and summary.folder.is_dir() else []
    if locations:
        console.print()
        width = max(len(what) for what, _ in locations) + 2
        for what, where in locations:
            console.print(Text(f"{what + ':':<{width}}{where}"), soft_wrap=True)


# ---- the full table as a file -------------------------------------------------------------------------------------


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")


def _md_row(row: KeyRow, headline: bool) -> str:
    name = f"**{_md(row.key)}**" if headline else _md(row.key)
    best = format_value(row.best, row.count) if row.best is not None else ""
    step = "" if row.best_step is None else str(row.best_step)
    last, first = format_value(row.last, row.count), format_value(row.first, row.count)
    cells = [name, ARROWS.get(row.mode, ""), last, _interval(row), best, step, first, _signed(row.change, row.count)]
    return "| " + " | ".join(cells) + " |"


def summary_markdown(summary: RunSummary) -> str:
    """The full table as Markdown: per family every scalar key (headline keys in bold) with its last value and
    interval, best value and step, first value and change, then the family's note lines; the other logged scalars."""
    lines = ["# Run summary", ""]
    if summary.folder is not None:
        lines += [f"Run folder: `{summary.folder}`", ""]
    lines += [
        (
            "Each key over its family's successful evaluations: the last value with its 95% bootstrap interval over "
            "the queries, the best value under its direction (↑ max, ↓ min) and the step it came at, the first value "
            "and the change since it. Headline keys are in bold."
        ),
        "",
    ]
    for family in summary.families:
        lines += [f"## {_md(family.prefix)}/: {_heading(family)}", ""]
        if family.rows:
            lines += ["| metric | | last | 95% interval | best | step | first | Δ first |"]
            lines += ["|---|:-:|--:|:--|--:|--:|--:|--:|"]
            headline = {row.key for row in family.headline}
            lines += [_md_row(row, row.key in headline) for row in family.rows]
            lines.append("")
        notes = [text for _, text in _family_notes(family)]
        lines += [*(f"- {_md(text)}" for text in notes), *([""] if notes else [])]
    if summary.extra:
        lines += ["## Other logged values", "", "| key | last |", "|---|--:|"]
        lines += [f"| {_md(key)} | {_general(value)} |" for key, value in summary.extra.items()]
        lines.append("")
    events = [_events_line(monitor, events) for monitor, events in _grouped_events(summary.events).items()]
    lines += [*(f"- {_md(text)}" for text in [*events, *summary.problems])]
    return "\n".join(lines).rstrip() + "\n"


def write_summary_table(summary: RunSummary, path: str | os.PathLike[str]) -> Path:
    """Write :func:`summary_markdown` to ``path`` (atomically) and return it."""
    path = Path(path)
    write_text(path, summary_markdown(summary))
    return path
