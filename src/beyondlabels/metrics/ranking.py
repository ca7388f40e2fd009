"""torchmetrics class for ranking metrics over graded judgements with unjudged items.

``GradedRanking`` was called ``RankingAudit`` (a name that read like the label audit of
:mod:`beyondlabels.functional.audit`); the old name still imports, with a ``FutureWarning``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_int_at_least, check_ks
from beyondlabels.functional.ranking import aggregate_ranking, ranking_output_schema, ranking_per_query
from beyondlabels.metrics.base import PerSampleMetric
from beyondlabels.schema import OutputSchema

__all__ = ["GradedRanking"]


class GradedRanking(PerSampleMetric):
    """Ranking quality when only some results are judged: P@k, recall@k, success@k, MAP, MRR, bpref, judged-only and
    condensed P@k, nDCG (exponential and linear gain), R-precision, judged@k and coverage@k, with per-query values.

    Each sample is one query: the model's scores for a fixed row of candidate documents and their grades (NaN =
    unjudged). :meth:`compute` ranks each row by score, highest first, ties by column (the earlier column first), and
    computes every metric of :mod:`beyondlabels.functional.ranking` (definitions, lone queries, unjudged rules; a
    negative grade is a pooled document that was not judged, as in trec_eval). Ordering the columns by document id
    descending makes the ties trec_eval's.
    A candidate with score ``-inf`` is not retrieved but its grade still counts for ``R`` and the ideal DCG: put
    judged documents the model did not retrieve there, so the ideal DCG covers all judged items of the query.

    Distributed use: queries are gathered and deduplicated by id, in id order, so any world size gives the same values.

    Args:
        ks: Cut-offs.
        relevance_level: Smallest grade that counts as relevant.
        validate_args: Check scores and grades in every update (a host sync per batch).
        kwargs: Passed to :class:`torchmetrics.Metric`.

    Inputs of :meth:`update`:
        ``scores`` float ``[B, D]`` (higher ranks first; ``-inf`` = not retrieved), ``grades`` float ``[B, D]``
        (ints; NaN or negative = unjudged), optional ``ids`` ``[B]`` (query ids; required under distributed training).

    Examples:
        >>> metric = GradedRanking(ks=(2,))
        >>> nan = float("nan")
        >>> metric.update(torch.tensor([[0.9, 0.8, 0.1]]), torch.tensor([[2.0, nan, 0.0]]), torch.tensor([5]))
        >>> metric.update(torch.tensor([[0.2, 0.7, -float("inf")]]), torch.tensor([[1.0, 0.0, 1.0]]), torch.tensor([6]))
        >>> out = metric.compute()
        >>> out["precision@2"].item(), out["judged_precision@2"].item(), out["r_precision"].item()
        (0.5, 0.75, 0.75)
        >>> out["per_query"]["query_id"].tolist()
        [5, 6]
    """

    scores: list[Tensor]
    grades: list[Tensor]

    def __init__(
        self, ks: Sequence[int] = (5, 10), relevance_level: int = 1, validate_args: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(validate_args=validate_args, **kwargs)
        self.ks = check_ks(ks)
        check_int_at_least(relevance_level, "relevance_level", 1, hint="the smallest relevant grade")
        self.relevance_level = relevance_level
        self.add_sample_state("scores")
        self.add_sample_state("grades", agree=True)

    @classmethod
    def example(cls) -> GradedRanking:
        """12 seeded queries of 8 candidates with graded and unjudged judgements, ``ks=(2, 5)`` (see
        :meth:`PerSampleMetric.example`)."""
        g = torch.Generator().manual_seed(4)
        grades = torch.randint(0, 3, (12, 8), generator=g).to(torch.float64)
        grades[torch.rand(12, 8, generator=g) < 0.25] = float("nan")
        metric = cls(ks=(2, 5))
        metric.update(torch.randn(12, 8, generator=g, dtype=torch.float64), grades, torch.arange(12))
        return metric

    def output_schema(self) -> OutputSchema:
        return ranking_output_schema(self.ks).merged(OutputSchema({"num_duplicates": self.count_spec()}))

    def update(self, scores: Tensor, grades: Tensor, ids: Any = None) -> None:
        """Add a batch of queries (see the class docstring for the inputs)."""
        if not isinstance(scores, Tensor) or scores.dim() != 2 or not scores.is_floating_point():
            raise ValueError(
                "`scores` must be a 2-D float tensor [B, D] of candidate scores, "
                f"got {getattr(scores, 'shape', type(scores).__name__)}."
            )
        if not isinstance(grades, Tensor) or grades.shape != scores.shape:
            raise ValueError(
                f"`grades` must be a tensor of the shape of `scores` {tuple(scores.shape)} (NaN = unjudged), "
                f"got {getattr(grades, 'shape', type(grades).__name__)}."
            )
        if self.scores and isinstance(self.scores, list) and self.scores[-1].shape[1] != scores.shape[1]:
            raise ValueError(
                f"`scores` has {scores.shape[1]} candidates per query but earlier updates had "
                f"{self.scores[-1].shape[1]}; pad rows with -inf scores."
            )
        grades = grades.to(torch.float64)
        if self.validate_args:
            if bool(torch.isnan(scores).any()) or bool((scores == float("inf")).any()):
                raise ValueError("`scores` contains NaN or +inf; use -inf for candidates that are not retrieved.")
            graded = grades[~torch.isnan(grades)]
            if bool((graded != graded.floor()).any()):
                raise ValueError(
                    "`grades` must be ints (negative: pooled but not judged, as in trec_eval), "
                    "or NaN for unjudged candidates."
                )
        ids = self.check_ids(ids, scores.shape[0], scores.device)
        # unjudged stored as -1, which the kernel reads as unjudged too: the base compares copies of an id with ==,
        # which NaN never satisfies
        self.append_samples(
            ids, scores=scores.detach().to(torch.float64), grades=grades.nan_to_num(-1.0).to(scores.device)
        )

    def compute(self) -> dict[str, Any]:
        """Rank the gathered queries' candidates and return every metric with per-query values."""
        samples = self.gathered_samples()
        scores, grades = samples.values["scores"], samples.values["grades"]
        order = torch.argsort(-scores, dim=1, stable=True)
        ranked = torch.gather(grades, 1, order)
        num_retrieved = (scores > float("-inf")).sum(dim=1)
        per_query = ranking_per_query(ranked, num_retrieved, grades, ks=self.ks, relevance_level=self.relevance_level)
        out = aggregate_ranking(per_query, self.ks, samples.ids)
        out["num_duplicates"] = torch.tensor(samples.num_duplicates, dtype=torch.long, device=scores.device)
        return out


_RENAMED = {"RankingAudit": "GradedRanking"}
_warned: set[str] = set()


def renamed(name: str) -> Any:
    """The class an earlier name of this module stands for (``RankingAudit``), with a ``FutureWarning`` once per
    process; None for any other name."""
    current = _RENAMED.get(name)
    if current is None:
        return None
    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"{name} is now called {current} (`from beyondlabels.metrics import {current}`); the old name will be "
            "removed in a later release.",
            FutureWarning,
            stacklevel=3,
        )
    return globals()[current]


def __getattr__(name: str) -> Any:
    found = renamed(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return found
