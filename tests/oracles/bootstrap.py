"""The percentile bootstrap of a mean, written from its definition apart from the library (the oracle of the tests
of intervals in the callbacks, the statistics and the evaluate.py tasks)."""

from __future__ import annotations

import numpy as np
import torch

BLOCK = 50  # rounds per block of the documented draw rule


def resample_indices(n: int, rounds: int, seed: int, stream: int = 0) -> np.ndarray:
    """The row indices ``[rounds, n]`` of the library's documented draw rule: rounds in blocks of 50, block ``b``'s
    rounds drawn in order (``n`` indices each) by ``torch.randint(n, ...)`` from a CPU generator seeded with the first
    64-bit word of ``numpy.random.SeedSequence([seed mod 2**64, stream, b])``; here one block at a time, whole."""
    blocks = []
    for b, start in enumerate(range(0, rounds, BLOCK)):
        word = np.random.SeedSequence([seed % 2**64, stream, b]).generate_state(1, dtype=np.uint64)[0]
        generator = torch.Generator().manual_seed(int(word))
        blocks.append(torch.randint(n, (min(BLOCK, rounds - start), n), generator=generator).numpy())
    return np.concatenate(blocks)


def numpy_percentile_bootstrap(values, rounds: int, seed: int, confidence: float = 0.95) -> tuple[float, float]:
    """The NaN-free values resampled ``rounds`` times (indices: :func:`resample_indices`); the interval the
    ``(1 -+ c) / 2`` quantiles (linear interpolation) of the resampled means."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    index = resample_indices(len(v), rounds, seed)
    low, high = np.quantile(v[index].mean(axis=1), [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)
