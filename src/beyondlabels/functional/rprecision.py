"""Text-to-image R-precision: each generated image against its own prompt and R−1 distractor captions.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning. Definitions (stated
once here; the metric, the callback and ``evaluate.py task=rprecision`` refer to them):

Samples
    Row ``i`` of ``image_embeddings`` is the image generated from the prompt whose embedding is row ``i`` of
    ``text_embeddings``; ``ids[i]`` is the sample's global id (unique). Every computation first orders the samples by
    id, so results never depend on the order or the batches in which samples arrive.

Candidates
    ``R = num_candidates`` (default 100: 1 ground truth + 99 distractors, as AttnGAN / DM-GAN / CLIP-R-precision).
    The distractors of sample ``q`` are captions of *other* samples, drawn without replacement, never

    - ``q`` itself,
    - a sample of the same class when ``class_ids`` are given (CUB-style),
    - a sample whose caption is the same string (``caption_codes`` equal, see
      :func:`~beyondlabels.functional.labels.encode_labels`),
    - with ``near_duplicate_threshold=t`` (default 0.8; None: off) a sample whose text embedding has cosine ``>= t``
      with ``q``'s (a near-duplicate would leak the answer).

    Uniform draw: every pair of ids ``(q, j)`` gets a 64-bit key, a hash of ``(seed, repeat, q, j)``; the distractors of
    ``q`` are its ``R − 1`` eligible samples of smallest key (the key is a bijection of ``j`` for fixed ``q``: no ties). The sets are thus a pure function of
    ``(seed, repeat, the ids of the pool)`` — the same on any world size, batch size or input order — and can be
    saved and loaded (:func:`save_candidate_sets`, :func:`load_candidate_sets`) to pin a paper's protocol.
    Hard negatives (``hard_negatives=True``): the ``R − 1`` eligible samples whose text embeddings are nearest to
    ``q``'s (descending cosine, ties: smaller id); reported under their own key ``hard_r_precision``.
    Fewer than ``R − 1`` eligible samples for some query raises a ``ValueError`` naming the count.

Scores and the tie rule
    The cosine of L2-normalised fp32 embeddings (one similarity ``s(i, t) = <image_i, text_t>``). The rank of the
    ground truth is ``1 + #{distractors d : s_d >= s_gt}``: a hit at ``r`` (``rank <= r``) needs the ground truth
    **strictly** above all but ``r − 1`` distractors, so a tie counts as a miss. (DM-GAN's ``argmax`` counts a tie with
    an earlier-indexed ground truth as a hit; its numbers can be higher on tied scores.) The top-r curve
    ``r_precision_curve[r − 1] = mean(rank <= r)``, ``r = 1..R``, comes from the same scores.

Directions
    Image → text (the standard, ``r_precision``): image ``q`` against caption ``q`` and the captions of its
    distractor samples. Text → image (``text_to_image_r_precision``): prompt ``q`` against image ``q`` and the
    generated images of the same distractor samples. Both read the one similarity ``s``.

Aggregation
    ``protocol="folds"`` (DM-GAN / Comp-T2I): one draw (``repeat = 0``); the value is the mean hit over all samples
    and ``*_std`` the standard deviation (ddof = 0) of the fold means, the hits shuffled with the seed (order of a hash
    of ``(seed, id)``) and split into ``min(repeats, N)`` near-equal folds (:func:`fold_assignment`). With equal folds
    (``N`` divisible by ``repeats``) the value is DM-GAN's mean of the fold means; otherwise that mean weights the
    samples of smaller folds more, and this one does not. ``protocol="resample"`` (DALL-Eval): ``repeats`` draws
    (``repeat = 0..repeats − 1``); value and std over the draws' means. ``r_precision@r`` and the text → image value
    aggregate the same way; the curve and per-sample values average over the draws.

Per-sample values
    ``per_query`` holds, in ascending id order, ``query_id``, ``r_precision`` (the sample's hit, averaged over the
    draws), ``rank`` (its caption's rank in the first draw), ``text_to_image_r_precision``, ``hard_r_precision`` (when
    on) and ``clip_score``; the mean of each is the scalar of the same name.

Other keys
    ``chance = r / R`` (the expected value of random embeddings), ``clip_score = 100 · mean(max(cos(image_i,
    text_i), 0))`` (torchmetrics' CLIPScore scale) and ``clip_score_w2.5 = 2.5 · mean(max(cos, 0))`` (Hessel et al.'s
    CLIP-S with w = 2.5), ``num_samples``, ``num_candidates``.

Example:
    >>> texts = torch.eye(4)
    >>> out = text_image_r_precision(texts.clone(), texts, torch.arange(4), num_candidates=3, top_r=(1, 2), repeats=2)
    >>> out["r_precision"].item(), out["chance"].item(), out["clip_score"].item()
    (1.0, 0.3333333333333333, 100.0)
    >>> text_image_r_precision(torch.ones(2, 2), torch.ones(2, 2), num_candidates=2, top_r=(1,),
    ...                        repeats=1, near_duplicate_threshold=None)["r_precision"].item()  # a tie is a miss
    0.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from beyondlabels.functional.search import _check_positive_int, _scores, normalize_rows
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "CandidateSets",
    "draw_candidate_sets",
    "fold_assignment",
    "candidate_scores",
    "load_candidate_sets",
    "rprecision_output_schema",
    "save_candidate_sets",
    "text_image_r_precision",
]

PROTOCOLS = ("folds", "resample")
_M1 = 0xBF58476D1CE4E5B9 - 2**64
_M2 = 0x94D049BB133111EB - 2**64
_GOLDEN = 0x9E3779B97F4A7C15 - 2**64
_INT64_MAX = torch.iinfo(torch.int64).max


def _shr(x: Tensor, s: int) -> Tensor:
    """Logical right shift of int64 ``x`` by ``s`` bits."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix(x: Tensor) -> Tensor:
    """The splitmix64 finaliser on int64 tensors (wrapping arithmetic): a bijection that scrambles every bit."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


def _base_key(seed: int, repeat: int, device: torch.device) -> Tensor:
    seed_t = torch.tensor(seed, dtype=torch.long, device=device)
    repeat_t = torch.tensor(repeat, dtype=torch.long, device=device)
    return _mix(_mix(seed_t) ^ _mix(repeat_t * _GOLDEN + 1))


@dataclass(frozen=True)
class CandidateSets:
    """Distractors per query: ``distractor_ids[i]`` are the ``R − 1`` sample ids drawn for query ``query_ids[i]``.

    Attributes:
        query_ids: int64 ``[N]`` query sample ids, ascending.
        distractor_ids: int64 ``[N, R − 1]`` distractor sample ids.
    """

    query_ids: Tensor
    distractor_ids: Tensor

    @property
    def num_candidates(self) -> int:
        return self.distractor_ids.shape[1] + 1


def save_candidate_sets(sets: CandidateSets, path: str | Path) -> None:
    """Write candidate sets to an ``.npz`` (arrays ``query_ids``, ``distractor_ids``) to pin a protocol.

    Example:
        >>> import tempfile, os
        >>> s = CandidateSets(torch.tensor([0, 1]), torch.tensor([[1], [0]]))
        >>> p = os.path.join(tempfile.mkdtemp(), "sets.npz"); save_candidate_sets(s, p)
        >>> load_candidate_sets(p).distractor_ids.tolist()
        [[1], [0]]
    """
    np.savez(path, query_ids=sets.query_ids.cpu().numpy(), distractor_ids=sets.distractor_ids.cpu().numpy())


def load_candidate_sets(path: str | Path) -> CandidateSets:
    """Read candidate sets written by :func:`save_candidate_sets`.

    Raises:
        ValueError: if the file lacks ``query_ids`` / ``distractor_ids`` or their shapes do not fit.
    """
    with np.load(path) as data:
        if "query_ids" not in data or "distractor_ids" not in data:
            raise ValueError(f"`path` {path} holds {sorted(data.files)}; candidate sets need `query_ids` and `distractor_ids`.")
        q, d = torch.from_numpy(data["query_ids"]).long(), torch.from_numpy(data["distractor_ids"]).long()
    if q.dim() != 1 or d.dim() != 2 or d.shape[0] != q.shape[0]:
        raise ValueError(f"`path` {path}: `query_ids` {tuple(q.shape)} and `distractor_ids` {tuple(d.shape)} must be [N] and [N, R-1].")
    return CandidateSets(q, d)


# ----------------------------------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------------------------------


def _check_vector(x: object, name: str, n: int, device: torch.device) -> Tensor:
    if not isinstance(x, Tensor) or x.dim() != 1 or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        got = f"{tuple(x.shape)} {x.dtype}" if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"`{name}` must be a 1-D integer tensor with one entry per sample, got {got}.")
    if x.shape[0] != n:
        raise ValueError(f"`{name}` has {x.shape[0]} entries but there are {n} samples (embedding rows); they must match.")
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
        raise ValueError(f"`ids` contains duplicates {ids[1:][ids[1:] == ids[:-1]][:5].tolist()}; deduplicate the samples first.")
    if class_ids is not None:
        class_ids = _check_vector(class_ids, "class_ids", n, device)[order]
    if caption_codes is not None:
        caption_codes = _check_vector(caption_codes, "caption_codes", n, device)[order]
    return txt[order], ids, class_ids, caption_codes, order


def _check_threshold(t: object) -> float | None:
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not -1.0 <= float(t) <= 1.0:
        raise ValueError(f"`near_duplicate_threshold` must be a cosine in [-1, 1] or None (off), got {t!r}.")
    return float(t)


# ----------------------------------------------------------------------------------------------------------------------
# candidate sets
# ----------------------------------------------------------------------------------------------------------------------


def _draw(
    txt: Tensor,
    ids: Tensor,
    class_ids: Tensor | None,
    caption_codes: Tensor | None,
    num_candidates: int,
    seed: int,
    repeats: Sequence[int],
    threshold: float | None,
    hard: bool,
    chunk_size: int,
) -> list[Tensor]:
    """Distractor *rows* ``[N, R − 1]`` (into the id-ordered pool) per repeat, or one set of hard negatives."""
    n, device = ids.shape[0], ids.device
    k = num_candidates - 1
    if k > n - 1:
        raise ValueError(
            f"`num_candidates` {num_candidates} needs {k} distractors but the pool has only {n} samples ({n - 1} others); "
            f"lower `num_candidates` to at most {n} or evaluate more samples."
        )
    out: list[list[Tensor]] = [[] for _ in (["hard"] if hard else repeats)]
    bases = [_base_key(seed, r, device) for r in repeats]
    id_keys = ids * _GOLDEN
    fewest = (n, -1)
    for start in range(0, n, chunk_size):
        rows = torch.arange(start, min(start + chunk_size, n), device=device)
        eligible = torch.ones(rows.numel(), n, dtype=torch.bool, device=device)
        eligible[torch.arange(rows.numel(), device=device), rows] = False
        if class_ids is not None:
            eligible &= class_ids[rows].unsqueeze(1) != class_ids.unsqueeze(0)
        if caption_codes is not None:
            eligible &= caption_codes[rows].unsqueeze(1) != caption_codes.unsqueeze(0)
        sims = _scores(txt[rows], txt) if (threshold is not None or hard) else None
        if threshold is not None:
            eligible &= sims < threshold
        counts = eligible.sum(dim=1)
        low = int(counts.argmin())
        if int(counts[low]) < fewest[0]:
            fewest = (int(counts[low]), int(ids[rows[low]]))
        if fewest[0] < k:
            continue
        if hard:
            masked = sims.masked_fill(~eligible, float("-inf"))
            out[0].append(torch.sort(masked, dim=1, descending=True, stable=True).indices[:, :k])
            continue
        for slot, base in enumerate(bases):
            keys = _mix(_mix(base ^ ids[rows]).unsqueeze(1) ^ id_keys.unsqueeze(0))
            keys = keys.masked_fill(~eligible, _INT64_MAX)
            # keys of distinct ids are distinct (every step is a bijection of the id): the k smallest are exact
            out[slot].append(torch.topk(keys, k, dim=1, largest=False, sorted=True).indices)
    if fewest[0] < k:
        raise ValueError(
            f"sample id {fewest[1]} has only {fewest[0]} eligible distractors but `num_candidates` {num_candidates} needs "
            f"{k} (exclusions: itself, same class, same caption, near-duplicates at cosine >= {threshold}); lower "
            "`num_candidates`, raise or turn off `near_duplicate_threshold` (None), or evaluate more samples."
        )
    return [torch.cat(parts) if parts else torch.empty(0, k, dtype=torch.long, device=device) for parts in out]


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
        seed, repeat: The draw (``repeat`` numbers the redraws of ``protocol="resample"``).
        class_ids, caption_codes: Optional int ``[N]``: same-class and same-caption samples are never distractors.
        near_duplicate_threshold: Cosine at or above which a caption is no distractor (None: off).
        hard_negatives: Nearest eligible captions instead of a seeded draw.
        chunk_size: Queries per block (memory ``chunk_size × N``).

    Returns:
        :class:`CandidateSets` in ascending id order.

    Example:
        >>> t = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
        >>> a = draw_candidate_sets(t, torch.arange(6), num_candidates=3, near_duplicate_threshold=None)
        >>> b = draw_candidate_sets(t.flip(0), torch.arange(6).flip(0), num_candidates=3, near_duplicate_threshold=None)
        >>> torch.equal(a.distractor_ids, b.distractor_ids), a.distractor_ids.shape
        (True, torch.Size([6, 2]))
    """
    _check_positive_int(num_candidates, "num_candidates")
    _check_positive_int(chunk_size, "chunk_size")
    txt, sid, cls, cap, _ = _check_pool(text_embeddings, ids, class_ids, caption_codes)
    rows = _draw(txt, sid, cls, cap, num_candidates, int(seed), [int(repeat)], _check_threshold(near_duplicate_threshold), bool(hard_negatives), chunk_size)[0]
    return CandidateSets(sid, sid[rows])


