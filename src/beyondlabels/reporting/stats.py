"""A/B tables of runs against a baseline (paired by query id, with confidence intervals and decisions), and the JSON
report of a ranking evaluation over qrels.

An A/B comparison (what ``evaluate.py task=abtest runs=[...] baseline=... metric=... output=PATH.json`` saves)::

    {"metric": "retrieval/precision@1", "direction": "max" | "min", "baseline": label, "which": "final" | "best",
     "guardrails": ["retrieval/map@r", ...], "tolerance": 0.02, "rounds": 2000, "seed": 11,
     "runs": {label: {"path": str, "step": int, "value": float, "ci_low": float, "ci_high": float, "n": int,
                      "vs_baseline": None (the baseline) | ABResult.to_json()}}}

Each run's value is the mean of its per-query values with a percentile bootstrap interval; ``vs_baseline`` holds the
paired difference (run − baseline) with its bootstrap and t intervals, the guardrails and the decision of
:func:`beyondlabels.functional.abtest.ab_test`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from beyondlabels._internal.checks import check_choice
from beyondlabels.functional.abtest import ab_test
from beyondlabels.functional.bootstrap import bootstrap_ci
from beyondlabels.io.run_files import EvaluationRun, query_values
from beyondlabels.reporting._console import print_fitting
from beyondlabels.reporting.tables import ARROWS, format_value

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["ab_comparison", "print_ab_table", "split_key"]


def split_key(key: str) -> tuple[str, str]:
    """``"retrieval/precision@1"`` → ``("retrieval", "precision@1")``.

    Raises:
        ValueError: for a key without a ``prefix/`` (the message says what is expected).
    """
    if not isinstance(key, str) or "/" not in key:
        raise ValueError(
            f"metric and guardrail names are logged keys such as 'retrieval/precision@1' (prefix/key), got {key!r}"
        )
    prefix, name = key.split("/", 1)
    return prefix, name


def _folder(run: EvaluationRun) -> Path:
    return Path(run.run_folder or run.path).resolve()


def _values(run: EvaluationRun, key: str, which: str) -> tuple[int, np.ndarray, np.ndarray]:
    """(step, query ids, per-query values of ``key``) of the final or best evaluation of ``run``; of a file with
    several kinds of query, the rows of ``key``'s kind (:func:`beyondlabels.io.run_files.query_values`)."""
    if run.schema is None or key not in run.schema.per_query:
        known = sorted(run.schema.per_query) if run.schema is not None else []
        raise ValueError(
            f"{run.file}: {key!r} has no per-query values (per-query keys: {known}); choose one of them as metric"
        )
    if which == "best":
        record = run.best(key)
        if record is None:
            raise ValueError(f"{run.file}: no evaluation has a value of {key!r}")
        step = int(record["step"])
    else:
        last = run.last()
        if last is None:
            raise ValueError(f"{run.file}: no successful evaluation")
        step = int(last["step"])
    return (step, *query_values(run.per_query(step), key, f"{run.file}: the per-query file of step {step}"))


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def ab_comparison(
    runs: Sequence[EvaluationRun],
    baseline: str | Path,
    metric: str,
    guardrails: Sequence[str] = (),
    *,
    which: str = "final",
    tolerance: float = 0.02,
    min_queries: int = 8,
    intersect: bool = False,
    rounds: int = 2000,
    seed: int = 11,
) -> dict[str, Any]:
    """Every run against the baseline on ``metric`` (a logged key), paired by query id (format: the module docstring).

    Args:
        runs: Evaluations read with :func:`beyondlabels.io.read_evaluation_run` (one per callback of each run folder;
            the callbacks of one run folder form one run).
        baseline: The baseline's run folder (or any path inside it, or its label).
        metric: The primary metric, e.g. ``"retrieval/precision@1"``; its direction comes from the schema.
        guardrails: Logged keys that must not get worse by more than ``tolerance``.
        which: ``"final"`` (last evaluation) or ``"best"`` (the evaluation with the best ``metric``; guardrails are read
            at the same step when their callback evaluated then, else at their own final evaluation).

    Raises:
        ValueError: when the baseline is not among the runs, a key has no per-query values, or the runs do not hold
            the same queries (unless ``intersect``).
    """
    check_choice(which, "which", ("final", "best"))
    prefix, key = split_key(metric)
    guards = [(g, *split_key(g)) for g in guardrails]
    groups: dict[Path, dict[str, EvaluationRun]] = {}
    for run in runs:
        groups.setdefault(_folder(run), {})[run.prefix] = run
    folders = [f for f, g in groups.items() if prefix in g]
    if not folders:
        raise ValueError(
            f"no run has evaluations under {prefix!r} "
            f"(prefixes found: {sorted({p for g in groups.values() for p in g})})"
        )
    labels = _unique([groups[f][prefix].name for f in folders])
    b = _baseline_index(baseline, folders, labels)
    direction = groups[folders[b]][prefix].schema.mode(key) if groups[folders[b]][prefix].schema is not None else None
    if direction is None:
        raise ValueError(
            f"{metric!r} has no direction in the schema (a count or setting); "
            "choose a metric that is better when higher or lower"
        )
    data = {f: _read_run(groups[f], metric, guards, which) for f in folders}
    base = data[folders[b]]
    table: dict[str, Any] = {
        "metric": metric,
        "direction": direction,
        "baseline": labels[b],
        "which": which,
        "guardrails": list(guardrails),
        "tolerance": tolerance,
        "rounds": rounds,
        "seed": seed,
        "runs": {},
    }
    for i, f in enumerate(folders):
        step, ids, values = data[f][metric]
        ci = bootstrap_ci(values, rounds=rounds, seed=seed)
        entry: dict[str, Any] = {
            "path": str(f),
            "step": step,
            "value": ci.estimate,
            "ci_low": ci.low,
            "ci_high": ci.high,
            "n": ci.n,
            "vs_baseline": None,
        }
        if i != b:
            _, base_ids, base_values = base[metric]
            guard_inputs, guard_ids = _guardrail_inputs(groups[f], guards, base, data[f])
            result = ab_test(
                base_values,
                values,
                base_ids,
                ids,
                higher_is_better=direction == "max",
                guardrails=guard_inputs,
                guardrail_ids=guard_ids,
                tolerance=tolerance,
                min_queries=min_queries,
                intersect=intersect,
                rounds=rounds,
                seed=seed,
            )
            entry["vs_baseline"] = result.to_json()
        table["runs"][labels[i]] = entry
    return table


