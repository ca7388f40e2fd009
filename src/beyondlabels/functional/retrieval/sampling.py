"""The seeded query sample of the retrieval metrics (``max_queries``): chosen by id alone."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from beyondlabels._internal.checks import check_positive_int, check_seed

__all__ = ["sample_queries"]


def sample_queries(ids: Tensor, max_queries: int, seed: int = 0) -> Tensor:
    """Positions of a fixed, seeded sample of ``max_queries`` queries, chosen by their ids alone.

    Each id gets a pseudo-random 64-bit key from ``(seed, id)`` (SplitMix64); the ``max_queries`` smallest keys are
    the sample. The same ids are therefore chosen at every evaluation, on any world size, batch size or sample order,
    and a sample of a larger pool keeps the ids of a smaller one that it contains. All positions when
    ``max_queries >= len(ids)``.

    Args:
        ids: Int tensor ``[N]`` of unique sample ids.
        max_queries: Sample size (positive).
        seed: The sample's seed.

    Returns:
        int64 positions into ``ids``, ascending.

    Examples:
        >>> ids = torch.arange(100, 110)
        >>> chosen = ids[sample_queries(ids, 3, seed=1)]
        >>> shuffled = ids[torch.randperm(10, generator=torch.Generator().manual_seed(0))]
        >>> torch.equal(torch.sort(shuffled[sample_queries(shuffled, 3, seed=1)]).values, chosen)
        True
        >>> sample_queries(ids, 20).tolist() == list(range(10))
        True
    """
    max_queries, seed = check_positive_int(max_queries, "max_queries"), check_seed(seed)
    if max_queries >= ids.numel():
        return torch.arange(ids.numel(), device=ids.device)
    with np.errstate(over="ignore"):
        x = ids.detach().cpu().numpy().astype(np.uint64) ^ np.uint64(seed % 2**64)
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    order = np.lexsort((ids.detach().cpu().numpy(), x))[:max_queries]
    return torch.from_numpy(np.sort(order)).to(device=ids.device, dtype=torch.long)
