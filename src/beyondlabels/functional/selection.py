"""Which checkpoint to keep: the model confidence set over the evaluated checkpoints and a selection-corrected
estimate of the chosen one's value.

Pure torch, on the device of the input (float64; float32 on MPS, which has no float64), no Lightning. The input is a
table of per-query values of one metric, ``[queries, checkpoints]``: row ``i`` is the same query at every checkpoint
(the evaluation callbacks keep these as ``per_query/step_<step>.npz``; :func:`beyondlabels.io.per_query_table` reads
them into this shape).

Definitions (stated once)
    - **Bootstrap over queries.** The queries are exchangeable draws from the population of queries the evaluation set
      stands for, the same queries at every checkpoint. A resample draws ``n`` queries with replacement (iid: the
      ``block_size=1`` bootstrap of ``arch``), the same resample for every checkpoint. Resamples come from a
      ``torch.Generator`` on the input's device seeded with ``seed`` (the same numbers on any world size; a CPU and a
      CUDA generator draw different numbers), in chunks of rounds that bound the memory (the numbers do not depend
      on the chunk). ``resamples`` (``[rounds, queries]`` indices) replays given draws instead, e.g. another
      implementation's.
    - **Model confidence set** (:func:`model_confidence_set`; Hansen, Lunde & Nason, *The Model Confidence Set*,
      Econometrica 79(2), 2011), with ``L`` the losses (lower is better), ``Lbar_j`` their means over the queries and
      ``e*_bj = Lbar*_bj - Lbar_j`` the resampled deviations. Starting from every checkpoint, each round tests whether
      the ones still in the set are equally good, and if not removes the worst:

      - ``statistic="R"`` (``T_R``): ``d_ij = Lbar_i - Lbar_j``, ``var_ij = mean_b (e*_bi - e*_bj)^2`` (1 on the
        diagonal), ``t_ij = d_ij / sqrt(var_ij)``; ``T_R = max_(i,j in M) t_ij``, its resampled version
        ``max_(i,j in M) (e*_bi - e*_bj) / sqrt(var_ij)``; the checkpoint eliminated is the row ``i`` of the largest
        ``t_ij`` (the first in row-major order: the lowest index among ties). The variances are computed once, from
        every checkpoint.
      - ``statistic="max"`` (``T_max``): over the set ``M`` of ``k`` checkpoints, ``x*_bi = e*_bi - mean_(j in M)
        e*_bj``, ``var_i = mean_b x*_bi^2``, ``t_i = (Lbar_i - mean_(j in M) Lbar_j) / sqrt(var_i)``; ``T_max =
        max_i t_i``, its resampled version ``max_i x*_bi / sqrt(var_i)``; every checkpoint whose ``t_i`` equals
        ``T_max`` is eliminated (ties together). The variances are recomputed over each round's set.
      - A zero variance (two checkpoints whose losses differ by a constant on every query) makes ``t`` 0 for equal
        means and +-inf otherwise; the resampled ratio is then 0.
      - The round's p-value is the share of resamples whose statistic reaches the observed one (``T* >= T``, values
        within a relative ``100 eps`` of each other counting as equal). ``arch`` counts ``T < T*`` in floating point:
        the same wherever the statistics are continuous; on per-query values on a grid (0/1 hits) the resampled
        statistic can equal the observed one exactly, and ``arch`` leaves such ties to rounding where they count
        here as reaching it (the conservative convention of resampling p-values, a larger set); the
        **MCS p-value** of the checkpoint eliminated at round ``r`` is the largest p-value of rounds ``1..r`` (the
        running maximum), and 1 for the last checkpoint standing. The ``1 - size`` set holds the checkpoints with
        MCS p-value above ``size``. These are ``arch.bootstrap.MCS``'s definitions (``method="R"`` and ``"max"``),
        which the tests check; where every checkpoint left ties under ``"max"`` they all stay (p-value 1).

      What the set promises: in repeated evaluation sets drawn from the same population of queries, the set holds
      the checkpoint with the best expected value (the lowest expected loss) with probability at least ``1 - size``
      (asymptotically in the number of queries). It says nothing about checkpoints that were not evaluated, about
      another population of queries, or about which checkpoint of the set is best: a checkpoint left out is
      significantly worse than the ones kept; a checkpoint kept is not shown to be as good as the best, only not
      shown to be worse.
    - **Selection-corrected estimate** (:func:`best_checkpoint_estimate`): the checkpoint with the best mean over the
      queries (``selected``, the first of equal means) is the usual choice, and its mean (``naive``) is biased upward:
      the winner's curse (the maximum of noisy means over near-equal checkpoints). The correction is out-of-bag
      (the bootstrap bias-corrected estimate of Tsamardinos, Greasidou & Borboudakis, *Machine Learning* 107(12),
      2018): in each resample the checkpoint with the best resampled mean is chosen, and its value is measured on the
      queries the resample left out; ``estimate`` is the mean of those out-of-bag values over the resamples. The
      choice is made on queries the estimate never sees, so selection noise cannot inflate it; choosing on a
      resample (about 63% distinct queries) is a little noisier than choosing on all of them, which biases the
      estimate slightly down. The interval is the percentile interval of the selected checkpoint's resampled means
      (the usual bootstrap interval of its mean over the queries), moved by ``estimate - naive``: the query-sampling
      uncertainty of the chosen checkpoint, centred on the corrected value (its coverage of the chosen checkpoint's
      expected value is measured in ``docs/selection.md``).

Examples:
    >>> g = torch.Generator().manual_seed(0)
    >>> hits = (torch.rand(500, 4, generator=g) < torch.tensor([0.70, 0.71, 0.60, 0.72])).double()
    >>> mcs = model_confidence_set(-hits, size=0.1, rounds=500, seed=0)  # losses: lower is better
    >>> mcs["included"].tolist()
    [True, True, False, True]
    >>> best = best_checkpoint_estimate(hits, rounds=500, seed=0)
    >>> best["selected"], round(best["naive"], 3), best["estimate"] < best["naive"]
    (1, 0.722, True)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_choice, check_confidence, check_number, check_rounds, check_seed
from beyondlabels._internal.stats import CHUNK_VALUES
from beyondlabels.functional.regressions import class_regressions, forgetting_events, negative_flips

__all__ = ["STATISTICS", "best_checkpoint_estimate", "model_confidence_set", "resampled_means", "select_checkpoints"]

STATISTICS = ("R", "max")


def _table(values: Any, name: str, what: str, min_columns: int) -> Tensor:
    """``values`` as a finite ``[queries, checkpoints]`` float tensor on its device (float64; float32 on MPS)."""
    tensor = values if isinstance(values, Tensor) else torch.as_tensor(values)
    if tensor.dim() != 2 or tensor.dtype == torch.bool or tensor.is_complex():
        raise ValueError(
            f"`{name}` must be a [queries, checkpoints] table of real numbers ({what}), got shape "
            f"{tuple(tensor.shape)} {tensor.dtype}."
        )
    if tensor.shape[0] < 2 or tensor.shape[1] < min_columns:
        raise ValueError(
            f"`{name}` must hold at least 2 queries and {min_columns} checkpoint(s) ({what}), got shape "
            f"{tuple(tensor.shape)}."
        )
    dtype = torch.float32 if tensor.device.type == "mps" else torch.float64
    tensor = tensor.detach().to(dtype)
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(
            f"`{name}` must be finite: leave out the queries with a NaN or infinite value at any checkpoint "
            "(beyondlabels.io.per_query_table does), so that every checkpoint is compared on the same queries."
        )
    return tensor


def _check_resamples(resamples: Any, queries: int, device: torch.device) -> Tensor:
    index = torch.as_tensor(resamples, device=device)
    if index.dim() != 2 or index.shape[1] != queries or index.shape[0] < 1 or index.is_floating_point():
        raise ValueError(
            f"`resamples` must be integer indices [rounds, queries={queries}] (one resample of the queries per row), "
            f"got shape {tuple(index.shape)} {index.dtype}."
        )
    if bool((index < 0).any()) or bool((index >= queries).any()):
        raise ValueError(f"`resamples` must index the queries: every entry in [0, {queries}).")
    return index.long()


def _resample_chunks(queries: int, rounds: int, seed: int, resamples: Tensor | None, device: torch.device, width: int):
    """Yield ``(start, counts [size, queries])``: how often each query is drawn in each resample, ``CHUNK_VALUES``
    values (counting ``width`` per query) at a time."""
    generator = torch.Generator(device=device).manual_seed(seed) if resamples is None else None
    chunk = max(1, CHUNK_VALUES // max(queries * max(width, 1), 1))
    total = rounds if resamples is None else resamples.shape[0]
    dtype = torch.float32 if device.type == "mps" else torch.float64
    for start in range(0, total, chunk):
        size = min(chunk, total - start)
        if resamples is None:
            index = torch.randint(queries, (size, queries), generator=generator, device=device)
        else:
            index = resamples[start : start + size]
        ones = torch.ones(size, queries, dtype=dtype, device=device)
        yield start, torch.zeros(size, queries, dtype=dtype, device=device).scatter_add_(1, index, ones)


def resampled_means(values: Any, *, rounds: int = 1000, seed: int = 0, resamples: Any = None) -> Tensor:
    """Means ``[rounds, checkpoints]`` of every checkpoint's column of ``values`` ``[queries, checkpoints]`` over
    ``rounds`` resamples of the queries (the same resample for every checkpoint; definitions: the module docstring).

    Examples:
        >>> resampled_means(torch.tensor([[1.0, 0.0], [1.0, 2.0]]), rounds=3, resamples=[[0, 0], [1, 1], [0, 1]])
        tensor([[1., 0.],
                [1., 2.],
                [1., 1.]], dtype=torch.float64)
    """
    table = _table(values, "values", "one column per checkpoint", 1)
    rounds, seed = check_rounds(rounds), check_seed(seed)
    index = None if resamples is None else _check_resamples(resamples, table.shape[0], table.device)
    n = table.shape[0]
    parts = [counts @ table / n for _, counts in _resample_chunks(n, rounds, seed, index, table.device, 1)]
    return torch.cat(parts)


# ---- the model confidence set -----------------------------------------------------------------------------------


def _ratio(numerator: Tensor, denominator: Tensor) -> Tensor:
    """``numerator / denominator``; over a zero denominator: 0 for a zero numerator, else +-inf."""
    if bool((denominator > 0).all()):
        return numerator / denominator
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    inf = torch.where(numerator > 0, math.inf, torch.where(numerator < 0, -math.inf, 0.0)).to(numerator.dtype)
    return torch.where(denominator > 0, numerator / safe, inf)


def _exceeds(resampled: Tensor, observed: Tensor) -> Tensor:
    """``resampled >= observed``, with values within the rounding of the arithmetic (a relative ``100 eps``) counted
    as equal: per-query values on a grid (0/1 hits) make exact ties between an observed and a resampled statistic,
    which rounding would otherwise decide either way; a tie counts as reaching the observed value (the conservative
    convention of resampling p-values)."""
    slack = 100 * torch.finfo(observed.dtype).eps * observed.abs().nan_to_num(posinf=0.0, neginf=0.0)
    return resampled >= observed - slack


def _pair_variances(deviations: Tensor) -> Tensor:
    """``var_ij = mean_b (e_bi - e_bj)^2`` over the resamples ``deviations`` ``[B, m]`` (1 on the diagonal), in
    chunks of resamples."""
    rounds, m = deviations.shape
    total = torch.zeros(m, m, dtype=deviations.dtype, device=deviations.device)
    chunk = max(1, CHUNK_VALUES // (m * m))
    for start in range(0, rounds, chunk):
        e = deviations[start : start + chunk]
        total += ((e[:, :, None] - e[:, None, :]) ** 2).sum(0)
    variances = total / rounds
    variances.fill_diagonal_(1.0)
    return variances


def _range_elimination(standardized: Tensor) -> tuple[Tensor, Tensor]:
    """The elimination order of ``T_R`` from the standardized differences ``t`` ``[m, m]``: ``(order [m - 1],
    statistics [m - 1])``, the checkpoint removed at each round and the round's ``T_R``."""
    m = standardized.shape[0]
    alive = torch.ones(m, dtype=torch.bool, device=standardized.device)
    order, statistics = [], []
    for _ in range(m - 1):
        masked = standardized.masked_fill(~(alive[:, None] & alive[None, :]), -math.inf)
        flat = masked.reshape(-1).argmax()  # the first maximum in row-major order
        row = flat // m
        order.append(row)
        statistics.append(masked.reshape(-1)[flat])
        alive[row] = False
    return torch.stack(order), torch.stack(statistics)


