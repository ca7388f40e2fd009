"""Confidence intervals of an evaluation's headline keys, driven by its output schema.

The one place intervals are computed: the callbacks and every offline evaluation call :func:`add_confidence_intervals`.
Each interval is the percentile bootstrap of :func:`beyondlabels.functional.bootstrap.bootstrap_ci` over the
per-query values; the keys it adds are ``<key>_ci_low`` and ``<key>_ci_high``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    distributed: bool = False,
    process_group: Any = None,
) -> dict[str, float]:
    """``{<key>_ci_low: ..., <key>_ci_high: ...}``: the percentile bootstrap interval of the mean of each per-query
    vector (NaN left out), equal to :func:`bootstrap_ci` with the same seed. Keys missing from ``per_query`` are
    skipped. Above ``max_bootstrap_n`` values the bootstrap (whose cost grows as ``rounds x n``) is replaced by the
    normal interval ``mean +- z * sd / sqrt(n)`` (sample sd, ddof 1), which the bootstrap of a mean approaches at
    that size; it keeps an evaluation of a million queries cheap.

    With ``distributed=True`` under an initialized ``torch.distributed`` group (``process_group``, default the
    whole world) of more than one process, every process of the group must call this with the same arguments: each
    computes its share of the rounds (blocks of rounds whose draws do not depend on the split) and the resampled
    means are gathered, so every process returns the one-process intervals bit for bit for about ``1/W`` of the
    work. It is one collective call whatever happens: a failure on any process raises on every process (no process
    is left waiting), and processes whose ``per_query`` differ (a metric that was not synced) each compute their own
    intervals whole. Otherwise (no group, one process, ``distributed=False``) every round is computed here.

    Examples:
        >>> ci = confidence_intervals({"p@1": torch.tensor([1.0, 0.0, 1.0, 1.0])}, ["p@1"], rounds=200)
        >>> sorted(ci), ci["p@1_ci_low"] <= 0.75 <= ci["p@1_ci_high"]
        (['p@1_ci_high', 'p@1_ci_low'], True)
    """
    share = _process_share(process_group) if distributed else None
    if share is None:
        rounds, seed, confidence = check_rounds(rounds), check_seed(seed), check_confidence(confidence)
        groups = _key_groups(per_query, keys, max_bootstrap_n)
        means = [resampled_means(g.matrix, rounds, seed) if g.bootstrap else None for g in groups]
        return _bounds(groups, means, confidence)
    failure: BaseException | None = None
    groups, means, digest = [], [], ""
    try:
        rounds, seed, confidence = check_rounds(rounds), check_seed(seed), check_confidence(confidence)
        groups = _key_groups(per_query, keys, max_bootstrap_n)
        means = [resampled_means(g.matrix, rounds, seed, share=share) if g.bootstrap else None for g in groups]
        digest = _digest(groups, rounds, seed)
    except Exception as exc:  # noqa: BLE001 - told to every process below, then raised on every process
        failure = exc
    means = _gathered_means(means, failure, share, process_group, digest)
    if means is None:  # the processes hold different values: each bootstraps its own whole
        means = [resampled_means(g.matrix, rounds, seed) if g.bootstrap else None for g in groups]
    return _bounds(groups, means, confidence)


@dataclass
class _KeyGroup:
    """Keys with the same queries (one NaN pattern): one matrix ``[n, K]`` of their finite values, whose resamples
    they share (one set of draws, one matrix product), and whether it is bootstrapped (or gets the normal interval,
    or a point)."""

    members: list[str]
    matrix: Tensor
    bootstrap: bool
    normal: bool


def _key_groups(per_query: Mapping[str, Any], keys: Sequence[str], max_bootstrap_n: int) -> list[_KeyGroup]:
    patterns: dict[bytes, list[tuple[str, Tensor]]] = {}
    for key in keys:
        if key not in per_query:
            continue
        values = vector(per_query[key], key)
        patterns.setdefault(torch.isnan(values).numpy().tobytes(), []).append((key, values))
    groups = []
    for members in patterns.values():
        matrix = torch.stack([finite(v) for _, v in members], dim=1)
        constant = matrix.shape[0] < 2 or bool((matrix == matrix[:1]).all())
        normal = not constant and matrix.shape[0] > max_bootstrap_n
        groups.append(_KeyGroup([k for k, _ in members], matrix, not constant and not normal, normal))
    return groups


def _bounds(groups: list[_KeyGroup], means: list[Tensor | None], confidence: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for group, group_means in zip(groups, means):
        matrix, n = group.matrix, group.matrix.shape[0]
        estimates = matrix.mean(dim=0) if n else torch.full((len(group.members),), math.nan, dtype=torch.float64)
        if group.normal:
            half = normal_ppf(0.5 + confidence / 2.0) * matrix.std(dim=0, unbiased=True) / math.sqrt(n)
            for column, key in enumerate(group.members):
                out[f"{key}_ci_low"] = float(estimates[column] - half[column])
                out[f"{key}_ci_high"] = float(estimates[column] + half[column])
            continue
        for column, key in enumerate(group.members):
            estimate = float(estimates[column])
            if group_means is None or bool((matrix[:, column] == matrix[0, column]).all()):
                interval = (
                    point_interval(estimate, confidence, "percentile", n)
                    if n
                    else Interval(math.nan, math.nan, math.nan, confidence, "percentile", 0)
                )
            else:
                interval = interval_from(group_means[:, column], estimate, confidence, "percentile", n, None)
            out[f"{key}_ci_low"], out[f"{key}_ci_high"] = interval.low, interval.high
    return out


def _process_share(process_group: Any) -> tuple[int, int] | None:
    """``(rank, world)`` of this process in ``process_group`` under an initialized group of more than one process."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    world = torch.distributed.get_world_size(process_group)
    return (torch.distributed.get_rank(process_group), world) if world > 1 else None


