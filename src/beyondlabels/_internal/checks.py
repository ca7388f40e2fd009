"""Argument checks shared by every kernel, metric, reader and report (internal: not part of the public API).

One message style for every argument a user passes: each check returns the validated (and, where stated, converted)
value or raises a ``ValueError`` that names the argument, says what it must be (with a hint of what to pass where
one helps) and what it got: ``"`window` must be an int >= 2 (values per window), got 1."``

Numbers: an *int* is any integral number (Python or numpy) but never a bool, returned as a Python ``int``; a
*number* is any real number but never a bool, returned as a Python ``float``. Checks of one family's settings live in
that family's kernel package (e.g. :mod:`beyondlabels.functional.rprecision.settings`).

Examples:
    >>> check_int(3, "window", minimum=2, hint="values per window")
    3
    >>> check_int(1, "window", minimum=2, hint="values per window")
    Traceback (most recent call last):
    ...
    ValueError: `window` must be an int >= 2 (values per window), got 1.
    >>> check_number(0.95, "confidence", above=0, below=1), check_choice("max", "mode", ("max", "min"))
    (0.95, 'max')
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

# Search precisions: the name a user passes and the low-precision dtype it searches in (None: exact fp32 only).
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# Search distances (beyondlabels.functional.search): cosine similarity, Euclidean (L2) distance, inner product.
DISTANCES = ("cosine", "euclidean", "dot")


def _must(name: str, what: str, hint: str | None, value: object) -> ValueError:
    """The one message of every check: "`name` must be what (hint), got value."."""
    return ValueError(f"`{name}` must be {what}{f' ({hint})' if hint else ''}, got {value!r}.")


def is_int(value: object) -> bool:
    """Whether ``value`` is an integral number (Python or numpy) and not a bool.

    Examples:
        >>> is_int(3), is_int(True), is_int(3.0)
        (True, False, False)
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """Whether ``value`` is a real number (int or float, Python or numpy) and not a bool; NaN and infinities count.

    Examples:
        >>> is_number(0.5), is_number(float("nan")), is_number(False), is_number("1")
        (True, True, False, False)
    """
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _int_phrase(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an int in [{minimum}, {maximum}]"
    if minimum == 1:
        return "a positive int"
    if minimum is not None:
        return f"an int >= {minimum}"
    return "an int" if maximum is None else f"an int <= {maximum}"


def check_int(
    value: object, name: str, *, minimum: int | None = None, maximum: int | None = None, hint: str | None = None
) -> int:
    """``value`` as a Python int, checked to lie in ``[minimum, maximum]`` (either bound optional).

    Examples:
        >>> check_int(0, "top", minimum=0), check_int(5, "num_components", minimum=1, maximum=8)
        (0, 5)
    """
    if not is_int(value) or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _must(name, _int_phrase(minimum, maximum), hint, value)
    return int(value)  # type: ignore[call-overload]


def check_positive_int(value: object, name: str, hint: str | None = None) -> int:
    """``value`` as a Python int >= 1."""
    return check_int(value, name, minimum=1, hint=hint)


def check_non_negative_int(value: object, name: str, hint: str | None = None) -> int:
    """``value`` as a Python int >= 0."""
    return check_int(value, name, minimum=0, hint=hint)


def check_seed(value: object, name: str = "seed") -> int:
    """A seed: any int (negative ones included), as a Python int.

    Examples:
        >>> check_seed(-3)
        -3
    """
    return check_int(value, name)


def check_rounds(value: object, name: str = "rounds", hint: str | None = "e.g. 2000 bootstrap resamples") -> int:
    """A number of resampling rounds, a positive int."""
    return check_int(value, name, minimum=1, hint=hint)


def _number_phrase(above: float | None, at_least: float | None, below: float | None, at_most: float | None) -> str:
    low = f"({above:g}" if above is not None else f"[{at_least:g}" if at_least is not None else None
    high = f"{below:g})" if below is not None else f"{at_most:g}]" if at_most is not None else None
    if low is not None and high is not None:
        return f"a number in {low}, {high}"
    if low is not None:
        return f"a number {'>' if above is not None else '>='} {low[1:]}"
    if high is not None:
        return f"a number {'<' if below is not None else '<='} {high[:-1]}"
    return "a finite number"


def check_number(
    value: object,
    name: str,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
    hint: str | None = None,
    what: str | None = None,
    finite: bool = True,
) -> float:
    """``value`` as a Python float: a finite real number (with ``finite=False`` also an infinity, never NaN), checked
    against the bounds given (``above`` and ``below`` exclusive, ``at_least`` and ``at_most`` inclusive). ``what``
    replaces the phrase the bounds give.

    Examples:
        >>> check_number(0, "min_delta", at_least=0), check_number(2, "noise", above=0)
        (0.0, 2.0)
        >>> check_number(float("inf"), "noise", above=0)
        Traceback (most recent call last):
        ...
        ValueError: `noise` must be a number > 0, got inf.
    """
    ok = is_number(value) and (math.isfinite(value) if finite else not math.isnan(value))  # type: ignore[arg-type]
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (
            (above is None or v > above)
            and (at_least is None or v >= at_least)
            and (below is None or v < below)
            and (at_most is None or v <= at_most)
        )
    if not ok:
        raise _must(name, what or _number_phrase(above, at_least, below, at_most), hint, value)
    return float(value)  # type: ignore[arg-type]


def check_confidence(value: object, name: str = "confidence") -> float:
    """A confidence level, strictly between 0 and 1."""
    return check_number(value, name, above=0.0, below=1.0, what="a number strictly between 0 and 1", hint="e.g. 0.95")


def check_bool(value: object, name: str, *, hint: str | None = None, what: str | None = None) -> bool:
    """``value`` when it is True or False (no other truthy or falsy value); ``what`` replaces "True or False".

    Examples:
        >>> check_bool(True, "include_root")
        True
    """
    if not isinstance(value, bool):
        raise _must(name, what or "True or False", hint, value)
    return value


def check_choice(
    value: Any, name: str, choices: Sequence[Any], *, hint: str | None = None, what: str | None = None
) -> Any:
    """``value`` when it is one of ``choices`` (compared by equality, a bool never equal to an int); ``what``
    replaces the phrase "one of [...]".

    Examples:
        >>> check_choice("weak", "percentile_kind", ("weak", "strict"))
        'weak'
    """
    try:
        known = any(
            choice is value or (not isinstance(value, bool) and not isinstance(choice, bool) and bool(value == choice))
            for choice in choices
        )
    except (TypeError, ValueError):  # a value that compares to no plain choice (an array)
        known = False
    if not known:
        raise _must(name, what or f"one of {list(choices)}", hint, value)
    return value


def check_precision(precision: object) -> torch.dtype | None:
    """The low-precision dtype of a search precision name (None: exact fp32 only)."""
    return PRECISIONS[check_choice(precision, "precision", sorted(PRECISIONS))]


def check_distance(distance: object, name: str = "distance") -> str:
    """A search distance: ``"cosine"`` (the default everywhere), ``"euclidean"`` or ``"dot"``.

    Examples:
        >>> check_distance("euclidean")
        'euclidean'
    """
    return check_choice(distance, name, DISTANCES, hint="how neighbours are ranked")


def check_ks(ks: object, name: str = "ks") -> tuple[int, ...]:
    """Cut-offs: a positive int or a non-empty sequence of them, as sorted distinct Python ints."""
    if is_int(ks):
        ks = (ks,)
    if not isinstance(ks, Sequence) or isinstance(ks, str) or len(ks) == 0:
        raise ValueError(f"`{name}` must be a non-empty sequence of positive ints, got {ks!r}.")
    for k in ks:
        if not is_int(k) or k <= 0:
            raise ValueError(f"`{name}` must contain only positive ints, got {k!r} in {ks!r}.")
    return tuple(sorted({int(k) for k in ks}))


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


def check_index_vector(
    value: object, name: str, length: int, device: torch.device, *, items: str, vector: str, rows: str
) -> Tensor:
    """``value`` (a tensor, or anything ``torch.as_tensor`` takes: a list, a numpy array) as a 1-D int64 tensor of
    ``length`` entries on ``device``. The messages say what the entries are (``items``: "integer sample ids"), what
    the tensor must be (``vector``: "a 1-D integer tensor [B] of global sample ids") and what ``length`` counts
    (``rows``: "a batch of 4").

    Examples:
        >>> check_index_vector([3, 1], "ids", 2, torch.device("cpu"), items="integer ids", vector="1-D", rows="2")
        tensor([3, 1])
        >>> check_index_vector([3], "ids", 2, torch.device("cpu"), items="integer ids", vector="1-D", rows="2 rows")
        Traceback (most recent call last):
        ValueError: `ids` has 1 entries for 2 rows; they must match.
    """
    if not isinstance(value, Tensor):
        try:
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"`{name}` must be {items}, got {type(value).__name__}: {exc}") from exc
    if value.dim() != 1 or value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise ValueError(f"`{name}` must be {vector}, got {tuple(value.shape)} {value.dtype}.")
    if value.shape[0] != length:
        raise ValueError(f"`{name}` has {value.shape[0]} entries for {rows}; they must match.")
    return value.to(device=device, dtype=torch.long)


