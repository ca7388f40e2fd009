"""Per-query hits of checkpoints whose expected value is known, for the simulations of checkpoint selection (the
same design as ``benchmarks/bench_selection.py`` and ``docs/selection.md``).

Query ``i`` at checkpoint ``j`` is right when ``sqrt(r) z_i + sqrt(1 - r) e_ij > Phi^-1(1 - mu_j)``, ``z_i`` and
``e_ij`` independent standard normals: each checkpoint is right on a share ``mu_j`` of the population of queries in
expectation, and two checkpoints agree on a query more than chance (a query hard for one is hard for the others),
with latent correlation ``r`` (0.7: about 12% of the queries change between two checkpoints of equal value).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

CORRELATION = 0.7


def correlated_hits(rng: np.random.Generator, mu, queries: int, r: float = CORRELATION) -> np.ndarray:
    """``[queries, checkpoints]`` 0/1 hits with expected values ``mu`` (one per checkpoint)."""
    mu = np.asarray(mu, dtype=np.float64)
    z = rng.standard_normal((queries, 1))
    e = rng.standard_normal((queries, mu.size))
    return (np.sqrt(r) * z + np.sqrt(1 - r) * e > norm.ppf(1 - mu)).astype(np.float64)


def paired_class_hits(
    rng: np.random.Generator, accuracy: np.ndarray, drop: np.ndarray, per_class: int, r: float = CORRELATION
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(reference, current, labels)``: 0/1 hits of two checkpoints on ``per_class`` queries of each class, the
    current one's expected accuracy lower by ``drop[c]`` on class ``c``."""
    labels = np.repeat(np.arange(accuracy.size), per_class)
    z = rng.standard_normal(labels.size)
    before, after = accuracy[labels], accuracy[labels] - drop[labels]
    reference = np.sqrt(r) * z + np.sqrt(1 - r) * rng.standard_normal(labels.size) > norm.ppf(1 - before)
    current = np.sqrt(r) * z + np.sqrt(1 - r) * rng.standard_normal(labels.size) > norm.ppf(1 - after)
    return reference.astype(np.float64), current.astype(np.float64), labels
