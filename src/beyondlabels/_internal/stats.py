"""Primitives shared by the statistics modules (internal: not part of the public API).

:class:`Interval` (public at :mod:`beyondlabels.functional.bootstrap`), the normal and Student t quantiles, and the
seeded resampling every bootstrap interval is drawn from (definitions: :mod:`beyondlabels.functional.bootstrap`). The
checks of ``confidence``, ``rounds`` and ``seed`` are :mod:`beyondlabels._internal.checks`' (importable from here too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

# Re-exported: the statistics modules import their argument checks with the primitives.
from beyondlabels._internal.checks import check_confidence as check_confidence
from beyondlabels._internal.checks import check_rounds as check_rounds
from beyondlabels._internal.checks import check_seed as check_seed

# Resampled values held at once by the bootstrap (rounds are processed in chunks of at most this many values).
CHUNK_VALUES = 1 << 22
# Resampling rounds come in blocks of this many, each drawn from its own generator (`resampled_means`), so that any
# split of the blocks between processes gives the same rounds.
ROUNDS_PER_BLOCK = 50


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval.

    Attributes:
        estimate: The statistic on the data (the mean).
        low: Lower bound. high: Upper bound.
        confidence: Coverage of the interval (0.95).
        method: ``"percentile"``, ``"bca"`` or ``"t"``.
        n: Number of (finite) values used.
    """

    estimate: float
    low: float
    high: float
    confidence: float
    method: str
    n: int

    @property
    def width(self) -> float:
        return self.high - self.low

    def contains(self, value: float = 0.0) -> bool:
        """Whether ``value`` lies inside the closed interval (False for a NaN interval)."""
        return bool(self.low <= value <= self.high)

    def to_json(self) -> dict[str, Any]:
        """Every field, in field order."""
        return asdict(self)


def vector(values: Any, name: str) -> Tensor:
    """``values`` as a 1-D float64 CPU tensor (NaN kept)."""
    if isinstance(values, Tensor):
        tensor = values.detach().to("cpu")
    else:
        try:
            tensor = torch.as_tensor(values)
            if tensor.is_floating_point() and not hasattr(values, "dtype"):
                tensor = torch.as_tensor(values, dtype=torch.float64)  # Python floats are doubles: never via float32
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"`{name}` must be a 1-D sequence of numbers, got {type(values).__name__}: {exc}") from exc
    if tensor.dim() != 1 or tensor.is_complex() or tensor.dtype == torch.bool:
        raise ValueError(
            f"`{name}` must be a 1-D vector of real numbers (one per query), "
            f"got shape {tuple(tensor.shape)} {tensor.dtype}."
        )
    return tensor.to(torch.float64)


def finite(values: Tensor) -> Tensor:
    return values[~torch.isnan(values)]


def normal_ppf(p: float | Tensor) -> Tensor:
    return torch.special.ndtri(torch.as_tensor(p, dtype=torch.float64))


def t_ppf(p: float, df: float) -> float:
    from scipy import special

    return float(special.stdtrit(df, p))


def t_sf(t: float, df: float) -> float:
    from scipy import special

    return float(special.stdtr(df, -t))


# ---- resampling -----------------------------------------------------------------------------------------------------


def block_seed(seed: int, stream: int, block: int) -> int:
    """The seed of the generator that draws round block ``block`` of stream ``stream``: the first 64-bit word of
    numpy's ``SeedSequence([seed mod 2**64, stream, block])`` (well mixed: neighbouring seeds and blocks give unrelated
    streams)."""
    words = np.random.SeedSequence([seed % 2**64, stream, block]).generate_state(1, dtype=np.uint64)
    return int(words[0])


