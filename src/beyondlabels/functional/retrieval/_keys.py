"""The keys of the retrieval metrics that are plain means over queries (those a query sample gives a standard error)."""

from __future__ import annotations

from collections.abc import Sequence


def micro_keys(ks: Sequence[int], graded: Sequence[str], deep_metrics: bool = True) -> list[str]:
    """The keys that are plain means over (non-lone) queries, in output order."""
    keys = [f"{family}@{k}" for family in ("precision", "recall", "hit", "ndcg") for k in ks]
    keys += [f"{name}_{family}@{k}" for name in graded for family in ("precision", "ndcg") for k in ks]
    return keys + (["r_precision", "map@r", "mean_first_relevant_rank"] if deep_metrics else [])
