"""The seeded candidate draw (random and hard distractors) over the id-ordered pool."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from beyondlabels.functional._topk import MIN_BLOCK, exact_topk
from beyondlabels.functional.rprecision._hash import _GOLDEN, _INT64_MAX, _base_key, _mix
from beyondlabels.functional.rprecision._pairs import _pair_scores
from beyondlabels.functional.rprecision._pool import (
    _check_enough,
    _eligible_counts,
    _masked_text_scores,
    _Pool,
    _raise_too_few,
)

# Elements of one round of the draw (queries x draws) above which a round is split.
_ROUND_ELEMENTS = 1 << 20


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


def _drop_near_duplicates(
    txt: Tensor, q: Tensor, pos: Tensor, ok: Tensor, threshold: float, img: Tensor | None, i2t: Tensor | None
) -> None:
    """Clear ``ok`` ``[a, W]`` (in place) where the sample at ``pos`` is a near-duplicate of query ``q`` (row); with
    ``img``, write the image -> text scores ``s(q, pos)`` of the pairs checked into ``i2t`` ``[a, W]`` (same
    products)."""
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
    span: tuple[int, int] | None = None,
) -> list[tuple[Tensor, Tensor | None]]:
    """Per repeat, the distractor *rows* ``[c, R − 1]`` (into the id-ordered pool) of the seeded draw of the queries
    at pool positions ``span = (lo, hi)`` (default: all, ``c = hi − lo``) and, with ``img`` and a near-duplicate
    filter, their image -> text scores (else None). A query's draw does not depend on the span or the chunks."""
    device = txt.device
    lo, hi = span or (0, pool.n)
    k = num_candidates - 1
    _check_enough(txt, pool, k, threshold)
    fused = img is not None and threshold is not None
    out = []
    for repeat in repeats:
        base = _base_key(seed, repeat, device)
        rows = torch.empty(hi - lo, k, dtype=torch.long, device=device)
        i2t = torch.empty(hi - lo, k, dtype=torch.float32, device=device) if fused else None
        if k > 0:
            for start in range(lo, hi, chunk_size):
                chunk = torch.arange(start, min(start + chunk_size, hi), device=device)
                rows[chunk - lo], chunk_i2t = _draw_chunk(txt, pool, chunk, k, base, threshold, img)
                if fused:
                    i2t[chunk - lo] = chunk_i2t
        out.append((rows, i2t))
    return out


def _hard(
    txt: Tensor,
    pool: _Pool,
    num_candidates: int,
    threshold: float | None,
    chunk_size: int,
    span: tuple[int, int] | None = None,
) -> Tensor:
    """Hard-negative rows ``[c, R − 1]`` of the queries at pool positions ``span = (lo, hi)`` (default: all): per
    query the exact top ``R − 1`` eligible text scores (ties: smaller id)."""
    device = txt.device
    lo, hi = span or (0, pool.n)
    k = num_candidates - 1
    _check_enough(txt, pool, k, threshold)
    rows = torch.empty(hi - lo, k, dtype=torch.long, device=device)
    if k == 0:
        return rows
    for start in range(lo, hi, chunk_size):
        chunk = torch.arange(start, min(start + chunk_size, hi), device=device)
        sims = _masked_text_scores(txt, pool, chunk, threshold)
        # the pool is in id order, so the core's tie rule (smaller index first) is "smaller id first"
        vals, rows[chunk - lo] = exact_topk(sims, k)
        short = vals[:, -1] == float("-inf")  # an ineligible sample made the top k: fewer than k eligible
        if bool(short.any()):
            bad = int(torch.nonzero(short)[0])
            _raise_too_few(pool, int(chunk[bad]), int(_eligible_counts(sims[bad : bad + 1])), k, threshold)
    return rows