def _mcs_range(means: Tensor, deviations: Tensor) -> tuple[Tensor, Tensor]:
    """``(order, round p-values)`` of the ``T_R`` procedure (definitions: the module docstring)."""
    rounds, m = deviations.shape
    variances = _pair_variances(deviations)
    scale = variances.sqrt()
    standardized = _ratio(means[:, None] - means[None, :], scale)
    order, statistics = _range_elimination(standardized)
    # The set at round r holds the checkpoints removed at round r or later (the last one: never), so a pair (i, j)
    # is in it while r <= min(out_i, out_j): each resample's T_R of every round is the suffix maximum over rounds of
    # the pairs' largest values grouped by min(out_i, out_j).
    out = torch.full((m,), m - 1, dtype=torch.long, device=means.device)
    out[order] = torch.arange(m - 1, device=means.device)
    group = torch.minimum(out[:, None], out[None, :]).reshape(1, -1)
    exceed = torch.zeros(m - 1, dtype=torch.long, device=means.device)
    chunk = max(1, CHUNK_VALUES // (m * m))
    for start in range(0, rounds, chunk):
        e = deviations[start : start + chunk]
        size = e.shape[0]
        resampled = _ratio(e[:, :, None] - e[:, None, :], scale.expand(size, m, m)).reshape(size, -1)
        largest = torch.full((size, m), -math.inf, dtype=e.dtype, device=e.device)
        largest.scatter_reduce_(1, group.expand(size, -1), resampled, reduce="amax")
        per_round = largest.flip(1).cummax(1).values.flip(1)[:, : m - 1]
        exceed += _exceeds(per_round, statistics[None, :]).sum(0)
    return order, exceed.to(means.dtype) / rounds


def _mcs_max(means: Tensor, deviations: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    """``(groups removed at each round, round p-values)`` of the ``T_max`` procedure."""
    alive = torch.ones(means.numel(), dtype=torch.bool, device=means.device)
    groups, pvalues = [], []
    while int(alive.sum()) > 1:
        index = alive.nonzero().flatten()
        x = deviations[:, index]
        x = x - x.mean(1, keepdim=True)
        sd = (x**2).mean(0).sqrt()
        centred = means[index] - means[index].mean()
        t = _ratio(centred, sd)
        statistic = t.max()
        tied = index[t == statistic]
        if tied.numel() == index.numel():  # every checkpoint left is as good as the others: they all stay
            break
        resampled = _ratio(x, sd.expand_as(x)).amax(1)
        groups.append(tied)
        pvalues.append(_exceeds(resampled, statistic).to(means.dtype).mean())
        alive[tied] = False
    return groups, pvalues


def model_confidence_set(
    losses: Any,
    *,
    size: float = 0.1,
    statistic: str = "R",
    rounds: int = 1000,
    seed: int = 0,
    resamples: Any = None,
) -> dict[str, Tensor]:
    """The model confidence set of the checkpoints (Hansen, Lunde & Nason 2011; definitions, tie rules and what the
    set promises: the module docstring).

    Args:
        losses: ``[queries, checkpoints]`` per-query losses, lower is better (for a metric where higher is better,
            pass its negative), finite, the same queries in every column.
        size: The test size ``alpha``: the set holds the best checkpoint with probability ``1 - size``.
        statistic: ``"R"`` (``T_R``, the range statistic) or ``"max"`` (``T_max``).
        rounds: Bootstrap resamples of the queries.
        seed: Seed of the resamples.
        resamples: ``[rounds, queries]`` query indices to use instead of drawing them (``rounds`` and ``seed`` are
            then ignored), e.g. ``arch``'s bootstrap indices.

    Returns:
        ``{"included": bool [checkpoints], "pvalues": [checkpoints] (the MCS p-values), "order": long [checkpoints]
        (the order of elimination, the checkpoints still in at the end last, in index order), "size": 0-d}``.

    Raises:
        ValueError: for a table that is not ``[queries >= 2, checkpoints >= 2]`` of finite numbers, or a bad
            ``size``, ``statistic``, ``rounds``, ``seed`` or ``resamples``.

    Examples:
        >>> losses = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
        >>> out = model_confidence_set(losses, size=0.1, rounds=200, seed=1)
        >>> out["included"].tolist(), out["order"].tolist()
        ([True, False, True], [1, 0, 2])
    """
    table = _table(losses, "losses", "per-query losses, lower is better", 2)
    size = check_number(size, "size", above=0.0, below=1.0, hint="e.g. 0.1 for a 90% set")
    check_choice(statistic, "statistic", STATISTICS, hint="'R' the range statistic, 'max' the deviation from the mean")
    means = table.mean(0)
    deviations = resampled_means(table, rounds=rounds, seed=seed, resamples=resamples) - means
    m = table.shape[1]
    pvalues = torch.ones(m, dtype=table.dtype, device=table.device)
    running = torch.zeros((), dtype=table.dtype, device=table.device)
    removed: list[Tensor] = []
    if statistic == "R":
        order, round_p = _mcs_range(means, deviations)
        groups = [order[r : r + 1] for r in range(m - 1)]
        round_pvalues = list(round_p)
    else:
        groups, round_pvalues = _mcs_max(means, deviations)
    for group, p in zip(groups, round_pvalues):
        running = torch.maximum(running, p)
        pvalues[group] = running
        removed.append(group)
    done = torch.cat(removed) if removed else torch.zeros(0, dtype=torch.long, device=table.device)
    left = torch.ones(m, dtype=torch.bool, device=table.device)
    left[done] = False
    order = torch.cat([done, left.nonzero().flatten()])
    return {
        "included": pvalues > size,
        "pvalues": pvalues,
        "order": order,
        "size": torch.tensor(size, dtype=table.dtype, device=table.device),
    }


# ---- the selection-corrected estimate -----------------------------------------------------------------------------


def best_checkpoint_estimate(
    values: Any, *, rounds: int = 1000, confidence: float = 0.95, seed: int = 0, resamples: Any = None
) -> dict[str, Any]:
    """The checkpoint with the best mean, and a selection-corrected (out-of-bag) estimate of its value with an
    interval (definitions and why this estimate: the module docstring).

    Args:
        values: ``[queries, checkpoints]`` per-query values, higher is better (pass the negative of a loss), finite,
            the same queries in every column.
        rounds: Bootstrap resamples of the queries.
        confidence: Level of the interval.
        seed: Seed of the resamples.
        resamples: ``[rounds, queries]`` query indices to use instead of drawing them.

    Returns:
        ``{"selected": int (column of the best mean, the first of equal means), "naive": its mean, "estimate": the
        out-of-bag estimate, "ci_low", "ci_high": its interval, "confidence", "rounds": resamples with at least one
        query left out (the others are skipped)}`` (floats).

    Raises:
        ValueError: for a table that is not ``[queries >= 2, checkpoints >= 1]`` of finite numbers, or bad
            ``rounds``, ``confidence``, ``seed`` or ``resamples``.

    Examples:
        >>> g = torch.Generator().manual_seed(1)
        >>> same = (torch.rand(1000, 30, generator=g) < 0.88).double()  # 30 checkpoints, all 0.88 in expectation
        >>> out = best_checkpoint_estimate(same, rounds=400, seed=0)
        >>> round(out["naive"], 3), round(out["estimate"], 3)  # every checkpoint is worth 0.88
        (0.893, 0.87)
    """
    table = _table(values, "values", "per-query values, higher is better", 1)
    confidence = check_confidence(confidence)
    rounds, seed = check_rounds(rounds), check_seed(seed)
    index = None if resamples is None else _check_resamples(resamples, table.shape[0], table.device)
    n = table.shape[0]
    means = table.mean(0)
    selected = int(means.argmax())  # torch.argmax returns the first of equal maxima
    out_of_bag, chosen = [], []
    for _, counts in _resample_chunks(n, rounds, seed, index, table.device, 2):
        resampled = counts @ table / n
        chosen.append(resampled[:, selected])
        pick = resampled.argmax(1)
        left_out = (counts == 0).to(table.dtype)
        kept = left_out.sum(1)
        totals = (left_out * table[:, pick].T).sum(1)
        out_of_bag.append((totals / kept.clamp(min=1))[kept > 0])
    oob, selected_means = torch.cat(out_of_bag), torch.cat(chosen)
    naive = float(means[selected])
    estimate = float(oob.mean()) if oob.numel() else math.nan
    alpha = (1.0 - confidence) / 2.0
    levels = torch.tensor([alpha, 1.0 - alpha], dtype=table.dtype, device=table.device)
    low, high = (torch.quantile(selected_means, levels) + (estimate - naive)).tolist()
    return {
        "selected": selected,
        "naive": naive,
        "estimate": estimate,
        "ci_low": float(low),
        "ci_high": float(high),
        "confidence": confidence,
        "rounds": int(oob.numel()),
    }


# ---- one run's checkpoints at once -------------------------------------------------------------------------------


def select_checkpoints(
    values: Any,
    steps: Sequence[int],
    *,
    mode: str = "max",
    size: float = 0.1,
    statistic: str = "R",
    rounds: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    labels: Any = None,
    threshold: float = 0.5,
    fdr: float = 0.1,
) -> dict[str, Any]:
    """Everything checkpoint selection says about one run's evaluations of one metric, as plain data (what
    ``selection.json`` holds): the model confidence set, the best checkpoint with its selection-corrected estimate,
    and what got worse from the best checkpoint to the latest one.

    Args:
        values: ``[queries, evaluations]`` per-query values of the metric, finite, the same queries in every column,
            the evaluations in step order.
        steps: The step of each evaluation (column).
        mode: ``"max"`` (higher is better) or ``"min"``; the losses of the set are ``-values`` or ``values``.
        size: The test size of the set (``1 - size`` is its level).
        statistic: The set's statistic, ``"R"`` or ``"max"``.
        rounds: Bootstrap resamples of the queries (the set and the estimate draw the same ones).
        confidence: Level of the estimate's interval.
        seed: Seed of the resamples.
        labels: Int class label ``[queries]`` of each query, for the per-class regressions (None: none).
        threshold: The value from which a query counts as right (negative flips, forgetting events), in the metric's
            units; for ``mode="min"`` a query is right at or below it.
        fdr: The false discovery rate of the per-class regressions.

    Returns:
        ``{"steps", "means" (per evaluation), "pvalues" (MCS p-values), "in_set" (bools), "set_steps", "best_step",
        "best_value" (its mean over the queries), "estimate", "ci_low", "ci_high", "latest_step", "flips"
        ({"reference_step", "negative_flip_rate", "positive_flip_rate"}), "classes" (per class present: "label", "n",
        "reference_mean", "current_mean", "down", "up", "pvalue", "adjusted", "regressed"; empty without labels),
        "forgetting" ({"mean_events", "forgotten", "unforgettable", "never_learned"}: shares of the queries), "queries",
        "size", "statistic", "confidence", "mode"}``. With one evaluation the set is that evaluation (p-value 1).

    Raises:
        ValueError: for a table that does not match ``steps``, or any argument the kernels refuse.

    Examples:
        >>> g = torch.Generator().manual_seed(0)
        >>> hits = (torch.rand(400, 3, generator=g) < torch.tensor([0.6, 0.8, 0.79])).double()
        >>> out = select_checkpoints(hits, [10, 20, 30], rounds=200)
        >>> out["set_steps"], out["best_step"], out["latest_step"]
        ([20, 30], 20, 30)
    """
    check_choice(mode, "mode", ("max", "min"), what="'max' (higher is better) or 'min'")
    table = _table(values, "values", "per-query values of one metric", 1)
    steps = [int(s) for s in steps]
    if len(steps) != table.shape[1]:
        raise ValueError(f"`steps` must give one step per evaluation (column): {len(steps)} for {table.shape[1]}.")
    higher = table if mode == "max" else -table
    if table.shape[1] > 1:
        mcs = model_confidence_set(-higher, size=size, statistic=statistic, rounds=rounds, seed=seed)
        pvalues, in_set = mcs["pvalues"].tolist(), mcs["included"].tolist()
    else:
        size = check_number(size, "size", above=0.0, below=1.0, hint="e.g. 0.1 for a 90% set")
        pvalues, in_set = [1.0], [True]
    best = best_checkpoint_estimate(higher, rounds=rounds, confidence=confidence, seed=seed)
    sign = 1.0 if mode == "max" else -1.0
    bounds = sorted((sign * best["ci_low"], sign * best["ci_high"]))
    right = higher >= (threshold if mode == "max" else -threshold)
    reference = best["selected"]
    flips = negative_flips(right[:, reference], right[:, -1])
    classes: dict[str, Any] = {}
    if labels is not None:
        tested = class_regressions(higher[:, reference], higher[:, -1], labels, fdr=fdr)
        classes = {name: tensor.tolist() for name, tensor in tested.items()}
        for name in ("reference_mean", "current_mean"):  # in the metric's units
            classes[name] = [sign * v for v in classes[name]]
    forgetting = forgetting_events(right.T)
    queries = table.shape[0]
    return {
        "steps": steps,
        "means": table.mean(0).tolist(),
        "pvalues": pvalues,
        "in_set": in_set,
        "set_steps": [s for s, kept in zip(steps, in_set) if kept],
        "best_step": steps[reference],
        "best_value": sign * best["naive"],
        "estimate": sign * best["estimate"],
        "ci_low": bounds[0],
        "ci_high": bounds[1],
        "latest_step": steps[-1],
        "flips": {
            "reference_step": steps[reference],
            "negative_flip_rate": flips["negative_flip_rate"],
            "positive_flip_rate": flips["positive_flip_rate"],
        },
        "classes": classes,
        "forgetting": {
            "mean_events": float(forgetting["events"].double().mean()),
            "forgotten": float((forgetting["events"] > 0).double().mean()),
            "unforgettable": float(forgetting["unforgettable"].double().mean()),
            "never_learned": float((~forgetting["learned"]).double().mean()),
        },
        "queries": queries,
        "size": size,
        "statistic": statistic,
        "confidence": best["confidence"],
        "mode": mode,
    }
