"""A sweep's jobs grouped by setting (seeds summarised), tested against a baseline group with the Holm–Bonferroni
correction, and shown as a terminal table, Markdown, LaTeX (booktabs) and one PNG per metric.

The grouped comparison (what ``evaluate.py task=compare runs=[<multirun>] output=PATH.json`` saves)::

    {"kind": "sweep", "which": "final" | "best", "seed_keys": ["seed"], "confidence": 0.95,
     "min_bootstrap_seeds": 5, "common_overrides": [str],
     "metrics": {key: {"direction": "max" | "min" | None}},
     "groups": {name: {"key": group key, "overrides": [str], "seeds": [str],
                       "jobs": [{"path": str, "seed": str, "values": {key: float | None}}],
                       "metrics": {key: {"values": [float], "seeds": SeedSummary.to_json(),
                                         "pooled": Interval.to_json() | None}}}},
     "baseline": None | {"group": name, "metric": key, "guardrails": [key], "level": 0.05,
                         "correction": "Holm–Bonferroni", "family_size": m, "permutations": int, "test": str,
                         "effect_size": str,
                         "comparisons": [{"group": name, "metric": key, "direction": "max" | "min",
                                          **GroupDifference.to_json(), "p_adjusted": float,
                                          "decision": "better" | "worse" | "cannot distinguish" | "no conclusion",
                                          "reason": str}]},
     "warnings": [str]}

Groups (:func:`beyondlabels.io.sweeps.group_jobs`) are named by the overrides that differ between groups (those every
group shares are ``common_overrides``). A group's value of a key is each job's final (or best) scalar, summarised
across its seeds (:func:`beyondlabels.functional.sweeps.seed_summary`); ``pooled`` is the bootstrap over the
per-query values of all its jobs. Against a baseline every other group is compared on ``metric`` and each guardrail
(:func:`beyondlabels.functional.sweeps.paired_group_difference`: the decision's p-value is the larger of the
query-level and the seed-level test's); the p-values of all these comparisons (groups × keys) are adjusted together (:func:`beyondlabels.functional.multiple_testing.holm_adjust`) and the decision reads the
adjusted one: below ``level`` → ``better`` or ``worse`` under the key's direction, else ``cannot distinguish`` (never
"no difference": a test that does not reject shows no equality); ``no conclusion`` when the groups share no seed or
no query.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from beyondlabels._internal.checks import check_choice, check_number, is_number
from beyondlabels.functional.multiple_testing import CORRECTION, holm_adjust
from beyondlabels.functional.sweeps import MIN_BOOTSTRAP_SEEDS, paired_group_difference, pooled_query_interval, seed_summary
from beyondlabels.io.run_files import EvaluationRun, query_values
from beyondlabels.io.sweeps import SEED_KEYS, SweepJob, group_jobs, override_name
from beyondlabels.reporting._console import print_fitting
from beyondlabels.reporting.stats import split_key
from beyondlabels.reporting.tables import ARROWS

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "DAGGER",
    "TEST",
    "plot_sweep",
    "print_sweep",
    "sweep_comparison",
    "sweep_headline_keys",
    "sweep_latex",
    "sweep_markdown",
    "write_sweep_files",
]

TEST = (
    "the larger of a two-sided paired randomization (sign-flip) p over queries (each query's difference averaged over "
    "the shared seeds) and a two-sided paired t p over the per-seed differences (both must reject)"
)
EFFECT_SIZE = "d_z: mean / standard deviation of the per-query differences"
DAGGER = "†"
_NO_OVERRIDE = "(no override)"


# ---- assembling -----------------------------------------------------------------------------------------------------


def _record(run: EvaluationRun, key: str, which: str) -> dict[str, Any] | None:
    if which == "best" and run.schema is not None and key in run.schema.scalar_keys() and run.schema.mode(key) is not None:
        return run.best(key)
    return run.last()


def _number(value: Any) -> float | None:
    return float(value) if is_number(value) else None


def _direction(jobs: Sequence[SweepJob], prefix: str, key: str) -> str | None:
    for job in jobs:
        run = job.runs.get(prefix)
        if run is not None and run.schema is not None and key in run.schema.scalar_keys():
            return run.schema.mode(key)
    return None


def sweep_headline_keys(runs: Sequence[EvaluationRun]) -> list[str]:
    """The keys :func:`sweep_comparison` tabulates by default: the scalars with a direction that have per-query
    values, prefixed as logged (``retrieval/precision@1``), in the order of ``runs`` and their schemas.

    Example:
        >>> from beyondlabels.schema import KeySpec, OutputSchema
        >>> schema = OutputSchema({"map@r": KeySpec("scalar", True), "num_queries": KeySpec("scalar", None, count=True)},
        ...                       per_query={"map@r": KeySpec("per_query", True)})
        >>> sweep_headline_keys([EvaluationRun(Path("0/retrieval"), "0", "retrieval", [], schema=schema)])
        ['retrieval/map@r']
    """
    keys: dict[str, None] = {}
    for run in runs:
        if run.schema is None:
            continue
        for key in run.schema.scalar_keys():
            if run.schema.mode(key) is not None and key in run.schema.per_query:
                keys[f"{run.prefix}/{key}"] = None
    return list(keys)


def _default_keys(jobs: Sequence[SweepJob]) -> list[str]:
    return sweep_headline_keys([run for job in jobs for run in job.runs.values()])


def _per_query(job: SweepJob, prefix: str, key: str, which: str, primary: str | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """(ids, values) of ``key`` at the job's final or best evaluation (best under ``primary`` when given); None
    without a per-query file holding it."""
    run = job.runs.get(prefix)
    if run is None or run.schema is None or key not in run.schema.per_query:
        return None
    record = _record(run, primary or key, which) if primary is None or primary in run.schema.scalar_keys() else run.last()
    if record is None:
        return None
    try:
        return query_values(run.per_query(int(record["step"])), key, run.file)
    except (FileNotFoundError, KeyError, ValueError):
        return None


def _names(groups: Mapping[str, list[SweepJob]]) -> tuple[list[str], list[str]]:
    """Display names (the overrides that differ between groups) and the overrides every group shares."""
    settings = [jobs[0].setting for jobs in groups.values()]
    common = [o for o in settings[0] if all(o in s for s in settings)] if settings else []
    names = []
    for key, jobs in groups.items():
        differing = [o for o in jobs[0].setting if o not in common]
        name = ", ".join(differing) if differing else (jobs[0].folder.name if not jobs[0].seed else _NO_OVERRIDE)
        names.append(name)
    unique = []
    for name, jobs in zip(names, groups.values()):
        unique.append(name if names.count(name) == 1 else f"{name} ({jobs[0].folder.name})")
    return unique, common


def _find_baseline(baseline: str | Path, names: list[str], groups: Mapping[str, list[SweepJob]]) -> int:
    text = str(baseline)
    keys = list(groups)
    for i, (name, key) in enumerate(zip(names, keys)):
        if text in (name, key):
            return i
    path = Path(text).resolve()
    for i, jobs in enumerate(groups.values()):
        for job in jobs:
            folder = job.folder.resolve()
            if path == folder or folder in path.parents:
                return i
    raise ValueError(
        f"baseline={text!r} is neither a group nor one of the job folders compared; groups: {names} (or pass the "
        "folder of one of the baseline group's jobs)"
    )


def sweep_comparison(
    runs: Sequence[EvaluationRun],
    *,
    seed_keys: Sequence[str] = SEED_KEYS,
    keys: Sequence[str] | None = None,
    which: str = "final",
    baseline: str | Path | None = None,
    metric: str | None = None,
    guardrails: Sequence[str] = (),
    level: float = 0.05,
    permutations: int = 9999,
    intersect: bool = False,
    confidence: float = 0.95,
    rounds: int = 2000,
    seed: int = 11,
) -> dict[str, Any]:
    """Group ``runs`` by setting and summarise (and against ``baseline``, test) them (format: the module docstring).

    Args:
        runs: Evaluations read with :func:`beyondlabels.io.read_evaluation_run`, one per callback of each job.
        seed_keys: Override keys that tell a group's seeds apart.
        keys: Logged keys to tabulate (default: ``metric`` and ``guardrails`` with a baseline, else every headline
            key, i.e. every scalar with a direction and per-query values).
        which: ``"final"`` or ``"best"`` (best under each key's direction; with a baseline, the keys of ``metric``'s
            callback are read at its evaluation that is best under ``metric``, those of other callbacks at their last).
        baseline: A group name, group key or the folder of one of its jobs.
        metric, guardrails: The keys tested against the baseline.
        level: The family-wise error rate of the decisions.
        permutations: Random sign assignments of each randomization test.
        intersect: Compare the queries both jobs of a seed hold instead of raising on unmatched ids.
        confidence, rounds, seed: Of every interval (and the tests' seed).

    Raises:
        ValueError: for an unknown ``which``, a ``level`` outside (0, 1), a baseline without ``metric`` (or the
            reverse), a baseline that is no group, keys no job has.
    """
    check_choice(which, "which", ("final", "best"))
    check_number(level, "level", above=0.0, below=1.0, hint="e.g. 0.05")
    if (baseline is None) != (metric is None):
        raise ValueError("a test against a baseline needs both baseline=GROUP (or a job folder) and metric=KEY (e.g. retrieval/precision@1)")
    groups = group_jobs(runs, seed_keys)
    if not groups:
        raise ValueError("no runs to compare")
    all_jobs = [job for jobs in groups.values() for job in jobs]
    tested = [metric, *guardrails] if metric is not None else []
    for key in tested:
        split_key(key)
    keys = list(dict.fromkeys(list(keys) if keys else (tested or _default_keys(all_jobs))))
    if not keys:
        raise ValueError("no key to tabulate: the runs' schemas name no scalar with a direction and per-query values; pass metrics=[prefix/key, ...]")
    known = {f"{p}/{k}" for job in all_jobs for p, r in job.runs.items() for k in r.scalar_keys()}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise ValueError(f"keys {unknown} are in none of the runs; their keys: {sorted(known)}")
    names, common = _names(groups)
    primary = split_key(metric) if metric is not None else None
    table: dict[str, Any] = {
        "kind": "sweep",
        "which": which,
        "seed_keys": list(seed_keys) if not isinstance(seed_keys, str) else [seed_keys],
        "confidence": confidence,
        "min_bootstrap_seeds": MIN_BOOTSTRAP_SEEDS,
        "common_overrides": common,
        "metrics": {k: {"direction": _direction(all_jobs, *split_key(k))} for k in keys},
        "groups": {},
        "baseline": None,
        "warnings": [],
    }
    per_query: dict[tuple[int, str], dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for g, (name, (gkey, jobs)) in enumerate(zip(names, groups.items())):
        entry: dict[str, Any] = {"key": gkey, "overrides": jobs[0].setting, "seeds": [j.seed for j in jobs], "jobs": [], "metrics": {}}
        for job in jobs:
            values = {}
            for k in keys:
                prefix, key = split_key(k)
                run = job.runs.get(prefix)
                by = primary[1] if primary is not None and primary[0] == prefix else key
                record = _record(run, by, which) if run is not None else None
                if record is not None and primary is not None and primary[0] != prefix and which == "best":
                    record = run.last()
                values[k] = _number(record.get(key)) if record is not None else None
            entry["jobs"].append({"path": str(job.folder), "seed": job.seed, "values": values})
        for k in keys:
            prefix, key = split_key(k)
            values = [v for v in (j["values"][k] for j in entry["jobs"]) if v is not None]
            by = primary[1] if primary is not None and primary[0] == prefix else None
            arrays = {job.seed: pq for job in jobs if (pq := _per_query(job, prefix, key, which, by)) is not None}
            per_query[(g, k)] = arrays
            pooled = pooled_query_interval([v for _, v in arrays.values()], confidence=confidence, rounds=rounds, seed=seed) if arrays else None
            entry["metrics"][k] = {
                "values": values,
                "seeds": seed_summary(values, confidence=confidence, rounds=rounds, seed=seed).to_json(),
                "pooled": pooled.to_json() if pooled is not None else None,
            }
        table["groups"][name] = entry
        if len(jobs) < 3:
            table["warnings"].append(f"group {name}: {len(jobs)} seed(s); an interval across seeds needs at least 2, and 3 or more to mean much")
    if baseline is not None:
        table["baseline"] = _against_baseline(
            table, names, groups, per_query, baseline, tested, level=level, permutations=permutations,
            intersect=intersect, confidence=confidence, rounds=rounds, seed=seed,
        )  # fmt: skip
    return table


def _against_baseline(
    table: dict[str, Any],
    names: list[str],
    groups: Mapping[str, list[SweepJob]],
    per_query: Mapping[tuple[int, str], Mapping[str, tuple[np.ndarray, np.ndarray]]],
    baseline: str | Path,
    tested: list[str],
    *,
    level: float,
    permutations: int,
    intersect: bool,
    confidence: float,
    rounds: int,
    seed: int,
) -> dict[str, Any]:
    b = _find_baseline(baseline, names, groups)
    base_seeds = set(table["groups"][names[b]]["seeds"])
    comparisons: list[dict[str, Any]] = []
    for g, name in enumerate(names):
        if g == b:
            continue
        seeds = set(table["groups"][name]["seeds"])
        if seeds != base_seeds:
            table["warnings"].append(
                f"group {name}: seeds {sorted(seeds)} differ from the baseline's {sorted(base_seeds)}; only the shared ones are paired"
            )
        for k in tested:
            direction = table["metrics"][k]["direction"]
            if direction is None:
                raise ValueError(f"{k!r} has no direction in the schema (a count or setting); test a key that is better when higher or lower")
            entry: dict[str, Any] = {"group": name, "metric": k, "direction": direction}
            base_pq, other_pq = per_query[(b, k)], per_query[(g, k)]
            if not base_pq or not other_pq:
                entry.update(pvalue=math.nan, reason=f"no per-query values of {k} in the per-query files of both groups")
            elif not set(base_pq) & set(other_pq):
                entry.update(pvalue=math.nan, reason="the two groups share no seed")
            else:
                result = paired_group_difference(
                    base_pq, other_pq, intersect=intersect, permutations=permutations, rounds=rounds, confidence=confidence, seed=seed
                )
                entry.update(result.to_json())
                if result.n_queries == 0:
                    entry.update(pvalue=math.nan, reason="no paired query has a value")
            comparisons.append(entry)
    adjusted = holm_adjust([c["pvalue"] for c in comparisons]) if comparisons else np.zeros(0)
    for entry, p in zip(comparisons, adjusted.tolist()):
        entry["p_adjusted"] = p
        if math.isnan(p):
            entry["decision"] = "no conclusion"
            entry.setdefault("reason", "no test was made")
            continue
        up = entry["difference"] > 0
        if p < level:
            entry["decision"] = "better" if up == (entry["direction"] == "max") else "worse"
            entry["reason"] = f"{CORRECTION}-adjusted p = {p:.4g} < {level}"
        else:
            entry["decision"] = "cannot distinguish"
            entry["reason"] = f"{CORRECTION}-adjusted p = {p:.4g} >= {level}"
    return {
        "group": names[b],
        "metric": tested[0],
        "guardrails": tested[1:],
        "level": level,
        "correction": CORRECTION,
        "family_size": int(np.isfinite(adjusted).sum()),
        "permutations": permutations,
        "test": TEST,
        "effect_size": EFFECT_SIZE,
        "comparisons": comparisons,
    }


# ---- text -----------------------------------------------------------------------------------------------------------


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
            f" {DAGGER}: differs from the baseline ({base['group']}) at level {base['level']} after {base['correction']} "
            f"adjustment over {base['family_size']} comparisons ({base['test']})."
        )
    return text


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
    widths = [max(cell_len(f"{k} {ARROWS.get(table['metrics'][k]['direction'], '')}"), *(cell_len(line) for c in cells[k] for line in c.split("\n"))) for k in keys]
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
            out.add_column(f"{keys[i]} {ARROWS.get(table['metrics'][keys[i]]['direction'], '')}".strip(), justify="right", no_wrap=True)
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
    out = Table(title=f"against {base['group']}: {base['correction']} over {base['family_size']} comparisons, level {base['level']}")
    for name, justify in (("group", "left"), ("metric", "left"), ("Δ seeds [t]", "right"), ("Δ queries", "right"), ("p / Holm", "right"), ("d_z", "right"), ("decision", "left")):
        out.add_column(name, justify=justify, no_wrap=True)
    for c in base["comparisons"]:
        if "seed_t" in c:
            t, q = c["seed_t"], c["per_query"]
            seeds = f"{_fmt(t['estimate'], 4, True)} (n={len(c['seeds'])})\n[{_fmt(t['low'], 4, True)}, {_fmt(t['high'], 4, True)}]"
            queries = f"{_fmt(q['estimate'], 4, True)} (n={c['n_queries']})\n[{_fmt(q['low'], 4, True)}, {_fmt(q['high'], 4, True)}]"
            p = f"{c['pvalue']:.4f}\n{c['p_adjusted']:.4f}"
            d = _fmt(c["effect_size"], 2)
        else:
            seeds = queries = p = d = "—"
        arrow = ARROWS.get(c["direction"], "")
        out.add_row(c["group"], f"{c['metric']} {arrow}", seeds, queries, p, d, c["decision"])
    needed = Measurement.get(console, console.options.update(width=10_000), out).maximum
    print_fitting(console, out, needed)
    console.print(
        f"p: {base['test']} ({base['permutations']} sign assignments, or all of them when fewer), then {base['correction']}-adjusted "
        f"over every comparison above; decisions use the adjusted p. d_z = mean / sd of the per-query differences.",
        highlight=False,
        soft_wrap=True,
    )
    for c in base["comparisons"]:
        if c["decision"] == "no conclusion":
            console.print(f"{c['group']} on {c['metric']}: no conclusion ({c['reason']})", highlight=False, soft_wrap=True)


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
    header = ["setting", "n", *(escape(f"{k} {ARROWS.get(table['metrics'][k]['direction'], '')}".strip()) for k in keys)]
    return header, rows


def sweep_markdown(table: Mapping[str, Any]) -> str:
    """The grouped table as Markdown: a row per group, a column per key, ``mean [low, high]`` across seeds, the best
    mean of each column (under the key's direction) in bold, :data:`DAGGER` where the difference to the baseline
    survives the correction, and a footnote naming it.

    Example:
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


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _latex_escape(text: str) -> str:
    return re.sub(r"[\\&%$#_{}~^]", lambda m: _LATEX[m.group()], text).replace("↑", r"$\uparrow$").replace("↓", r"$\downarrow$").replace("–", "--")


def sweep_latex(table: Mapping[str, Any]) -> str:
    """The grouped table as a LaTeX ``table`` with booktabs rules (``\\usepackage{booktabs}``), formatted as
    :func:`sweep_markdown` (bold: ``\\textbf``; the mark: ``$^\\dagger$``), the footnote under the tabular.

    Example:
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


def plot_sweep(table: Mapping[str, Any], stem: str | Path) -> list[Path]:
    """One PNG per key, ``<stem>.<key>.png`` (``/`` and other characters unsafe in a file name as ``_``): the value
    against the swept setting (a numeric axis when its values are numbers), a line per combination of the other
    differing overrides, the band the across-seed t interval, the baseline group ringed."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from beyondlabels.io.atomic import save_figure

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
        fig, ax = plt.subplots(figsize=(5, 3.4), dpi=100)
        try:
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
                ax.set_xticks(range(len(categories)), [str(c) for c in categories], rotation=20 if len(categories) > 4 else 0)
            ax.set_xlabel(x_key or "group")
            ax.set_ylabel(f"{key} {ARROWS.get(spec['direction'], '')}".strip())
            conf = f"{table['confidence']:.0%}"
            ax.set_title(f"{key}: mean over seeds, {conf} t band", fontsize=9)
            ax.grid(alpha=0.3)
            if len(lines) > 1:
                ax.legend(fontsize=7)
            fig.tight_layout()
            path = stem.parent / f"{stem.name}.{_slug(key)}.png"
            save_figure(fig, path)
            paths.append(path)
        finally:
            plt.close(fig)
    return paths


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