def _digest(groups: list[_KeyGroup], rounds: int, seed: int) -> str:
    """A fingerprint of what is bootstrapped (keys, values, rounds, seed), to tell whether every process holds the
    same."""
    digest = hashlib.blake2b(repr((rounds, seed)).encode(), digest_size=16)
    for group in groups:
        digest.update(repr((group.members, tuple(group.matrix.shape), group.bootstrap)).encode())
        digest.update(group.matrix.contiguous().numpy().tobytes())
    return digest.hexdigest()


def _gathered_means(
    means: list[Tensor | None],
    failure: BaseException | None,
    share: tuple[int, int],
    process_group: Any,
    digest: str,
) -> list[Tensor | None] | None:
    """Every process's share of the resampled means, joined in rank order (the whole rounds, in order), after one
    ``all_gather_object``; None when the processes hold different values (``digest``: :func:`_digest`). Raises on
    every process when any failed."""
    rank, world = share
    mine = (None, repr(failure), None) if failure is not None else (digest, None, means)
    every: list[Any] = [None] * world
    torch.distributed.all_gather_object(every, mine, group=process_group)
    if failure is not None:
        raise failure
    failed = [(r, entry[1]) for r, entry in enumerate(every) if entry[1] is not None]
    if failed:
        raise RuntimeError(
            f"confidence intervals failed on rank {failed[0][0]} ({failed[0][1]}); every rank stops with it."
        )
    if any(entry[0] != every[rank][0] for entry in every):
        return None
    return [
        None if column is None else torch.cat([entry[2][index] for entry in every])
        for index, column in enumerate(means)
    ]


def add_confidence_intervals(
    results: Mapping[str, Any],
    schema: OutputSchema,
    keys: bool | Sequence[str] = True,
    *,
    rounds: int = 2000,
    seed: int = 11,
    distributed: bool = False,
    process_group: Any = None,
) -> tuple[dict[str, Any], OutputSchema]:
    """An evaluation's results with ``<key>_ci_low`` / ``<key>_ci_high`` of its headline keys, and the schema that
    describes them.

    Args:
        results: What a metric's ``compute`` returns: scalars and ``per_query`` (``{key: [N] values}``).
        schema: Its output schema.
        keys: Which headline keys get an interval (:func:`confidence_interval_keys`).
        rounds, seed: Of the bootstrap (:func:`confidence_intervals`).
        distributed, process_group: Share the bootstrap rounds between the processes of an initialized
            ``torch.distributed`` group, which must all call this with the same ``results`` (as after a metric's
            synced ``compute``); the bounds are the one-process bounds bit for bit (:func:`confidence_intervals`).

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
        out.update(
            confidence_intervals(
                per_query, chosen, rounds=rounds, seed=seed, distributed=distributed, process_group=process_group
            )
        )
    return out, with_confidence_intervals(schema, chosen)
