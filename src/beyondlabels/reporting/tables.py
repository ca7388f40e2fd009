"""Terminal tables (rich) of metrics, and side-by-side comparison of runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beyondlabels.io.wandb_offline import OfflineRun


def print_metrics_table(metrics: Mapping[str, Any], title: str = "metrics") -> None:
    """Print the scalar entries of ``metrics`` as a two-column table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        table.add_row(key, f"{value:d}" if isinstance(value, int) else f"{value:.4f}")
    Console().print(table)


def compare_runs(runs: Sequence[OfflineRun], keys: Sequence[str] | None = None, prefixes: Sequence[str] = ("val/", "retrieval/")) -> dict[str, dict[str, float | None]]:
    """Final (summary) values of ``keys`` in each run: ``{run label: {key: value or None}}``.

    Without ``keys``, every numeric summary key that starts with one of ``prefixes`` in any run is used.
    Run labels are ``name (id)``.
    """
    if keys is None:
        found = set()
        for run in runs:
            found.update(k for k, v in run.summary.items() if k.startswith(tuple(prefixes)) and _is_number(v))
        keys = sorted(found)
    table: dict[str, dict[str, float | None]] = {}
    for run in runs:
        label = f"{run.name} ({run.run_id})"
        table[label] = {k: float(run.summary[k]) if _is_number(run.summary.get(k)) else None for k in keys}
    return table


def print_comparison(table: Mapping[str, Mapping[str, float | None]], title: str = "runs") -> None:
    """Print :func:`compare_runs` output with one column per run."""
    from rich.console import Console
    from rich.table import Table

    out = Table(title=title)
    out.add_column("metric")
    labels = list(table)
    for label in labels:
        out.add_column(label, justify="right")
    keys = sorted({k for row in table.values() for k in row})
    for key in keys:
        out.add_row(key, *["—" if table[label].get(key) is None else f"{table[label][key]:.4f}" for label in labels])
    Console().print(out)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
