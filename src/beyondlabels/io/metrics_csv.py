"""What a run's CSV log (Lightning's ``CSVLogger``, ``<run>/csv/metrics.csv``) says about convergence, read back.

:class:`beyondlabels.callbacks.ConvergenceMonitor` logs, at the step of each value it observes,
``<prefix>/<monitor>/plateau`` and ``.../downturn`` (1 while the rule flags it, else 0) beside
``.../window_mean`` and the p-values ``.../plateau_p`` / ``.../downturn_p``. An *event* is the start of a flag: a
logged 1 whose previous logged value in that column was not 1 (the first value counts), exactly as the monitor's own
``events`` record them. Cells left empty (rows of other keys) are not observations.

Examples:
    >>> import tempfile
    >>> from pathlib import Path
    >>> file = Path(tempfile.mkdtemp()) / "metrics.csv"
    >>> _ = file.write_text("epoch,step,c/r/p@1/window_mean,c/r/p@1/plateau,c/r/p@1/plateau_p,val/loss\\n"
    ...                     "0,10,0.5,0,0.4,\\n0,12,,,,3.2\\n1,20,0.51,1,0.01,\\n1,30,0.5,1,0.02,\\n")
    >>> read_convergence_events(file)
    [{'series': 'c/r/p@1', 'event': 'plateau', 'step': 20, 'p': 0.01, 'window_mean': 0.51}]
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Any

from beyondlabels._internal.files import open_file

__all__ = ["FLAG_NAMES", "read_convergence_events"]

FLAG_NAMES = ("plateau", "downturn")


MAX_CSV_BYTES = 1 << 30  # the largest CSV log read


def _number(cell: str | None) -> float | None:
    if cell is None or not cell.strip():
        return None
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _flag_columns(header: list[str]) -> list[tuple[int, str, str, int | None, int | None]]:
    """``(column, series, event, p column, window_mean column)`` of every convergence flag in ``header``."""
    index = {name: i for i, name in enumerate(header)}
    found = []
    for i, name in enumerate(header):
        series, _, event = name.rpartition("/")
        if event in FLAG_NAMES and series and f"{series}/window_mean" in index:
            found.append((i, series, event, index.get(f"{series}/{event}_p"), index[f"{series}/window_mean"]))
    return found


def read_convergence_events(file: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The plateau and downturn events logged to a CSV log, in file order.

    Returns:
        ``{"series", "event", "step", "p", "window_mean"}`` per event: ``series`` is the logged name before
        ``/plateau`` (``convergence/retrieval/precision@1``), ``p`` and ``window_mean`` None when not logged.
        A log without convergence columns returns ``[]`` after reading its header only.

    Raises:
        ValueError: if the file cannot be read as CSV text (the message names the file).
    """
    file = Path(file)
    events: list[dict[str, Any]] = []
    try:
        with open_file(file, "the CSV log", MAX_CSV_BYTES) as raw, io.TextIOWrapper(raw, "utf-8", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            flags = _flag_columns(header)
            step_column = header.index("step") if "step" in header else None
            if not flags:
                return []
            previous: dict[int, float | None] = {}
            for row in reader:
                _scan_row(row, flags, step_column, previous, events)
    except (OSError, UnicodeDecodeError, csv.Error, ValueError) as exc:
        raise ValueError(f"{file}: not a readable CSV log ({type(exc).__name__}: {exc})") from exc
    return events


def _scan_row(
    row: list[str],
    flags: list[tuple[int, str, str, int | None, int | None]],
    step_column: int | None,
    previous: dict[int, float | None],
    events: list[dict[str, Any]],
) -> None:
    def cell(i: int | None) -> float | None:
        return _number(row[i]) if i is not None and i < len(row) else None

    for column, series, event, p_column, mean_column in flags:
        value = cell(column)
        if value is None:
            continue  # not an observation of this series
        if value == 1.0 and previous.get(column) != 1.0:
            step = cell(step_column)
            events.append(
                {
                    "series": series,
                    "event": event,
                    "step": int(step) if step is not None else None,
                    "p": cell(p_column),
                    "window_mean": cell(mean_column),
                }
            )
        previous[column] = value
