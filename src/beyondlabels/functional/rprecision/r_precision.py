"""Text-to-image R-precision of a pool of samples, both directions, with its folds (definitions:
:mod:`beyondlabels.functional.rprecision`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_choice, check_positive_int, check_same_space, check_seed
from beyondlabels._internal.shares import share_span
from beyondlabels.functional.rprecision._draw import _draw, _hard
from beyondlabels.functional.rprecision._hash import _base_key, _mix
from beyondlabels.functional.rprecision._pairs import _candidate_scores, _ranks
from beyondlabels.functional.rprecision._pool import _check_pool, _Pool
from beyondlabels.functional.rprecision._sets import CandidateSets, _rows_of
from beyondlabels.functional.rprecision.settings import (
    PROTOCOLS,
    check_candidate_sets,
    check_rprecision_settings,
    check_threshold,
    check_top_r,
)
from beyondlabels.functional.search import normalize_rows

__all__ = [
    "aggregate_rprecision",
    "fold_assignment",
    "rprecision_per_query",
    "text_image_r_precision",
]


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
    top_r, _ = check_rprecision_settings(
        num_candidates, r, top_r, protocol, repeats, seed, near_duplicate_threshold, chunk_size
    )
    rows = rprecision_per_query(
        image_embeddings,
        text_embeddings,
        ids,
        class_ids=class_ids,
        caption_codes=caption_codes,
        num_candidates=num_candidates,
        protocol=protocol,
        repeats=repeats,
        seed=seed,
        near_duplicate_threshold=near_duplicate_threshold,
        hard_negatives=hard_negatives,
        candidate_sets=candidate_sets,
        chunk_size=chunk_size,
    )
    return aggregate_rprecision(
        rows, num_candidates=num_candidates, r=r, top_r=top_r, protocol=protocol, repeats=repeats, seed=seed
    )


def rprecision_per_query(
    image_embeddings: Tensor,
    text_embeddings: Tensor,
    ids: Tensor | None = None,
    *,
    class_ids: Tensor | None = None,
    caption_codes: Tensor | None = None,
    num_candidates: int = 100,
    protocol: str = "folds",
    repeats: int = 10,
    seed: int = 0,
    near_duplicate_threshold: float | None = 0.8,
    hard_negatives: bool = False,
    candidate_sets: CandidateSets | None = None,
    chunk_size: int = 256,
    share: tuple[int, int] | None = None,
) -> dict[str, Tensor]:
    """The per-query rows of the queries of ``share``, the input of :func:`aggregate_rprecision`.

    Arguments are those of :func:`text_image_r_precision` (without ``r`` and ``top_r``, which only aggregation reads),
    plus ``share=(i, n)``: only the queries at pool positions ``i·N // n`` to ``(i + 1)·N // n − 1`` (the i-th of n
    contiguous near-equal runs of the id-ordered pool). Every query is drawn, scored and ranked against the whole
    pool, so a query's rows do not depend on the share; concatenating the rows of shares ``0, 1, ..., n − 1`` (key by
    key) gives the rows of one call, and aggregating them the values of :func:`text_image_r_precision`, bit for bit.

    Returns:
        In ascending id order, one row per query of the share: ``query_id`` (int64 ``[c]``), ``image_to_text_ranks``
        and ``text_to_image_ranks`` (int64 ``[c, draws]``: the ground truth's rank in each draw),
        ``ground_truth_score`` (fp32 ``[c]``: ``s(q, q)``) and, with ``hard_negatives``, ``hard_rank`` (int64 ``[c]``).

    Raises:
        ValueError: As :func:`text_image_r_precision`; a pool too small for some query is reported for the smallest
            such id of the share.
    """
    for value, name in ((num_candidates, "num_candidates"), (repeats, "repeats"), (chunk_size, "chunk_size")):
        check_positive_int(value, name)
    check_choice(protocol, "protocol", PROTOCOLS)
    check_seed(seed)
    threshold = check_threshold(near_duplicate_threshold)
    check_candidate_sets(candidate_sets, protocol)
    img = _check_images(image_embeddings, text_embeddings)
    txt, sid, cls, cap, order = _check_pool(text_embeddings, ids, class_ids, caption_codes)
    img, pool = img[order], _Pool(sid, cls, cap)
    lo, hi = share_span(pool.n, share)
    if candidate_sets is not None:
        draws = [(_rows_of(candidate_sets, sid, num_candidates)[lo:hi], None)]
    else:
        reps = range(repeats) if protocol == "resample" else range(1)
        draws = _draw(txt, pool, num_candidates, seed, list(reps), threshold, chunk_size, img, (lo, hi))
    i2t_ranks, t2i_ranks, i2t_scores = _ranked_draws(img, txt, draws, lo)
    rows = {
        "query_id": sid[lo:hi],
        "image_to_text_ranks": i2t_ranks.T.contiguous(),
        "text_to_image_ranks": t2i_ranks.T.contiguous(),
        "ground_truth_score": i2t_scores[0][:, 0].contiguous(),  # s(q, q)
    }
    if hard_negatives:
        hard = _hard(txt, pool, num_candidates, threshold, chunk_size, (lo, hi))
        rows["hard_rank"] = _ranks(_candidate_scores(img, txt, hard, "image_to_text", lo))
    return rows


def aggregate_rprecision(
    rows: Mapping[str, Tensor],
    *,
    num_candidates: int = 100,
    r: int = 1,
    top_r: Sequence[int] = (1, 5, 10),
    protocol: str = "folds",
    repeats: int = 10,
    seed: int = 0,
) -> dict[str, Tensor | dict[str, Tensor]]:
    """The values of :func:`text_image_r_precision` from every query's rows of :func:`rprecision_per_query`, in
    ascending id order (the shares' rows concatenated in share order), with the settings given to it.

    ``hard_r_precision`` is reported when the rows hold ``hard_rank``.
    """
    top_r = check_top_r(top_r, check_positive_int(r, "r"), check_positive_int(num_candidates, "num_candidates"))
    check_choice(protocol, "protocol", PROTOCOLS)
    sid = rows["query_id"]
    n, device = sid.shape[0], sid.device
    i2t_ranks = rows["image_to_text_ranks"].T.contiguous()  # [draws, N]
    t2i_ranks = rows["text_to_image_ranks"].T.contiguous()
    folds = (fold_assignment(sid, seed, min(repeats, n)), min(repeats, n)) if protocol == "folds" else None
    out, per_query = _rank_values(i2t_ranks, t2i_ranks, sid, r, top_r, folds)
    if "hard_rank" in rows:
        hard_hit = (rows["hard_rank"] <= r).to(torch.float64)
        out["hard_r_precision"] = hard_hit.mean()
        per_query["hard_r_precision"] = hard_hit
    cos = rows["ground_truth_score"].to(torch.float64).clamp(min=0)  # s(q, q)
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
    img: Tensor, txt: Tensor, draws: list[tuple[Tensor, Tensor | None]], first: int = 0
) -> tuple[Tensor, Tensor, list[Tensor]]:
    """The ranks ``[draws, c]`` of each query's ground truth in both directions, and the image -> text scores of
    every draw (``draws``: the distractor rows of each draw and the image -> text scores its filter kept, or None),
    for the ``c`` queries at pool positions ``first, first + 1, ...``."""
    t2i_scores = [_candidate_scores(img, txt, d, "text_to_image", first) for d, _ in draws]
    # the draw's near-duplicate filter already scored the kept pairs image -> text; column 0, s(q, q), is shared
    i2t_scores = [
        _candidate_scores(img, txt, d, "image_to_text", first)
        if fused is None
        else torch.cat([t2i[:, :1], fused], dim=1)
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