def _guardrail_inputs(
    run: dict[str, EvaluationRun], guards: list[tuple[str, str, str]], base: dict[str, Any], data: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per guardrail of one run (its evaluations by prefix, ``data`` as read by :func:`_read_run`) against the baseline
    (``base``): ``(baseline values, run values, higher is better)`` and ``(baseline ids, run ids)``."""
    inputs, ids = {}, {}
    for name, _, gkey in guards:
        schema = run[split_key(name)[0]].schema
        gdir = schema.mode(gkey) if schema is not None else None
        if gdir is None:
            raise ValueError(
                f"guardrail {name!r} has no direction in the schema; choose a key that is better when higher or lower"
            )
        inputs[name] = (base[name][2], data[name][2], gdir == "max")
        ids[name] = (base[name][1], data[name][1])
    return inputs, ids


def _baseline_index(baseline: str | Path, folders: list[Path], labels: list[str]) -> int:
    """The position of the baseline among the run folders: its folder, a path inside it, or its label."""
    base_path = Path(baseline).resolve()
    matches = [
        i
        for i, f in enumerate(folders)
        if base_path == f or base_path in f.parents or f in base_path.parents or str(baseline) == labels[i]
    ]
    if len(matches) != 1:
        raise ValueError(
            f"baseline={baseline!r} matches {len(matches)} of the runs "
            f"({[labels[i] for i in matches] or [str(f) for f in folders]}); "
            "pass the baseline's run folder (one of the runs compared)"
        )
    return matches[0]


def _read_run(
    group: Mapping[str, EvaluationRun], metric: str, guards: Sequence[tuple[str, str, str]], which: str
) -> dict[str, tuple[int, np.ndarray, np.ndarray]]:
    """``(step, ids, values)`` of the metric and of each guardrail in one run folder's evaluations (by prefix); with
    ``which="best"`` a guardrail is read at the metric's best step when its callback evaluated then."""
    prefix, key = split_key(metric)
    primary = _values(group[prefix], key, which)
    out = {metric: primary}
    for name, gprefix, gkey in guards:
        if gprefix not in group:
            raise ValueError(f"guardrail {name!r}: run {group[prefix].name} has no evaluations under {gprefix!r}")
        grun = group[gprefix]
        if which == "best" and primary[0] in grun.steps:  # the guardrail at the primary's best evaluation
            out[name] = (primary[0], *_at(grun, gkey, primary[0]))
        else:
            out[name] = _values(grun, gkey, "final")
    return out


def _at(run: EvaluationRun, key: str, step: int) -> tuple[np.ndarray, np.ndarray]:
    return query_values(run.per_query(step), key, f"{run.file}: the per-query file of step {step}")


def _interval(low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return "—"
    return f"[{low:.4f}, {high:.4f}]"


def print_ab_table(table: Mapping[str, Any], console: Console | None = None) -> None:
    """Print an A/B comparison: one row per run with the metric and its CI, the paired difference to the baseline with
    its deciding CI (marked ``(t)`` when the t interval was the wider one), and the decision; guardrail breaches and
    left-out queries are listed under the table. Nothing is cut: a table wider than the terminal is printed whole."""
    from rich.console import Console
    from rich.table import Table

    console = console if console is not None else Console()
    arrow = ARROWS.get(table["direction"], "")
    out = Table(title=f"{table['metric']} {arrow} against {table['baseline']} ({table['which']}, paired by query)")
    for name, justify in (
        ("run", "left"),
        ("value", "right"),
        ("95% CI", "right"),
        ("n", "right"),
        ("Δ vs baseline", "right"),
        ("95% CI of Δ", "right"),
        ("decision", "left"),
    ):
        out.add_column(name, justify=justify, no_wrap=True)
    notes = []
    for label, entry in table["runs"].items():
        ab = entry["vs_baseline"]
        if ab is None:
            out.add_row(
                label,
                format_value(entry["value"]),
                _interval(entry["ci_low"], entry["ci_high"]),
                str(entry["n"]),
                "",
                "",
                "baseline",
            )
            continue
        interval = ab["interval"]
        out.add_row(
            label,
            format_value(entry["value"]),
            _interval(entry["ci_low"], entry["ci_high"]),
            str(ab["n"]),
            f"{ab['difference']:+.4f}",
            _interval(interval["low"], interval["high"]) + (" (t)" if interval["method"] == "t" else ""),
            ab["decision"],
        )
        for name, guard in ab["guardrails"].items():
            if guard["breached"]:
                notes.append(
                    f"{label}: guardrail {name} worse by {guard['worse_by']:.4f} (tolerance {table['tolerance']})"
                )
        if ab["unmatched"]:
            notes.append(f"{label}: {ab['unmatched']} query ids only in one of the two runs were left out")
    from rich.measure import Measurement

    needed = Measurement.get(console, console.options.update(width=10_000), out).maximum
    print_fitting(console, out, needed)  # never cut a run name or a decision
    for note in notes:
        console.print(note, highlight=False, soft_wrap=True)
