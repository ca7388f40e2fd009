"""Argument checks shared by the kernels and metrics (internal: not part of the public API).

Each check returns the validated (and, where stated, converted) value or raises a ``ValueError`` that names the
argument, says what was wrong and what to pass instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

# Search precisions: the name a user passes and the low-precision dtype it searches in (None: exact fp32 only).
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# Aggregation protocols of text-to-image R-precision.
PROTOCOLS = ("folds", "resample")


def check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    return value


def check_non_negative_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be an int >= 0, got {value!r}.")
    return value


def check_precision(precision: object) -> torch.dtype | None:
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {sorted(PRECISIONS)}, got {precision!r}.")
    return PRECISIONS[precision]  # type: ignore[index]


def check_ks(ks: object, name: str = "ks") -> tuple[int, ...]:
    if isinstance(ks, int) and not isinstance(ks, bool):
        ks = (ks,)
    if not isinstance(ks, Sequence) or isinstance(ks, str) or len(ks) == 0:
        raise ValueError(f"`{name}` must be a non-empty sequence of positive ints, got {ks!r}.")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ValueError(f"`{name}` must contain only positive ints, got {k!r} in {ks!r}.")
    return tuple(sorted(set(ks)))


def check_embeddings(x: object, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor of shape [N, D], got {type(x).__name__}.")
    if x.dim() != 2:
        raise ValueError(f"`{name}` must be 2-D [N, D], got shape {tuple(x.shape)}; reshape it to [N, D].")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(x.shape)}); pass at least one row of at least one dim.")
    if not (x.is_floating_point()):
        raise ValueError(f"`{name}` must be a floating-point tensor, got dtype {x.dtype}.")
    return x


def check_int_vector(x: object, name: str, length: int, device: torch.device) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(
            f"`{name}` must be a 1-D integer torch.Tensor, got {type(x).__name__}; map other label types to ints "
            "first (see `encode_labels`)."
        )
    if x.dim() != 1:
        raise ValueError(f"`{name}` must be 1-D, got shape {tuple(x.shape)}.")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise ValueError(f"`{name}` must have an integer dtype, got {x.dtype}; map labels to ints first.")
    if x.shape[0] != length:
        raise ValueError(f"`{name}` has {x.shape[0]} entries but the embeddings have {length} rows; they must match.")
    return x.to(device=device, dtype=torch.long)


def check_matrix(similarity: Any, name: str = "similarity") -> Tensor:
    m = torch.as_tensor(similarity, dtype=torch.float64)
    if m.dim() != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 2:
        raise ValueError(f"`{name}` must be a square [C, C] matrix with C >= 2, got shape {tuple(m.shape)}.")
    if not bool(torch.isfinite(m).all()):
        raise ValueError(f"`{name}` holds NaN or infinite values; every class pair needs a finite similarity.")
    return m


def check_threshold(t: object) -> float | None:
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not -1.0 <= float(t) <= 1.0:
        raise ValueError(f"`near_duplicate_threshold` must be a cosine in [-1, 1] or None (off), got {t!r}.")
    return float(t)


def check_top_r(top_r: object, r: int, num_candidates: int) -> tuple[int, ...]:
    if isinstance(top_r, int) and not isinstance(top_r, bool):
        top_r = (top_r,)
    if not isinstance(top_r, Sequence) or isinstance(top_r, str) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in top_r):
        raise ValueError(f"`top_r` must be a sequence of positive ints, got {top_r!r}.")
    too_big = [v for v in (*top_r, r) if v > num_candidates]
    if too_big:
        raise ValueError(f"`top_r` / `r` values {too_big} exceed `num_candidates` {num_candidates}; a rank is at most R.")
    return tuple(sorted(set(top_r)))


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
    distinct cut-offs, the threshold as a float or None), after checking every setting."""
    check_positive_int(num_candidates, "num_candidates")
    check_positive_int(r, "r")
    check_positive_int(repeats, "repeats")
    check_positive_int(chunk_size, "chunk_size")
    top_r = check_top_r(top_r, r, num_candidates)  # type: ignore[arg-type]
    if protocol not in PROTOCOLS:
        raise ValueError(f"`protocol` must be one of {PROTOCOLS}, got {protocol!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an int, got {seed!r}.")
    return top_r, check_threshold(near_duplicate_threshold)


def check_deep_metrics(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"`deep_metrics` must be True or False, got {value!r}.")
    return value


def check_share(share: object) -> tuple[int, int]:
    """``(index, count)`` of a share of the queries (None: the one share ``(0, 1)``)."""
    if share is None:
        return 0, 1
    if (
        not isinstance(share, (tuple, list))
        or len(share) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in share)
        or not 0 <= share[0] < share[1]
    ):
        raise ValueError(f"`share` must be (index, count) with 0 <= index < count, got {share!r}.")
    return int(share[0]), int(share[1])