def check_same_space(
    first: Tensor, first_name: str, second: Tensor, second_name: str, *, width: str, device: str
) -> None:
    """Raise unless the 2-D embeddings ``first`` and ``second`` have one width and lie on one device; ``width`` and
    ``device`` say what to do about each (e.g. "embed both with one evaluator", "use one device")."""
    if first.shape[1] != second.shape[1]:
        raise ValueError(
            f"`{first_name}` has dimension {first.shape[1]} but `{second_name}` has {second.shape[1]}; {width}."
        )
    if first.device != second.device:
        raise ValueError(f"`{first_name}` is on {first.device} but `{second_name}` on {second.device}; {device}.")


def check_matrix(similarity: Any, name: str = "similarity") -> Tensor:
    m = torch.as_tensor(similarity, dtype=torch.float64)
    if m.dim() != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 2:
        raise ValueError(f"`{name}` must be a square [C, C] matrix with C >= 2, got shape {tuple(m.shape)}.")
    if not bool(torch.isfinite(m).all()):
        raise ValueError(f"`{name}` holds NaN or infinite values; every class pair needs a finite similarity.")
    return m


def check_deep_metrics(value: object) -> bool:
    """``deep_metrics``: True or False."""
    return check_bool(value, "deep_metrics")


def check_share(share: object) -> tuple[int, int]:
    """``(index, count)`` of a share of the queries (None: the one share ``(0, 1)``)."""
    if share is None:
        return 0, 1
    if (
        not isinstance(share, (tuple, list))
        or len(share) != 2
        or not all(is_int(v) for v in share)
        or not 0 <= share[0] < share[1]
    ):
        raise ValueError(f"`share` must be (index, count) with 0 <= index < count, got {share!r}.")
    return int(share[0]), int(share[1])


