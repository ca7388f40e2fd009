"""The JSON report of a retrieval evaluation, driven by the metric's output schema."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from beyondlabels.schema import OutputSchema

log = logging.getLogger(__name__)


def _scalar(value: Any, count: bool) -> float | int:
    number = value.item() if isinstance(value, torch.Tensor) else value
    return int(number) if count else float(number)


def retrieval_report(
    metrics: Mapping[str, Any],
    schema: OutputSchema,
    *,
    ks: Sequence[int],
    num_items: int,
    num_labels: int,
    label_names: Mapping[int, str] | None = None,
    settings: Mapping[str, Any] | None = None,
    per_query_file: str | None = None,
) -> dict[str, Any]:
    """A JSON-ready report: what ``schema`` names, and what was evaluated.

    The schema's scalar keys go at the top level (counts as ints, the rest as floats), its curve keys as lists
    (``precision_curve[i] = precision@(i+1)``), and the schema itself under ``schema`` so readers need not guess what
    a key is. Nothing outside the schema is taken from ``metrics``. Beside them: ``task`` (``"retrieval"``), ``ks``,
    ``num_items``, ``num_labels`` (distinct labels), ``label_names`` (``{code: name}``, only when some label is not
    an integer, so hashed codes can be read), ``per_query_file`` (when given) and ``settings``.

    Examples:
        >>> from beyondlabels.schema import KeySpec
        >>> schema = OutputSchema({"precision@1": KeySpec("scalar", True),
        ...                        "num_queries": KeySpec("scalar", None, count=True),
        ...                        "precision_curve": KeySpec("curve", True)})
        >>> r = retrieval_report({"precision@1": torch.tensor(0.5, dtype=torch.float64), "num_queries": torch.tensor(4),
        ...                       "precision_curve": torch.tensor([0.5, 0.25]), "per_query": {}}, schema, ks=[1],
        ...                      num_items=5, num_labels=2)
        >>> r["precision@1"], r["num_queries"], r["precision_curve"], r["num_labels"], "per_query" in r
        (0.5, 4, [0.5, 0.25], 2, False)
    """
    report: dict[str, Any] = {"task": "retrieval"}
    missing = [k for k in [*schema.scalar_keys(), *schema.curve_keys()] if k not in metrics]
    if missing:
        log.warning("the metrics lack the schema keys %s; they are left out of the report", missing)
    for key in schema.scalar_keys():
        if key in metrics:
            report[key] = _scalar(metrics[key], schema[key].count)
    for key in schema.curve_keys():
        if key in metrics:
            value = metrics[key]
            report[key] = [float(v) for v in (value.tolist() if isinstance(value, torch.Tensor) else value)]
    report["ks"] = [int(k) for k in ks]
    report["num_items"] = int(num_items)
    report["num_labels"] = int(num_labels)
    if label_names and any(name != str(code) for code, name in label_names.items()):
        report["label_names"] = {str(code): name for code, name in label_names.items()}
    if per_query_file is not None:
        report["per_query_file"] = str(per_query_file)
    report["settings"] = dict(settings or {})
    report["schema"] = schema.to_json()
    return report