def round_blocks(rounds: int, share: tuple[int, int] | None = None) -> range:
    """The round blocks (of ``ROUNDS_PER_BLOCK`` rounds, the last one shorter) that ``share = (rank, world)``
    computes: the ``rank``-th of ``world`` contiguous runs of nearly equal length (every block when None). Taken in
    rank order, the shares' rounds are the rounds ``0 .. rounds - 1`` in order.

    Examples:
        >>> [list(round_blocks(120, (rank, 2))) for rank in range(2)], list(round_blocks(120))
        ([[0], [1, 2]], [0, 1, 2])
    """
    blocks = -(-rounds // ROUNDS_PER_BLOCK)
    if share is None:
        return range(blocks)
    rank, world = share
    return range(blocks * rank // world, blocks * (rank + 1) // world)


def resampled_means(
    values: Tensor, rounds: int, seed: int, *, stream: int = 0, share: tuple[int, int] | None = None
) -> Tensor:
    """Means ``[R, K]`` of resamples (with replacement) of the rows of ``values`` ``[n, K]``: every round
    (``R = rounds``), or with ``share = (rank, world)`` only the rounds of that share's blocks (:func:`round_blocks`).

    The draw rule (what makes a split exact): round ``r`` belongs to block ``b = r // ROUNDS_PER_BLOCK``; the rounds
    of block ``b`` draw their row indices in order, ``n`` per round, as ``torch.randint(n, ...)`` from a CPU
    generator seeded with :func:`block_seed` ``(seed, stream, b)``. A round's draws therefore depend on
    ``(seed, stream, r)`` alone, not on which process computes it, and the shares of ``world`` processes
    concatenated in rank order equal the whole. One set of resamples serves every column (each round's row counts
    times the matrix); a block is drawn in chunks so memory is bounded by ``CHUNK_VALUES`` (the numbers do not depend
    on the chunk).
    """
    n, width = values.shape
    chunk = max(1, CHUNK_VALUES // max(n, 1))
    parts = [torch.empty(0, width, dtype=values.dtype)]
    for block in round_blocks(rounds, share):
        generator = torch.Generator(device="cpu").manual_seed(block_seed(seed, stream, block))
        start, stop = block * ROUNDS_PER_BLOCK, min(rounds, (block + 1) * ROUNDS_PER_BLOCK)
        for first in range(start, stop, chunk):
            size = min(chunk, stop - first)
            index = torch.randint(n, (size, n), generator=generator)
            counts = torch.zeros(size, n, dtype=torch.float64).scatter_add_(
                1, index, torch.ones(size, n, dtype=torch.float64)
            )
            parts.append(counts @ values / n)
    return torch.cat(parts)


def bootstrap_means(groups: Sequence[Tensor], rounds: int, seed: int) -> list[Tensor]:
    """Resampled means ``[rounds]`` of each vector in ``groups`` (independent resamples: group ``i`` is stream ``i``
    of :func:`resampled_means`)."""
    return [resampled_means(values.unsqueeze(1), rounds, seed, stream=i)[:, 0] for i, values in enumerate(groups)]


def interval_from(
    means: Tensor, estimate: float, confidence: float, method: str, n: int, jackknife: Tensor | None
) -> Interval:
    alpha = (1.0 - confidence) / 2.0
    levels = torch.tensor([alpha, 1.0 - alpha], dtype=torch.float64)
    if method == "bca":
        b = means.numel()
        below = float((means < estimate).sum()) + float((means <= estimate).sum())
        z0 = normal_ppf(below / (2.0 * b))
        deviations = jackknife.mean() - jackknife
        denominator = 6.0 * float((deviations**2).sum()) ** 1.5
        accel = float((deviations**3).sum()) / denominator if denominator > 0 else 0.0
        z = normal_ppf(levels)
        levels = torch.special.ndtr(z0 + (z0 + z) / (1.0 - accel * (z0 + z)))
        if not bool(torch.isfinite(levels).all()):
            levels = torch.tensor([alpha, 1.0 - alpha], dtype=torch.float64)  # degenerate bias: fall back to percentile
    low, high = torch.quantile(means, levels.clamp(0.0, 1.0)).tolist()
    return Interval(estimate, float(low), float(high), confidence, method, n)


def point_interval(estimate: float, confidence: float, method: str, n: int) -> Interval:
    return Interval(estimate, estimate, estimate, confidence, method, n)
