"""Text-to-image R-precision of a pool of samples, both directions, with its folds (definitions:
:mod:`beyondlabels.functional.rprecision`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_positive_int, check_same_space
from beyondlabels.functional.rprecision._draw import _draw, _hard
from beyondlabels.functional.rprecision._hash import _base_key, _mix
from beyondlabels.functional.rprecision._pairs import _candidate_scores, _ranks
from beyondlabels.functional.rprecision._pool import _check_pool, _Pool
from beyondlabels.functional.rprecision._sets import CandidateSets, _rows_of
from beyondlabels.functional.rprecision.settings import check_candidate_sets, check_rprecision_settings
from beyondlabels.functional.search import normalize_rows

__all__ = ["fold_assignment", "text_image_r_precision"]


def fold_assignment(ids: Tensor, seed: int, folds: int) -> Tensor:
    """The fold (``0..folds−1``) of each sample under ``protocol="folds"``: samples ordered by a hash of
    ``(seed, id)`` (a bijection of the id, so no ties) and split into ``folds`` near-equal runs (sizes differ by <= 1).

    Examples:
        >>> f = fold_assignment(torch.arange(10), seed=0, folds=3)
        >>> torch.bincount(f).tolist(), torch.equal(fold_assignment(torch.arange(10).flip(0), 0, 3), f.flip(0))
        ([4, 3, 3], True)
    """
    check_positive_int(folds, "folds")
    perm = torch.argsort(_mix(_base_key(seed, -1, ids.device) ^ ids))
    out = torch.empty_like(perm)
    for j, part in enumerate(torch.tensor_split(perm, folds)):
        out[part] = j
    return out


def _fold_std(values: Tensor, fold: Tensor, n_folds: int) -> Tensor:
    """The ddof-0 standard deviation of the fold means of per-sample ``values`` (float64)."""
    return torch.stack([values[fold == j].mean() for j in range(n_folds)]).std(correction=0)


def text_image_r_precision(
    image_embeddings: Tensor,
    text_embeddings: Tensor,
    ids: Tensor | None = None,
    *,
    class_ids: Tensor | None = None,
    caption_codes: Tensor | None = None,
    num_candidates: int = 100,
    r: int = 1,
    top_r: Sequence[int] = (1, 5, 10),
    protocol: str = "folds",
    repeats: int = 10,
    seed: int = 0,
    near_duplicate_threshold: float | None = 0.8,
    hard_negatives: bool = False,
    candidate_sets: CandidateSets | None = None,
    chunk_size: int = 256,
) -> dict[str, Tensor | dict[str, Tensor]]:
    """R-precision of generated images against their prompts, both directions (definitions in the module docstring).

    Args:
        image_embeddings: Float ``[N, D]`` embeddings of the generated images.
        text_embeddings: Float ``[N, D]``; row ``i`` is the prompt of image ``i``.
        ids: Int ``[N]`` unique sample ids (default ``0..N−1``): the candidate draw is a function of them.
        class_ids: Optional int ``[N]``: same-class samples are never distractors.
        caption_codes: Optional int ``[N]`` codes of the caption strings: equal strings are never distractors.
        num_candidates: ``R`` (ground truth included).
        r: A hit is ``rank <= r`` for ``r_precision``, the text → image and the hard value; ``chance = r / R``.
        top_r: Cut-offs of ``r_precision@r``.
        protocol: ``"folds"`` or ``"resample"``.
        repeats: Folds, or draws.
        seed: Seed of the draws and of the fold shuffle.
        near_duplicate_threshold: Text cosine at or above which a caption is no distractor (None: off).
        hard_negatives: Also report ``hard_r_precision`` over the nearest eligible captions.
        candidate_sets: Pinned distractors (:class:`CandidateSets` covering exactly the samples' ids); only with
            ``protocol="folds"``.
        chunk_size: Queries per block of the draw and of the hard-negative search (results do not depend on it;
            hard negatives hold ``chunk_size × N`` scores at a time).

    Returns:
        The keys of :func:`~beyondlabels.functional.rprecision.rprecision_output_schema` (float64 values, int64 counts)
        and ``per_query`` with the per-sample vectors in ascending id order.

    Raises:
        ValueError: On bad embeddings (NaN, wrong shapes, mismatched row counts), ids, settings, or a pool too small
            for ``num_candidates`` after the exclusions.
    """
    top_r, threshold = check_rprecision_settings(
        num_candidates, r, top_r, protocol, repeats, seed, near_duplicate_threshold, chunk_size
    )
    check_candidate_sets(candidate_sets, protocol)
    img = _check_images(image_embeddings, text_embeddings)
    txt, sid, cls, cap, order = _check_pool(text_embeddings, ids, class_ids, caption_codes)
    img, pool, n, device = img[order], _Pool(sid, cls, cap), sid.shape[0], sid.device
    if candidate_sets is not None:
        draws = [(_rows_of(candidate_sets, sid, num_candidates), None)]
    else:
        reps = range(repeats) if protocol == "resample" else range(1)
        draws = _draw(txt, pool, num_candidates, seed, list(reps), threshold, chunk_size, img)
    i2t_ranks, t2i_ranks, i2t_scores = _ranked_draws(img, txt, draws)
    folds = (fold_assignment(sid, seed, min(repeats, n)), min(repeats, n)) if protocol == "folds" else None
    out, per_query = _rank_values(i2t_ranks, t2i_ranks, sid, r, top_r, folds)
    if hard_negatives:
        hard = _hard(txt, pool, num_candidates, threshold, chunk_size)
        hard_hit = (_ranks(_candidate_scores(img, txt, hard, "image_to_text")) <= r).to(torch.float64)
        out["hard_r_precision"] = hard_hit.mean()
        per_query["hard_r_precision"] = hard_hit
    cos = i2t_scores[0][:, 0].to(torch.float64).clamp(min=0)  # s(q, q)
    out["clip_score"] = 100.0 * cos.mean()
    out["clip_score_w2.5"] = 2.5 * cos.mean()
    per_query["clip_score"] = 100.0 * cos
    out["chance"] = torch.tensor(r / num_candidates, dtype=torch.float64, device=device)
    out["num_samples"] = torch.tensor(n, dtype=torch.long, device=device)
    out["num_candidates"] = torch.tensor(num_candidates, dtype=torch.long, device=device)
    cuts = torch.arange(1, num_candidates + 1, device=device)
    out["r_precision_curve"] = (i2t_ranks.unsqueeze(-1) <= cuts).to(torch.float64).mean(dim=1).mean(dim=0)
    out["per_query"] = per_query
    return out


def _check_images(image_embeddings: Tensor, text_embeddings: Tensor) -> Tensor:
    """The normalised image rows, after checking that the texts are one prompt per image, on the images' device."""
    img = normalize_rows(image_embeddings, "image_embeddings")
    if not isinstance(text_embeddings, Tensor) or text_embeddings.dim() != 2:
        normalize_rows(text_embeddings, "text_embeddings")  # raises the shape error
    if text_embeddings.shape[0] != img.shape[0]:
        raise ValueError(
            f"`image_embeddings` has {img.shape[0]} rows but `text_embeddings` has {text_embeddings.shape[0]}; row i "
            "of both must be one sample (an image and its prompt)."
        )
    check_same_space(
        img,
        "image_embeddings",
        text_embeddings,
        "text_embeddings",
        width="embed both with one evaluator",
        device="put them on one device",
    )
    return img


def _ranked_draws(
    img: Tensor, txt: Tensor, draws: list[tuple[Tensor, Tensor | None]]
) -> tuple[Tensor, Tensor, list[Tensor]]:
    """The ranks ``[draws, N]`` of each query's ground truth in both directions, and the image -> text scores of
    every draw (``draws``: the distractor rows of each draw and the image -> text scores its filter kept, or None)."""
    t2i_scores = [_candidate_scores(img, txt, d, "text_to_image") for d, _ in draws]
    # the draw's near-duplicate filter already scored the kept pairs image -> text; column 0, s(q, q), is shared
    i2t_scores = [
        _candidate_scores(img, txt, d, "image_to_text") if fused is None else torch.cat([t2i[:, :1], fused], dim=1)
        for (d, fused), t2i in zip(draws, t2i_scores)
    ]
    return torch.stack([_ranks(s) for s in i2t_scores]), torch.stack([_ranks(s) for s in t2i_scores]), i2t_scores


def _hit_rate(ranks: Tensor, cut: int, folds: tuple[Tensor, int] | None) -> tuple[Tensor, Tensor]:
    """The hit rate ``rank <= cut`` of ranks ``[draws, N]`` and its spread: the ddof-0 std of the fold means
    (``folds``: the fold of each sample and the number of folds, one draw) or of the draws' means (``folds`` None:
    resample)."""
    hits = (ranks <= cut).to(torch.float64)  # [draws, N]
    if folds is not None:
        return hits[0].mean(), _fold_std(hits[0], *folds)
    means = hits.mean(dim=1)
    return means.mean(), means.std(correction=0)


def _rank_values(
    i2t_ranks: Tensor, t2i_ranks: Tensor, sid: Tensor, r: int, top_r: Sequence[int], folds: tuple[Tensor, int] | None
) -> tuple[dict[str, Tensor | dict[str, Tensor]], dict[str, Tensor]]:
    """The R-precision keys of both directions (scalars in output order) and the per-sample vectors."""
    out: dict[str, Tensor | dict[str, Tensor]] = {}
    out["r_precision"], out["r_precision_std"] = _hit_rate(i2t_ranks, r, folds)
    for cut in top_r:
        out[f"r_precision@{cut}"] = _hit_rate(i2t_ranks, cut, folds)[0]
    out["text_to_image_r_precision"], out["text_to_image_r_precision_std"] = _hit_rate(t2i_ranks, r, folds)
    per_query: dict[str, Tensor] = {
        "query_id": sid,
        "r_precision": (i2t_ranks <= r).to(torch.float64).mean(dim=0),
        "rank": i2t_ranks[0].to(torch.float64),
        "text_to_image_r_precision": (t2i_ranks <= r).to(torch.float64).mean(dim=0),
    }
    return out, per_query
