"""The rows a search takes under each distance.

Internal. The distances and their score and tie rules are defined in :mod:`beyondlabels.functional.search`; the
search of the rows prepared here is chosen in :mod:`beyondlabels.functional._search_paths`, the Euclidean search (a
coarse product, a proven margin, an exact rescoring) is :mod:`beyondlabels.functional._euclidean`; derivations in
``docs/search.md`` ("Distances").

- ``cosine``: unit fp32 rows (:func:`unit_rows`); the score of a pair is the fp32 product of its rows.
- ``dot``: the rows scaled by one power of two so that no row is longer than 1 (only when one is); the score is the
  fp32 product of the scaled rows times ``4**shift``, i.e. the fp32 product of the rows themselves. The scale keeps
  the low-precision fast mode's margin valid and the products finite.
- ``euclidean``: coarse fp32 rows (centred on the gallery's mean, scaled by a power of two to norms at most 1) and
  their squared norms for the coarse search, and the rows as given for the exact rescoring; the score of a pair is
  minus its L2 distance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_embeddings, check_same_space

__all__ = ["L2Rows", "Space", "finite_rows", "prepare_space", "times_pow2", "unit_rows"]

# Below this fp32 norm the squares of a row's entries may fall into fp32's subnormal range (they lose bits, or become
# 0): such rows, and rows whose fp32 norm overflows, are normalised from a rescaled copy instead.
_TINY_NORM = 2.0**-40
# Rows converted at a time when rows are prepared (bounds the float64 temporaries).
_ROW_BLOCK = 8192
_FP32_MAX = torch.finfo(torch.float32).max


def unit_rows(x: Tensor, name: str = "embeddings") -> Tensor:
    """The rows of ``x`` L2-normalised in fp32 (:func:`beyondlabels.functional.search.normalize_rows`)."""
    x = finite_rows(x, name)
    x32 = x.to(torch.float32)
    norms = torch.linalg.vector_norm(x32, dim=1, keepdim=True)
    out = x32 / norms
    risky = (~torch.isfinite(norms) | (norms < _TINY_NORM)).squeeze(1)
    if bool(risky.any()):
        rows = torch.nonzero(risky).squeeze(1)
        wide = x[rows].to(torch.float64)
        peak = wide.abs().amax(dim=1, keepdim=True)
        zero = peak.squeeze(1) == 0
        if bool(zero.any()):
            bad = rows[zero][:5].tolist()
            raise ValueError(
                f"`{name}` has all-zero rows (rows {bad}...), which have no direction and cannot be normalised; "
                "drop them before evaluation."
            )
        wide = wide / peak
        out[rows] = (wide / torch.linalg.vector_norm(wide, dim=1, keepdim=True)).to(torch.float32)
    return out


def finite_rows(x: Tensor, name: str) -> Tensor:
    """``x`` checked to be a non-empty 2-D float tensor of finite values (zero rows allowed)."""
    x = check_embeddings(x, name)
    bad: list[int] = []
    for start in range(0, x.shape[0], _ROW_BLOCK):  # by blocks: no [N, D] mask beside the rows
        finite = torch.isfinite(x[start : start + _ROW_BLOCK]).all(dim=1)
        if not bool(finite.all()):
            bad += (torch.nonzero(~finite).flatten()[: 5 - len(bad)] + start).tolist()
            if len(bad) == 5:
                break
    if bad:
        raise ValueError(f"`{name}` contains NaN or Inf values (rows {bad}...); remove or fix those rows.")
    return x


def given_unit_rows(x: Tensor, name: str) -> Tensor:
    """``x`` checked to be the non-empty 2-D fp32 rows :func:`unit_rows` returns (``normalized=True``: taken as
    they are, with no copy; their norms are not checked)."""
    x = check_embeddings(x, name)
    if x.dtype != torch.float32:
        raise ValueError(
            f"`{name}` with `normalized=True` must be the fp32 unit rows of `normalize_rows`, got dtype {x.dtype}; "
            "pass the raw rows with `normalized=False` instead."
        )
    return x


def times_pow2(x: Tensor, exponent: int) -> Tensor:
    """``x * 2**exponent`` in ``x``'s dtype (two exact steps, so that each factor is a normal float64)."""
    half = exponent // 2
    for part in (half, exponent - half):
        if part:
            x = x * math.ldexp(1.0, part)
    return x


