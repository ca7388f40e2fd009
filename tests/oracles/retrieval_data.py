"""Synthetic galleries for the retrieval tests: clustered embeddings, with or without near ties."""

from __future__ import annotations

import numpy as np
import torch


def clustered(n: int, d: int, classes: int, seed: int, noise: float = 1.0, sizes=None):
    """``n`` embeddings in ``classes`` labelled clusters (class centres + Gaussian noise), float32.

    ``sizes`` optionally fixes the class sizes (uneven classes, singletons for lone queries).
    """
    rng = np.random.default_rng(seed)
    if sizes is None:
        labels = rng.integers(0, classes, size=n)
    else:
        labels = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    centres = rng.normal(size=(max(classes, len(sizes or ())), d))
    emb = centres[labels] + noise * rng.normal(size=(len(labels), d))
    return torch.tensor(emb, dtype=torch.float32), torch.tensor(labels, dtype=torch.long)


def min_score_gap(emb: torch.Tensor, queries: torch.Tensor | None = None) -> float:
    """Smallest gap between two distinct-item scores of any query (float64), to rule out near ties."""
    g = emb.double() / emb.double().norm(dim=1, keepdim=True)
    q = g if queries is None else queries.double() / queries.double().norm(dim=1, keepdim=True)
    s = torch.sort(q @ g.T, dim=1).values
    return float((s[:, 1:] - s[:, :-1]).min())


def clustered_without_ties(n: int, d: int, classes: int, seed: int, gap: float = 2e-7, **kw):
    """Like :func:`clustered`, trying successive seeds until no two scores of a query are within ``gap``."""
    for s in range(seed, seed + 200):
        emb, labels = clustered(n, d, classes, s, **kw)
        if min_score_gap(emb) > gap:
            return emb, labels
    raise RuntimeError("no tie-free sample found; lower n or gap")
