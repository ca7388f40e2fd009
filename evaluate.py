"""Offline evaluation of saved outputs, and comparison of runs (Hydra entry point).

    python evaluate.py task=retrieval input=embeddings.npz output=report.json k=[1,5,10]
    python evaluate.py task=retrieval input=embeddings.npz wandb=true     # also log an offline W&B run
    python evaluate.py task=compare runs=[logs/train/multiruns/2026-01-01_12-00-00]
    python evaluate.py task=compare runs=[logs/train/runs/a,logs/train/runs/b] which=best output=cmp.json

``task=retrieval`` writes a JSON report (every scalar of the output schema at the top level, the curve as a list, and
the schema itself under ``schema``), the per-query values beside it (``<output stem>.per_query.npz``), prints a table
and saves ``<output>.png`` with the precision@k curve. ``task=compare`` reads the evaluation files the callbacks write
(``source=files``: history.json, schema.json; or evaluate.py reports) or offline W&B runs (``source=wandb``) and prints
one row per metric and one column per run: final values, or ``which=best`` under each metric's direction.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, ListConfig, OmegaConf

from beyondlabels.functional import embedding_retrieval_metrics, retrieval_output_schema
from beyondlabels.io import (
    evaluation_schema,
    find_evaluation_runs,
    find_offline_runs,
    read_evaluation_run,
    read_offline_run,
    run_overrides,
    save_per_query,
)
from beyondlabels.io.arrays import load_embeddings_npz
from beyondlabels.reporting import (
    compare_evaluation_runs,
    compare_runs,
    print_comparison,
    print_metrics_table,
    retrieval_report,
    save_precision_curve_png,
)
from beyondlabels.schema import OutputSchema
from beyondlabels.utils import close_wandb

log = logging.getLogger(__name__)
TASKS = ("retrieval", "compare")
SOURCES = ("files", "wandb")
WHICH = ("final", "best")
# task=compare source=wandb: how long to wait for a run whose log wandb is still writing
WANDB_WAIT_S = 10.0


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def parse_ks(value: Any) -> list[int]:
    """``k`` from the command line: one positive int (``k=5``) or a list of them (``k=[1,5,10]``); sorted, unique.

    Raises:
        ValueError: for anything else (floats such as ``1.5``, strings, booleans, ``k <= 0``, an empty list),
            naming ``k``.
    """
    value = _plain(value)
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items or any(isinstance(k, bool) or not isinstance(k, int) or k <= 0 for k in items):
        raise ValueError(f"k must be a positive int or a list of positive ints (k=5 or k=[1,5,10]), got {value!r}")
    return sorted(set(items))


def _curve_max_k(value: Any, ks: list[int], n: int) -> int:
    """``eval.curve_max_k``: null means max(k); the curve never goes past the gallery (n - 1) unless k does."""
    if value is None:
        return max(ks)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"eval.curve_max_k must be a positive int or null (= max(k)), got {value!r}")
    return max(max(ks), min(value, n - 1))


def evaluate_retrieval(cfg: DictConfig) -> dict[str, Any]:
    if not cfg.get("input"):
        raise ValueError("task=retrieval needs input=PATH.npz (arrays 'embeddings' N×D and 'labels' N, optional 'ids')")
    ks = parse_ks(cfg.k)
    data = load_embeddings_npz(cfg.input)
    n = len(data.labels)
    curve_max_k = _curve_max_k(cfg.eval.get("curve_max_k"), ks, n)
    metrics = embedding_retrieval_metrics(
        data.embeddings, data.labels, data.ids, ks=ks, chunk_size=int(cfg.eval.chunk_size), precision=str(cfg.eval.precision), curve_max_k=curve_max_k
    )
    schema = retrieval_output_schema(ks)
    output = Path(cfg.output) if cfg.get("output") else Path(cfg.paths.output_dir) / "report.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    per_query_path = save_per_query(output.parent / f"{output.stem}.per_query.npz", metrics["per_query"], schema)
    settings = {"input": str(cfg.input), **OmegaConf.to_container(cfg.eval, resolve=True), "curve_max_k": curve_max_k}
    report = retrieval_report(
        metrics,
        schema,
        ks=ks,
        num_items=n,
        num_labels=data.num_labels,
        label_names=data.label_names,
        settings=settings,
        per_query_file=per_query_path.name,
    )
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    png = save_precision_curve_png({Path(cfg.input).stem: report["precision_curve"]}, output.with_suffix(".png"), title=f"precision@k — {Path(cfg.input).name}")
    print_metrics_table(report, title=f"retrieval: {cfg.input}", schema=schema)
    log.info("report: %s  per-query values: %s  curve: %s", output, per_query_path, png)
    if cfg.get("wandb"):
        _log_report_to_wandb(cfg, report, schema, ks, png)
    return report


def _log_report_to_wandb(cfg: DictConfig, report: dict[str, Any], schema: OutputSchema, ks: list[int], png: Path) -> None:
    import wandb

    run = wandb.init(project="beyondlabels", job_type="evaluate", dir=str(cfg.paths.output_dir), mode="offline", config={"input": str(cfg.input), "k": ks})
    curve = report["precision_curve"]
    scalars = {f"retrieval/{k}": report[k] for k in schema.scalar_keys() if k in report}
    plot = wandb.plot.line_series(xs=list(range(1, len(curve) + 1)), ys=[curve], keys=[Path(cfg.input).stem], title="precision@k", xname="k")
    run.log({**scalars, "retrieval/precision_at_k_curve": plot, "retrieval/precision_at_k_png": wandb.Image(str(png))})
    run.summary.update(scalars)


def _wandb_run_folder(log_file: Path) -> Path | None:
    """The run folder of ``<run folder>/wandb/offline-run-*/run-*.wandb`` (None for another layout)."""
    parents = log_file.parents
    return parents[2] if len(parents) > 2 and parents[1].name == "wandb" else None


def compare(cfg: DictConfig) -> dict[str, Any]:
    roots = _plain(cfg.get("runs"))
    roots = [roots] if isinstance(roots, str) else list(roots or [])
    if not roots:
        raise ValueError("task=compare needs runs=[PATH, ...]: run folders, multirun folders or history.json files")
    source = cfg.get("source", "files")
    which = cfg.get("which", "final")
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if which not in WHICH:
        raise ValueError(f"which must be one of {WHICH}, got {which!r}")
    keys = _plain(cfg.get("metrics"))
    keys = [keys] if isinstance(keys, str) else (list(keys) if keys else None)
    if source == "files":
        try:
            files = [file for root in roots for file in find_evaluation_runs(root)]
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{exc} Offline W&B runs are read with source=wandb.") from None
        runs = [read_evaluation_run(file) for file in files]
        table = compare_evaluation_runs(runs, keys=keys, which=which)
    else:
        paths = [p for root in roots for p in find_offline_runs(root)]
        if not paths:
            raise ValueError(f"no offline W&B runs (*.wandb) under {roots}; to read the project's own evaluation files use source=files")
        offline = [read_offline_run(p, wait_s=WANDB_WAIT_S, allow_incomplete=True) for p in paths]
        for run in offline:
            if not run.complete:
                log.warning("%s is incomplete (no final exit record): its values may be partial", run.path)
        folders = [_wandb_run_folder(p) for p in paths]
        hydra_jobs = [folder is not None and (folder / ".hydra").is_dir() for folder in folders]
        labels = [folder.name if job else f"{run.name} ({run.run_id})" for run, folder, job in zip(offline, folders, hydra_jobs)]
        overrides = [run_overrides(folder) if job else [] for folder, job in zip(folders, hydra_jobs)]
        schemas = [evaluation_schema(folder) if folder is not None else None for folder in folders]
        table = compare_runs(
            offline, keys=keys, which=which, schemas=schemas, labels=labels, overrides=overrides, paths=[f or p for f, p in zip(folders, paths)]
        )
    print_comparison(table)
    if cfg.get("output"):
        Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.output).write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    return table


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    if cfg.task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {cfg.task!r}")
    try:
        (evaluate_retrieval if cfg.task == "retrieval" else compare)(cfg)
    finally:
        close_wandb()


if __name__ == "__main__":
    main()
