"""Retrieval metrics of an embedding gallery, computed from one exact search and a relevance definition.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning. The search (scores,
exclusion, ranking and ties, depth, shares) is :func:`beyondlabels.functional.search.search_neighbors`; its definitions
apply.

Modules (every name importable from this package): the output keys are declared here
(:func:`retrieval_output_schema`); :mod:`~beyondlabels.functional.retrieval.sampling` the seeded query sample;
:mod:`~beyondlabels.functional.retrieval.per_query` the search and the per-query values;
:mod:`~beyondlabels.functional.retrieval.aggregate` the means, the curve and the standard errors;
:mod:`~beyondlabels.functional.retrieval.embedding` both in one call.

Relevance
    Binary: a gallery item is relevant to a query when their labels are equal. ``R`` of a query is the number of
    relevant gallery items available to it (the excluded item left out): in leave-one-out use, the number of *other*
    items that share its label. Graded (optional, any number of :class:`~beyondlabels.functional.relevance.ClassGains`
    matrices): the gain of an item is ``gains[class(query), class(item)]``; binary metrics are unaffected by it.

Lone queries
    Queries with ``R == 0`` are excluded from every metric (binary and graded) and only counted in
    ``num_lone_queries``. When every query is lone, every metric is NaN and ``num_queries`` is 0.

Metrics (per query, then averaged)
    - ``precision@k`` = (#relevant in the top k) / k; ``recall@k`` = (#relevant in the top k) / R;
      ``hit@k`` = 1 if a relevant item is in the top k.
    - ``r_precision`` = (#relevant in the top R) / R.
    - ``map@r`` = (1/R) * sum over i <= R of P(i) * rel(i) (pytorch-metric-learning's MAP@R).
    - ``ndcg@k`` (binary, linear gain): DCG@k / IDCG@k with DCG@k = sum over i <= k of rel(i) / log2(i + 1) and the
      ideal DCG of min(R, k) relevant items at the top.
    - ``first_relevant_rank``: the 1-based rank of the best-ranked relevant item, exact over the whole gallery
      (``mean_first_relevant_rank``, ``median_first_relevant_rank``: the mean of the two middle values for even counts).
    - graded, for each matrix named ``g``: ``g_precision@k`` = (sum of gains in the top k) / k and ``g_ndcg@k`` with
      linear gains, the same discount, and the ideal DCG of the best possible order of the available gallery.
    - ``precision_curve[i]`` = ``precision@(i + 1)`` for ``i = 0 .. curve_max_k - 1``.

    Micro averages (the plain keys) are the mean over non-lone queries. Macro averages (``macro_*``) first average
    the queries of each label, then average over labels. Every mean is a float64 sum in query order, so the values
    do not depend on chunking or on how queries were shared between processes.

Per-query values
    ``per_query`` holds one float64 vector per metric (NaN for lone queries), plus ``query_id``, ``label`` and
    ``num_relevant``: the input of confidence intervals and paired tests.

Examples:
    >>> import torch
    >>> emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
    >>> labels = torch.tensor([0, 0, 1, 1, 2])
    >>> m = embedding_retrieval_metrics(emb, labels, ks=(1, 2))
    >>> m["precision@1"], m["num_queries"], m["num_lone_queries"]
    (tensor(1., dtype=torch.float64), tensor(4), tensor(1))
    >>> m["per_query"]["r_precision"]
    tensor([1., 1., 1., 1., nan], dtype=torch.float64)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from beyondlabels._internal.checks import check_deep_metrics, check_ks
from beyondlabels.functional.retrieval._keys import micro_keys
from beyondlabels.functional.retrieval.aggregate import aggregate_retrieval
from beyondlabels.functional.retrieval.embedding import embedding_retrieval_metrics
from beyondlabels.functional.retrieval.per_query import retrieval_per_query
from beyondlabels.functional.retrieval.sampling import sample_queries
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "aggregate_retrieval",
    "embedding_retrieval_metrics",
    "retrieval_output_schema",
    "retrieval_per_query",
    "sample_queries",
]


def retrieval_output_schema(
    ks: Sequence[int],
    graded: Sequence[str] = (),
    sampled: bool = False,
    mistake_stats: Mapping[str, Sequence[str]] | None = None,
    deep_metrics: bool = True,
) -> OutputSchema:
    """The output schema of :func:`embedding_retrieval_metrics` for cut-offs ``ks`` and graded matrix names; with
    ``sampled`` (a query sample, ``max_queries``) also ``num_query_pool`` and the standard error ``<key>_se`` of
    every micro-averaged metric; without ``deep_metrics`` (see :func:`embedding_retrieval_metrics`) none of the
    keys that need a search past ``max(ks)``.

    Examples:
        >>> s = retrieval_output_schema((1, 5))
        >>> s["precision@5"].higher_is_better, s["mean_first_relevant_rank"].higher_is_better, s["num_queries"].count
        (True, False, True)
        >>> s.per_query["first_relevant_rank"].higher_is_better, s.headline
        (False, ['precision@1', 'r_precision', 'map@r', 'ndcg@5'])
    """
    ks = check_ks(ks)
    deep_metrics = check_deep_metrics(deep_metrics)
    up, down = KeySpec("scalar", True), KeySpec("scalar", False)
    keys: dict[str, KeySpec] = {}
    per_query: dict[str, KeySpec] = {}
    for family in ("precision", "recall", "hit", "ndcg"):
        for k in ks:
            keys[f"{family}@{k}"] = up
            per_query[f"{family}@{k}"] = KeySpec("per_query", True)
    for name in graded:
        for family in ("precision", "ndcg"):
            for k in ks:
                keys[f"{name}_{family}@{k}"] = up
                per_query[f"{name}_{family}@{k}"] = KeySpec("per_query", True)
    for name, stats in (mistake_stats or {}).items():
        for stat in stats:
            keys[f"{name}_mistake_{stat}"] = up
            per_query[f"{name}_mistake_{stat}"] = KeySpec("per_query", True)
    if deep_metrics:
        keys["r_precision"] = up
        keys["map@r"] = up
        per_query["r_precision"] = per_query["map@r"] = KeySpec("per_query", True)
        keys["mean_first_relevant_rank"] = keys["median_first_relevant_rank"] = down
        per_query["first_relevant_rank"] = KeySpec("per_query", False)
    for k in ks:
        keys[f"macro_precision@{k}"] = up
    if deep_metrics:
        keys["macro_r_precision"] = keys["macro_map@r"] = up
    keys["num_queries"] = keys["num_lone_queries"] = KeySpec("scalar", None, count=True)
    keys["precision_curve"] = KeySpec("curve", True)
    per_query["num_relevant"] = KeySpec("per_query", None, count=True)
    per_query["query_id"] = per_query["label"] = KeySpec("per_query", None)
    if sampled:
        for key in micro_keys(ks, graded, deep_metrics):
            keys[f"{key}_se"] = KeySpec("scalar", None)
        keys["num_query_pool"] = KeySpec("scalar", None, count=True)
    # read by: precision at the smallest cut-off, R-precision and MAP@R (deep), nDCG at the largest cut-off
    if deep_metrics:
        headline = [f"precision@{ks[0]}", "r_precision", "map@r"]
    else:
        headline = [f"precision@{k}" for k in dict.fromkeys((ks[0], ks[-1]))]
    return OutputSchema(keys, per_query, headline=[*headline, f"ndcg@{ks[-1]}"])
