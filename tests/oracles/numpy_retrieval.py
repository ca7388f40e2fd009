"""Brute-force numpy reference for leave-one-out embedding retrieval metrics.

Written from the definitions, not from the kernel: float64 scores (cosine of the normalised rows; with ``distance``
the inner product of the rows as given, or minus their Euclidean distance), one plain loop per query, a full argsort
of the whole gallery under the order (descending score, ascending gallery index).
"""

from __future__ import annotations

import numpy as np


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def ranked_gallery(
    query: np.ndarray, gallery: np.ndarray, excluded: int | None, distance: str = "cosine"
) -> tuple[np.ndarray, np.ndarray]:
    """Gallery indices of one query ranked best first, and their scores (excluded item removed)."""
    if distance == "euclidean":
        scores = -np.sqrt(((gallery - query) ** 2).sum(axis=1))
    else:
        scores = gallery @ query
    index = np.arange(len(gallery))
    keep = index != (-1 if excluded is None else excluded)
    scores, index = scores[keep], index[keep]
    order = np.lexsort((index, -scores))  # last key is primary
    return index[order], scores[order]


def retrieval_metrics(
    embeddings,
    labels,
    ks=(1, 5, 10),
    curve_max_k=None,
    query_embeddings=None,
    query_labels=None,
    excluded=None,
    distance="cosine",
) -> dict:
    """Reference metrics.

    ``excluded[q]`` is the gallery index removed for query q (or -1); in leave-one-out mode (no
    ``query_embeddings``) it defaults to q itself. ``distance``: ``"cosine"``, ``"dot"`` or ``"euclidean"`` (the rows
    as given, in float64).
    """
    rows = _unit if distance == "cosine" else (lambda x: np.asarray(x, dtype=np.float64))
    gallery = rows(embeddings)
    g_labels = np.asarray(labels)
    if query_embeddings is None:
        queries, q_labels = gallery, g_labels
        if excluded is None:
            excluded = np.arange(len(gallery))
    else:
        queries, q_labels = rows(query_embeddings), np.asarray(query_labels)
        if excluded is None:
            excluded = -np.ones(len(queries), dtype=int)
    ks = sorted(set(ks))
    curve_max_k = curve_max_k or max(ks)

    per_query = []
    lone = 0
    for q in range(len(queries)):
        ex = int(excluded[q])
        ranked, _ = ranked_gallery(queries[q], gallery, None if ex < 0 else ex, distance)
        rel = (g_labels[ranked] == q_labels[q]).astype(np.float64)
        big_r = int(rel.sum())
        if big_r == 0:
            lone += 1
            continue
        row = {"label": q_labels[q]}
        for k in ks:
            n = rel[:k].sum()
            row[f"precision@{k}"] = n / k
            row[f"recall@{k}"] = n / big_r
            row[f"hit@{k}"] = float(n > 0)
        row["r_precision"] = rel[:big_r].sum() / big_r
        total = 0.0
        for i in range(big_r):
            if rel[i]:
                total += rel[: i + 1].sum() / (i + 1)
        row["map@r"] = total / big_r
        row["first_rank"] = float(np.argmax(rel > 0) + 1)
        row["curve"] = np.array([rel[:i].sum() / i for i in range(1, curve_max_k + 1)])
        per_query.append(row)

    out: dict = {"num_queries": len(per_query), "num_lone_queries": lone}
    if not per_query:
        return out
    scalar_keys = [k for k in per_query[0] if k not in ("label", "curve", "first_rank")]
    for key in scalar_keys:
        out[key] = float(np.mean([row[key] for row in per_query]))
    ranks = np.array([row["first_rank"] for row in per_query])
    out["mean_first_relevant_rank"] = float(ranks.mean())
    out["median_first_relevant_rank"] = float(np.median(ranks))
    out["precision_curve"] = np.mean([row["curve"] for row in per_query], axis=0)
    classes = sorted({row["label"] for row in per_query})
    for key in [f"precision@{k}" for k in ks] + ["r_precision", "map@r"]:
        per_class = [np.mean([row[key] for row in per_query if row["label"] == c]) for c in classes]
        out[f"macro_{key}"] = float(np.mean(per_class))
    out["per_query_first_rank"] = ranks
    return out
