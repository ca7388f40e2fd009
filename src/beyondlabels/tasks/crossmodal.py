"""``task=crossmodal``: image↔text recall@k and ranks of saved paired embeddings (an ``.npz`` with
``image_embeddings``, ``text_embeddings``, ``text_image_index``, optional ``image_ids`` / ``text_ids``); a JSON report
driven by the schema, the per-query values beside it."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from beyondlabels.functional.crossmodal import crossmodal_output_schema
from beyondlabels.io.arrays import load_crossmodal_npz
from beyondlabels.metrics import CrossModalRetrieval
from beyondlabels.tasks._common import ReportFiles, parse_ks, scalar_report, with_intervals

__all__ = ["run"]


def run(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate ``input`` with the crossmodal callback's metric (:class:`~beyondlabels.metrics.CrossModalRetrieval`;
    definitions: :mod:`beyondlabels.functional.crossmodal`) and write the report."""
    if not cfg.get("input"):
        raise ValueError(
            "task=crossmodal needs input=PATH.npz (arrays image_embeddings, text_embeddings, text_image_index)"
        )
    ks = parse_ks(cfg.k)
    data = load_crossmodal_npz(cfg.input)
    index, n_img = data["text_image_index"], len(data["image_embeddings"])
    bad = (index < 0) | (index >= n_img)
    if bool(bad.any()):
        rows = bad.nonzero().flatten()[:5].tolist()
        raise ValueError(
            f"`text_image_index` must hold image rows in [0, {n_img}) (the row of each caption's image); captions "
            f"{rows} point to {index[rows].tolist()}."
        )
    metric = CrossModalRetrieval(ks=ks, chunk_size=int(cfg.eval.chunk_size), precision=str(cfg.eval.precision))
    metric.update(
        data["image_embeddings"], data["image_ids"], data["text_embeddings"], data["image_ids"][index], data["text_ids"]
    )
    metrics = metric.compute()
    schema = with_intervals(cfg, metrics, crossmodal_output_schema(ks))
    files = ReportFiles(cfg)
    per_query_file = files.save_per_query(metrics["per_query"], schema)
    report = scalar_report("crossmodal", metrics, schema)
    report.update(
        ks=ks,
        per_query_file=per_query_file,
        settings={
            "input": str(cfg.input),
            "chunk_size": int(cfg.eval.chunk_size),
            "precision": str(cfg.eval.precision),
        },
    )
    files.write(report, schema=schema, title=f"crossmodal: {cfg.input}")
    return report
