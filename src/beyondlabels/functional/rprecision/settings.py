"""The settings of text-to-image R-precision, checked once for the kernel, the metric and the task
(definitions: :mod:`beyondlabels.functional.rprecision`)."""

from __future__ import annotations

from collections.abc import Sequence

from beyondlabels._internal.checks import check_choice, check_number, check_positive_int, check_seed, is_int
from beyondlabels.functional.rprecision._sets import CandidateSets

__all__ = ["PROTOCOLS", "check_candidate_sets", "check_rprecision_settings", "check_threshold", "check_top_r"]

# Aggregation protocols of text-to-image R-precision.
PROTOCOLS = ("folds", "resample")


def check_threshold(t: object) -> float | None:
    """``near_duplicate_threshold``: a cosine in ``[-1, 1]`` as a float, or None (off)."""
    if t is None:
        return None
    return check_number(
        t, "near_duplicate_threshold", at_least=-1.0, at_most=1.0, what="a cosine in [-1, 1] or None (off)"
    )


def check_top_r(top_r: object, r: int, num_candidates: int) -> tuple[int, ...]:
    """``top_r`` (a positive int or a sequence of them) as sorted distinct ints, each and ``r`` at most
    ``num_candidates``."""
    if is_int(top_r):
        top_r = (top_r,)
    if not isinstance(top_r, Sequence) or isinstance(top_r, str) or not all(is_int(v) and v > 0 for v in top_r):
        raise ValueError(f"`top_r` must be a sequence of positive ints, got {top_r!r}.")
    too_big = [int(v) for v in (*top_r, r) if v > num_candidates]
    if too_big:
        raise ValueError(
            f"`top_r` / `r` values {too_big} exceed `num_candidates` {num_candidates}; a rank is at most R."
        )
    return tuple(sorted({int(v) for v in top_r}))


def check_candidate_sets(candidate_sets: object, protocol: object) -> None:
    """``candidate_sets``: None, or :class:`CandidateSets` pinning the one draw of ``protocol="folds"``."""
    if candidate_sets is None:
        return
    if not isinstance(candidate_sets, CandidateSets):
        raise ValueError(
            f"`candidate_sets` must be CandidateSets (see `load_candidate_sets`), got {type(candidate_sets).__name__}."
        )
    if protocol != "folds":
        raise ValueError("`candidate_sets` pin one draw; use them with `protocol='folds'` (resample redraws).")


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

    Examples:
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
