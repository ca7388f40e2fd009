"""The exact Euclidean search of one chunk of queries, and the exact rank of a query's first relevant item.

Internal. A coarse score, ``2 q.g - |q|^2 - |g|^2`` of the centred, scaled fp32 rows
(:class:`~beyondlabels.functional._distances.L2Rows`; an fp32 product, or a low-precision one in the fast mode), lies
within a proven margin ``eps`` of minus the squared distance in those units. Every item whose coarse score reaches the
chunk's coarse top ``depth`` minus ``2 eps`` (and a relative slack) is rescored exactly from the rows as given, and
the exact scores are ranked. Why this is exact, the margin and the slack: ``docs/search.md`` ("Euclidean distance").
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from beyondlabels.functional._distances import L2Rows, times_pow2
from beyondlabels.functional._low_precision import Gallery
from beyondlabels.functional._pair_shares import Exchange, shared_block_search
from beyondlabels.functional._topk import Workspace, from_keys, mask_excluded, score_block, to_keys, to_l2

# fp32's rounding unit.
_U = 2.0**-24
# Rounding of the inputs of an fp32 matrix product under torch.set_float32_matmul_precision (TF32, bf16).
_MATMUL_ROUNDING = {"highest": 0.0, "high": 2.0**-11, "medium": 2.0**-8}
# fp32 elements of one block of the exact distances (4 MB): every block has the same shape, so that each pair's sum
# is reduced in the same order whatever the chunk, the share or the number of pairs (docs/search.md).
_EXACT_BLOCK = 2**20
_FP32_MAX = torch.finfo(torch.float32).max


def _gamma(d: int) -> float:
    """Bound of the relative error of a sum of ``d`` fp32 products."""
    return d * _U / (1.0 - d * _U)


def _slack(t: Tensor, eps: Tensor, rho: float) -> Tensor:
    """How far below a coarse score ``t`` an item must score to be certainly ranked after it (``docs/search.md``)."""
    return 2.0 * eps + rho * (t.abs() + eps)


class L2Gallery:
    """A Euclidean space's gallery (coarse fp32 rows of norm at most 1, :class:`L2Rows`) searched chunk by chunk
    against the coarse query rows ``queries``; ``lowp``: the low-precision dtype of the coarse product (None:
    fp32)."""

    def __init__(self, gallery: Tensor, l2: L2Rows, queries: Tensor, lowp: torch.dtype | None) -> None:
        self.g, self.l2, self.q, self.lowp = gallery, l2, queries, lowp
        self.q_sq = l2.g_sq if l2.q_sq is None else l2.q_sq
        self.q_exact = l2.g_exact if l2.q_exact is None else l2.q_exact
        self.gamma = _gamma(gallery.shape[1])
        # Relative slack of every candidate threshold: an item left out is farther than each coarse leader by more
        # than this share of their squared distance, four times the exact distances' error bound (docs/search.md).
        self.rho = 4.0 * _gamma(gallery.shape[1] + 2) + 2.0**-18
        self.pairs = max(1, _EXACT_BLOCK // l2.g_exact.shape[1])  # pairs per block of the exact distances
        self.low = None if lowp is None else Gallery(gallery, lowp)
        rounding = _MATMUL_ROUNDING.get(torch.get_float32_matmul_precision(), 2.0**-8)
        self.eps_fp32 = 1.01 * (2.0 * self.gamma + 20.0 * _U + 4.01 * rounding) + 2.0**-100

    def coarse(self, rows: Tensor, excl: Tensor | None, ws: Workspace | None = None) -> tuple[Tensor, Tensor]:
        """fp32 coarse scores ``[c, N]`` of the query rows ``rows`` (``-inf`` at excluded items) and each row's margin
        ``eps`` (float64 ``[c]``)."""
        q = self.q[rows]
        if self.low is None:
            scores = score_block(q, self.g, ws)
            eps = torch.full((q.shape[0],), self.eps_fp32, dtype=torch.float64, device=q.device)
        else:
            q_low = q.to(self.lowp)
            scores = (q_low @ self.low.g_low.T).to(torch.float32)
            eps = 1.01 * (2.0 * (self.low.margin(q, q_low).to(torch.float64) + self.gamma) + 20.0 * _U) + 2.0**-100
        to_l2(scores, self.q_sq[rows], self.l2.g_sq)
        mask_excluded(scores, excl)
        return scores, eps

    def search(self, rows: Tensor, excl: Tensor | None, depth: int, ws: Workspace) -> tuple[Tensor, Tensor]:
        """Exact top ``depth`` (scores ``-distance`` in fp32, gallery indices) of the query rows ``rows``.

        The candidates of a row are the items whose coarse score reaches its coarse ``depth``-th minus the slack;
        they are looked for among the row's coarse top ``depth + max(16, depth / 8)`` first, and rows with more are
        searched again with as many as the most numerous needs."""
        scores, eps = self.coarse(rows, excl, ws)
        n = scores.shape[1]
        first = min(n, depth + max(16, depth // 8))
        top, cols = torch.topk(scores, first, dim=1, sorted=False)
        kth = torch.topk(top, depth, dim=1, sorted=False).values.amin(dim=1).to(torch.float64)
        threshold = kth - _slack(kth, eps, self.rho)
        short = top.amin(dim=1).to(torch.float64) >= threshold  # candidates may lie past the first columns
        if first == n or not bool(short.any()):
            return self._exact_top(rows, cols, top, depth)
        vals = torch.empty((rows.numel(), depth), dtype=torch.float32, device=scores.device)
        idx = torch.empty((rows.numel(), depth), dtype=torch.long, device=scores.device)
        fits = torch.nonzero(~short).flatten()
        if fits.numel():
            vals[fits], idx[fits] = self._exact_top(rows[fits], cols[fits], top[fits], depth)
        again = torch.nonzero(short).flatten()
        wanted = int(torch.ge(scores[again], threshold[again].unsqueeze(1)).sum(dim=1).max())
        top, cols = torch.topk(scores[again], wanted, dim=1, sorted=False)
        vals[again], idx[again] = self._exact_top(rows[again], cols, top, depth)
        return vals, idx

    def leave_one_out(
        self, depths: Tensor, share: tuple[int, int], chunk_size: int, exchange: Exchange | None = None
    ) -> Iterator[tuple[Tensor, Tensor, Tensor]] | None:
        """The leave-one-out search of share ``share`` with its coarse pass in symmetric blocks
        (:func:`~beyondlabels.functional._pair_shares.shared_block_search`, half the products), each row searched
        ``depth + max(16, depth / 8)`` deep; a row whose candidates may lie deeper is searched again by rows
        (:meth:`search`). None when the symmetric blocks do not apply (search by rows then)."""
        n = self.g.shape[0]
        wide = torch.clamp(depths + torch.clamp(depths // 8, min=16), max=n - 1)
        parts = shared_block_search(self.g, wide, share, chunk_size, sq=self.l2.g_sq, exchange=exchange)
        if parts is None:
            return None
        return self._rescored_parts(parts, depths, chunk_size)

    def _rescored_parts(
        self, parts: Iterator[tuple[Tensor, Tensor, Tensor]], depths: Tensor, chunk_size: int
    ) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        """Each row of each part: the exact top of its coarse columns, or of a search by rows when they may miss a
        candidate (``docs/search.md``)."""
        n = self.g.shape[0]
        ws = Workspace(self.g.device)
        for rows, coarse, cols in parts:
            d = int(depths[rows].max())  # every row of the part is given its exact top d (a prefix of any deeper)
            kth = coarse[:, d - 1].to(torch.float64)
            eps = torch.full_like(kth, self.eps_fp32)
            # every candidate is among the searched columns when the last of them is below the threshold, or when
            # the whole gallery was searched
            last = coarse[:, -1].to(torch.float64)
            complete = (last < kth - _slack(kth, eps, self.rho)) | (coarse.shape[1] >= n - 1)
            vals = torch.empty((rows.numel(), d), dtype=torch.float32, device=coarse.device)
            idx = torch.empty((rows.numel(), d), dtype=torch.long, device=coarse.device)
            done = torch.nonzero(complete).flatten()
            if done.numel():
                vals[done], idx[done] = self._exact_top(rows[done], cols[done], coarse[done], d)
            again = torch.nonzero(~complete).flatten()
            for start in range(0, again.numel(), chunk_size):
                part = again[start : start + chunk_size]
                vals[part], idx[part] = self.search(rows[part], rows[part], d, ws)
            yield rows, vals, idx

    def _exact_top(self, rows: Tensor, cols: Tensor, coarse: Tensor, depth: int) -> tuple[Tensor, Tensor]:
        """The top ``depth`` of the items ``cols`` (``[c, m]``, with their coarse scores ``coarse``) of the query rows
        ``rows`` by their exact scores; excluded items (coarse ``-inf``) stay out."""
        exact = self.exact_scores(rows, cols)
        exact.masked_fill_(coarse == float("-inf"), float("-inf"))
        keys = torch.topk(to_keys(exact, cols), depth, dim=1, sorted=False).values
        return from_keys(torch.sort(keys, dim=1, descending=True).values)

    def exact_scores(self, rows: Tensor, cols: Tensor) -> Tensor:
        """fp32 ``-||q - g||`` of the query rows ``rows`` and the gallery items ``cols`` (``[c, m]``): the square root
        of the fp32 sum of the squared fp32 differences of the scaled rows (:class:`L2Rows`), scaled back (distances
        beyond fp32's range saturate at its largest value). The pairs of a few rows at a time are summed in a buffer
        of one fixed shape (rows past the pairs hold zeros or earlier pairs, and are not read)."""
        c, m = cols.shape
        g, pairs = self.l2.g_exact, self.pairs
        per_col = min(m, pairs)
        per_row = max(1, pairs // per_col)
        d2 = torch.empty((c, m), dtype=torch.float32, device=cols.device)
        buffer = torch.zeros((pairs, g.shape[1]), dtype=torch.float32, device=cols.device)
        sums = torch.empty(pairs, dtype=torch.float32, device=cols.device)
        for r in range(0, c, per_row):
            q = self.q_exact.index_select(0, rows[r : r + per_row]).unsqueeze(1)  # [a, 1, D]
            for j in range(0, m, per_col):
                sub = cols[r : r + per_row, j : j + per_col]
                part = buffer[: sub.numel()]
                torch.index_select(g, 0, sub.reshape(-1), out=part)
                part.view(*sub.shape, -1).sub_(q).square_()
                torch.sum(buffer, dim=1, out=sums)
                d2[r : r + per_row, j : j + per_col] = sums[: sub.numel()].view(sub.shape)
        distance = times_pow2(d2.sqrt_().to(torch.float64), self.l2.exact_shift)
        return distance.clamp_(max=_FP32_MAX).neg_().to(torch.float32).view(c, m)

    def coarse_units(self, scores: Tensor) -> Tensor:
        """Final scores ``-distance`` as coarse scores: minus the squared distance in the coarse rows' units."""
        return -times_pow2(scores.to(torch.float64), -self.l2.coarse_shift).square()

    def _rescored(self, rows: Tensor, scores: Tensor, chosen: Tensor) -> tuple[Tensor, Tensor]:
        """Exact scores ``[c, m]`` of the items ``chosen`` (a mask over ``scores``' columns) of each query row, ``-inf``
        in the slots past a row's own count, and their gallery indices."""
        wanted = max(1, int(chosen.sum(dim=1).max()))
        masked = scores.masked_fill(~chosen, float("-inf"))
        top, cols = torch.topk(masked, wanted, dim=1, sorted=False)
        exact = self.exact_scores(rows, cols)
        return exact.masked_fill_(top == float("-inf"), float("-inf")), cols

    def first_relevant_rank(self, rows: Tensor, q_labels: Tensor, g_labels: Tensor, excl: Tensor | None) -> Tensor:
        """The exact 1-based rank (float64) of the best-ranked relevant item of each query row ``rows`` (each has one),
        counted over the whole gallery under the ranking order (``docs/search.md``): the relevant items within the
        slack of the best coarse one are rescored to find it; then the items within the slack of its score are
        rescored, and those above the slack counted as they are."""
        scores, eps = self.coarse(rows, excl)
        eps = eps.unsqueeze(1)
        finite = scores > float("-inf")
        relevant = (g_labels.unsqueeze(0) == q_labels.unsqueeze(1)) & finite
        best = scores.masked_fill(~relevant, float("-inf")).amax(dim=1, keepdim=True).to(torch.float64)
        found, cols = self._rescored(rows, scores, relevant & (scores >= best - _slack(best, eps, self.rho)))
        top = found.amax(dim=1, keepdim=True)
        first = torch.where(found == top, cols, scores.shape[1]).amin(dim=1, keepdim=True)
        bound = self.coarse_units(top)
        slack = _slack(bound, eps, self.rho)
        above = (scores > bound + slack).sum(dim=1)
        near, cols = self._rescored(rows, scores, finite & (scores >= bound - slack) & (scores <= bound + slack))
        before = (near > top) | ((near == top) & (cols < first))
        return (above + before.sum(dim=1)).to(torch.float64) + 1.0
