"""``task=compare``: finished runs side by side, per job or grouped by setting across seeds.

Reads the evaluation files the callbacks write (``source=files``: history.jsonl, schema.json; or evaluate.py
reports) or offline W&B runs (``source=wandb``) and tabulates final values, or ``which=best`` under each metric's
direction. Per job (``group=false``; tables: :mod:`beyondlabels.reporting.tables`): a row per metric, a column per
run. Grouped (``group=true``; :mod:`beyondlabels.reporting.sweeps`): the jobs of one setting (their Hydra overrides but
the ``seed_keys``) form a group summarised across its seeds, a row per group; ``baseline=`` and ``metric=`` (with
``guardrails=``) test every other group against the baseline group with the Holm–Bonferroni correction, and
``output=`` also writes the table as Markdown and LaTeX and a PNG per metric. ``group=auto`` (the default) groups
with a baseline, or when the jobs form at least two settings of which one has several seeds. Paired tests of single
runs against a baseline run are ``task=abtest``.

What is printed per job: one run prints its run summary, as ``train.py`` ends (:mod:`beyondlabels.reporting.summary`:
per family the headline keys with their interval, best step and change since the first evaluation, the notes, the
paths); several runs print the table of their headline keys. ``full_table=true`` prints the table of every key, and
``metrics=`` the table of those keys. ``output=`` saves the table of ``metrics=`` (default every key) whatever is
printed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from beyondlabels._internal.checks import check_int_at_least
from beyondlabels._internal.convert import plain
from beyondlabels.io import (
    evaluation_schema,
    find_evaluation_runs,
    find_offline_runs,
    read_evaluation_run,
    read_offline_run,
    run_overrides,
)
from beyondlabels.reporting import compare_evaluation_runs, compare_wandb_runs, print_comparison
from beyondlabels.reporting.summary import print_summary, resolve_headline, summarize_runs
from beyondlabels.schema import OutputSchema
from beyondlabels.tasks._common import ReportFiles, full_table, path_list

__all__ = ["GROUPING", "SOURCES", "WAIT_S", "WHICH", "run"]

log = logging.getLogger(__name__)

SOURCES = ("files", "wandb")
WHICH = ("final", "best")
GROUPING = ("auto", True, False)
# source=wandb: how long to wait for a run whose log wandb is still writing
WAIT_S = 10.0


def run(cfg: DictConfig) -> dict[str, Any]:
    """Compare ``runs`` and print (and with ``output``, save) the table."""
    roots = path_list(cfg.get("runs"))
    if not roots:
        raise ValueError("task=compare needs runs=[PATH, ...]: run folders, multirun folders or history.jsonl files")
    source = cfg.get("source", "files")
    which = cfg.get("which", "final")
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if which not in WHICH:
        raise ValueError(f"which must be one of {WHICH}, got {which!r}")
    keys = plain(cfg.get("metrics"))
    keys = [keys] if isinstance(keys, str) else (list(keys) if keys else None)
    group = cfg.get("group", "auto")
    if group not in GROUPING:
        raise ValueError(f"group must be auto, true or false, got {group!r}")
    full = full_table(cfg)
    tested = cfg.get("baseline") is not None or cfg.get("metric") is not None
    if tested and group is False:
        raise ValueError(
            "baseline= and metric= test groups of jobs; drop group=false "
            "(or use task=abtest to test single runs against one)"
        )
    if source == "wandb":
        if group is True or tested:
            raise ValueError(
                "grouping by setting and the baseline test read the project's evaluation files: use source=files"
            )
        table, schemas = _from_wandb(roots, keys, which)
        logged = list(table["metrics"])
        headline = [k for schema in schemas if schema is not None for k in resolve_headline(schema, logged)]
        _print_table(table, None if keys is not None or full or not headline else headline)
    else:
        runs = _read_files(roots)
        if group is True or tested or (group == "auto" and _sweep_of_seeds(runs, _seed_keys(cfg))):
            return _grouped(cfg, runs, keys, which)
        table = compare_evaluation_runs(runs, keys=keys, which=which)
        if keys is None and len(table["runs"]) == 1:
            folder = runs[0].run_folder
            print_summary(summarize_runs(runs, folder if folder is not None and folder.is_dir() else None), full=full)
        else:
            headline = [f"{run.prefix}/{k}" for run in runs for k in resolve_headline(run.schema, list(run.final()))]
            _print_table(table, None if keys is not None or full else headline)
    if cfg.get("output"):
        ReportFiles(cfg).write(table)
    return table


def _print_table(table: dict[str, Any], headline: list[str] | None) -> None:
    """The comparison, of the ``headline`` keys only when given (the table saved by ``output=`` keeps every key)."""
    if headline is None:
        print_comparison(table)
        return
    keys = list(dict.fromkeys(k for k in headline if k in table["metrics"]))
    print_comparison({**table, "metrics": {k: table["metrics"][k] for k in keys}}, title="headline metrics per run")
    print(f"{len(keys)} headline keys of {len(table['metrics'])}; every key: full_table=true")


def _seed_keys(cfg: DictConfig) -> list[str]:
    seed_keys = plain(cfg.get("seed_keys", ["seed"]))
    seed_keys = [seed_keys] if isinstance(seed_keys, str) else list(seed_keys or [])
    if not all(isinstance(k, str) and k for k in seed_keys):
        raise ValueError(f"seed_keys must be a list of config keys, e.g. [seed] or [seed,data.seed], got {seed_keys!r}")
    return seed_keys


def _sweep_of_seeds(runs: list[Any], seed_keys: list[str]) -> bool:
    """Whether the jobs form at least two settings, one of them with several jobs (seeds)."""
    from beyondlabels.io.sweeps import group_jobs

    groups = group_jobs(runs, seed_keys)
    return len(groups) > 1 and any(len(jobs) > 1 for jobs in groups.values())


def _grouped(cfg: DictConfig, runs: list[Any], keys: list[str] | None, which: str) -> dict[str, Any]:
    from beyondlabels.reporting.sweeps import print_sweep, sweep_comparison, write_sweep_files

    guardrails = plain(cfg.get("guardrails")) or []
    guardrails = [guardrails] if isinstance(guardrails, str) else list(guardrails)
    if guardrails and cfg.get("metric") is None:
        raise ValueError(
            "guardrails= are tested against the baseline beside metric=KEY: give baseline= and metric= too"
        )
    permutations = cfg.get("permutations", 9999)
    check_int_at_least(permutations, "permutations", 1, hint="random sign assignments of each test, e.g. 9999")
    table = sweep_comparison(
        runs,
        seed_keys=_seed_keys(cfg),
        keys=keys,
        which=which,
        baseline=cfg.get("baseline"),
        metric=None if cfg.get("metric") is None else str(cfg.metric),
        guardrails=guardrails,
        level=float(cfg.get("level", 0.05)),
        permutations=permutations,
        intersect=bool(cfg.get("intersect", False)),
        rounds=int(cfg.get("bootstrap_rounds", 2000)),
        seed=int(cfg.get("ci_seed", 11)),
    )
    print_sweep(table)
    if cfg.get("output"):
        ReportFiles(cfg).write(table, figures=lambda path: write_sweep_files(table, path))
    return table


def _read_files(roots: list[str]) -> list[Any]:
    try:
        files = list(dict.fromkeys(file for root in roots for file in find_evaluation_runs(root)))
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{exc} Offline W&B runs are read with source=wandb.") from None
    return [read_evaluation_run(file) for file in files]


def _from_wandb(
    roots: list[str], keys: list[str] | None, which: str
) -> tuple[dict[str, Any], list[OutputSchema | None]]:
    paths = [p for root in roots for p in find_offline_runs(root)]
    if not paths:
        raise ValueError(
            f"no offline W&B runs (*.wandb) under {roots}; to read the project's own evaluation files use source=files"
        )
    offline = [read_offline_run(p, wait_s=WAIT_S, allow_incomplete=True) for p in paths]
    for run in offline:
        if not run.complete:
            log.warning("%s is incomplete (no final exit record): its values may be partial", run.path)
    folders = [_wandb_run_folder(p) for p in paths]
    hydra_jobs = [folder is not None and (folder / ".hydra").is_dir() for folder in folders]
    labels = [
        folder.name if job else f"{run.name} ({run.run_id})" for run, folder, job in zip(offline, folders, hydra_jobs)
    ]
    overrides = [run_overrides(folder) if job else [] for folder, job in zip(folders, hydra_jobs)]
    schemas = [evaluation_schema(folder) if folder is not None else None for folder in folders]
    table = compare_wandb_runs(
        offline,
        keys=keys,
        which=which,
        schemas=schemas,
        labels=labels,
        overrides=overrides,
        paths=[f or p for f, p in zip(folders, paths)],
    )
    return table, schemas


def _wandb_run_folder(log_file: Path) -> Path | None:
    """The run folder of ``<run folder>/wandb/offline-run-*/run-*.wandb`` (None for another layout)."""
    parents = log_file.parents
    return parents[2] if len(parents) > 2 and parents[1].name == "wandb" else None