def _exponent(peak: float) -> int:
    """The smallest ``e`` with ``peak <= 2**e`` (0 for ``peak == 0``)."""
    if peak == 0.0:
        return 0
    mantissa, e = math.frexp(peak)  # peak = mantissa * 2**e, mantissa in [0.5, 1)
    return e - 1 if mantissa == 0.5 else e


@dataclass(frozen=True)
class L2Rows:
    """What the Euclidean search keeps besides the coarse rows: their fp32 squared norms, the rows for the exact
    distances (the rows as given times ``2**-exact_shift`` in fp32, zero-padded to a multiple of 8 columns), and
    ``coarse_shift``: one unit of the coarse rows is ``2**coarse_shift`` of the input's."""

    g_sq: Tensor
    q_sq: Tensor | None
    g_exact: Tensor
    q_exact: Tensor | None
    exact_shift: int
    coarse_shift: int


@dataclass(frozen=True)
class Space:
    """A gallery (and optional query set) prepared for the search under ``distance``.

    ``gallery`` / ``queries`` are the fp32 rows the search multiplies (None queries: leave-one-out); a score computed
    from them times ``2**score_shift`` is the user's score (``dot``); ``l2`` holds the Euclidean search's other rows.
    """

    distance: str
    gallery: Tensor
    queries: Tensor | None = None
    score_shift: int = 0
    l2: L2Rows | None = None

    @classmethod
    def cosine(cls, gn: Tensor, qn: Tensor | None = None) -> Space:
        """The space of unit rows ``gn`` and ``qn`` (from :func:`unit_rows`)."""
        return cls("cosine", gn, qn)

    @property
    def query_rows(self) -> Tensor:
        return self.gallery if self.queries is None else self.queries

    def subset(self, rows: Tensor) -> Space:
        """The same space with the query rows ``rows`` as a separate query set (leave-one-out queries included)."""
        l2 = self.l2
        if l2 is not None:
            q_sq = l2.g_sq if l2.q_sq is None else l2.q_sq
            q_exact = l2.g_exact if l2.q_exact is None else l2.q_exact
            l2 = replace(l2, q_sq=q_sq[rows], q_exact=q_exact[rows])
        return replace(self, queries=self.query_rows[rows], l2=l2)

    def user_scores(self, scores: Tensor) -> Tensor:
        """Scores of the search's rows in the user's units (``dot``: times ``4**shift``, saturating at fp32's
        largest finite value; others as they are)."""
        if not self.score_shift:
            return scores
        wide = times_pow2(scores.to(torch.float64), self.score_shift)
        finite = torch.isfinite(scores)
        return torch.where(finite, wide.clamp(-_FP32_MAX, _FP32_MAX), scores.to(torch.float64)).to(torch.float32)


def prepare_space(
    gallery: Tensor,
    queries: Tensor | None,
    distance: str,
    names: tuple[str, str] = ("gallery", "queries"),
    normalized: bool = False,
) -> Space:
    """``gallery`` and ``queries`` (None: leave-one-out) checked and prepared for the search under ``distance``
    (``names``: the arguments named in errors; ``normalized``: they are already the unit rows of :func:`unit_rows`,
    cosine only)."""
    if normalized:
        if distance != "cosine":
            raise ValueError(
                f"`normalized=True` means unit rows of the cosine search; with distance={distance!r} drop it."
            )
        return Space.cosine(
            given_unit_rows(gallery, names[0]), None if queries is None else given_unit_rows(queries, names[1])
        )
    if distance == "cosine":
        return Space.cosine(unit_rows(gallery, names[0]), None if queries is None else unit_rows(queries, names[1]))
    g = finite_rows(gallery, names[0])
    q = None if queries is None else finite_rows(queries, names[1])
    if q is not None:
        check_same_space(q, names[1], g, names[0], width="they must match", device="put them on one device")
    if distance == "dot":
        return _dot_space(g, q)
    return _euclidean_space(g, q)


