"""The scores of each query's candidates, ground truth first (definitions:
:mod:`beyondlabels.functional.rprecision`)."""

from __future__ import annotations

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_choice, check_positive_int
from beyondlabels.functional.rprecision._pairs import _candidate_scores
from beyondlabels.functional.search import normalize_rows

__all__ = ["candidate_scores"]


def candidate_scores(
    image_embeddings: Tensor,
    text_embeddings: Tensor,
    rows: Tensor,
    direction: str = "image_to_text",
    chunk_size: int = 256,
) -> Tensor:
    """Scores ``[N, R]`` of each query's candidates: column 0 the ground truth, then the distractors ``rows[q]``.

    ``direction="image_to_text"``: ``s(q, q), s(q, rows[q, 0]), ...``; ``"text_to_image"``: ``s(q, q), s(rows[q, 0], q),
    ...`` with ``s(i, t)`` the score of image ``i`` and text ``t`` (inputs in pool order; rows index the pool).
    ``chunk_size`` is accepted for compatibility: scores never depend on a blocking.

    Examples:
        >>> candidate_scores(torch.eye(2), torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[1], [0]]))
        tensor([[1.0000, 0.7071],
                [0.7071, 0.0000]])
    """
    img = normalize_rows(image_embeddings, "image_embeddings")
    txt = normalize_rows(text_embeddings, "text_embeddings")
    check_choice(direction, "direction", ("image_to_text", "text_to_image"))
    check_positive_int(chunk_size, "chunk_size")
    if not isinstance(rows, Tensor) or rows.dim() != 2 or rows.shape[0] != img.shape[0] or rows.is_floating_point():
        got = f"{tuple(rows.shape)} {rows.dtype}" if isinstance(rows, Tensor) else type(rows).__name__
        raise ValueError(
            f"`rows` must be an integer tensor [N, R - 1] with one row per sample ({img.shape[0]}), got {got}."
        )
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= txt.shape[0]):
        raise ValueError(f"`rows` must index the {txt.shape[0]} samples (0..{txt.shape[0] - 1}).")
    if txt.shape != img.shape:
        raise ValueError(
            f"`image_embeddings` {tuple(img.shape)} and `text_embeddings` {tuple(txt.shape)} must have one shape."
        )
    return _candidate_scores(img, txt, rows.to(device=img.device, dtype=torch.long), direction)
