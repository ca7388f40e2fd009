"""The JSON report of a retrieval evaluation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch


def _plain(value: torch.Tensor) -> Any:
    if value.numel() == 1:
        item = value.item()
        return int(item) if value.dtype in (torch.int64, torch.int32) else float(item)
    return value.tolist()


def retrieval_report(metrics: Mapping[str, torch.Tensor], *, ks: Sequence[int], num_items: int, label_names: Sequence[str], settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-ready report: every scalar metric at the top level, the curve, and what was evaluated.

    Scalars keep the metric's names (``precision@1``, ``r_precision``, ``map@r``, ``num_queries``, ...);
    ``precision_curve`` is a list with ``precision_curve[i] = precision@(i+1)``; ``per_query_*`` and
    ``neighbor_*`` tensors are left out.

    Example:
        >>> r = retrieval_report({"precision@1": torch.tensor(0.5, dtype=torch.float64), "num_queries": torch.tensor(4),
        ...                       "precision_curve": torch.tensor([0.5, 0.25])}, ks=[1], num_items=5, label_names=["a", "b"])
        >>> r["precision@1"], r["num_queries"], r["precision_curve"], r["num_items"]
        (0.5, 4, [0.5, 0.25], 5)
    """
    report: dict[str, Any] = {}
    for key, value in metrics.items():
        if key.startswith(("per_query_", "neighbor_")):
            continue
        report[key] = _plain(value)
    report["ks"] = list(ks)
    report["num_items"] = int(num_items)
    report["num_labels"] = len(label_names)
    report["settings"] = dict(settings or {})
    return report
