"""Confidence intervals of an evaluation's headline keys, driven by its output schema.

The one place intervals are computed: the callbacks and every offline evaluation call :func:`add_confidence_intervals`.
Each interval is the percentile bootstrap of :func:`beyondlabels.functional.bootstrap.bootstrap_ci` over the
per-query values; the keys it adds are ``<key>_ci_low`` and ``<key>_ci_high``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.stats import (
    Interval,
    check_confidence,
    check_rounds,
    check_seed,
    finite,
    interval_from,
    normal_ppf,
    point_interval,
    resampled_means,
    vector,
)
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = ["add_confidence_intervals", "confidence_interval_keys", "confidence_intervals", "with_confidence_intervals"]


def confidence_interval_keys(schema: OutputSchema, keys: bool | Sequence[str] = True) -> list[str]:
    """The headline keys that get a confidence interval: scalars with a direction that have a per-query vector of
    the same name (all of them for ``keys=True``, none for False, or the given subset).

    Raises:
        ValueError: when a requested key is not such a scalar (the message lists the ones that are).

    Examples:
        >>> schema = OutputSchema({"p@1": KeySpec("scalar", True), "n": KeySpec("scalar", None, count=True)},
        ...                       {"p@1": KeySpec("per_query", True)})
        >>> confidence_interval_keys(schema), confidence_interval_keys(schema, False)
        (['p@1'], [])
    """
    eligible = [k for k in schema.scalar_keys() if schema[k].higher_is_better is not None and k in schema.per_query]
    if keys is True:
        return eligible
    if keys is False or keys is None:
        return []
    if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"`confidence_intervals` must be True, False or a list of metric names, got {keys!r}.")
    unknown = [k for k in keys if k not in eligible]
    if unknown:
        raise ValueError(
            f"`confidence_intervals` names {unknown}, which have no per-query values; choose from {eligible}."
        )
    return list(keys)


def with_confidence_intervals(schema: OutputSchema, keys: Sequence[str]) -> OutputSchema:
    """``schema`` plus ``<key>_ci_low`` and ``<key>_ci_high`` (scalars with the key's direction) for each key."""
    extra: dict[str, KeySpec] = {}
    for key in keys:
        extra[f"{key}_ci_low"] = extra[f"{key}_ci_high"] = KeySpec("scalar", schema[key].higher_is_better)
    return schema.merged(OutputSchema(extra))


def confidence_intervals(
    per_query: Mapping[str, Any],
    keys: Sequence[str],
    *,
    rounds: int = 2000,
    confidence: float = 0.95,
    seed: int = 11,
    max_bootstrap_n: int = 20_000,
) -> dict[str, float]:
    """``{<key>_ci_low: ..., <key>_ci_high: ...}``: the percentile bootstrap interval of the mean of each per-query
    vector (NaN left out), equal to :func:`bootstrap_ci` with the same seed. Keys missing from ``per_query`` are
    skipped. Above ``max_bootstrap_n`` values the bootstrap (whose cost grows as ``rounds x n``) is replaced by the
    normal interval ``mean +- z * sd / sqrt(n)`` (sample sd, ddof 1), which the bootstrap of a mean approaches at
    that size; it keeps an evaluation of a million queries cheap.

    Examples:
        >>> ci = confidence_intervals({"p@1": torch.tensor([1.0, 0.0, 1.0, 1.0])}, ["p@1"], rounds=200)
        >>> sorted(ci), ci["p@1_ci_low"] <= 0.75 <= ci["p@1_ci_high"]
        (['p@1_ci_high', 'p@1_ci_low'], True)
    """
    rounds, seed, confidence = check_rounds(rounds), check_seed(seed), check_confidence(confidence)
    out: dict[str, float] = {}
    # keys with the same queries (the same NaN pattern) share one set of resamples: one matrix product for all
    groups: dict[bytes, list[tuple[str, Tensor]]] = {}
    for key in keys:
        if key not in per_query:
            continue
        values = vector(per_query[key], key)
        groups.setdefault(torch.isnan(values).numpy().tobytes(), []).append((key, values))
    for members in groups.values():
        matrix = torch.stack([finite(v) for _, v in members], dim=1)
        n = matrix.shape[0]
        estimates = matrix.mean(dim=0) if n else torch.full((len(members),), math.nan, dtype=torch.float64)
        constant = n < 2 or bool((matrix == matrix[:1]).all())
        if not constant and n > max_bootstrap_n:
            half = normal_ppf(0.5 + confidence / 2.0) * matrix.std(dim=0, unbiased=True) / math.sqrt(n)
            for column, (key, _) in enumerate(members):
                out[f"{key}_ci_low"] = float(estimates[column] - half[column])
                out[f"{key}_ci_high"] = float(estimates[column] + half[column])
            continue
        means = None if constant else resampled_means(matrix, rounds, torch.Generator(device="cpu").manual_seed(seed))
        for column, (key, _) in enumerate(members):
            estimate = float(estimates[column])
            if means is None or bool((matrix[:, column] == matrix[0, column]).all()):
                interval = (
                    point_interval(estimate, confidence, "percentile", n)
                    if n
                    else Interval(math.nan, math.nan, math.nan, confidence, "percentile", 0)
                )
            else:
                interval = interval_from(means[:, column], estimate, confidence, "percentile", n, None)
            out[f"{key}_ci_low"], out[f"{key}_ci_high"] = interval.low, interval.high
    return out


def add_confidence_intervals(
    results: Mapping[str, Any],
    schema: OutputSchema,
    keys: bool | Sequence[str] = True,
    *,
    rounds: int = 2000,
    seed: int = 11,
) -> tuple[dict[str, Any], OutputSchema]:
    """An evaluation's results with ``<key>_ci_low`` / ``<key>_ci_high`` of its headline keys, and the schema that
    describes them.

    Args:
        results: What a metric's ``compute`` returns: scalars and ``per_query`` (``{key: [N] values}``).
        schema: Its output schema.
        keys: Which headline keys get an interval (:func:`confidence_interval_keys`).
        rounds, seed: Of the bootstrap (:func:`confidence_intervals`).

    Returns:
        ``(results plus the bounds, schema plus their keys)``; ``results`` itself is left as it is. Without a
        ``per_query`` mapping no bound is added (the schema still names them).

    Examples:
        >>> schema = OutputSchema({"p@1": KeySpec("scalar", True)}, {"p@1": KeySpec("per_query", True)})
        >>> out, extended = add_confidence_intervals(
        ...     {"p@1": 0.5, "per_query": {"p@1": torch.tensor([0.0, 1.0])}}, schema
        ... )
        >>> sorted(k for k in out if k != "per_query"), extended.scalar_keys()
        (['p@1', 'p@1_ci_high', 'p@1_ci_low'], ['p@1', 'p@1_ci_low', 'p@1_ci_high'])
    """
    chosen = confidence_interval_keys(schema, keys)
    out = dict(results)
    per_query = results.get("per_query")
    if chosen and isinstance(per_query, Mapping):
        out.update(confidence_intervals(per_query, chosen, rounds=rounds, seed=seed))
    return out, with_confidence_intervals(schema, chosen)
