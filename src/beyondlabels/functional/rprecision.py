"""Text-to-image R-precision: each generated image against its own prompt and R−1 distractor captions.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning. Definitions (stated
once here; the metric, the callback and ``evaluate.py task=rprecision`` refer to them); their properties and the
comparison with published protocols are in ``docs/rprecision.md``:

Samples
    Row ``i`` of ``image_embeddings`` is the image generated from the prompt whose embedding is row ``i`` of
    ``text_embeddings``; ``ids[i]`` is the sample's global id (unique). Every computation first orders the samples by
    id (the *pool*, positions ``0..N−1``), so results never depend on the order or the batches in which samples
    arrive.

Scores
    ``s(i, t)``, the score of image ``i`` and text ``t``, is the core's Score (:mod:`beyondlabels.functional.search`):
    the fp32 product of the L2-normalised rows, image on the left; a pair gets the same bits whatever the blocking,
    the candidate set, the direction or the chunk size. Text-to-text scores (near-duplicates, hard negatives) are the
    Score of ``(text_q, text_j)``, query ``q`` on the left.

Candidates
    ``R = num_candidates`` (default 100: 1 ground truth + 99 distractors, as AttnGAN / DM-GAN / CLIP-R-precision).
    A sample ``j`` is an *eligible* distractor of sample ``q`` unless

    - ``j`` is ``q`` itself,
    - ``j`` has ``q``'s class when ``class_ids`` are given (CUB-style),
    - ``j`` has ``q``'s caption string (``caption_codes`` equal, see
      :func:`~beyondlabels.functional.labels.encode_labels`),
    - with ``near_duplicate_threshold=t`` (default 0.8; None: off) the text score of ``(q, j)`` is ``>= t`` (a
      near-duplicate would leak the answer).

    Seeded draw: the *space* of ``q`` is the ``M_q`` samples of other classes (all ``N`` samples without
    ``class_ids``) in ascending id order. For ``j = 0, 1, 2, ...`` the draw takes the sample at position
    ``u_j = (h_j mod 2**63) mod M_q`` of the space, where ``h_j = mix(mix(base ^ q) + (j + 1)·γ)`` is the ``j``-th
    output of splitmix64 seeded with ``mix(base ^ q)`` (``mix``: splitmix64's finaliser, ``γ = 0x9E3779B97F4A7C15``,
    ``base = mix(mix(seed) ^ mix(repeat·γ + 1))``, all modulo ``2**64``, ``q`` the query's id); it keeps the sample
    when it is eligible and not kept before, and stops at ``R − 1`` kept: the distractors in the order drawn. The sets
    are a pure function of ``(seed, repeat, the ids [and class ids, caption codes, text embeddings] of the pool)``;
    :class:`CandidateSets` pin them (files: :mod:`beyondlabels.io.candidate_sets`).
    Hard negatives (``hard_negatives=True``): the ``R − 1`` eligible samples of highest text score with ``q``, equal
    scores ordered by smaller id, also across the ``(R − 1)``-th place; reported under their own key
    ``hard_r_precision``.
    Fewer than ``R − 1`` eligible samples for some query raises a ``ValueError`` naming one such query (the same
    one whatever the chunk size) and its exact count.

The tie rule
    The rank of the ground truth is ``1 + #{distractors d : s_d >= s_gt}``: a hit at ``r`` (``rank <= r``) needs the
    ground truth **strictly** above all but ``r − 1`` distractors, so a tie counts as a miss. The top-r curve
    ``r_precision_curve[r − 1] = mean(rank <= r)``, ``r = 1..R``, comes from the same scores.

Directions
    Image → text (the standard, ``r_precision``): image ``q`` against caption ``q`` and the captions of its
    distractor samples. Text → image (``text_to_image_r_precision``): prompt ``q`` against image ``q`` and the
    generated images of the same distractor samples. Both read the one similarity ``s``.

Aggregation
    ``protocol="folds"`` (DM-GAN / Comp-T2I): one draw (``repeat = 0``); the value is the mean hit over all samples
    and ``*_std`` the standard deviation (ddof = 0) of the fold means, the hits shuffled with the seed (order of a hash
    of ``(seed, id)``) and split into ``min(repeats, N)`` near-equal folds (:func:`fold_assignment`).
    ``protocol="resample"`` (DALL-Eval): ``repeats`` draws (``repeat = 0..repeats − 1``); value and std over the
    draws' means. ``r_precision@r`` and the text → image value aggregate the same way; the curve and per-sample
    values average over the draws.

Per-sample values
    ``per_query`` holds, in ascending id order, ``query_id``, ``r_precision`` (the sample's hit, averaged over the
    draws), ``rank`` (its caption's rank in the first draw), ``text_to_image_r_precision``, ``hard_r_precision`` (when
    on) and ``clip_score``; the mean of each is the scalar of the same name.

Other keys
    ``chance = r / R`` (the expected value of random embeddings), ``clip_score = 100 · mean(max(s(i, i), 0))``
    (torchmetrics' CLIPScore scale) and ``clip_score_w2.5 = 2.5 · mean(max(s(i, i), 0))`` (Hessel et al.'s CLIP-S
    with w = 2.5), ``num_samples``, ``num_candidates``.

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

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_choice, check_int, check_number, check_positive_int, check_seed, is_int
from beyondlabels.functional._topk import MIN_BLOCK, Workspace, exact_topk, score_block
from beyondlabels.functional.search import normalize_rows
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "PROTOCOLS",
    "CandidateSets",
    "check_rprecision_settings",
    "draw_candidate_sets",
    "fold_assignment",
    "candidate_scores",
    "rprecision_output_schema",
    "text_image_r_precision",
]

# Aggregation protocols of text-to-image R-precision.
PROTOCOLS = ("folds", "resample")


def check_threshold(t: object) -> float | None:
    """``near_duplicate_threshold``: a cosine in ``[-1, 1]`` as a float, or None (off)."""
    if t is None:
        return None
    return check_number(t, "near_duplicate_threshold", at_least=-1.0, at_most=1.0, what="a cosine in [-1, 1] or None (off)")


def check_top_r(top_r: object, r: int, num_candidates: int) -> tuple[int, ...]:
    """``top_r`` (a positive int or a sequence of them) as sorted distinct ints, each and ``r`` at most
    ``num_candidates``."""
    if is_int(top_r):
        top_r = (top_r,)
    if not isinstance(top_r, Sequence) or isinstance(top_r, str) or not all(is_int(v) and v > 0 for v in top_r):
        raise ValueError(f"`top_r` must be a sequence of positive ints, got {top_r!r}.")
    too_big = [int(v) for v in (*top_r, r) if v > num_candidates]
    if too_big:
        raise ValueError(f"`top_r` / `r` values {too_big} exceed `num_candidates` {num_candidates}; a rank is at most R.")
    return tuple(sorted({int(v) for v in top_r}))


def check_rprecision_settings(
    num_candidates: object,
    r: object,
    top_r: object,
    protocol: object,
    repeats: object,
    seed: object,
    near_duplicate_threshold: object,
    chunk_size: object,
) -> tuple[tuple[int, ...], float | None]:
    """The settings of text-to-image R-precision: ``(top_r, near_duplicate_threshold)`` as the kernel uses them (sorted
    distinct cut-offs, the threshold as a float or None), after checking every setting.

    Example:
        >>> check_rprecision_settings(100, 1, (10, 1, 5), "folds", 10, 0, 0.8, 256)
        ((1, 5, 10), 0.8)
    """
    num_candidates = check_positive_int(num_candidates, "num_candidates")
    r = check_positive_int(r, "r")
    check_positive_int(repeats, "repeats")
    check_positive_int(chunk_size, "chunk_size")
    top_r = check_top_r(top_r, r, num_candidates)
    check_choice(protocol, "protocol", PROTOCOLS)
    check_seed(seed)
    return top_r, check_threshold(near_duplicate_threshold)


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


# ----------------------------------------------------------------------------------------------------------------------
# candidate sets
# ----------------------------------------------------------------------------------------------------------------------

# Distinct queries per product of `_pair_scores` (at least the core's smallest block side).
_QUERY_BLOCK = MIN_BLOCK
# Candidates per product of `_pair_scores`: a run of queries with more is scored in pieces (bounded memory).
_MAX_PAIRS = 1 << 15
# Elements of one round of the draw (queries x draws) above which a round is split.
_ROUND_ELEMENTS = 1 << 20


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
                _, pair_rank, pair_sizes = torch.unique(torch.stack([class_ids, caption_codes], 1), dim=0, return_inverse=True, return_counts=True)
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
        count = int(pool.eligible[row]) if threshold is None else int(_eligible_counts(_masked_text_scores(txt, pool, row, threshold)))
        _raise_too_few(pool, int(row), count, k, threshold)


def _draw_chunk(
    txt: Tensor, pool: _Pool, rows: Tensor, k: int, base: Tensor, threshold: float | None, img: Tensor | None
) -> tuple[Tensor, Tensor | None]:
    """The seeded draw (module docstring) of the queries at pool positions ``rows`` (ascending): rows ``[len(rows), k]``
    and, with ``img`` and a near-duplicate filter, the image -> text scores of the kept pairs ``[len(rows), k]``.

    Vectorised in rounds: a round draws the next ``W`` counters ``j`` of every unfinished query, and processes them
    exactly as the one-by-one definition would, up to the draw holding the query's ``need``-th candidate that passes
    the cheap checks (itself, class, caption, drawn before); only those get a text score for the near-duplicate
    filter. The next round resumes at the first unprocessed counter.
    """
    device = txt.device
    c = rows.numel()
    stream = _mix(base ^ pool.ids[rows])
    space = pool.space[rows]
    kept = torch.full((c, k), -1, dtype=torch.long, device=device)
    fused = img is not None and threshold is not None
    kept_i2t = torch.empty(c, k, dtype=torch.float32, device=device) if fused else None
    count = torch.zeros(c, dtype=torch.long, device=device)
    counter = torch.zeros(c, dtype=torch.long, device=device)
    budget = 4 * space + 64  # counters past this without finishing: count the eligible samples exactly, once
    checked = torch.zeros(c, dtype=torch.bool, device=device)
    # Expected draws per kept sample (at least): the space over the samples left by class / caption exclusions.
    spread = float((space.double() / pool.eligible[rows].clamp(min=1).double()).max())
    rnd = 0
    while True:
        active = torch.nonzero(count < k).flatten()
        if active.numel() == 0:
            return kept, kept_i2t
        need = k - count[active]
        width = math.ceil(int(need.max()) * spread * (1.15 if rnd == 0 else 2.0 ** min(rnd, 30))) + 8
        width = max(int(need.max()), min(width, _ROUND_ELEMENTS // active.numel()))
        if active.numel() * width > _ROUND_ELEMENTS:  # many queries: a part now, the rest in the next rounds
            active = active[: max(1, _ROUND_ELEMENTS // width)]
            need = need[: active.numel()]
        q = rows[active]
        j = counter[active].unsqueeze(1) + torch.arange(width, device=device)
        h = _mix(stream[active].unsqueeze(1) + (j + 1) * _GOLDEN)
        pos = pool.position(q, (h & _INT64_MAX) % space[active].unsqueeze(1))
        ok = pool.allowed(q, pos)
        # drawn before: earlier in this round (a stable sort keeps the first of equal positions first) ...
        sorted_pos, perm = torch.sort(pos, dim=1, stable=True)
        repeat = torch.zeros_like(ok)
        repeat[:, 1:] = sorted_pos[:, 1:] == sorted_pos[:, :-1]
        ok &= ~torch.zeros_like(ok).scatter_(1, perm, repeat)
        # ... or kept in an earlier round
        if rnd > 0:
            previous = torch.sort(kept[active], dim=1).values
            at = torch.searchsorted(previous, pos).clamp_(max=k - 1)
            ok &= previous.gather(1, at) != pos
        # Process the draws up to the one holding the need-th candidate (all of them when there are fewer). The first
        # round counts candidates before the near-duplicate filter, so that only about `need` get a text score;
        # later rounds (queries that met near-duplicates or repeats) filter first, so rejected ones cannot stall them.
        i2t = torch.empty(ok.shape, dtype=torch.float32, device=device) if fused else None
        if threshold is not None and rnd > 0:
            _drop_near_duplicates(txt, q, pos, ok, threshold, img if fused else None, i2t)
        running = torch.cumsum(ok, dim=1)
        reached = running[:, -1] >= need
        processed = torch.where(reached, torch.argmax((running >= need.unsqueeze(1)).to(torch.uint8), dim=1) + 1, width)
        ok &= running <= need.unsqueeze(1)
        if threshold is not None and rnd == 0:
            _drop_near_duplicates(txt, q, pos, ok, threshold, img if fused else None, i2t)
        slot = count[active].unsqueeze(1) + torch.cumsum(ok, dim=1) - 1
        r_i, c_i = torch.nonzero(ok, as_tuple=True)
        kept[active[r_i], slot[r_i, c_i]] = pos[r_i, c_i]
        if fused:
            kept_i2t[active[r_i], slot[r_i, c_i]] = i2t[r_i, c_i]
        count[active] += ok.sum(dim=1)
        counter[active] += processed
        if threshold is not None:
            suspect = torch.nonzero((count < k) & ~checked & (counter > budget)).flatten()
            if suspect.numel():
                checked[suspect] = True
                short = _first_short(txt, pool, rows[suspect], k, threshold)
                if short is not None:
                    # report the smallest short id of the chunk: every short query is still unfinished
                    earlier = torch.nonzero((count < k) & (rows < short[0])).flatten()
                    _raise_too_few(pool, *(_first_short(txt, pool, rows[earlier], k, threshold) or short), k, threshold)
        rnd += 1


def _drop_near_duplicates(txt: Tensor, q: Tensor, pos: Tensor, ok: Tensor, threshold: float, img: Tensor | None, i2t: Tensor | None) -> None:
    """Clear ``ok`` ``[a, W]`` (in place) where the sample at ``pos`` is a near-duplicate of query ``q`` (row); with
    ``img``, write the image -> text scores ``s(q, pos)`` of the pairs checked into ``i2t`` ``[a, W]`` (same products)."""
    r_i, c_i = torch.nonzero(ok, as_tuple=True)
    if img is None:
        text = _pair_scores(txt, txt, q[r_i], pos[r_i, c_i])
    else:
        text, i2t[r_i, c_i] = _pair_scores(txt, txt, q[r_i], pos[r_i, c_i], extra_left=img)
    near = text >= threshold
    ok[r_i[near], c_i[near]] = False


def _first_short(txt: Tensor, pool: _Pool, rows: Tensor, k: int, threshold: float | None) -> tuple[int, int] | None:
    """The first of ``rows`` (ascending) with fewer than ``k`` eligible samples and its exact count, or None."""
    for start in range(0, rows.numel(), MIN_BLOCK):
        part = rows[start : start + MIN_BLOCK]
        exact = _eligible_counts(_masked_text_scores(txt, pool, part, threshold))
        if bool((exact < k).any()):
            bad = int(torch.nonzero(exact < k)[0])
            return int(part[bad]), int(exact[bad])
    return None


def _draw(
    txt: Tensor,
    pool: _Pool,
    num_candidates: int,
    seed: int,
    repeats: Sequence[int],
    threshold: float | None,
    chunk_size: int,
    img: Tensor | None = None,
) -> list[tuple[Tensor, Tensor | None]]:
    """Per repeat, the distractor *rows* ``[N, R − 1]`` (into the id-ordered pool) of the seeded draw and, with
    ``img`` and a near-duplicate filter, their image -> text scores (else None)."""
    n, device = pool.n, txt.device
    k = num_candidates - 1
    _check_enough(txt, pool, k, threshold)
    fused = img is not None and threshold is not None
    out = []
    for repeat in repeats:
        base = _base_key(seed, repeat, device)
        rows = torch.empty(n, k, dtype=torch.long, device=device)
        i2t = torch.empty(n, k, dtype=torch.float32, device=device) if fused else None
        if k > 0:
            for start in range(0, n, chunk_size):
                chunk = torch.arange(start, min(start + chunk_size, n), device=device)
                rows[chunk], chunk_i2t = _draw_chunk(txt, pool, chunk, k, base, threshold, img)
                if fused:
                    i2t[chunk] = chunk_i2t
        out.append((rows, i2t))
    return out


def _hard(txt: Tensor, pool: _Pool, num_candidates: int, threshold: float | None, chunk_size: int) -> Tensor:
    """Hard-negative rows ``[N, R − 1]``: per query the exact top ``R − 1`` eligible text scores (ties: smaller id)."""
    n, device = pool.n, txt.device
    k = num_candidates - 1
    _check_enough(txt, pool, k, threshold)
    rows = torch.empty(n, k, dtype=torch.long, device=device)
    if k == 0:
        return rows
    for start in range(0, n, chunk_size):
        chunk = torch.arange(start, min(start + chunk_size, n), device=device)
        sims = _masked_text_scores(txt, pool, chunk, threshold)
        # the pool is in id order, so the core's tie rule (smaller index first) is "smaller id first"
        vals, rows[chunk] = exact_topk(sims, k)
        short = vals[:, -1] == float("-inf")  # an ineligible sample made the top k: fewer than k eligible
        if bool(short.any()):
            bad = int(torch.nonzero(short)[0])
            _raise_too_few(pool, int(chunk[bad]), int(_eligible_counts(sims[bad : bad + 1])), k, threshold)
    return rows


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
        near_duplicate_threshold: Text score at or above which a caption is no distractor (None: off).
        hard_negatives: Nearest eligible captions instead of a seeded draw.
        chunk_size: Queries per block (the result does not depend on it; hard negatives hold ``chunk_size × N``
            scores at a time).

    Returns:
        :class:`CandidateSets` in ascending id order.

    Example:
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


def _pair_scores(
    left: Tensor, right: Tensor, li: Tensor, ri: Tensor, queries_left: bool = True, extra_left: Tensor | None = None
) -> Tensor | tuple[Tensor, Tensor]:
    """Scores ``[P]`` of the pairs ``(left[li[p]], right[ri[p]])`` (the core's Score, ``left`` rows on the left).

    The query side (``li`` with ``queries_left``, else ``ri``) must be non-decreasing. Pairs are scored in one
    product per run of 16 distinct queries against the candidates of that run (in pieces of at most ``_MAX_PAIRS``),
    and each pair's entry is read out: 16 is the core's smallest block side, so every entry equals the Score of its
    pair, whatever the runs hold. With
    ``extra_left`` (queries on the left only) the pairs ``(extra_left[li[p]], right[ri[p]])`` are scored too, as more
    rows of the same products (the gathered candidates are shared), and both score vectors are returned.
    """
    q, g = (li, ri) if queries_left else (ri, li)
    out = torch.empty(q.shape[0], dtype=torch.float32, device=left.device)
    extra = None if extra_left is None else torch.empty_like(out)
    if q.numel() == 0:
        return out if extra is None else (out, extra)
    distinct, sizes = torch.unique_consecutive(q, return_counts=True)
    local = torch.repeat_interleave(torch.arange(distinct.numel(), device=q.device) % _QUERY_BLOCK, sizes)
    ends = torch.cumsum(sizes, 0)
    bounds = [0, *ends[_QUERY_BLOCK - 1 :: _QUERY_BLOCK].tolist()]
    if bounds[-1] != q.numel():
        bounds.append(q.numel())
    pieces = [
        (block, lo, min(lo + _MAX_PAIRS, hi))
        for block, (start, hi) in enumerate(zip(bounds[:-1], bounds[1:]))
        for lo in range(start, hi, _MAX_PAIRS)
    ]
    ws = Workspace(left.device)
    at = torch.arange(min(q.numel(), _MAX_PAIRS), device=q.device)
    d = left.shape[1]
    for block, lo, hi in pieces:
        queries = distinct[block * _QUERY_BLOCK : (block + 1) * _QUERY_BLOCK]
        m = queries.numel()
        cands = ws.get("cands", (hi - lo, d), left.dtype)
        if queries_left:
            side = ws.get("queries", (m if extra is None else 2 * m, d), left.dtype)
            torch.index_select(left, 0, queries, out=side[:m])
            if extra is not None:
                torch.index_select(extra_left, 0, queries, out=side[m:])
            scores = score_block(side, torch.index_select(right, 0, g[lo:hi], out=cands), ws)  # [queries, candidates]
            flat = local[lo:hi] * scores.shape[1] + at[: hi - lo]
            torch.index_select(scores[:m].reshape(-1), 0, flat, out=out[lo:hi])
            if extra is not None:
                torch.index_select(scores[m:].reshape(-1), 0, flat, out=extra[lo:hi])
        else:
            side = torch.index_select(right, 0, queries, out=ws.get("queries", (m, d), right.dtype))
            scores = score_block(torch.index_select(left, 0, g[lo:hi], out=cands), side, ws)  # [candidates, queries]
            flat = at[: hi - lo] * scores.shape[1] + local[lo:hi]
            torch.index_select(scores.reshape(-1), 0, flat, out=out[lo:hi])
    return out if extra is None else (out, extra)


def candidate_scores(image_embeddings: Tensor, text_embeddings: Tensor, rows: Tensor, direction: str = "image_to_text", chunk_size: int = 256) -> Tensor:
    """Scores ``[N, R]`` of each query's candidates: column 0 the ground truth, then the distractors ``rows[q]``.

    ``direction="image_to_text"``: ``s(q, q), s(q, rows[q, 0]), ...``; ``"text_to_image"``: ``s(q, q), s(rows[q, 0], q),
    ...`` with ``s(i, t)`` the score of image ``i`` and text ``t`` (inputs in pool order; rows index the pool).
    ``chunk_size`` is accepted for compatibility: scores never depend on a blocking.

    Example:
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
        raise ValueError(f"`rows` must be an integer tensor [N, R - 1] with one row per sample ({img.shape[0]}), got {got}.")
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= txt.shape[0]):
        raise ValueError(f"`rows` must index the {txt.shape[0]} samples (0..{txt.shape[0] - 1}).")
    if txt.shape != img.shape:
        raise ValueError(f"`image_embeddings` {tuple(img.shape)} and `text_embeddings` {tuple(txt.shape)} must have one shape.")
    return _candidate_scores(img, txt, rows.to(device=img.device, dtype=torch.long), direction)


