"""``task=rprecision``: text-to-image R-precision of saved image / prompt embeddings (an ``.npz`` with
``image_embeddings`` and ``text_embeddings``, row i the prompt of image i; optional ``ids``, ``class_ids``,
``captions``, ``evaluator``); a JSON report driven by the schema, with bootstrap intervals of the headline keys, and
the per-query values beside it. Definitions: :mod:`beyondlabels.functional.rprecision`."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from beyondlabels.io.arrays import load_rprecision_npz
from beyondlabels.tasks._common import ReportFiles, parse_ks, scalar_report, with_intervals

__all__ = ["run"]


def run(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate ``input`` with the R-precision callback's metric (:class:`~beyondlabels.metrics.TextImageRPrecision`)
    and write the report."""
    from beyondlabels.functional.rprecision import rprecision_output_schema
    from beyondlabels.io.candidate_sets import load_candidate_sets
    from beyondlabels.metrics import TextImageRPrecision

    if not cfg.get("input"):
        raise ValueError("task=rprecision needs input=PATH.npz (arrays image_embeddings, text_embeddings)")
    data = load_rprecision_npz(cfg.input)
    extra = cfg.get("rprecision") or {}
    top_r = parse_ks(cfg.top_r, "top_r")
    settings = {
        "num_candidates": int(cfg.num_candidates),
        "r": int(extra.get("r", 1)),
        "top_r": top_r,
        "protocol": str(cfg.protocol),
        "repeats": int(cfg.repeats),
        "seed": int(cfg.seed),
        "near_duplicate_threshold": None
        if extra.get("near_duplicate_threshold") is None
        else float(extra.near_duplicate_threshold),
        "hard_negatives": bool(extra.get("hard_negatives", False)),
    }
    sets_path = extra.get("candidate_sets")
    metric = TextImageRPrecision(candidate_sets=load_candidate_sets(sets_path) if sets_path else None, **settings)
    metric.update(
        data["image_embeddings"],
        data["text_embeddings"],
        data.get("ids"),
        class_ids=data.get("class_ids"),
        captions=data.get("caption_codes"),
    )
    metrics = metric.compute()
    schema = with_intervals(cfg, metrics, rprecision_output_schema(top_r, settings["hard_negatives"]))
    files = ReportFiles(cfg)
    per_query_file = files.save_per_query(metrics["per_query"], schema)
    report = scalar_report("rprecision", metrics, schema)
    report["r_precision_curve"] = [float(v) for v in metrics["r_precision_curve"]]
    settings.update(input=str(cfg.input), candidate_sets=str(sets_path) if sets_path else None)
    report.update(per_query_file=per_query_file, settings=settings, evaluator=data.get("evaluator"))
    files.write(report, schema=schema, title=f"rprecision: {cfg.input}")
    return report
