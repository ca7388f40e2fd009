"""The id-ordered pool of samples: its checks, its exclusions and the counts of eligible distractors."""

from __future__ import annotations

import torch
from torch import Tensor

from beyondlabels.functional._topk import score_block
from beyondlabels.functional.search import normalize_rows


def _check_vector(x: object, name: str, n: int, device: torch.device) -> Tensor:
    if not isinstance(x, Tensor) or x.dim() != 1 or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        got = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"`{name}` must be a 1-D integer tensor with one entry per sample, got {got}.")
    if x.shape[0] != n:
        raise ValueError(
            f"`{name}` has {x.shape[0]} entries but there are {n} samples (embedding rows); they must match."
        )
    return x.to(device=device, dtype=torch.long)


def _check_pool(
    text_embeddings: Tensor, ids: Tensor | None, class_ids: Tensor | None, caption_codes: Tensor | None
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor]:
    """Normalised texts, ids, class ids and caption codes, all ordered by id, and the order applied."""
    txt = normalize_rows(text_embeddings, "text_embeddings")
    n, device = txt.shape[0], txt.device
    ids = torch.arange(n, device=device) if ids is None else _check_vector(ids, "ids", n, device)
    order = torch.argsort(ids, stable=True)
    ids = ids[order]
    if n > 1 and bool((ids[1:] == ids[:-1]).any()):
        raise ValueError(
            f"`ids` contains duplicates {ids[1:][ids[1:] == ids[:-1]][:5].tolist()}; deduplicate the samples first."
        )
    if class_ids is not None:
        class_ids = _check_vector(class_ids, "class_ids", n, device)[order]
    if caption_codes is not None:
        caption_codes = _check_vector(caption_codes, "caption_codes", n, device)[order]
    return txt[order], ids, class_ids, caption_codes, order


class _Pool:
    """The id-ordered pool's exclusions: each query's draw space and its count of eligible samples before the
    near-duplicate filter, both from group sizes in ``O(N log N)``."""

    def __init__(self, ids: Tensor, class_ids: Tensor | None, caption_codes: Tensor | None) -> None:
        n, device = ids.shape[0], ids.device
        self.n, self.ids, self.cls, self.cap = n, ids, class_ids, caption_codes
        self.keys: Tensor | None = None
        if class_ids is None:
            self.space = torch.full((n,), n, dtype=torch.long, device=device)
            excluded = torch.ones(n, dtype=torch.long, device=device)  # itself
        else:
            _, self.rank, sizes = torch.unique(class_ids, return_inverse=True, return_counts=True)
            self.space = n - sizes[self.rank]
            excluded = sizes[self.rank]  # the class holds the query itself
            # Positions of class c in ascending order, p_0 < p_1 < ...: p_i - i samples of other classes precede p_i,
            # so the u-th sample outside c is at position u + #{i : p_i - i <= u}. One sorted key array serves all
            # classes: key = rank(c) * (N + 1) + p_i - i.
            by_class = torch.argsort(self.rank, stable=True)
            self.starts = torch.cumsum(sizes, 0) - sizes
            within = torch.arange(n, device=device) - self.starts[self.rank[by_class]]
            self.keys = self.rank[by_class] * (n + 1) + by_class - within
        if caption_codes is not None:
            _, cap_rank, cap_sizes = torch.unique(caption_codes, return_inverse=True, return_counts=True)
            if class_ids is None:
                excluded = cap_sizes[cap_rank]
            else:  # |class ∪ caption| = |class| + |caption| − |class ∩ caption|
                _, pair_rank, pair_sizes = torch.unique(
                    torch.stack([class_ids, caption_codes], 1), dim=0, return_inverse=True, return_counts=True
                )
                excluded = excluded + cap_sizes[cap_rank] - pair_sizes[pair_rank]
        self.eligible = n - excluded

    def position(self, rows: Tensor, u: Tensor) -> Tensor:
        """Pool positions of the draws ``u`` ``[a, W]`` (positions in the spaces of the queries at ``rows`` ``[a]``)."""
        if self.keys is None:
            return u
        rank = self.rank[rows].unsqueeze(1)
        before = torch.searchsorted(self.keys, rank * (self.n + 1) + u, right=True) - self.starts[rank]
        return u + before

    def allowed(self, rows: Tensor, pos: Tensor) -> Tensor:
        """Whether the samples at ``pos`` ``[a, W]`` are no class, caption or self exclusion of the queries ``rows``."""
        ok = pos != rows.unsqueeze(1)
        if self.cls is not None:
            ok &= self.cls[pos] != self.cls[rows].unsqueeze(1)
        if self.cap is not None:
            ok &= self.cap[pos] != self.cap[rows].unsqueeze(1)
        return ok


def _masked_text_scores(txt: Tensor, pool: _Pool, rows: Tensor, threshold: float | None) -> Tensor:
    """Text scores ``[len(rows), N]`` of the queries at ``rows`` with every ineligible sample set to ``-inf``."""
    sims = score_block(txt[rows], txt)
    if threshold is not None:
        sims.masked_fill_(sims >= threshold, float("-inf"))
    sims[torch.arange(rows.numel(), device=rows.device), rows] = float("-inf")
    for codes in (pool.cls, pool.cap):
        if codes is not None:
            sims.masked_fill_(codes.unsqueeze(0) == codes[rows].unsqueeze(1), float("-inf"))
    return sims


def _eligible_counts(sims: Tensor) -> Tensor:
    return torch.count_nonzero(sims != float("-inf"), dim=1)


def _raise_too_few(pool: _Pool, row: int, count: int, k: int, threshold: float | None) -> None:
    raise ValueError(
        f"sample id {int(pool.ids[row])} has only {count} eligible distractors but `num_candidates` {k + 1} needs {k} "
        f"(exclusions: itself, same class, same caption, near-duplicates at cosine >= {threshold}); lower "
        "`num_candidates`, raise or turn off `near_duplicate_threshold` (None), or evaluate more samples."
    )


def _check_enough(txt: Tensor, pool: _Pool, k: int, threshold: float | None) -> None:
    """Raise for the smallest id whose class / caption exclusions alone leave fewer than ``k`` eligible samples."""
    n = pool.n
    if k > n - 1:
        raise ValueError(
            f"`num_candidates` {k + 1} needs {k} distractors but the pool has only {n} samples ({n - 1} others); "
            f"lower `num_candidates` to at most {n} or evaluate more samples."
        )
    short = torch.nonzero(pool.eligible < k).flatten()
    if short.numel():
        row = short[:1]
        count = (
            int(pool.eligible[row])
            if threshold is None
            else int(_eligible_counts(_masked_text_scores(txt, pool, row, threshold)))
        )
        _raise_too_few(pool, int(row), count, k, threshold)
