"""Search of one chunk of queries against the whole gallery: in fp32, or by the low-precision fast mode.

Internal. The fast mode (``precision="bf16"`` / ``"fp16"``) scores a low-precision copy of the gallery first and
rescores in fp32 every item within a proven margin of the chunk's coarse top ``depth``, so its results equal the fp32
search; the margin is derived in ``docs/search.md`` ("Low-precision fast mode").
"""

from __future__ import annotations

import torch
from torch import Tensor

from beyondlabels.functional._topk import Workspace, exact_topk, mask_excluded, score_block

# Rounding unit of the output of a low-precision product.
_OUT_ROUNDING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


class Gallery:
    """A normalised gallery, ready to be searched chunk by chunk (and its low-precision copy in fast mode)."""

    def __init__(self, gallery: Tensor, lowp: torch.dtype | None) -> None:
        self.g = gallery  # [N, D] fp32, unit rows
        self.n, self.d = gallery.shape
        self.lowp = lowp
        self.gamma = self.d * 2.0**-24 / (1.0 - self.d * 2.0**-24)  # fp32 accumulation over D terms
        if lowp is not None:
            self.g_low = gallery.to(lowp)
            self.err_g = float(_rounding_error(gallery, self.g_low).max())
            self.out_rounding = _OUT_ROUNDING[lowp]

    def margin(self, q: Tensor, q_low: Tensor) -> Tensor:
        """Per-query bound ``eps`` on |coarse score - fp32 score| (``docs/search.md``)."""
        e_q = _rounding_error(q, q_low)
        big_e = self.err_g
        grow = (1.0 + e_q) * (1.0 + big_e)
        eps = e_q * (1.0 + big_e) + (1.0 + 1e-6) * big_e + (2.0 * self.gamma + self.out_rounding) * grow
        return eps * 1.01 + 1e-7


def _rounding_error(x: Tensor, x_low: Tensor) -> Tensor:
    # x_low - x is exact in fp32 (the two are within a factor 2); the norm's own error is covered by the 1% inflation.
    return torch.linalg.vector_norm(x_low.to(torch.float32) - x, dim=1)


def search_chunk(
    gal: Gallery, q: Tensor, excl: Tensor | None, depth: int, ws: Workspace | None = None
) -> tuple[Tensor, Tensor]:
    """Exact top-``depth`` (fp32 scores, gallery indices) for one chunk of normalised queries."""
    if gal.lowp is None:
        scores = score_block(q, gal.g, ws)
        mask_excluded(scores, excl)
        return exact_topk(scores, depth, ws)

    q_low = q.to(gal.lowp)
    coarse = q_low @ gal.g_low.T  # low precision [c, N]
    mask_excluded(coarse, excl)
    kth = torch.topk(coarse, depth, dim=1, largest=True, sorted=False).values.amin(dim=1, keepdim=True)
    threshold = kth.to(torch.float32) - 2.0 * gal.margin(q, q_low).unsqueeze(1)
    candidates = (coarse >= threshold) & (coarse > float("-inf"))
    del coarse
    cols = torch.nonzero(candidates.any(dim=0)).flatten()  # ascending: positions order ties like gallery indices
    if 2 * cols.numel() > gal.n:
        # The chunk's candidates cover most of the gallery: rescore it whole.
        scores = score_block(q, gal.g)
        scores.masked_fill_(~candidates, float("-inf"))
        return exact_topk(scores, depth)
    scores = score_block(q, gal.g[cols])
    scores.masked_fill_(~candidates[:, cols], float("-inf"))
    vals, pos = exact_topk(scores, depth)
    return vals, cols[pos]
