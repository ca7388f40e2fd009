"""A plain numpy/Python loop audit of labelled embeddings, written apart from ``beyondlabels.functional.audit``.

It does its own brute-force leave-one-out cosine search (ties: smaller index first) and follows the definitions of
the audit module docstring item by item.
"""

from __future__ import annotations

import numpy as np


def brute_neighbors(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores ``[N, k]`` of each row's k most similar other rows (cosine, ties by smaller index)."""
    xn = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    sim = xn @ xn.T
    n = len(x)
    idx = np.zeros((n, k), dtype=np.int64)
    sc = np.zeros((n, k))
    for i in range(n):
        cands = sorted((j for j in range(n) if j != i), key=lambda j: (-sim[i, j], j))[:k]
        idx[i] = cands
        sc[i] = [sim[i, j] for j in cands]
    return idx, sc


def _median(values: list[float]) -> float:
    v = sorted(values)
    m = len(v)
    return (v[(m - 1) // 2] + v[m // 2]) / 2


def audit_oracle(
    idx: np.ndarray,
    sc: np.ndarray,
    labels: np.ndarray,
    quality_threshold: float = 0.5,
    outlier_threshold: float = 3.5,
    duplicate_threshold: float = 0.995,
) -> dict:
    n, k = idx.shape
    own, sugg, sugg_share = np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n)
    for i in range(n):
        w = [max(float(s), 0.0) for s in sc[i]]
        if sum(w) == 0:
            w = [1.0] * k
        total = sum(w)
        per_label: dict[int, float] = {}
        for j, wj in zip(idx[i], w):
            per_label[int(labels[j])] = per_label.get(int(labels[j]), 0.0) + wj / total
        own[i] = per_label.get(int(labels[i]), 0.0)
        best = max(per_label.items(), key=lambda kv: (kv[1], -kv[0]))
        sugg[i], sugg_share[i] = best
    rate = np.zeros(n)
    quality = np.zeros(n)
    for c in set(labels.tolist()):
        members = [i for i in range(n) if labels[i] == c]
        r = sum(own[i] for i in members) / len(members)
        for i in members:
            rate[i] = r
            quality[i] = own[i] / r if r > 0 else 1.0
    suspect = np.array([sugg[i] != labels[i] and quality[i] < quality_threshold for i in range(n)])
    ranked = [i for i in sorted(range(n), key=lambda i: (quality[i], i)) if suspect[i]]
    dist = 1.0 - sc[:, k - 1]
    z = np.zeros(n)
    for c in set(labels.tolist()):
        members = [i for i in range(n) if labels[i] == c]
        med = _median([dist[i] for i in members])
        mad = _median([abs(dist[i] - med) for i in members])
        mean_ad = sum(abs(dist[i] - med) for i in members) / len(members)
        for i in members:
            if mad > 0:
                z[i] = 0.6745 * (dist[i] - med) / mad
            elif mean_ad > 0:
                z[i] = (dist[i] - med) / (1.2533 * mean_ad)
    pairs = {}
    for i in range(n):
        for j, s in zip(idx[i], sc[i]):
            if s >= duplicate_threshold:
                key = (min(i, int(j)), max(i, int(j)))
                pairs[key] = max(pairs.get(key, -2.0), float(s))
    keys = sorted(pairs)
    return {
        "own_share": own,
        "suggested_label": sugg,
        "suggested_share": sugg_share,
        "class_rate": rate,
        "label_quality": quality,
        "is_suspect": suspect,
        "suspects": ranked,
        "kth_distance": dist,
        "outlier_score": z,
        "is_outlier": z > outlier_threshold,
        "pairs": keys,
        "pair_scores": [pairs[p] for p in keys],
        "cross_label": [labels[a] != labels[b] for a, b in keys],
    }