def check_depths(depth: object, n_queries: int, limit: int, device: torch.device) -> Tensor:
    """The search depth of every query, int64 ``[n_queries]``: ``depth`` an int, or a tensor with one entry per
    query; each at least 1 and at most ``limit`` (the gallery items available to a query)."""
    if isinstance(depth, Tensor):
        if depth.dim() != 1 or depth.shape[0] != n_queries or depth.is_floating_point() or depth.dtype == torch.bool:
            raise ValueError(
                f"`depth` as a tensor must be 1-D integer with one entry per query ({n_queries}), "
                f"got {tuple(depth.shape)} {depth.dtype}."
            )
        depths = depth.to(device=device, dtype=torch.long)
        if n_queries and int(depths.min()) < 1:
            raise ValueError("`depth` must be >= 1 for every query.")
    else:
        depths = torch.full((n_queries,), check_positive_int(depth, "depth"), dtype=torch.long, device=device)
    if n_queries and int(depths.max()) > limit:
        raise ValueError(
            f"`depth` {int(depths.max())} exceeds the {limit} gallery items available to a query; lower it."
        )
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
# In the message style of every check above; ``name`` is the argument, or the config key of an entry point
# (``eval.curve_max_k``).


def check_int_at_least(value: object, name: str, low: int, hint: str | None = None) -> int:
    """An int (not a bool) of at least ``low``, as a Python int.

    Examples:
        >>> check_int_at_least(0, "num_examples", 0, hint="0 turns the table off")
        0
        >>> check_int_at_least(-1, "num_examples", 0, hint="0 turns the table off")
        Traceback (most recent call last):
        ValueError: `num_examples` must be an int >= 0 (0 turns the table off), got -1.
    """
    return check_int(value, name, minimum=low, hint=hint)


def check_optional_positive_int(value: object, name: str, hint: str | None = None) -> int | None:
    """None, or an int >= 1 as a Python int.

    Examples:
        >>> check_optional_positive_int(None, "limit_batches"), check_optional_positive_int(2, "limit_batches")
        (None, 2)
    """
    if value is None:
        return None
    if not is_int(value) or value < 1:  # type: ignore[operator]
        raise _must(name, "a positive int or None", hint, value)
    return int(value)  # type: ignore[call-overload]


def check_optional_bool(value: object, name: str, hint: str | None = None) -> bool | None:
    """None, True or False."""
    if value is not None and not isinstance(value, bool):
        raise _must(name, "None, True or False", hint, value)
    return value


def check_number_between(value: object, name: str, low: float, high: float, hint: str | None = None) -> float:
    """A real number (not a bool) strictly between ``low`` and ``high``, as a float.

    Examples:
        >>> check_number_between(0.05, "level", 0, 1)
        0.05
        >>> check_number_between(1.5, "level", 0, 1)
        Traceback (most recent call last):
        ValueError: `level` must be a number in (0, 1), got 1.5.
    """
    return check_number(value, name, above=low, below=high, what=f"a number in ({low:g}, {high:g})", hint=hint)


def check_text(value: object, name: str, optional: bool = False, hint: str | None = None) -> str | None:
    """A non-empty string (a method name, a batch key, a logged key); None too when ``optional``.

    Examples:
        >>> check_text("encode_image", "encode_method"), check_text(None, "tokenizer", optional=True)
        ('encode_image', None)
        >>> check_text("", "encode_method")
        Traceback (most recent call last):
        ValueError: `encode_method` must be a non-empty string, got ''.
    """
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise _must(name, "a non-empty string" + (" or None" if optional else ""), hint, value)
    return value
