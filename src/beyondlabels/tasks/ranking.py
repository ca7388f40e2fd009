"""``task=ranking``: a run against qrels (TREC or JSON); every key of the ranking schema (P@k, recall@k, success@k,
MAP, recip_rank, bpref, R-precision, nDCG, judged-only and condensed P@k, coverage) with bootstrap intervals of the
headline keys, ``per_query`` (``{query: {key: value}}``), ``num_queries`` and ``num_unjudged``.
Definitions and their trec_eval names: :mod:`beyondlabels.functional.ranking`."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from beyondlabels.tasks._common import ReportFiles, parse_ks, scalar_report, with_intervals

__all__ = ["run"]


def run(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate ``run`` against ``qrels`` and write the report."""
    from beyondlabels.functional.ranking import judge_run, ranking_output_schema
    from beyondlabels.io.qrels import load_qrels, load_run

    if not cfg.get("run") or not cfg.get("qrels"):
        raise ValueError("task=ranking needs run=PATH (TREC run or JSON) and qrels=PATH (TREC qrels or JSON)")
    ks = parse_ks(cfg.k)
    judged = judge_run(load_run(cfg.run), load_qrels(cfg.qrels), depth=cfg.get("depth"))
    # evaluated in groups of queries: no table wider than the rankings it holds
    metrics = judged.metrics(ks=ks, relevance_level=int(cfg.get("relevance_level", 1)))
    schema = with_intervals(cfg, metrics, ranking_output_schema(ks))
    files = ReportFiles(cfg)
    per_query_file = files.save_per_query(metrics["per_query"], schema)
    report = scalar_report("ranking", metrics, schema)
    pq = {k: v.tolist() for k, v in metrics["per_query"].items() if k != "query_id"}
    report["per_query"] = {
        q: {k: (None if v[i] != v[i] else v[i]) for k, v in pq.items()} for i, q in enumerate(judged.queries)
    }
    report.update(
        ks=ks,
        queries_without_qrels=judged.queries_without_qrels,
        queries_without_run=judged.queries_without_run,
        per_query_file=per_query_file,
    )
    report["settings"] = {
        "run": str(cfg.run),
        "qrels": str(cfg.qrels),
        "depth": cfg.get("depth"),
        "relevance_level": int(cfg.get("relevance_level", 1)),
    }
    files.write(report, schema=schema, title=f"ranking: {cfg.run} against {cfg.qrels}")
    return report