def _candidate_scores(img: Tensor, txt: Tensor, rows: Tensor, direction: str) -> Tensor:
    n = img.shape[0]
    queries = torch.arange(n, device=img.device)
    cands = torch.cat([queries.unsqueeze(1), rows], dim=1)
    q = queries.repeat_interleave(cands.shape[1])
    if direction == "image_to_text":
        return _pair_scores(img, txt, q, cands.flatten()).view(n, -1)
    return _pair_scores(img, txt, cands.flatten(), q, queries_left=False).view(n, -1)


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
    return OutputSchema(keys, per_query, headline=["r_precision", "text_to_image_r_precision"])  # both directions


def fold_assignment(ids: Tensor, seed: int, folds: int) -> Tensor:
    """The fold (``0..folds−1``) of each sample under ``protocol="folds"``: samples ordered by a hash of
    ``(seed, id)`` (a bijection of the id, so no ties) and split into ``folds`` near-equal runs (sizes differ by <= 1).

    Example:
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
        The keys of :func:`rprecision_output_schema` (float64 values, int64 counts) and ``per_query`` with the
        per-sample vectors in ascending id order.

    Raises:
        ValueError: On bad embeddings (NaN, wrong shapes, mismatched row counts), ids, settings, or a pool too small
            for ``num_candidates`` after the exclusions.
    """
    top_r, threshold = check_rprecision_settings(
        num_candidates, r, top_r, protocol, repeats, seed, near_duplicate_threshold, chunk_size
    )
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
    pool = _Pool(sid, cls, cap)

    if candidate_sets is not None:
        if protocol != "folds":
            raise ValueError("`candidate_sets` pin one draw; use them with `protocol='folds'` (resample redraws).")
        draws = [(_rows_of(candidate_sets, sid, num_candidates), None)]
    else:
        reps = range(repeats) if protocol == "resample" else range(1)
        draws = _draw(txt, pool, num_candidates, seed, list(reps), threshold, chunk_size, img)

    t2i_scores = [_candidate_scores(img, txt, d, "text_to_image") for d, _ in draws]
    # the draw's near-duplicate filter already scored the kept pairs image -> text; column 0, s(q, q), is shared
    i2t_scores = [
        _candidate_scores(img, txt, d, "image_to_text") if fused is None else torch.cat([t2i[:, :1], fused], dim=1)
        for (d, fused), t2i in zip(draws, t2i_scores)
    ]
    i2t_ranks = torch.stack([_ranks(s) for s in i2t_scores])
    t2i_ranks = torch.stack([_ranks(s) for s in t2i_scores])
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
        hard = _hard(txt, pool, num_candidates, threshold, chunk_size)
        hard_hit = (_ranks(_candidate_scores(img, txt, hard, "image_to_text")) <= r).to(f64)
        out["hard_r_precision"] = hard_hit.mean()
        per_query["hard_r_precision"] = hard_hit
    cos = i2t_scores[0][:, 0].to(f64).clamp(min=0)  # s(q, q)
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
