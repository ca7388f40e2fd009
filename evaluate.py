"""Offline evaluation of saved outputs, and comparison of runs (Hydra entry point).

    python evaluate.py task=retrieval input=embeddings.npz output=report.json k=[1,5,10]
    python evaluate.py task=retrieval input=embeddings.npz wandb=true     # also log an offline W&B run
    python evaluate.py task=compare runs=[logs/train/multiruns/2026-01-01_12-00-00]
    python evaluate.py task=compare runs=[logs/train/runs/a,logs/train/runs/b] which=best output=cmp.json
    python evaluate.py task=crossmodal input=pairs.npz output=report.json    # image<->text recall@k and ranks
    python evaluate.py task=hierarchy taxonomy=tree.yaml predictions=preds.jsonl output=report.json   # hP / hR / hF
    python evaluate.py task=ranking run=run.txt qrels=qrels.txt k=[5,10] output=report.json   # graded qrels, unjudged
    python evaluate.py task=compare runs=[A,B,C] baseline=A metric=retrieval/precision@1 guardrails=[retrieval/map@r]

``task=retrieval`` writes a JSON report (every scalar of the output schema at the top level, the curve as a list, and
the schema itself under ``schema``), the per-query values beside it (``<output stem>.per_query.npz``), prints a table
and saves ``<output>.png`` with the precision@k curve. ``task=compare`` reads the evaluation files the callbacks write
(``source=files``: history.jsonl, schema.json; or evaluate.py reports) or offline W&B runs (``source=wandb``) and prints
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
from beyondlabels.functional.crossmodal import crossmodal_output_schema, crossmodal_retrieval_metrics
from beyondlabels.io import (
    evaluation_schema,
    find_evaluation_runs,
    find_offline_runs,
    read_evaluation_run,
    read_offline_run,
    run_overrides,
    save_per_query,
)
from beyondlabels.io.arrays import load_crossmodal_npz, load_embeddings_npz, load_rprecision_npz
from beyondlabels.io.atomic import write_json
from beyondlabels.reporting import (
    compare_evaluation_runs,
    compare_wandb_runs,
    print_comparison,
    print_metrics_table,
    retrieval_report,
    save_precision_curve_png,
)
from beyondlabels.schema import OutputSchema
from beyondlabels.utils import close_wandb

log = logging.getLogger(__name__)
TASKS = ("retrieval", "compare", "crossmodal", "hierarchy", "ranking", "rprecision", "mismatch", "profiles")
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


def _with_intervals(cfg: DictConfig, metrics: dict[str, Any], schema: OutputSchema) -> OutputSchema:
    """Add ``<key>_ci_low`` / ``<key>_ci_high`` (seeded bootstrap over queries; ``bootstrap_rounds``, ``ci_seed``) of
    the headline keys to ``metrics`` and return the schema that describes them."""
    from beyondlabels.metrics.intervals import add_confidence_intervals

    rounds, seed = int(cfg.get("bootstrap_rounds", 2000)), int(cfg.get("ci_seed", 11))
    with_bounds, schema = add_confidence_intervals(metrics, schema, rounds=rounds, seed=seed)
    metrics.update(with_bounds)
    return schema


def _report_files(cfg: DictConfig, metrics: dict[str, Any], schema: OutputSchema) -> tuple[Path, Path]:
    """The report's path (``output``, default ``<run>/report.json``, its folder created) and the per-query file
    written beside it (``<stem>.per_query.npz``)."""
    output = Path(cfg.output) if cfg.get("output") else Path(cfg.paths.output_dir) / "report.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    return output, save_per_query(output.parent / f"{output.stem}.per_query.npz", metrics["per_query"], schema)


def _scalar_report(task: str, metrics: dict[str, Any], schema: OutputSchema) -> dict[str, Any]:
    """``{"task": task}`` and every scalar of ``schema`` from ``metrics`` (counts as ints)."""
    report: dict[str, Any] = {"task": task}
    for key in schema.scalar_keys():
        value = float(metrics[key])
        report[key] = int(value) if schema[key].count else value
    return report


def evaluate_retrieval(cfg: DictConfig) -> dict[str, Any]:
    if not cfg.get("input"):
        raise ValueError("task=retrieval needs input=PATH.npz (arrays 'embeddings' N×D and 'labels' N, optional 'ids')")
    ks = parse_ks(cfg.k)
    data = load_embeddings_npz(cfg.input)
    n = len(data.labels)
    curve_max_k = _curve_max_k(cfg.eval.get("curve_max_k"), ks, n)
    max_queries = cfg.eval.get("max_queries")
    deep_metrics = cfg.eval.get("deep_metrics", True)
    if not isinstance(deep_metrics, bool):
        raise ValueError(f"eval.deep_metrics must be true or false, got {deep_metrics!r}")
    gains = _retrieval_profiles(cfg, data) if cfg.get("profiles") else None  # profiles=PATH: graded keys + mismatch section
    metrics = embedding_retrieval_metrics(
        data.embeddings, data.labels, data.ids, ks=ks, chunk_size=int(cfg.eval.chunk_size), precision=str(cfg.eval.precision),
        curve_max_k=curve_max_k, max_queries=max_queries, query_seed=int(cfg.eval.get("query_seed", 0)),
        deep_metrics=deep_metrics,
        **({"graded": [gains], "return_neighbors": 1} if gains is not None else {}),
    )
    graded_names = [gains.name] if gains is not None else []
    schema = _with_intervals(cfg, metrics, retrieval_output_schema(
        ks, graded=graded_names, sampled=max_queries is not None, deep_metrics=deep_metrics
    ))
    output, per_query_path = _report_files(cfg, metrics, schema)
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
    if gains is not None:
        report["mismatch"] = _retrieval_mismatch(cfg, data, metrics, gains)
    write_json(output, report)
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


def evaluate_crossmodal(cfg: DictConfig) -> dict[str, Any]:
    """``task=crossmodal``: image↔text recall@k and ranks of saved embeddings; a JSON report driven by the schema."""
    if not cfg.get("input"):
        raise ValueError("task=crossmodal needs input=PATH.npz (arrays image_embeddings, text_embeddings, text_image_index)")
    ks = parse_ks(cfg.k)
    data = load_crossmodal_npz(cfg.input)
    metrics = crossmodal_retrieval_metrics(
        data["image_embeddings"], data["text_embeddings"], data["text_image_index"], ks=ks, chunk_size=int(cfg.eval.chunk_size),
        precision=str(cfg.eval.precision), image_ids=data["image_ids"], text_ids=data["text_ids"],
    )  # fmt: skip
    schema = _with_intervals(cfg, metrics, crossmodal_output_schema(ks))
    output, per_query_path = _report_files(cfg, metrics, schema)
    report = _scalar_report("crossmodal", metrics, schema)
    report.update(ks=ks, per_query_file=per_query_path.name, settings={"input": str(cfg.input), "chunk_size": int(cfg.eval.chunk_size), "precision": str(cfg.eval.precision)})
    report["schema"] = schema.to_json()
    write_json(output, report)
    print_metrics_table(report, title=f"crossmodal: {cfg.input}", schema=schema)
    log.info("report: %s  per-query values: %s", output, per_query_path)
    return report


def evaluate_rprecision(cfg: DictConfig) -> dict[str, Any]:
    """``task=rprecision``: text-to-image R-precision of saved image / prompt embeddings; a JSON report driven by the
    schema (definitions: :mod:`beyondlabels.functional.rprecision`)."""
    from beyondlabels.functional.rprecision import load_candidate_sets, rprecision_output_schema, text_image_r_precision

    if not cfg.get("input"):
        raise ValueError("task=rprecision needs input=PATH.npz (arrays image_embeddings, text_embeddings)")
    data = load_rprecision_npz(cfg.input)
    extra = cfg.get("rprecision") or {}
    top_r = parse_ks(cfg.top_r)
    settings = {
        "num_candidates": int(cfg.num_candidates),
        "r": int(extra.get("r", 1)),
        "top_r": top_r,
        "protocol": str(cfg.protocol),
        "repeats": int(cfg.repeats),
        "seed": int(cfg.seed),
        "near_duplicate_threshold": None if extra.get("near_duplicate_threshold") is None else float(extra.near_duplicate_threshold),
        "hard_negatives": bool(extra.get("hard_negatives", False)),
    }
    sets_path = extra.get("candidate_sets")
    metrics = text_image_r_precision(
        data["image_embeddings"], data["text_embeddings"], data.get("ids"), class_ids=data.get("class_ids"),
        caption_codes=data.get("caption_codes"), candidate_sets=load_candidate_sets(sets_path) if sets_path else None, **settings,
    )  # fmt: skip
    schema = rprecision_output_schema(top_r, settings["hard_negatives"])
    output, per_query_path = _report_files(cfg, metrics, schema)
    report = _scalar_report("rprecision", metrics, schema)
    report["r_precision_curve"] = [float(v) for v in metrics["r_precision_curve"]]
    settings.update(input=str(cfg.input), candidate_sets=str(sets_path) if sets_path else None)
    report.update(per_query_file=per_query_path.name, settings=settings, evaluator=data.get("evaluator"))
    report["schema"] = schema.to_json()
    write_json(output, report)
    print_metrics_table(report, title=f"rprecision: {cfg.input}", schema=schema)
    log.info("report: %s  per-query values: %s", output, per_query_path)
    return report


def evaluate_hierarchy(cfg: DictConfig) -> dict[str, Any]:
    """``task=hierarchy``: hP / hR / hF of saved predictions (JSONL) against a taxonomy; a JSON report driven by the
    schema (every scalar, the LCA-depth histogram, mapping rules), per-sample values beside it. Nothing is written
    unless every row is valid."""
    import os

    import torch

    from beyondlabels.functional.hierarchy import hierarchical_precision_recall, hierarchy_output_schema
    from beyondlabels.taxonomy import TextToNode, load_taxonomy, read_hierarchy_predictions

    if not cfg.get("taxonomy") or not cfg.get("predictions"):
        raise ValueError(
            "task=hierarchy needs taxonomy=PATH (.yaml/.json/.tsv, or wordnet, or demo) and predictions=PATH.jsonl "
            '(rows {"gt": NODE, "pred": NODE} or {"gt": NODE, "pred_text": TEXT}, optional "id")'
        )
    options = cfg.get("hierarchy") or {}
    include_root = bool(options.get("include_root", False))
    taxonomy = load_taxonomy(str(cfg.taxonomy))
    rows = read_hierarchy_predictions(cfg.predictions, taxonomy)
    if not include_root and bool((rows.gt == 0).any()):
        lines = [n for n, g in zip(rows.line_numbers, rows.gt.tolist()) if g == 0]
        raise ValueError(
            f"predictions file '{cfg.predictions}': 'gt' is the root {taxonomy.root!r} on line(s) {lines[:5]}; with the root "
            "excluded it has nothing to recall. Use a more specific node or hierarchy.include_root=true."
        )
    pred, rules = rows.pred.clone(), ["node" if t is None else "" for t in rows.texts]
    free = [i for i, t in enumerate(rows.texts) if t is not None]
    if free:
        mapper = TextToNode(
            taxonomy,
            encoder=_plain(options.get("encoder", "hashing")),
            top_k=int(options.get("top_k", 5)),
            ngram_orders=tuple(_plain(options.get("ngram_orders", [4, 3, 2]))),
            lca_margin=options.get("lca_margin", 0.02),
        )
        mapped, mapped_rules = mapper.map_indices([rows.texts[i] for i in free])
        pred[torch.tensor(free)] = mapped
        for i, rule in zip(free, mapped_rules):
            rules[i] = rule
    metrics = hierarchical_precision_recall(pred, rows.gt, taxonomy, include_root=include_root)
    metrics["per_query"]["query_id"] = rows.ids
    schema = _with_intervals(cfg, metrics, hierarchy_output_schema())
    report = _scalar_report("hierarchy", metrics, schema)
    report["error_lca_depth_fraction"] = [float(v) for v in metrics["error_lca_depth_fraction"]]
    report["rules"] = {rule: rules.count(rule) for rule in dict.fromkeys(rules)}
    report["settings"] = {"taxonomy": str(cfg.taxonomy), "predictions": str(cfg.predictions), **dict(_plain(options))}
    report["schema"] = schema.to_json()
    output, per_query_path = _report_files(cfg, metrics, schema)
    report["per_query_file"] = per_query_path.name
    write_json(output, report)
    print_metrics_table(report, title=f"hierarchy: {cfg.predictions}", schema=schema)
    log.info("report: %s  per-sample values: %s", output, per_query_path)
    return report


def evaluate_ranking(cfg: DictConfig) -> dict[str, Any]:
    """``task=ranking``: a run against qrels (TREC or JSON) — every key of the ranking schema per k with 95% bootstrap
    intervals of the headline keys, ``per_query`` ({query: {key: value}}), ``num_queries`` and ``num_unjudged``."""
    from beyondlabels.functional.ranking import judge_run, ranking_metrics, ranking_output_schema
    from beyondlabels.io.qrels import load_qrels, load_run

    if not cfg.get("run") or not cfg.get("qrels"):
        raise ValueError("task=ranking needs run=PATH (TREC run or JSON) and qrels=PATH (TREC qrels or JSON)")
    ks = parse_ks(cfg.k)
    judged = judge_run(load_run(cfg.run), load_qrels(cfg.qrels), depth=cfg.get("depth"))
    metrics = ranking_metrics(judged.ranked, judged.num_retrieved, judged.pool, ks=ks, relevance_level=int(cfg.get("relevance_level", 1)), query_ids=judged.query_ids)
    schema = _with_intervals(cfg, metrics, ranking_output_schema(ks))
    output, per_query_path = _report_files(cfg, metrics, schema)
    report = _scalar_report("ranking", metrics, schema)
    pq = {k: v.tolist() for k, v in metrics["per_query"].items() if k != "query_id"}
    report["per_query"] = {q: {k: (None if v[i] != v[i] else v[i]) for k, v in pq.items()} for i, q in enumerate(judged.queries)}
    report.update(ks=ks, queries_without_qrels=judged.queries_without_qrels, queries_without_run=judged.queries_without_run, per_query_file=per_query_path.name)
    report["settings"] = {"run": str(cfg.run), "qrels": str(cfg.qrels), "depth": cfg.get("depth"), "relevance_level": int(cfg.get("relevance_level", 1))}
    report["schema"] = schema.to_json()
    write_json(output, report)
    print_metrics_table(report, title=f"ranking: {cfg.run} against {cfg.qrels}", schema=schema)
    log.info("report: %s  per-query values: %s", output, per_query_path)
    return report


def compare_ab(cfg: DictConfig) -> dict[str, Any]:
    """``task=compare baseline=PATH metric=KEY [guardrails=[KEY,...]]``: every run against the baseline, paired by query id."""
    from beyondlabels.reporting.stats import ab_comparison, print_ab_table

    roots = _plain(cfg.get("runs"))
    roots = [roots] if isinstance(roots, str) else list(roots or [])
    if not cfg.get("baseline") or not cfg.get("metric"):
        raise ValueError("an A/B comparison needs baseline=PATH (one of the runs) and metric=KEY (e.g. retrieval/precision@1)")
    if str(cfg.baseline) not in roots:
        roots.append(str(cfg.baseline))
    files = list(dict.fromkeys(file for root in roots for file in find_evaluation_runs(root)))
    guardrails = _plain(cfg.get("guardrails")) or []
    table = ab_comparison(
        [read_evaluation_run(f) for f in files], cfg.baseline, str(cfg.metric), [guardrails] if isinstance(guardrails, str) else list(guardrails),
        which=cfg.get("which", "final"), tolerance=float(cfg.get("tolerance", 0.02)), intersect=bool(cfg.get("intersect", False)),
        rounds=int(cfg.get("bootstrap_rounds", 2000)), seed=int(cfg.get("ci_seed", 11)),
    )  # fmt: skip
    print_ab_table(table)
    if cfg.get("output"):
        Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
        write_json(cfg.output, table)
    return table


def _wandb_run_folder(log_file: Path) -> Path | None:
    """The run folder of ``<run folder>/wandb/offline-run-*/run-*.wandb`` (None for another layout)."""
    parents = log_file.parents
    return parents[2] if len(parents) > 2 and parents[1].name == "wandb" else None


def compare(cfg: DictConfig) -> dict[str, Any]:
    if cfg.get("baseline") or cfg.get("metric"):
        return compare_ab(cfg)
    roots = _plain(cfg.get("runs"))
    roots = [roots] if isinstance(roots, str) else list(roots or [])
    if not roots:
        raise ValueError("task=compare needs runs=[PATH, ...]: run folders, multirun folders or history.jsonl files")
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
        table = compare_wandb_runs(
            offline, keys=keys, which=which, schemas=schemas, labels=labels, overrides=overrides, paths=[f or p for f, p in zip(folders, paths)]
        )
    print_comparison(table)
    if cfg.get("output"):
        Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
        write_json(cfg.output, table)
    return table


def _profile_labels(profiles: Any, texts: list[str], what: str) -> str:
    """How ``texts`` (labels as text) name the profiled classes: ``"names"`` when every one is a class name,
    ``"index"`` when every one is an int in ``0..C-1`` (the class at that position of the profiles file)."""
    names = set(profiles.classes)
    if all(t in names for t in texts):
        return "names"
    if all(t.lstrip("-").isdigit() and 0 <= int(t) < len(profiles) for t in texts):
        return "index"
    unknown = sorted({t for t in texts if t not in names})[:5]
    raise ValueError(
        f"{what} holds labels {unknown} that are not classes of the profiles file; use the class names of the profiles "
        f"(e.g. {list(profiles.classes)[:3]}) or class indices 0..{len(profiles) - 1} in profiles-file order"
    )


def _mismatch_json(analysis: dict[str, Any], schema: OutputSchema) -> dict[str, Any]:
    out = {k: (int(analysis[k]) if schema[k].count else float(analysis[k])) for k in schema.scalar_keys() if k in analysis}
    out["null_ci95"] = [out.get("null_ci95_low"), out.get("null_ci95_high")]
    return out


def load_mismatch_pairs(path: str | Path, rank_max: int = 1) -> tuple[list[str], list[str], list[str]]:
    """``(query labels of the analysed rows, their retrieved labels, the query label of each query)`` from a CSV
    (columns ``query_label``, ``retrieved_label``, optional ``rank``) or an ``.npz`` with those arrays. Without
    ``rank`` every row is one query at rank 1; with it, rows of rank <= ``rank_max`` are analysed and the rank-1 rows
    give one query each (the class frequencies).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: naming the missing column, a bad rank or an empty file.
    """
    import csv

    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pairs file {path} does not exist; pass pairs=PATH.csv (query_label, retrieved_label[, rank])")
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            cols = {n: np.asarray(data[n]).tolist() for n in data.files}
    else:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        cols = {k: [row[k] for row in rows] for k in (rows[0].keys() if rows else [])}
    missing = [c for c in ("query_label", "retrieved_label") if c not in cols]
    if missing:
        raise ValueError(f"pairs file {path} lacks the column(s) {missing}; it has {sorted(cols)}. Give query_label and retrieved_label (optional rank).")
    q = [str(v) for v in cols["query_label"]]
    r = [str(v) for v in cols["retrieved_label"]]
    if not q or len(q) != len(r):
        raise ValueError(f"pairs file {path} must hold one or more rows with both labels, got {len(q)} and {len(r)}")
    if "rank" not in cols:
        return q, r, q
    try:
        ranks = [int(v) for v in cols["rank"]]
    except ValueError as err:
        raise ValueError(f"pairs file {path}: the `rank` column must hold integers >= 1 ({err})") from err
    if min(ranks) < 1:
        raise ValueError(f"pairs file {path}: the `rank` column must hold integers >= 1, got {min(ranks)}")
    keep = [i for i, k in enumerate(ranks) if k <= rank_max]
    return [q[i] for i in keep], [r[i] for i in keep], [q[i] for i, k in enumerate(ranks) if k == 1]


def evaluate_mismatch(cfg: DictConfig) -> dict[str, Any]:
    """``task=mismatch pairs=PATH profiles=PATH``: label-mismatch similarity, percentile ranks and the
    frequency-aware Monte Carlo null (definitions: ``beyondlabels.functional.mismatch``); a JSON report and the
    observed-vs-null histogram PNG beside it."""
    import torch

    from beyondlabels.functional.mismatch import mismatch_analysis, mismatch_output_schema, mismatch_pair_table
    from beyondlabels.functional.profiles import pair_distribution
    from beyondlabels.profiles import load_profiles
    from beyondlabels.reporting.heatmap import save_null_histogram_png

    if not cfg.get("pairs") or not cfg.get("profiles"):
        raise ValueError("task=mismatch needs pairs=PATH (CSV or npz: query_label, retrieved_label[, rank]) and profiles=PATH (YAML/JSON)")
    profiles = load_profiles(str(cfg.profiles))
    q_text, r_text, queries = load_mismatch_pairs(cfg.pairs, int(cfg.get("rank_max", 1)))
    mode = _profile_labels(profiles, q_text + r_text, f"pairs file {cfg.pairs}")
    to_index = (lambda ts: profiles.require_classes(ts)) if mode == "names" else (lambda ts: torch.tensor([int(t) for t in ts]))
    q, r = to_index(q_text), to_index(r_text)
    c = len(profiles)
    if cfg.get("counts"):
        raw = json.loads(Path(cfg.counts).read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError(f"counts file {cfg.counts} must hold a JSON object {{class: count}}")
        unknown = [k for k in raw if k not in profiles]
        if unknown:
            raise ValueError(f"counts file {cfg.counts} names classes {unknown[:5]} that the profiles do not have")
        counts = torch.tensor([float(raw.get(name, 0)) for name in profiles.classes], dtype=torch.float64)
    else:
        counts = torch.bincount(to_index(queries), minlength=c).to(torch.float64)
    m = profiles.similarity_matrix()
    analysis = mismatch_analysis(q, r, m, counts=counts, num_trials=int(cfg.get("trials", 10_000)), seed=int(cfg.get("seed", 42)))
    schema = mismatch_output_schema()
    report: dict[str, Any] = {"task": "mismatch", **_mismatch_json(analysis, schema)}
    report["pair_distribution"] = pair_distribution(m, profiles.classes, top=10)
    report["mismatch_pairs"] = mismatch_pair_table(q, r, m, profiles.classes, top=20)
    report["settings"] = {"pairs": str(cfg.pairs), "profiles": str(cfg.profiles), "counts": cfg.get("counts"), "labels": mode,
                          "trials": int(cfg.get("trials", 10_000)), "seed": int(cfg.get("seed", 42)), "rank_max": int(cfg.get("rank_max", 1))}
    report["schema"] = schema.to_json()
    output = Path(cfg.output) if cfg.get("output") else Path(cfg.paths.output_dir) / "mismatch.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    write_json(output, report)
    if analysis["num_mismatches"]:
        save_null_histogram_png(analysis["null"], analysis["mean_similarity"], output.with_suffix(".png"), p_value=analysis["p_value"])
    log.info("mismatches %d: mean similarity %.3f, null %.3f ± %.4f, p = %.3g; report: %s", analysis["num_mismatches"],
             analysis["mean_similarity"], analysis["null_mean"], analysis["null_std"], analysis["p_value"], output)
    return report


def evaluate_profiles(cfg: DictConfig) -> dict[str, Any]:
    """``task=profiles profiles=PATH``: the M_feature matrix, its distinct-pair distribution and top pairs as JSON,
    and a heatmap PNG beside it."""
    from beyondlabels.functional.profiles import pair_distribution
    from beyondlabels.profiles import load_profiles
    from beyondlabels.reporting.heatmap import save_similarity_heatmap_png

    if not cfg.get("profiles"):
        raise ValueError("task=profiles needs profiles=PATH (YAML/JSON: features {ordinal, sets}, classes)")
    profiles = load_profiles(str(cfg.profiles))
    m = profiles.similarity_matrix()
    report = {"task": "profiles", "classes": list(profiles.classes), "matrix": m.tolist(),
              "pair_distribution": pair_distribution(m, profiles.classes, top=int(cfg.get("top_pairs", 10))),
              "settings": {"profiles": str(cfg.profiles)}}
    output = Path(cfg.output) if cfg.get("output") else Path(cfg.paths.output_dir) / "profiles.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    write_json(output, report)
    save_similarity_heatmap_png(m, profiles.classes, output.with_suffix(".png"))
    log.info("profiles: %d classes, %d pairs, mean %.3f; report: %s", len(profiles), report["pair_distribution"]["num_pairs"],
             report["pair_distribution"]["mean"], output)
    return report


def _retrieval_profiles(cfg: DictConfig, data: Any) -> Any:
    """``task=retrieval profiles=PATH``: the profile-derived ClassGains (graded keys ``profile_*``) for the labels of
    ``data`` (class names, or indices in profiles-file order)."""
    from beyondlabels.profiles import load_profiles

    profiles = load_profiles(str(cfg.profiles))
    mode = _profile_labels(profiles, [str(v) for v in data.label_names.values()], f"input {cfg.input}")
    return profiles.class_gains(name="profile", labels=None if mode == "names" else "index")


def _retrieval_mismatch(cfg: DictConfig, data: Any, metrics: dict[str, Any], gains: Any) -> dict[str, Any]:
    """The ``mismatch`` section of a retrieval report: top-1 mismatches against the profiles, with Spearman."""
    from beyondlabels.functional.mismatch import mismatch_analysis, mismatch_output_schema

    q = gains.class_index(metrics["per_query"]["label"].cpu(), "labels")
    r = gains.class_index(data.labels[metrics["neighbors"]["indices"][:, 0].cpu()], "labels")
    analysis = mismatch_analysis(q, r, gains.gains, num_trials=int(cfg.get("trials", 10_000)), seed=int(cfg.get("seed", 42)),
                                 embeddings=data.embeddings, embedding_classes=gains.class_index(data.labels, "labels"))
    return _mismatch_json(analysis, mismatch_output_schema(spearman=True))


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    if cfg.task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {cfg.task!r}")
    try:
        if cfg.task == "crossmodal":
            evaluate_crossmodal(cfg)
        elif cfg.task == "hierarchy":
            evaluate_hierarchy(cfg)
        elif cfg.task == "ranking":
            evaluate_ranking(cfg)
        elif cfg.task == "rprecision":
            evaluate_rprecision(cfg)
        elif cfg.task == "mismatch":
            evaluate_mismatch(cfg)
        elif cfg.task == "profiles":
            evaluate_profiles(cfg)
        else:
            (evaluate_retrieval if cfg.task == "retrieval" else compare)(cfg)
    finally:
        close_wandb()


if __name__ == "__main__":
    main()