def check_depths(depth: object, n_queries: int, limit: int, device: torch.device) -> Tensor:
    """The search depth of every query, int64 ``[n_queries]``: ``depth`` an int, or a tensor with one entry per
    query; each at least 1 and at most ``limit`` (the gallery items available to a query)."""
    if isinstance(depth, Tensor):
        if depth.dim() != 1 or depth.shape[0] != n_queries or depth.is_floating_point() or depth.dtype == torch.bool:
            raise ValueError(f"`depth` as a tensor must be 1-D integer with one entry per query ({n_queries}), got {tuple(depth.shape)} {depth.dtype}.")
        depths = depth.to(device=device, dtype=torch.long)
        if n_queries and int(depths.min()) < 1:
            raise ValueError("`depth` must be >= 1 for every query.")
    else:
        check_positive_int(depth, "depth")
        depths = torch.full((n_queries,), depth, dtype=torch.long, device=device)
    if n_queries and int(depths.max()) > limit:
        raise ValueError(f"`depth` {int(depths.max())} exceeds the {limit} gallery items available to a query; lower it.")
    return depths


def gain_labels(labels: Any, classes: Sequence[Any]) -> list[Any]:
    """The label each class of a gain matrix carries: ``None`` (the class names themselves), ``"index"`` (class ``i``
    is label ``i``) or one label per class, in class order."""
    if labels is None:
        return list(classes)
    if isinstance(labels, str):
        if labels != "index":
            raise ValueError(f"`labels` must be None, 'index' or one label per class, got {labels!r}.")
        return list(range(len(classes)))
    labels = list(labels)
    if len(labels) != len(classes):
        raise ValueError(f"`labels` has {len(labels)} entries for {len(classes)} classes; give one label per class.")
    return labels


# ---- Checks of the callbacks, metrics, tasks and entry points -----------------------------------------------------
# One message style: "`<name>` must be <what>, got <value>." with an optional hint in parentheses that says what a value
# means or what to pass. ``name`` is the argument, or the config key of an entry point (``eval.curve_max_k``).


def _refuse(name: str, what: str, value: object, hint: str = "") -> ValueError:
    return ValueError(f"`{name}` must be {what}, got {value!r}{f' ({hint})' if hint else ''}.")


def check_int(value: object, name: str, hint: str = "") -> int:
    """An int (not a bool), e.g. a seed.

    Example:
        >>> check_int(3, "seed")
        3
        >>> check_int(1.0, "seed")
        Traceback (most recent call last):
        ValueError: `seed` must be an int, got 1.0.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(name, "an int", value, hint)
    return value


def check_int_at_least(value: object, name: str, low: int, hint: str = "") -> int:
    """An int (not a bool) of at least ``low``.

    Example:
        >>> check_int_at_least(0, "num_examples", 0, hint="0 turns the table off")
        0
        >>> check_int_at_least(-1, "num_examples", 0, hint="0 turns the table off")
        Traceback (most recent call last):
        ValueError: `num_examples` must be an int >= 0, got -1 (0 turns the table off).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _refuse(name, f"an int >= {low}", value, hint)
    return value


def check_optional_positive_int(value: object, name: str, hint: str = "") -> int | None:
    """None, or an int >= 1.

    Example:
        >>> check_optional_positive_int(None, "limit_batches"), check_optional_positive_int(2, "limit_batches")
        (None, 2)
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _refuse(name, "a positive int or None", value, hint)
    return value


def check_bool(value: object, name: str, hint: str = "") -> bool:
    """True or False (not 0, 1 or a string).

    Example:
        >>> check_bool("yes", "strict")
        Traceback (most recent call last):
        ValueError: `strict` must be True or False, got 'yes'.
    """
    if not isinstance(value, bool):
        raise _refuse(name, "True or False", value, hint)
    return value


def check_optional_bool(value: object, name: str, hint: str = "") -> bool | None:
    """None, True or False."""
    if value is not None and not isinstance(value, bool):
        raise _refuse(name, "None, True or False", value, hint)
    return value


def check_number_between(value: object, name: str, low: float, high: float, hint: str = "") -> float:
    """A real number (not a bool) strictly between ``low`` and ``high``, as a float.

    Example:
        >>> check_number_between(0.05, "level", 0, 1)
        0.05
        >>> check_number_between(1.5, "level", 0, 1)
        Traceback (most recent call last):
        ValueError: `level` must be a number in (0, 1), got 1.5.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < high:
        raise _refuse(name, f"a number in ({low:g}, {high:g})", value, hint)
    return float(value)


def check_text(value: object, name: str, optional: bool = False, hint: str = "") -> str | None:
    """A non-empty string (a method name, a batch key, a logged key); None too when ``optional``.

    Example:
        >>> check_text("encode_image", "encode_method"), check_text(None, "tokenizer", optional=True)
        ('encode_image', None)
        >>> check_text("", "encode_method")
        Traceback (most recent call last):
        ValueError: `encode_method` must be a non-empty string, got ''.
    """
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise _refuse(name, "a non-empty string" + (" or None" if optional else ""), value, hint)
    return value


def check_choice(value: object, name: str, choices: Sequence[object], hint: str = "") -> object:
    """One of ``choices`` (compared with ``==``; a bool never stands for 0 or 1).

    Example:
        >>> check_choice("text", "source", ("labels", "text"))
        'text'
        >>> check_choice("words", "source", ("labels", "text"))
        Traceback (most recent call last):
        ValueError: `source` must be one of ('labels', 'text'), got 'words'.
    """
    if not any(value == c and isinstance(value, bool) == isinstance(c, bool) for c in choices):
        raise _refuse(name, f"one of {tuple(choices)}", value, hint)
    return value