def _rows_of(sets: CandidateSets, ids: Tensor, num_candidates: int) -> Tensor:
    """Distractor rows (into the id-ordered pool ``ids``) of given candidate sets, validated against the pool."""
    q, d = sets.query_ids.to(ids.device), sets.distractor_ids.to(ids.device)
    if d.shape[1] != num_candidates - 1:
        raise ValueError(f"`candidate_sets` hold {d.shape[1] + 1} candidates per query but `num_candidates` is {num_candidates}; make them agree.")
    order = torch.argsort(q)
    q, d = q[order], d[order]
    if q.shape[0] != ids.shape[0] or not torch.equal(q, ids):
        raise ValueError(f"`candidate_sets` cover {q.shape[0]} query ids but the pool has {ids.shape[0]}; they must name exactly the pool's sample ids.")
    pos = torch.searchsorted(ids, d).clamp_(max=ids.shape[0] - 1)
    if not bool((ids[pos] == d).all()):
        raise ValueError(f"`candidate_sets` name distractor ids {d[ids[pos] != d][:5].tolist()} that are not in the pool.")
    if bool((d == q.unsqueeze(1)).any()):
        raise ValueError("`candidate_sets` list a query's own id among its distractors.")
    return pos


# ----------------------------------------------------------------------------------------------------------------------
# scoring
# ----------------------------------------------------------------------------------------------------------------------


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise dot products ``[..., D] · [..., D]`` (an elementwise product summed: the same per pair whatever the batch)."""
    return (a * b).sum(dim=-1)


def candidate_scores(image_embeddings: Tensor, text_embeddings: Tensor, rows: Tensor, direction: str = "image_to_text", chunk_size: int = 256) -> Tensor:
    """Scores ``[N, R]`` of each query's candidates: column 0 the ground truth, then the distractors ``rows[q]``.

    ``direction="image_to_text"``: ``s(q, q), s(q, rows[q, 0]), ...``; ``"text_to_image"``: ``s(q, q), s(rows[q, 0], q),
    ...`` with ``s(i, t)`` the cosine of image ``i`` and text ``t`` (inputs in pool order; rows index the pool).

    Example:
        >>> candidate_scores(torch.eye(2), torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[1], [0]]))
        tensor([[1.0000, 0.7071],
                [0.7071, 0.0000]])
    """
    img = normalize_rows(image_embeddings, "image_embeddings")
    txt = normalize_rows(text_embeddings, "text_embeddings")
    if direction not in ("image_to_text", "text_to_image"):
        raise ValueError(f"`direction` must be 'image_to_text' or 'text_to_image', got {direction!r}.")
    return _candidate_scores(img, txt, rows, direction, chunk_size)


def _candidate_scores(img: Tensor, txt: Tensor, rows: Tensor, direction: str, chunk_size: int) -> Tensor:
    queries, gallery = (img, txt) if direction == "image_to_text" else (txt, img)
    parts = []
    for start in range(0, img.shape[0], chunk_size):
        sl = slice(start, start + chunk_size)
        gt = _dot(img[sl], txt[sl]).unsqueeze(1)
        dis = _dot(queries[sl].unsqueeze(1), gallery[rows[sl]])
        parts.append(torch.cat([gt, dis], dim=1))
    return torch.cat(parts)


def _ranks(scores: Tensor) -> Tensor:
    """1-based rank of column 0 with ties counted against it (the strict rule)."""
    return 1 + (scores[:, 1:] >= scores[:, :1]).sum(dim=1)


# ----------------------------------------------------------------------------------------------------------------------
# the metric
# ----------------------------------------------------------------------------------------------------------------------


def rprecision_output_schema(top_r: Sequence[int] = (1, 5, 10), hard_negatives: bool = False) -> OutputSchema:
    """The output schema of :func:`text_image_r_precision`.

    Example:
        >>> s = rprecision_output_schema((1, 5), hard_negatives=True)
        >>> s["r_precision@5"].higher_is_better, s["chance"].higher_is_better, s["num_samples"].count
        (True, None, True)
        >>> s["r_precision_curve"].kind, sorted(s.per_query)
        ('curve', ['clip_score', 'hard_r_precision', 'query_id', 'r_precision', 'rank', 'text_to_image_r_precision'])
    """
    up, none = KeySpec("scalar", True), KeySpec("scalar", None)
    keys = {"r_precision": up, "r_precision_std": none}
    keys.update({f"r_precision@{r}": up for r in sorted(set(top_r))})
    keys["text_to_image_r_precision"] = up
    keys["text_to_image_r_precision_std"] = none
    if hard_negatives:
        keys["hard_r_precision"] = up
    keys.update({"clip_score": up, "clip_score_w2.5": up, "chance": none})
    keys.update({"num_samples": KeySpec("scalar", None, count=True), "num_candidates": KeySpec("scalar", None, count=True)})
    keys["r_precision_curve"] = KeySpec("curve", True)
    per_query = {
        "query_id": KeySpec("per_query", None),
        "r_precision": KeySpec("per_query", True),
        "rank": KeySpec("per_query", False),
        "text_to_image_r_precision": KeySpec("per_query", True),
        "clip_score": KeySpec("per_query", True),
    }
    if hard_negatives:
        per_query["hard_r_precision"] = KeySpec("per_query", True)
    return OutputSchema(keys, per_query)


def _check_top_r(top_r: object, r: int, num_candidates: int) -> tuple[int, ...]:
    if isinstance(top_r, int) and not isinstance(top_r, bool):
        top_r = (top_r,)
    if not isinstance(top_r, Sequence) or isinstance(top_r, str) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in top_r):
        raise ValueError(f"`top_r` must be a sequence of positive ints, got {top_r!r}.")
    too_big = [v for v in (*top_r, r) if v > num_candidates]
    if too_big:
        raise ValueError(f"`top_r` / `r` values {too_big} exceed `num_candidates` {num_candidates}; a rank is at most R.")
    return tuple(sorted(set(top_r)))


def fold_assignment(ids: Tensor, seed: int, folds: int) -> Tensor:
    """The fold (``0..folds−1``) of each sample under ``protocol="folds"``: samples ordered by a hash of
    ``(seed, id)`` (a bijection of the id, so no ties) and split into ``folds`` near-equal runs (sizes differ by <= 1).

    Example:
        >>> f = fold_assignment(torch.arange(10), seed=0, folds=3)
        >>> torch.bincount(f).tolist(), torch.equal(fold_assignment(torch.arange(10).flip(0), 0, 3), f.flip(0))
        ([4, 3, 3], True)
    """
    _check_positive_int(folds, "folds")
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
        chunk_size: Queries per block.

    Returns:
        The keys of :func:`rprecision_output_schema` (float64 values, int64 counts) and ``per_query`` with the
        per-sample vectors in ascending id order.

    Raises:
        ValueError: On bad embeddings (NaN, wrong shapes, mismatched row counts), ids, settings, or a pool too small
            for ``num_candidates`` after the exclusions.
    """
    _check_positive_int(num_candidates, "num_candidates")
    _check_positive_int(r, "r")
    _check_positive_int(repeats, "repeats")
    _check_positive_int(chunk_size, "chunk_size")
    top_r = _check_top_r(top_r, r, num_candidates)
    if protocol not in PROTOCOLS:
        raise ValueError(f"`protocol` must be one of {PROTOCOLS}, got {protocol!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an int, got {seed!r}.")
    threshold = _check_threshold(near_duplicate_threshold)
    img = normalize_rows(image_embeddings, "image_embeddings")
    if not isinstance(text_embeddings, Tensor) or text_embeddings.dim() != 2:
        normalize_rows(text_embeddings, "text_embeddings")  # raises the shape error
    if text_embeddings.shape[0] != img.shape[0]:
        raise ValueError(
            f"`image_embeddings` has {img.shape[0]} rows but `text_embeddings` has {text_embeddings.shape[0]}; row i of "
            "both must be one sample (an image and its prompt)."
        )
    if text_embeddings.shape[1] != img.shape[1]:
        raise ValueError(f"`image_embeddings` has dimension {img.shape[1]} but `text_embeddings` has {text_embeddings.shape[1]}; embed both with one evaluator.")
    if text_embeddings.device != img.device:
        raise ValueError(f"`text_embeddings` is on {text_embeddings.device} but `image_embeddings` on {img.device}; put them on one device.")
    txt, sid, cls, cap, order = _check_pool(text_embeddings, ids, class_ids, caption_codes)
    img = img[order]
    n, device = sid.shape[0], sid.device

    if candidate_sets is not None:
        if protocol != "folds":
            raise ValueError("`candidate_sets` pin one draw; use them with `protocol='folds'` (resample redraws).")
        draws = [_rows_of(candidate_sets, sid, num_candidates)]
    else:
        reps = range(repeats) if protocol == "resample" else range(1)
        draws = _draw(txt, sid, cls, cap, num_candidates, seed, list(reps), threshold, False, chunk_size)

    i2t_ranks = torch.stack([_ranks(_candidate_scores(img, txt, d, "image_to_text", chunk_size)) for d in draws])
    t2i_ranks = torch.stack([_ranks(_candidate_scores(img, txt, d, "text_to_image", chunk_size)) for d in draws])
    f64 = torch.float64

    def aggregate(ranks: Tensor, cut: int) -> tuple[Tensor, Tensor]:
        hits = (ranks <= cut).to(f64)  # [draws, N]
        if protocol == "folds":
            n_folds = min(repeats, n)
            return hits[0].mean(), _fold_std(hits[0], fold_assignment(sid, seed, n_folds), n_folds)
        means = hits.mean(dim=1)
        return means.mean(), means.std(correction=0)

    out: dict[str, Tensor | dict[str, Tensor]] = {}
    out["r_precision"], out["r_precision_std"] = aggregate(i2t_ranks, r)
    for cut in top_r:
        out[f"r_precision@{cut}"] = aggregate(i2t_ranks, cut)[0]
    out["text_to_image_r_precision"], out["text_to_image_r_precision_std"] = aggregate(t2i_ranks, r)
    per_query: dict[str, Tensor] = {
        "query_id": sid,
        "r_precision": (i2t_ranks <= r).to(f64).mean(dim=0),
        "rank": i2t_ranks[0].to(f64),
        "text_to_image_r_precision": (t2i_ranks <= r).to(f64).mean(dim=0),
    }
    if hard_negatives:
        hard = _draw(txt, sid, cls, cap, num_candidates, seed, [0], threshold, True, chunk_size)[0]
        hard_hit = (_ranks(_candidate_scores(img, txt, hard, "image_to_text", chunk_size)) <= r).to(f64)
        out["hard_r_precision"] = hard_hit.mean()
        per_query["hard_r_precision"] = hard_hit
    cos = _dot(img, txt).to(f64).clamp(min=0)
    out["clip_score"] = 100.0 * cos.mean()
    out["clip_score_w2.5"] = 2.5 * cos.mean()
    per_query["clip_score"] = 100.0 * cos
    out["chance"] = torch.tensor(r / num_candidates, dtype=f64, device=device)
    out["num_samples"] = torch.tensor(n, dtype=torch.long, device=device)
    out["num_candidates"] = torch.tensor(num_candidates, dtype=torch.long, device=device)
    cuts = torch.arange(1, num_candidates + 1, device=device)
    out["r_precision_curve"] = (i2t_ranks.unsqueeze(-1) <= cuts).to(f64).mean(dim=1).mean(dim=0)
    out["per_query"] = per_query
    return out