def _blockwise(x: Tensor, fn, width: int | None = None) -> Tensor:
    """``fn`` (float64 rows in, rows out) applied to ``x`` in blocks of rows, as fp32 ``[N, width]`` (zero-padded)."""
    out = torch.zeros((x.shape[0], width or x.shape[1]), dtype=torch.float32, device=x.device)
    for start in range(0, x.shape[0], _ROW_BLOCK):
        out[start : start + _ROW_BLOCK, : x.shape[1]] = fn(x[start : start + _ROW_BLOCK].to(torch.float64))
    return out


def _peak_norm(*rows: Tensor | None, centre: Tensor | float = 0.0) -> float:
    """The largest L2 norm of the rows of ``rows`` minus ``centre``, in float64 (by blocks of rows)."""
    peak = 0.0
    for x in rows:
        for start in range(0, 0 if x is None else x.shape[0], _ROW_BLOCK):
            block = x[start : start + _ROW_BLOCK].to(torch.float64) - centre
            peak = max(peak, float(torch.linalg.vector_norm(block, dim=1).max()))
    return peak


def _dot_space(g: Tensor, q: Tensor | None) -> Space:
    """Rows scaled by ``2**-shift`` so that none is longer than 1 (``shift = 0`` when none is)."""
    shift = max(0, _exponent(_peak_norm(g, q)))

    def scaled(x: Tensor | None) -> Tensor | None:
        if x is None:
            return None
        return times_pow2(x.to(torch.float64), -shift).to(torch.float32) if shift else x.to(torch.float32)

    return Space("dot", scaled(g), scaled(q), score_shift=2 * shift)


def _exact_rows(x: Tensor, shift: int, width: int) -> Tensor:
    """``x * 2**-shift`` in fp32, zero-padded to ``width`` columns: directly in fp32 when ``x`` converts to fp32
    exactly and ``2**-shift`` is a normal fp32 (the same bits as through float64), else through float64."""
    if x.dtype in (torch.float32, torch.bfloat16, torch.float16) and abs(shift) <= 126:
        out = torch.zeros((x.shape[0], width), dtype=torch.float32, device=x.device)
        torch.mul(x.to(torch.float32), 2.0**-shift, out=out[:, : x.shape[1]])
        return out
    return _blockwise(x, lambda b: times_pow2(b, -shift), width)


def _euclidean_space(g: Tensor, q: Tensor | None) -> Space:
    """Coarse rows ``(x - mean) * 2**-e`` (norms at most 1) in fp32 with their squared norms, and the exact rows: the
    rows times ``2**-shift``, the largest entry near ``2**t`` with ``(2 * 2**t)**2 * D <= 2**126``, so that no
    squared difference or sum of them overflows fp32 and small differences do not underflow (``docs/search.md``)."""
    centre = sum(g[i : i + _ROW_BLOCK].to(torch.float64).sum(dim=0) for i in range(0, g.shape[0], _ROW_BLOCK))
    centre = centre / g.shape[0]
    e = _exponent(_peak_norm(g, q, centre=centre))
    coarse = [None if x is None else _blockwise(x, lambda b: times_pow2(b - centre, -e)) for x in (g, q)]
    sq = [None if x is None else _blockwise(x, lambda b: b.square().sum(dim=1, keepdim=True))[:, 0] for x in coarse]
    dim = g.shape[1]
    peak = max(float(x.abs().max()) for x in (g, q) if x is not None)
    shift = _exponent(peak) - (124 - math.ceil(math.log2(dim))) // 2 if peak > 0 else 0
    width = -(-dim // 8) * 8
    exact = [None if x is None else _exact_rows(x, shift, width) for x in (g, q)]
    l2 = L2Rows(sq[0], sq[1], exact[0], exact[1], shift, e)
    return Space("euclidean", coarse[0], coarse[1], l2=l2)
