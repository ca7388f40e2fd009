"""Candidate sets: the distractors of each query, pinned or drawn."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class CandidateSets:
    """Distractors per query: ``distractor_ids[i]`` are the ``R − 1`` sample ids drawn for query ``query_ids[i]``.

    Attributes:
        query_ids: int64 ``[N]`` query sample ids, ascending.
        distractor_ids: int64 ``[N, R − 1]`` distractor sample ids.
    """

    query_ids: Tensor
    distractor_ids: Tensor

    @property
    def num_candidates(self) -> int:
        return self.distractor_ids.shape[1] + 1


def _rows_of(sets: CandidateSets, ids: Tensor, num_candidates: int) -> Tensor:
    """Distractor rows (into the id-ordered pool ``ids``) of given candidate sets, validated against the pool."""
    q, d = sets.query_ids.to(ids.device), sets.distractor_ids.to(ids.device)
    if d.shape[1] != num_candidates - 1:
        raise ValueError(
            f"`candidate_sets` hold {d.shape[1] + 1} candidates per query but `num_candidates` is {num_candidates}; "
            "make them agree."
        )
    order = torch.argsort(q)
    q, d = q[order], d[order]
    if q.shape[0] != ids.shape[0] or not torch.equal(q, ids):
        raise ValueError(
            f"`candidate_sets` cover {q.shape[0]} query ids but the pool has {ids.shape[0]}; "
            "they must name exactly the pool's sample ids."
        )
    pos = torch.searchsorted(ids, d).clamp_(max=ids.shape[0] - 1)
    if not bool((ids[pos] == d).all()):
        raise ValueError(
            f"`candidate_sets` name distractor ids {d[ids[pos] != d][:5].tolist()} that are not in the pool."
        )
    if bool((d == q.unsqueeze(1)).any()):
        raise ValueError("`candidate_sets` list a query's own id among its distractors.")
    return pos


# ----------------------------------------------------------------------------------------------------------------------
