"""Offline evaluation of saved outputs, and comparison of runs (Hydra entry point).

    python evaluate.py task=retrieval input=embeddings.npz output=report.json k=[1,5,10]
    python evaluate.py task=retrieval input=embeddings.npz wandb=true     # also log an offline W&B run
    python evaluate.py task=compare runs=[logs/train/multiruns/2026-01-01_12-00-00]

``task=retrieval`` writes a JSON report (``precision@k``, ``r_precision``, ``map@r``, ``num_queries``,
``num_lone_queries``, the curve, ...), prints a table and saves ``<output>.png`` with the precision@k
curve. ``task=compare`` reads offline W&B runs and prints their final metrics side by side.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from beyondlabels.functional import embedding_retrieval_metrics
from beyondlabels.io import find_offline_runs, read_offline_run
from beyondlabels.io.arrays import load_embeddings_npz
from beyondlabels.reporting import compare_runs, print_comparison, print_metrics_table, retrieval_report, save_precision_curve_png
from beyondlabels.utils import close_wandb, scalar_metrics

log = logging.getLogger(__name__)
TASKS = ("retrieval", "compare")


def evaluate_retrieval(cfg: DictConfig) -> dict[str, Any]:
    if not cfg.get("input"):
        raise ValueError("task=retrieval needs input=PATH.npz (arrays 'embeddings' N×D and 'labels' N, optional 'ids')")
    data = load_embeddings_npz(cfg.input)
    ks = [int(k) for k in cfg.k]
    n = len(data.labels)
    curve_max_k = max(max(ks), min(int(cfg.eval.curve_max_k), n - 1))
    metrics = embedding_retrieval_metrics(
        data.embeddings, data.labels, data.ids, ks=ks, chunk_size=int(cfg.eval.chunk_size), precision=str(cfg.eval.precision), curve_max_k=curve_max_k
    )
    settings = {"input": str(cfg.input), **OmegaConf.to_container(cfg.eval, resolve=True)}
    report = retrieval_report(metrics, ks=ks, num_items=n, label_names=data.label_names, settings=settings)
    output = Path(cfg.output) if cfg.get("output") else Path(cfg.paths.output_dir) / "report.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    png = save_precision_curve_png({Path(cfg.input).stem: report["precision_curve"]}, output.with_suffix(".png"), title=f"precision@k — {Path(cfg.input).name}")
    print_metrics_table({k: v for k, v in report.items() if k != "settings"}, title=f"retrieval: {cfg.input}")
    log.info("report: %s  curve: %s", output, png)
    if cfg.get("wandb"):
        _log_report_to_wandb(cfg, report, png)
    return report


def _log_report_to_wandb(cfg: DictConfig, report: dict[str, Any], png: Path) -> None:
    import wandb

    run = wandb.init(project="beyondlabels", job_type="evaluate", dir=str(cfg.paths.output_dir), mode="offline", config={"input": str(cfg.input), "k": list(cfg.k)})
    curve = report["precision_curve"]
    scalars = {f"retrieval/{k}": v for k, v in scalar_metrics(report).items()}
    plot = wandb.plot.line_series(xs=list(range(1, len(curve) + 1)), ys=[curve], keys=[Path(cfg.input).stem], title="precision@k", xname="k")
    run.log({**scalars, "retrieval/precision_at_k_curve": plot, "retrieval/precision_at_k_png": wandb.Image(str(png))})
    run.summary.update(scalars)


def compare(cfg: DictConfig) -> dict[str, Any]:
    if not cfg.get("runs"):
        raise ValueError("task=compare needs runs=[DIR_OR_FILE, ...]: run folders, .wandb files or multirun folders")
    paths = [p for root in cfg.runs for p in find_offline_runs(root)]
    if not paths:
        raise ValueError(f"no offline W&B runs (*.wandb) under {list(cfg.runs)}")
    runs = [read_offline_run(p) for p in paths]
    table = compare_runs(runs, keys=list(cfg.metrics) if cfg.get("metrics") else None)
    print_comparison(table, title="final metrics per run")
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
