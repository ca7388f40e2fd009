"""``task=audit``: the label audit of saved embeddings (an ``.npz`` with ``embeddings``, ``labels``, optional ``ids``,
read as ``task=retrieval`` reads it), from the one search of the retrieval metrics.

Writes a JSON report (the retrieval scalars and the audit counts of the output schema at the top level, the schema
under ``schema``, and an ``audit`` section: the ranked suspects with given and suggested label, share and label
quality, the near-duplicate pairs, the top outliers and the counts per class), the per-query values beside it
(``<output stem>.per_query.npz``, with the audit's per-item values) and prints a table. Definitions:
:mod:`beyondlabels.functional.audit`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from beyondlabels.functional.audit import AuditSettings
from beyondlabels.io.arrays import load_embeddings_npz
from beyondlabels.metrics import EmbeddingRetrieval
from beyondlabels.reporting import retrieval_report
from beyondlabels.tasks._common import ReportFiles, parse_ks, with_intervals

__all__ = ["audit_section", "run"]


def audit_section(audit: Mapping[str, Any], label_names: Mapping[int, str], top: int) -> dict[str, Any]:
    """The JSON-ready ``audit`` section of the report from the metric's ``audit`` output (labels by name).

    Examples:
        >>> import torch
        >>> out = {"suspects": {"ids": torch.tensor([7]), "labels": torch.tensor([0]),
        ...                     "suggested_labels": torch.tensor([1]), "suggested_shares": torch.tensor([0.9]),
        ...                     "label_quality": torch.tensor([0.0])},
        ...        "outliers": {"ids": torch.tensor([3]), "labels": torch.tensor([1]), "scores": torch.tensor([4.0])},
        ...        "duplicates": {"ids": torch.tensor([[3, 7]]), "labels": torch.tensor([[1, 0]]),
        ...                       "scores": torch.tensor([1.0]), "cross_label": torch.tensor([True])},
        ...        "per_class": {"label": torch.tensor([0, 1]), "items": torch.tensor([5, 5]),
        ...                      "suspects": torch.tensor([1, 0]), "outliers": torch.tensor([0, 1])}}
        >>> section = audit_section(out, {0: "arch", 1: "dome"}, top=5)
        >>> section["suspects"][0]["suggested_label"], section["cross_label_duplicates"][0]["labels"]
        ('dome', ['dome', 'arch'])
    """

    def name(code: Any) -> str:
        return str(label_names.get(int(code), int(code)))

    # torchmetrics returns one-element tensors as 0-d ones: every list is read as at least 1-d
    audit = {part: {key: torch.atleast_1d(v) for key, v in values.items()} for part, values in audit.items()}
    audit["duplicates"]["ids"] = audit["duplicates"]["ids"].reshape(-1, 2)
    audit["duplicates"]["labels"] = audit["duplicates"]["labels"].reshape(-1, 2)
    suspects = _records(
        audit["suspects"],
        {
            "id": ("ids", int),
            "given_label": ("labels", name),
            "suggested_label": ("suggested_labels", name),
            "share": ("suggested_shares", float),
            "label_quality": ("label_quality", float),
        },
        top,
    )
    outliers = _records(audit["outliers"], {"id": ("ids", int), "label": ("labels", name), "score": ("scores", float)})
    duplicates = _records(
        audit["duplicates"],
        {
            "ids": ("ids", lambda row: [int(v) for v in row]),
            "labels": ("labels", lambda row: [name(v) for v in row]),
            "cosine": ("scores", float),
        },
    )
    pairs = {True: [], False: []}
    for pair, cross_label in zip(duplicates, audit["duplicates"]["cross_label"]):
        pairs[bool(cross_label)].append(pair)
    counts = {key: (key, int) for key in ("items", "suspects", "outliers")}
    per_class = _records(audit["per_class"], {"label": ("label", name), **counts})
    return {
        "suspects": suspects,
        "outliers": outliers,
        "cross_label_duplicates": pairs[True],
        "same_label_duplicates": pairs[False],
        "per_class": per_class,
    }


def _records(
    table: Mapping[str, Any], columns: Mapping[str, tuple[str, Callable[[Any], Any]]], limit: int | None = None
) -> list[dict[str, Any]]:
    """One dict per row of the columnar ``table`` (its first ``limit`` rows; all by default): ``{key: read(value)}``
    for every ``key: (column, read)`` of ``columns``, ``value`` the row's entry of that column."""
    n = len(table[next(iter(columns.values()))[0]])
    return [
        {key: read(table[column][i]) for key, (column, read) in columns.items()}
        for i in range(n if limit is None else min(limit, n))
    ]


def run(cfg: DictConfig) -> dict[str, Any]:
    """Audit ``input`` with :class:`~beyondlabels.metrics.EmbeddingRetrieval` ``(audit=...)`` and write the report."""
    if not cfg.get("input"):
        raise ValueError("task=audit needs input=PATH.npz (arrays 'embeddings' N×D and 'labels' N, optional 'ids')")
    ks = parse_ks(cfg.k)
    settings = AuditSettings.of(
        OmegaConf.to_container(cfg.audit, resolve=True) if cfg.get("audit") is not None else True
    )
    data = load_embeddings_npz(cfg.input)
    metric = EmbeddingRetrieval(
        ks=ks,
        chunk_size=int(cfg.eval.chunk_size),
        precision=str(cfg.eval.precision),
        audit=settings,
        deep_metrics=cfg.eval.get("deep_metrics", True),
    )
    metric.update(data.embeddings, data.labels, data.ids)
    metrics = metric.compute()
    schema = with_intervals(cfg, metrics, metric.output_schema())
    files = ReportFiles(cfg, "audit.json")
    per_query_file = files.save_per_query(metrics["per_query"], schema)
    run_settings = {
        "input": str(cfg.input),
        **OmegaConf.to_container(cfg.eval, resolve=True),
        "audit": dict(vars(settings)),
    }
    report = retrieval_report(
        metrics,
        schema,
        ks=ks,
        num_items=len(data.labels),
        num_labels=data.num_labels,
        label_names=data.label_names,
        settings=run_settings,
        per_query_file=per_query_file,
    )
    report["task"] = "audit"
    report["audit"] = audit_section(metrics["audit"], data.label_names, settings.top)
    files.write(report, schema=schema, title=f"audit: {cfg.input}")
    return report
