"""The candidate sets of text-to-image R-precision: R - 1 distractors per query, drawn as a function of
the ids and the seed (definitions: :mod:`beyondlabels.functional.rprecision`)."""

from __future__ import annotations

from torch import Tensor

from beyondlabels._internal.checks import check_int, check_positive_int, check_seed
from beyondlabels.functional.rprecision._draw import _draw, _hard
from beyondlabels.functional.rprecision._pool import _check_pool, _Pool
from beyondlabels.functional.rprecision._sets import CandidateSets
from beyondlabels.functional.rprecision.settings import check_threshold

__all__ = ["CandidateSets", "draw_candidate_sets"]


def draw_candidate_sets(
    text_embeddings: Tensor,
    ids: Tensor | None = None,
    *,
    num_candidates: int = 100,
    seed: int = 0,
    repeat: int = 0,
    class_ids: Tensor | None = None,
    caption_codes: Tensor | None = None,
    near_duplicate_threshold: float | None = 0.8,
    hard_negatives: bool = False,
    chunk_size: int = 256,
) -> CandidateSets:
    """The candidate sets of a pool of samples (definitions in the module docstring).

    Args:
        text_embeddings: Float ``[N, D]`` prompt embeddings (used by the near-duplicate filter and hard negatives).
        ids: Int ``[N]`` unique sample ids (default ``0..N−1``).
        num_candidates: ``R``, ground truth included.
        seed: The draw's seed.
        repeat: The redraw's number (the redraws of ``protocol="resample"``).
        class_ids: Optional int ``[N]``: same-class samples are never distractors.
        caption_codes: Optional int ``[N]``: same-caption samples are never distractors.
        near_duplicate_threshold: Text score at or above which a caption is no distractor (None: off).
        hard_negatives: Nearest eligible captions instead of a seeded draw.
        chunk_size: Queries per block (the result does not depend on it; hard negatives hold ``chunk_size × N``
            scores at a time).

    Returns:
        :class:`CandidateSets` in ascending id order.

    Examples:
        >>> import torch
        >>> t = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
        >>> a = draw_candidate_sets(t, torch.arange(6), num_candidates=3, near_duplicate_threshold=None)
        >>> b = draw_candidate_sets(t.flip(0), torch.arange(6).flip(0), num_candidates=3, near_duplicate_threshold=None)
        >>> torch.equal(a.distractor_ids, b.distractor_ids), a.distractor_ids.shape
        (True, torch.Size([6, 2]))
    """
    check_positive_int(num_candidates, "num_candidates")
    check_positive_int(chunk_size, "chunk_size")
    seed, repeat = check_seed(seed), check_int(repeat, "repeat")
    txt, sid, cls, cap, _ = _check_pool(text_embeddings, ids, class_ids, caption_codes)
    pool, threshold = _Pool(sid, cls, cap), check_threshold(near_duplicate_threshold)
    if hard_negatives:
        rows = _hard(txt, pool, num_candidates, threshold, chunk_size)
    else:
        rows = _draw(txt, pool, num_candidates, seed, [repeat], threshold, chunk_size)[0][0]
    return CandidateSets(sid, sid[rows])
