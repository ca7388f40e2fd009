"""The percentile bootstrap of a mean, written from its definition apart from the library (the oracle of the tests
of intervals in the callbacks, the statistics and the evaluate.py tasks)."""

from __future__ import annotations

import numpy as np
import torch


def numpy_percentile_bootstrap(values, rounds: int, seed: int, confidence: float = 0.95) -> tuple[float, float]:
    """The NaN-free values resampled ``rounds`` times, the indices one ``torch.randint(n, (rounds, n))`` from a CPU
    generator seeded with ``seed`` (the library's documented seed rule); the interval the ``(1 -+ c) / 2`` quantiles
    (linear interpolation) of the resampled means."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    index = torch.randint(len(v), (rounds, len(v)), generator=torch.Generator().manual_seed(seed)).numpy()
    low, high = np.quantile(v[index].mean(axis=1), [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)
