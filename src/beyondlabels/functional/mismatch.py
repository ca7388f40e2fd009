"""Label-mismatch analysis: how similar are the classes a retrieval model confuses, against a frequency-aware null.

Inputs are class *indices* into a ``[C, C]`` similarity matrix ``M`` (e.g. ``M_feature`` of
:mod:`beyondlabels.functional.profiles`): the class of each query and the class retrieved at rank 1. Pure torch
(float64, CPU); no torchmetrics, no Lightning.

Definitions (stated once)
    - **Mismatch**: a query whose retrieved class differs from its own; its *similarity* is ``M[q, r]``.
      ``mean_similarity``, ``median_similarity``, ``p75_similarity``, ``p90_similarity`` (numpy linear quantiles) and
      ``max_similarity`` are taken over the mismatches.
    - **Pair distribution**: the ``C (C - 1) / 2`` distinct-pair values of ``M`` (above the diagonal).
    - **Percentile rank** of a value ``v`` (``kind="weak"``, the default, as ``scipy.stats.percentileofscore``):
      ``100 * #{pairs <= v} / #pairs`` (pass ``kind="weak"`` to scipy: its own default is ``"rank"``); ``"strict"``:
      ``<``; ``"mean"``: the mean of both; ``"rank"``: scipy's ``"rank"`` (the mean of weak and strict plus half a pair
      for each value equal to ``v``, i.e. ties share their average position) — all in percent. ``mean_percentile_rank``
      averages it over the mismatches.
    - ``share_top25`` / ``share_top10`` / ``share_top5``: the share of mismatches whose similarity is ``>=`` the 75th /
      90th / 95th percentile (linear interpolation) of the pair distribution.
    - ``num_distinct_pairs``: distinct *directed* (query class → retrieved class) pairs among the mismatches;
      ``top5_pair_share``: the share of mismatches that fall in the five most frequent of them.
    - **Frequency-aware Monte Carlo null**: class frequencies ``f_c`` are the counts of each class among all queries
      (or given counts). In each of ``B`` trials every mismatch with query class ``q`` draws an alternative
      ``c != q`` with probability ``f_c / sum_{c' != q} f_c'``; the trial statistic is the mean of ``M[q, c]`` over
      the mismatches. Draws come from a CPU ``torch.Generator`` seeded with ``seed`` (inverse CDF of uniform draws,
      mismatches grouped by query class in ascending class index), so a seed gives the same null anywhere.
      ``null_mean``, ``null_std`` (ddof 0), ``null_ci95_low`` / ``null_ci95_high`` (2.5 and 97.5 percentiles, linear),
      ``null_max``; ``p_value = (#{trials >= observed} + 1) / (B + 1)`` (one-sided: mismatches more similar than
      chance). Its expectation is ``mean_i sum_{c != q_i} f_c M(q_i, c) / sum_{c != q_i} f_c``.
    - **Spearman** between ``M`` and the mean embedding cosine of each class pair over the distinct pairs of classes
      that have embeddings; the mean pairwise cosine of classes ``a`` and ``b`` (all ``|a| x |b|`` sample pairs) is
      the dot product of their mean unit vectors.
    - No mismatches: the similarity statistics, percentile ranks, null and p-value are NaN; counts are 0.

Examples:
    >>> m = [[1.0, 0.8, 0.1], [0.8, 1.0, 0.2], [0.1, 0.2, 1.0]]
    >>> out = mismatch_analysis(torch.tensor([0, 0, 1, 2]), torch.tensor([1, 0, 0, 2]), m, num_trials=200, seed=0)
    >>> out["num_mismatches"], out["mean_similarity"], out["mean_percentile_rank"]
    (2, 0.8, 100.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_choice, check_matrix, check_positive_int, check_seed
from beyondlabels.functional.agreement import spearman
from beyondlabels.functional.profiles import pair_values
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "class_mean_cosine",
    "class_pair_spearman",
    "frequency_null",
    "mismatch_analysis",
    "mismatch_output_schema",
    "mismatch_pair_table",
    "percentile_ranks",
]

PERCENTILE_KINDS = ("weak", "strict", "mean", "rank")
TOP_SHARES = {"share_top25": 0.75, "share_top10": 0.90, "share_top5": 0.95}
_SIMILARITY_STATS = ("mean_similarity", "median_similarity", "p75_similarity", "p90_similarity", "max_similarity")
_NULL_CHUNK = 4_000_000  # uniform draws held at once by the null


def mismatch_output_schema(spearman: bool = False) -> OutputSchema:
    """The schema of :func:`mismatch_analysis` (with ``spearman_rho`` / ``spearman_p`` / ``spearman_pairs`` when
    embeddings are analysed)."""
    count = KeySpec("scalar", None, count=True)
    up, down, none = KeySpec("scalar", True), KeySpec("scalar", False), KeySpec("scalar", None)
    keys: dict[str, KeySpec] = {"num_queries": count, "num_mismatches": count, "mismatch_rate": down}
    keys.update(dict.fromkeys(_SIMILARITY_STATS, up))
    keys["mean_percentile_rank"] = up
    keys.update(dict.fromkeys(TOP_SHARES, up))
    keys.update({"num_distinct_pairs": count, "top5_pair_share": none})
    keys.update(dict.fromkeys(("null_mean", "null_std", "null_ci95_low", "null_ci95_high", "null_max"), none))
    keys.update({"num_trials": count, "p_value": down})
    if spearman:
        keys.update({"spearman_rho": up, "spearman_p": down, "spearman_pairs": count})
    per_query = {
        "mismatch": KeySpec("per_query", False),
        "similarity": KeySpec("per_query", True),
        "percentile_rank": KeySpec("per_query", True),
    }
    headline = ["mean_similarity", "mean_percentile_rank", "p_value", *(["spearman_rho"] if spearman else [])]
    return OutputSchema(keys, per_query, headline=headline)


def percentile_ranks(values: Any, reference: Any, kind: str = "weak") -> Tensor:
    """Percentile rank (percent) of each of ``values`` within ``reference`` (definitions: the module docstring).

    Examples:
        >>> percentile_ranks([0.2, 0.5], [0.1, 0.2, 0.3, 0.4]).tolist()
        [50.0, 100.0]
        >>> percentile_ranks([0.2], [0.1, 0.2, 0.3, 0.4], kind="strict").tolist()
        [25.0]
    """
    check_choice(kind, "kind", PERCENTILE_KINDS)
    ref = torch.sort(torch.as_tensor(reference, dtype=torch.float64).flatten()).values
    if ref.numel() == 0:
        raise ValueError("`reference` is empty; percentile ranks need at least one reference value.")
    v = torch.as_tensor(values, dtype=torch.float64).flatten()
    weak = torch.searchsorted(ref, v, right=True).to(torch.float64)
    strict = torch.searchsorted(ref, v, right=False).to(torch.float64)
    n = ref.numel()
    if kind == "weak":
        out = weak
    elif kind == "strict":
        out = strict
    elif kind == "mean":
        out = (weak + strict) / 2.0
    else:  # scipy's "rank": ties share their average position, (strict + weak + 1) / 2 when v is present
        present = weak > strict
        out = torch.where(present, (strict + weak + 1.0) / 2.0, weak)
    return 100.0 * out / n


def _index_vector(x: Any, name: str, num_classes: int) -> Tensor:
    t = torch.as_tensor(x)
    if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool:
        raise ValueError(f"`{name}` must be a 1-D integer tensor of class indices, got {tuple(t.shape)} {t.dtype}.")
    t = t.to(torch.long).cpu()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_classes):
        raise ValueError(f"`{name}` holds class indices outside 0..{num_classes - 1} (the rows of `similarity`).")
    return t


def _frequencies(query: Tensor, counts: Any, num_classes: int) -> Tensor:
    if counts is None:
        return torch.bincount(query, minlength=num_classes).to(torch.float64)
    f = torch.as_tensor(counts, dtype=torch.float64).flatten()
    if f.numel() != num_classes or not bool(torch.isfinite(f).all()) or bool((f < 0).any()):
        raise ValueError(
            f"`counts` must hold {num_classes} finite counts >= 0 (one per class of `similarity`), "
            f"got {f.numel()} values."
        )
    return f


def _check_trials(num_trials: Any, seed: Any) -> tuple[int, int]:
    return check_positive_int(num_trials, "num_trials"), check_seed(seed)


def frequency_null(
    query_classes: Any, similarity: Any, frequencies: Any, num_trials: int = 10_000, seed: int = 0
) -> Tensor:
    """The ``[num_trials]`` float64 trial statistics of the frequency-aware null for mismatches of the given query
    classes (definition: the module docstring; ``frequencies`` are ``f_c``, one per class, >= 0).

    Raises:
        ValueError: for indices outside the matrix, bad frequencies, or a query class with no alternative class of
            positive frequency.

    Examples:
        >>> m = [[1.0, 0.3], [0.3, 1.0]]
        >>> frequency_null(torch.tensor([0, 1]), m, torch.tensor([5.0, 5.0]), num_trials=3).tolist()
        [0.3, 0.3, 0.3]
    """
    m = check_matrix(similarity)
    c = m.shape[0]
    num_trials, seed = _check_trials(num_trials, seed)
    q = _index_vector(query_classes, "query_classes", c)
    f = _frequencies(q, frequencies, c)
    if q.numel() == 0:
        return torch.full((num_trials,), math.nan, dtype=torch.float64)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    sums = torch.zeros(num_trials, dtype=torch.float64)
    classes, group_sizes = torch.unique(q, return_counts=True)
    for cls, size in zip(classes.tolist(), group_sizes.tolist(), strict=True):
        weights = f.clone()
        weights[cls] = 0.0
        total = float(weights.sum())
        if total <= 0:
            raise ValueError(
                f"class index {cls} has mismatches but no other class has a positive frequency; "
                "the null cannot draw an alternative."
            )
        support = torch.nonzero(weights > 0).flatten()  # classes of zero frequency are never drawn
        cdf = torch.cumsum(weights[support] / total, dim=0)
        cdf[-1] = 2.0  # every uniform draw in [0, 1) lands on a class, whatever the rounding of the sum
        row = m[cls][support]
        step = max(1, _NULL_CHUNK // size)
        for start in range(0, num_trials, step):
            stop = min(num_trials, start + step)
            u = torch.rand((stop - start, size), generator=generator, dtype=torch.float64)
            drawn = torch.searchsorted(cdf, u, right=True)
            sums[start:stop] += row[drawn].sum(dim=1)
    return sums / q.numel()


def class_mean_cosine(embeddings: Any, class_index: Any, num_classes: int) -> tuple[Tensor, Tensor]:
    """``([C, C] mean pairwise cosine, [C] sample counts)``: entry ``(a, b)`` is the mean of ``cos(x, y)`` over all
    ``x`` of class ``a`` and ``y`` of class ``b`` (self-pairs included on the diagonal), computed as the dot product
    of the classes' mean unit vectors; NaN for a class without samples.

    Examples:
        >>> x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
        >>> cos, n = class_mean_cosine(x, torch.tensor([0, 0, 1]), 2)
        >>> cos.tolist(), n.tolist()
        ([[0.5, 0.5], [0.5, 1.0]], [2, 1])
    """
    x = torch.as_tensor(embeddings).to(torch.float64)
    if x.dim() != 2:
        raise ValueError(f"`embeddings` must be [N, D], got shape {tuple(x.shape)}.")
    idx = _index_vector(class_index, "class_index", num_classes).to(x.device)
    if idx.numel() != x.shape[0]:
        raise ValueError(f"`class_index` has {idx.numel()} entries for {x.shape[0]} embeddings; give one per row.")
    unit = torch.nn.functional.normalize(x, dim=1)
    sums = torch.zeros(num_classes, x.shape[1], dtype=torch.float64, device=x.device).index_add_(0, idx, unit)
    n = torch.bincount(idx, minlength=num_classes)
    means = sums / n.clamp(min=1)[:, None].to(torch.float64)
    cos = means @ means.T
    empty = n == 0
    cos[empty, :] = math.nan
    cos[:, empty] = math.nan
    return cos.cpu(), n.cpu()


def class_pair_spearman(similarity: Any, embeddings: Any, class_index: Any) -> dict[str, float]:
    """``spearman_rho``, ``spearman_p`` (:func:`beyondlabels.functional.agreement.spearman`) and ``spearman_pairs``
    between ``similarity`` and the mean embedding cosine over the distinct pairs of classes that have embeddings.

    Examples:
        >>> m = [[1.0, 0.9, 0.1], [0.9, 1.0, 0.5], [0.1, 0.5, 1.0]]
        >>> x = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
        >>> out = class_pair_spearman(m, x, torch.tensor([0, 1, 2]))
        >>> out["spearman_rho"], out["spearman_pairs"]
        (1.0, 3)
    """
    m = check_matrix(similarity)
    cos, n = class_mean_cosine(embeddings, class_index, m.shape[0])
    present = torch.nonzero(n > 0).flatten()
    i, j = torch.triu_indices(present.numel(), present.numel(), offset=1)
    a, b = present[i], present[j]
    result = spearman(m[a, b], cos[a, b])
    return {"spearman_rho": result.statistic, "spearman_p": result.pvalue, "spearman_pairs": int(a.numel())}


def _quantile(values: Tensor, q: float) -> float:
    return float(torch.quantile(values, q)) if values.numel() else math.nan


def mismatch_analysis(
    query_classes: Any,
    retrieved_classes: Any,
    similarity: Any,
    *,
    counts: Any = None,
    num_trials: int = 10_000,
    seed: int = 0,
    percentile_kind: str = "weak",
    embeddings: Any = None,
    embedding_classes: Any = None,
) -> dict[str, Any]:
    """Every statistic of the module docstring for one query per entry (matches included: they count towards
    ``num_queries`` and, without ``counts``, the class frequencies).

    Args:
        query_classes: ``[N]`` class indices (rows of ``similarity``) of each query.
        retrieved_classes: ``[N]`` class indices of what each query retrieved at rank 1.
        similarity: ``[C, C]`` class similarity (finite; ``M_feature`` or any other).
        counts: optional ``[C]`` class counts for the null (default: the query classes' counts).
        num_trials: the null's ``B``.
        seed: the null's seed.
        percentile_kind: ``"weak"`` (default), ``"strict"``, ``"mean"`` or ``"rank"``.
        embeddings: optional ``[N_e, D]`` embeddings: adds Spearman.
        embedding_classes: the class indices of ``embeddings`` (given with them).

    Returns:
        The scalars of :func:`mismatch_output_schema`, ``per_query`` (``mismatch`` 0/1, ``similarity`` and
        ``percentile_rank``, NaN for matches) and ``null`` (the ``[B]`` trial statistics).

    Raises:
        ValueError: naming the argument, for indices outside the matrix, vectors of different lengths, bad counts,
            trials, seed or kind.
    """
    m = check_matrix(similarity)
    c = m.shape[0]
    q = _index_vector(query_classes, "query_classes", c)
    r = _index_vector(retrieved_classes, "retrieved_classes", c)
    if q.numel() != r.numel():
        raise ValueError(
            f"`query_classes` and `retrieved_classes` must have one entry per query, got {q.numel()} and {r.numel()}."
        )
    num_trials, seed = _check_trials(num_trials, seed)
    check_choice(percentile_kind, "percentile_kind", PERCENTILE_KINDS)
    f = _frequencies(q, counts, c)
    wrong = q != r
    sims = m[q[wrong], r[wrong]]
    pairs = pair_values(m)
    ranks = percentile_ranks(sims, pairs, percentile_kind)
    k = int(wrong.sum())
    out: dict[str, Any] = {
        "num_queries": int(q.numel()),
        "num_mismatches": k,
        "mismatch_rate": k / q.numel() if q.numel() else math.nan,
    }
    out["mean_similarity"] = float(sims.mean()) if k else math.nan
    out["median_similarity"] = _quantile(sims, 0.5)
    out["p75_similarity"] = _quantile(sims, 0.75)
    out["p90_similarity"] = _quantile(sims, 0.90)
    out["max_similarity"] = float(sims.max()) if k else math.nan
    out["mean_percentile_rank"] = float(ranks.mean()) if k else math.nan
    for key, level in TOP_SHARES.items():
        out[key] = float((sims >= torch.quantile(pairs, level)).to(torch.float64).mean()) if k else math.nan
    directed = q[wrong] * c + r[wrong]
    _, pair_counts = torch.unique(directed, return_counts=True)
    out["num_distinct_pairs"] = int(pair_counts.numel())
    out["top5_pair_share"] = float(torch.sort(pair_counts, descending=True).values[:5].sum()) / k if k else math.nan
    null = frequency_null(q[wrong], m, f, num_trials, seed)
    out.update(_null_statistics(null, out["mean_similarity"], k, num_trials))
    if embeddings is not None:
        if embedding_classes is None:
            raise ValueError("`embedding_classes` is required with `embeddings` (the class index of each embedding).")
        out.update(class_pair_spearman(m, embeddings, embedding_classes))
    per_sim = torch.full((q.numel(),), math.nan, dtype=torch.float64)
    per_rank = per_sim.clone()
    per_sim[wrong], per_rank[wrong] = sims, ranks
    out["per_query"] = {"mismatch": wrong.to(torch.float64), "similarity": per_sim, "percentile_rank": per_rank}
    out["null"] = null
    return out


def _null_statistics(null: Tensor, observed: float, k: int, num_trials: int) -> dict[str, Any]:
    """The null's mean, sd, 95% range and maximum, and the p-value of the observed mean similarity of ``k``
    mismatches (NaN without mismatches), then ``num_trials``."""
    out: dict[str, Any] = {}
    if k:
        out["null_mean"], out["null_std"] = float(null.mean()), float(null.std(unbiased=False))
        out["null_ci95_low"], out["null_ci95_high"] = _quantile(null, 0.025), _quantile(null, 0.975)
        out["null_max"] = float(null.max())
        # a trial equal to the observation up to float rounding (sums in another order) counts as reaching it
        reached = int((null >= observed - 1e-12).sum())
        out["p_value"] = (reached + 1) / (num_trials + 1)
    else:
        for key in ("null_mean", "null_std", "null_ci95_low", "null_ci95_high", "null_max", "p_value"):
            out[key] = math.nan
    out["num_trials"] = num_trials
    return out


def mismatch_pair_table(
    query_classes: Any, retrieved_classes: Any, similarity: Any, classes: Sequence[str], top: int = 20
) -> list[dict[str, Any]]:
    """The ``top`` most frequent directed mismatch pairs as rows ``{query, retrieved, count, share, similarity}``
    (by count, descending; ties by query then retrieved class index).

    Examples:
        >>> m = [[1.0, 0.4], [0.4, 1.0]]
        >>> mismatch_pair_table(torch.tensor([0, 0, 1]), torch.tensor([1, 1, 1]), m, ["a", "b"])
        [{'query': 'a', 'retrieved': 'b', 'count': 2, 'share': 1.0, 'similarity': 0.4}]
    """
    m = check_matrix(similarity)
    c = m.shape[0]
    if len(classes) != c:
        raise ValueError(f"`classes` has {len(classes)} names for a {c} x {c} matrix; give one name per row.")
    q = _index_vector(query_classes, "query_classes", c)
    r = _index_vector(retrieved_classes, "retrieved_classes", c)
    wrong = q != r
    k = int(wrong.sum())
    if k == 0:
        return []
    pairs, counts = torch.unique(q[wrong] * c + r[wrong], return_counts=True)
    order = torch.sort(-counts, stable=True).indices[:top]
    rows = []
    for o in order.tolist():
        a, b = divmod(int(pairs[o]), c)
        rows.append(
            {
                "query": classes[a],
                "retrieved": classes[b],
                "count": int(counts[o]),
                "share": int(counts[o]) / k,
                "similarity": float(m[a, b]),
            }
        )
    return rows
