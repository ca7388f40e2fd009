"""The grouped comparison as terminal tables (rich): the groups, then the tests against the baseline
(format: :mod:`beyondlabels.reporting.sweeps`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from beyondlabels.reporting._console import print_fitting
from beyondlabels.reporting.sweeps._cells import _cell, _fmt, _footnote, _significant
from beyondlabels.reporting.sweeps.comparison import DAGGER
from beyondlabels.reporting.tables import ARROWS

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["print_sweep"]


def _console(console: Console | None) -> Console:
    from rich.console import Console

    return console if console is not None else Console()


def print_sweep(table: Mapping[str, Any], console: Console | None = None) -> None:
    """Print the grouped table (a row per group, a column per key: ``mean [low, high]`` across seeds above the pooled
    per-query interval ``q [low, high]``; columns that do not fit the terminal continue in further tables), then the
    comparisons with the baseline and the warnings."""
    from rich.cells import cell_len
    from rich.table import Table

    console = _console(console)
    names = list(table["groups"])
    keys = list(table["metrics"])
    marks = _significant(table)
    base_name = table["baseline"]["group"] if table.get("baseline") else None
    row_names = [f"{n} (baseline)" if n == base_name else n for n in names]
    cells: dict[str, list[str]] = {}
    for k in keys:
        column = []
        for n in names:
            m = table["groups"][n]["metrics"][k]
            pooled = m["pooled"]
            second = f"q [{_fmt(pooled['low'])}, {_fmt(pooled['high'])}]" if pooled else "q —"
            column.append(f"{_cell(m['seeds'])}{DAGGER if (n, k) in marks else ''}\n{second}")
        cells[k] = column
    name_width = max([len("group"), *(cell_len(n) for n in row_names)])
    widths = [
        max(
            cell_len(f"{k} {ARROWS.get(table['metrics'][k]['direction'], '')}"),
            *(cell_len(line) for c in cells[k] for line in c.split("\n")),
        )
        for k in keys
    ]
    fixed = 1 + name_width + 3 + 4 + 3
    chunks: list[list[int]] = []
    current: list[int] = []
    used = fixed
    for i, width in enumerate(widths):
        if current and used + width + 3 > console.width:
            chunks.append(current)
            current, used = [], fixed
        current.append(i)
        used += width + 3
    chunks.append(current)
    title = f"{'best' if table['which'] == 'best' else 'final'} values per setting, across seeds"
    for part, chunk in enumerate(chunks):
        out = Table(title=title + (f" ({part + 1}/{len(chunks)})" if len(chunks) > 1 else ""))
        out.add_column("group", no_wrap=True)
        out.add_column("n", justify="right", no_wrap=True)
        for i in chunk:
            out.add_column(
                f"{keys[i]} {ARROWS.get(table['metrics'][keys[i]]['direction'], '')}".strip(),
                justify="right",
                no_wrap=True,
            )
        for r, n in enumerate(names):
            out.add_row(row_names[r], str(len(table["groups"][n]["jobs"])), *(cells[keys[i]][r] for i in chunk))
        print_fitting(console, out, fixed + sum(widths[i] + 3 for i in chunk))
    notes = [_footnote(table) + " q: pooled per-query bootstrap interval over the group's jobs."]
    if table.get("common_overrides"):
        notes.append(f"every group: {', '.join(table['common_overrides'])}")
    for note in notes:
        console.print(note, highlight=False, soft_wrap=True)
    if table.get("baseline"):
        _print_tests(table, console)
    for warning in table.get("warnings", []):
        console.print(f"warning: {warning}", highlight=False, soft_wrap=True)


def _print_tests(table: Mapping[str, Any], console: Console) -> None:
    from rich.measure import Measurement
    from rich.table import Table

    base = table["baseline"]
    out = Table(
        title=(
            f"against {base['group']}: {base['correction']} over {base['family_size']} comparisons, "
            f"level {base['level']}"
        )
    )
    for name, justify in (
        ("group", "left"),
        ("metric", "left"),
        ("Δ seeds [t]", "right"),
        ("Δ queries", "right"),
        ("p / Holm", "right"),
        ("d_z", "right"),
        ("decision", "left"),
    ):
        out.add_column(name, justify=justify, no_wrap=True)
    for c in base["comparisons"]:
        if "seed_t" in c:
            t, q = c["seed_t"], c["per_query"]
            seeds = (
                f"{_fmt(t['estimate'], 4, True)} (n={len(c['seeds'])})\n"
                f"[{_fmt(t['low'], 4, True)}, {_fmt(t['high'], 4, True)}]"
            )
            queries = (
                f"{_fmt(q['estimate'], 4, True)} (n={c['n_queries']})\n"
                f"[{_fmt(q['low'], 4, True)}, {_fmt(q['high'], 4, True)}]"
            )
            p = f"{c['pvalue']:.4f}\n{c['p_adjusted']:.4f}"
            d = _fmt(c["effect_size"], 2)
        else:
            seeds = queries = p = d = "—"
        arrow = ARROWS.get(c["direction"], "")
        out.add_row(c["group"], f"{c['metric']} {arrow}", seeds, queries, p, d, c["decision"])
    needed = Measurement.get(console, console.options.update(width=10_000), out).maximum
    print_fitting(console, out, needed)
    console.print(
        f"p: {base['test']} ({base['permutations']} sign assignments, or all of them when fewer), "
        f"then {base['correction']}-adjusted over every comparison above; decisions use the adjusted p. "
        "d_z = mean / sd of the per-query differences.",
        highlight=False,
        soft_wrap=True,
    )
    for c in base["comparisons"]:
        if c["decision"] == "no conclusion":
            console.print(
                f"{c['group']} on {c['metric']}: no conclusion ({c['reason']})", highlight=False, soft_wrap=True
            )
