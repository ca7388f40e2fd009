"""``task=hierarchy``: hP / hR / hF of saved predictions (JSONL rows ``{"gt": NODE, "pred": NODE}`` or
``{"gt": NODE, "pred_text": TEXT}``, optional ``"id"``) against a taxonomy (or its subtree under ``taxonomy_root``),
free text mapped by :class:`~beyondlabels.taxonomy.TextToNode` with the ``hierarchy.*`` options; a JSON report driven
by the schema (every scalar, the LCA-depth histogram, mapping rules), per-sample values beside it. Nothing is written
unless every row is valid. Definitions: :mod:`beyondlabels.functional.hierarchy`."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from beyondlabels._internal.convert import plain
from beyondlabels.tasks._common import ReportFiles, scalar_report, with_intervals

__all__ = ["run"]


def run(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate ``predictions`` against ``taxonomy`` and write the report."""
    import torch

    from beyondlabels.functional.hierarchy import hierarchical_precision_recall, hierarchy_output_schema
    from beyondlabels.io.predictions import read_hierarchy_predictions
    from beyondlabels.io.taxonomy_files import load_node_texts, load_taxonomy
    from beyondlabels.io.text_encoders import text_encoder
    from beyondlabels.taxonomy import TextToNode
    from beyondlabels.taxonomy.text import DEFAULT_RULES

    if not cfg.get("taxonomy") or not cfg.get("predictions"):
        raise ValueError(
            "task=hierarchy needs taxonomy=PATH (.yaml/.json/.tsv, or wordnet) and predictions=PATH.jsonl "
            '(rows {"gt": NODE, "pred": NODE} or {"gt": NODE, "pred_text": TEXT}, optional "id")'
        )
    options = cfg.get("hierarchy") or {}
    include_root = bool(options.get("include_root", False))
    abstention_precision = float(options.get("abstention_precision", 0.0))
    root = cfg.get("taxonomy_root")
    taxonomy = load_taxonomy(str(cfg.taxonomy), root=None if root is None else str(root))
    rows = read_hierarchy_predictions(cfg.predictions, taxonomy)
    if not include_root and bool((rows.gt == 0).any()):
        lines = [n for n, g in zip(rows.line_numbers, rows.gt.tolist()) if g == 0]
        raise ValueError(
            f"predictions file '{cfg.predictions}': 'gt' is the root {taxonomy.root!r} on line(s) {lines[:5]}; "
            "with the root excluded it has nothing to recall. Use a more specific node or hierarchy.include_root=true."
        )
    pred, rules = rows.pred.clone(), ["node" if t is None else "" for t in rows.texts]
    free = [i for i, t in enumerate(rows.texts) if t is not None]
    if free:
        encode, encoder_key = text_encoder(plain(options.get("encoder", "hashing")))
        mapper = TextToNode(
            taxonomy,
            encoder=encode,
            encoder_key=encoder_key,
            node_texts=load_node_texts(plain(options.get("node_texts")), taxonomy),
            top_k=int(options.get("top_k", 10)),
            rules=plain(options.get("rules", list(DEFAULT_RULES))),
            ngram_orders=tuple(plain(options.get("ngram_orders", [4, 3, 2]))),
            context=options.get("context", "both"),
            lca_gap=float(options.get("lca_gap", 0.1)),
            temperature=float(options.get("temperature", 1 / 3)),
        )
        mapped, mapped_rules = mapper.map_indices([rows.texts[i] for i in free])
        pred[torch.tensor(free)] = mapped
        for i, rule in zip(free, mapped_rules):
            rules[i] = rule
    metrics = hierarchical_precision_recall(
        pred, rows.gt, taxonomy, include_root=include_root, abstention_precision=abstention_precision
    )
    metrics["per_query"]["query_id"] = rows.ids
    schema = with_intervals(cfg, metrics, hierarchy_output_schema())
    report = scalar_report("hierarchy", metrics, schema)
    report["error_lca_depth_fraction"] = [float(v) for v in metrics["error_lca_depth_fraction"]]
    report["rules"] = {rule: rules.count(rule) for rule in dict.fromkeys(rules)}
    report["settings"] = {
        "taxonomy": str(cfg.taxonomy),
        "taxonomy_root": root,
        "predictions": str(cfg.predictions),
        **dict(plain(options)),
    }
    report["schema"] = schema.to_json()
    files = ReportFiles(cfg)
    report["per_query_file"] = files.save_per_query(metrics["per_query"], schema)
    files.write(report, schema=schema, title=f"hierarchy: {cfg.predictions}")
    return report
