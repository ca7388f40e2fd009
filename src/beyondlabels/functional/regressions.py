"""What got worse between two checkpoints on the same queries: negative flips, per-class regressions with false
discovery rate control, and forgetting events across a run's evaluations.

Pure torch (the per-class p-values through scipy), on the device of the input, no Lightning. Inputs are per-query (or
per-sample) values of one metric at two checkpoints, or at every evaluation of a run, matched query by query (the same
row is the same query; :func:`beyondlabels.io.per_query_table` aligns a run's files by query id).

Definitions (stated once)
    - **Right.** A query is right at a checkpoint when its value is at least ``threshold`` (higher is better; a bool
      input is taken as is). For a 0/1 metric (``precision@1``, ``hit@k``) every threshold in ``(0, 1]`` gives the
      same; for a graded one (``map@r``) the threshold says what counts as right. NaN values (a query a metric leaves
      out) make the query missing at that checkpoint.
    - **Negative flip** (:func:`negative_flips`; Yan et al., *Positive-Congruent Training: Towards Regression-Free
      Model Updates*, CVPR 2021): right at the reference checkpoint and wrong at the current one. The negative flip
      rate is their number over the queries present at both, ``NFR = #{right_ref & wrong_cur} / n``; the positive
      flip rate counts the opposite change. ``NFR`` is at most the error rate of the current checkpoint and can be
      large while the accuracy does not change (flips both ways).
    - **Per-class regression** (:func:`class_regressions`): for each class, the queries of that class present at both
      checkpoints, paired; ``down`` queries worse now (a lower value), ``up`` better, the others tied. The one-sided
      exact sign test of "worse now": ``p = P(Binomial(down + up, 1/2) >= down)`` (1 when nothing changed); for 0/1
      values it is the exact one-sided McNemar test. It needs no model of the values (any scale, ties left out) and
      keeps its level for any class size. The p-values of all classes are adjusted by Benjamini–Hochberg
      (:func:`~beyondlabels.functional.multiple_testing.benjamini_hochberg`); a class has **regressed** when its
      adjusted p-value is at most ``fdr``: among the classes called regressed, the expected share that did not
      regress is at most ``fdr`` (independent classes, or positively dependent ones).
    - **Forgetting event** (:func:`forgetting_events`; Toneva et al., *An Empirical Study of Example Forgetting
      during Deep Neural Network Learning*, ICLR 2019): a query right at one evaluation and wrong at the next one
      (consecutive evaluations where the query has a value). Per query: the number of events, whether it was ever
      right (``learned``), the first evaluation it was right at, and ``unforgettable``: learned and never forgotten.
      Toneva et al. count the events over the presentations of training examples; here they are counted over the
      evaluations of held-out queries, so they describe what the evaluations saw, at their spacing.

Examples:
    >>> reference = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    >>> current = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    >>> flips = negative_flips(reference, current)
    >>> flips["negative"].tolist(), round(flips["negative_flip_rate"], 3), round(flips["positive_flip_rate"], 3)
    ([False, True, False, True, False, False], 0.333, 0.167)
    >>> right = torch.tensor([[1, 0, 1], [0, 0, 1], [1, 1, 0], [0, 1, 1]], dtype=torch.bool)  # [evaluations, queries]
    >>> out = forgetting_events(right)
    >>> out["events"].tolist(), out["unforgettable"].tolist(), out["first_learned"].tolist()
    ([2, 0, 1], [False, True, False], [0, 2, 0])
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_number
from beyondlabels.functional.multiple_testing import benjamini_hochberg

__all__ = ["class_regressions", "forgetting_events", "negative_flips", "right_answers"]


def _values(values: Any, name: str, dim: int) -> Tensor:
    tensor = values if isinstance(values, Tensor) else torch.as_tensor(values)
    if tensor.dim() != dim or tensor.is_complex():
        shape = "[queries]" if dim == 1 else "[evaluations, queries]"
        raise ValueError(f"`{name}` must be a {shape} tensor of per-query values, got shape {tuple(tensor.shape)}.")
    return tensor.detach()


def right_answers(values: Any, threshold: float = 0.5, name: str = "values") -> tuple[Tensor, Tensor]:
    """``(right, present)``: which queries are right (value ``>= threshold``; a bool input as is) and which have a
    value (not NaN), as bool tensors of the shape of ``values``.

    Examples:
        >>> right, present = right_answers([1.0, 0.0, float("nan"), 0.7])
        >>> right.tolist(), present.tolist()
        ([True, False, False, True], [True, True, False, True])
    """
    tensor = values if isinstance(values, Tensor) else torch.as_tensor(values)
    if tensor.dtype == torch.bool:
        return tensor, torch.ones_like(tensor)
    threshold = check_number(threshold, "threshold", hint="the value from which a query counts as right")
    present = ~torch.isnan(tensor) if tensor.is_floating_point() else torch.ones_like(tensor, dtype=torch.bool)
    return (tensor >= threshold) & present, present


def negative_flips(reference: Any, current: Any, *, threshold: float = 0.5) -> dict[str, Any]:
    """Negative and positive flips from ``reference`` to ``current`` (definitions: the module docstring).

    Args:
        reference: Per-query values ``[queries]`` at the reference checkpoint (e.g. the best one), or bools (right).
        current: Per-query values at the current checkpoint, the same queries in the same order.
        threshold: The value from which a query counts as right.

    Returns:
        ``{"negative": bool [queries], "positive": bool [queries], "negative_flip_rate", "positive_flip_rate",
        "reference_accuracy", "current_accuracy" (floats over the queries present at both; NaN when none is),
        "n": int}``.

    Raises:
        ValueError: for inputs that are not 1-D or of different lengths, or a non-finite ``threshold``.
    """
    ref, cur = _values(reference, "reference", 1), _values(current, "current", 1)
    if ref.shape != cur.shape:
        raise ValueError(
            f"`reference` and `current` must hold the same queries in the same order, got {ref.numel()} and "
            f"{cur.numel()} values."
        )
    right_ref, present_ref = right_answers(ref, threshold, "reference")
    right_cur, present_cur = right_answers(cur, threshold, "current")
    both = present_ref & present_cur
    n = int(both.sum())
    negative, positive = both & right_ref & ~right_cur, both & ~right_ref & right_cur

    def share(mask: Tensor) -> float:
        return float(mask.sum()) / n if n else math.nan

    return {
        "negative": negative,
        "positive": positive,
        "negative_flip_rate": share(negative),
        "positive_flip_rate": share(positive),
        "reference_accuracy": share(both & right_ref),
        "current_accuracy": share(both & right_cur),
        "n": n,
    }


def _sign_test(down: Tensor, up: Tensor) -> Tensor:
    """One-sided exact sign test ``P(Binomial(down + up, 1/2) >= down)`` per entry (1 where nothing changed)."""
    from scipy import special

    total = (down + up).double().cpu().numpy()
    k = down.double().cpu().numpy()
    p = special.bdtrc(k - 1, total, 0.5)  # P(X > k - 1) = P(X >= k)
    p = torch.as_tensor(p, dtype=torch.float64)
    return torch.where(torch.as_tensor(k) <= 0, 1.0, p).clamp(max=1.0)


def class_regressions(reference: Any, current: Any, labels: Any, *, fdr: float = 0.1) -> dict[str, Tensor]:
    """Which classes got worse from ``reference`` to ``current``: per class, an exact one-sided sign test over its
    paired queries, adjusted for the number of classes by Benjamini–Hochberg (definitions: the module docstring).

    Args:
        reference: Per-query values ``[queries]`` at the reference checkpoint (higher is better).
        current: Per-query values at the current checkpoint, the same queries in the same order.
        labels: Int class label ``[queries]`` of each query.
        fdr: The false discovery rate: the expected share, among the classes called regressed, of classes that did
            not regress.

    Returns:
        Tensors with one entry per class present, in ascending label order: ``"label"``, ``"n"`` (paired queries),
        ``"reference_mean"``, ``"current_mean"``, ``"down"``, ``"up"``, ``"pvalue"``, ``"adjusted"`` and
        ``"regressed"`` (bool).

    Raises:
        ValueError: for inputs of different lengths, labels that are not integers, or ``fdr`` outside (0, 1).

    Examples:
        >>> reference = torch.tensor([1.0] * 20 + [1.0] * 20)
        >>> current = torch.tensor([1.0] * 20 + [0.0] * 12 + [1.0] * 8)
        >>> out = class_regressions(reference, current, torch.tensor([0] * 20 + [1] * 20))
        >>> out["label"].tolist(), out["down"].tolist(), out["regressed"].tolist()
        ([0, 1], [0, 12], [False, True])
    """
    ref = _values(reference, "reference", 1).double()
    cur = _values(current, "current", 1).double().to(ref.device)
    label = _values(labels, "labels", 1).to(ref.device)
    if not (ref.shape == cur.shape == label.shape):
        raise ValueError(
            f"`reference`, `current` and `labels` must hold one entry per query, got {ref.numel()}, {cur.numel()} "
            f"and {label.numel()}."
        )
    if label.is_floating_point() or label.dtype == torch.bool:
        raise ValueError(f"`labels` must be integer class labels, got {label.dtype}.")
    fdr = check_number(fdr, "fdr", above=0.0, below=1.0, hint="e.g. 0.1")
    both = ~torch.isnan(ref) & ~torch.isnan(cur)
    classes, index = torch.unique(label[both], return_inverse=True)
    k = classes.numel()

    def per_class(x: Tensor) -> Tensor:
        return torch.zeros(k, dtype=torch.float64, device=ref.device).index_add_(0, index, x.double())

    n = per_class(torch.ones_like(ref[both]))
    change = cur[both] - ref[both]
    down, up = per_class(change < 0), per_class(change > 0)
    pvalue = _sign_test(down, up)
    adjusted = torch.as_tensor(benjamini_hochberg(pvalue.numpy()), dtype=torch.float64)
    return {
        "label": classes,
        "n": n.long(),
        "reference_mean": per_class(ref[both]) / n,
        "current_mean": per_class(cur[both]) / n,
        "down": down.long(),
        "up": up.long(),
        "pvalue": pvalue,
        "adjusted": adjusted,
        "regressed": adjusted <= fdr,
    }


def forgetting_events(values: Any, *, threshold: float = 0.5) -> dict[str, Tensor]:
    """Forgetting events per query across evaluations (definitions: the module docstring).

    Args:
        values: ``[evaluations, queries]`` per-query values in the order of the evaluations (or bools: right).
        threshold: The value from which a query counts as right.

    Returns:
        ``{"events": long [queries], "learned": bool, "unforgettable": bool, "first_learned": long (the index of the
        first evaluation it was right at; -1 if never)}``.

    Raises:
        ValueError: for input that is not 2-D.
    """
    table = _values(values, "values", 2)
    right, present = right_answers(table, threshold, "values")
    evaluations = table.shape[0]
    # each evaluation against the latest earlier one where the query had a value
    position = torch.arange(evaluations, device=table.device)[:, None].expand_as(present)
    last_seen = torch.where(present, position, -1).cummax(0).values
    previous = torch.cat([torch.full_like(last_seen[:1], -1), last_seen[:-1]])
    was_right = torch.zeros_like(right)
    has_previous = previous >= 0
    was_right[has_previous] = right.gather(0, previous.clamp(min=0))[has_previous]
    events = (present & has_previous & was_right & ~right).sum(0)
    learned = right.any(0)
    first = torch.where(learned, right.long().argmax(0), -1)
    return {"events": events, "learned": learned, "unforgettable": learned & (events == 0), "first_learned": first}
