"""The validated inputs of a retrieval problem: unit rows, labels, the excluded item and ``R`` of every query."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_int_vector, check_same_space
from beyondlabels.functional._distances import Space, prepare_space
from beyondlabels.functional._search_paths import available
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.functional.search import exclusion_index


@dataclass(frozen=True)
class _Problem:
    """A validated retrieval problem: the gallery and query rows prepared for the search (``space``; its query rows
    None: leave-one-out, the gallery is the query set), ``g_labels`` and ``q_labels``, the excluded item of each query
    ``excl`` (None: none), ``r`` (the relevant items available to each query) and ``lone`` (``r == 0``)."""

    space: Space
    g_labels: Tensor
    q_labels: Tensor
    excl: Tensor | None
    r: Tensor
    lone: Tensor

    @property
    def gn(self) -> Tensor:
        """The gallery rows the search multiplies (unit rows for cosine)."""
        return self.space.gallery

    @property
    def qn(self) -> Tensor | None:
        return self.space.queries

    @property
    def queries(self) -> Tensor:
        return self.space.query_rows


def _check_graded(graded: Sequence[ClassGains]) -> tuple[ClassGains, ...]:
    graded = tuple(graded)
    for g in graded:
        if not isinstance(g, ClassGains):
            raise ValueError(f"`graded` must hold ClassGains matrices, got {type(g).__name__}.")
    names = [g.name for g in graded]
    if len(set(names)) != len(names):
        raise ValueError(f"`graded` matrices need distinct names, got {names}.")
    return graded


def _problem(
    embeddings: Tensor,
    labels: Tensor,
    ids: Tensor | None,
    query_embeddings: Tensor | None,
    query_labels: Tensor | None,
    query_ids: Tensor | None,
    distance: str = "cosine",
    normalized: bool = False,
) -> _Problem:
    """The validated problem of :func:`~beyondlabels.functional.retrieval.retrieval_per_query`'s inputs, with ``R`` per
    query."""
    space = prepare_space(embeddings, query_embeddings, distance, ("embeddings", "query_embeddings"), normalized)
    gn, qn = space.gallery, space.queries
    device = gn.device
    g_labels = check_int_vector(labels, "labels", gn.shape[0], device)
    gid = None if ids is None else check_int_vector(ids, "ids", gn.shape[0], device)
    if query_embeddings is None:
        if query_labels is not None or query_ids is not None:
            raise ValueError("`query_labels` / `query_ids` need `query_embeddings`; omit them for leave-one-out.")
        if gid is not None:
            exclusion_index(gid, gid, device, "ids")  # rejects duplicated ids
        q_labels, excl = g_labels, torch.arange(gn.shape[0], device=device)
    else:
        check_same_space(qn, "query_embeddings", gn, "embeddings", width="they must match", device="use one device")
        if query_labels is None:
            raise ValueError("`query_labels` is required with `query_embeddings` (relevance = same label).")
        q_labels = check_int_vector(query_labels, "query_labels", qn.shape[0], device)
        qid = None if query_ids is None else check_int_vector(query_ids, "query_ids", qn.shape[0], device)
        if qid is not None and gid is None:
            raise ValueError("`query_ids` needs gallery `ids` to exclude matching items; pass both or neither.")
        excl = None
        if qid is not None:
            if qid.numel() > 1 and bool((torch.sort(qid).values[1:] == torch.sort(qid).values[:-1]).any()):
                raise ValueError("`query_ids` contains duplicated ids; each query needs its own id.")
            excl = exclusion_index(qid, gid, device, "ids")
    r = _num_relevant(g_labels, q_labels, excl)
    return _Problem(space, g_labels, q_labels, excl, r, r == 0)


def _num_relevant(g_labels: Tensor, q_labels: Tensor, excl: Tensor | None) -> Tensor:
    """R per query: gallery items sharing the label, minus the excluded item when it shares the label."""
    classes, g_codes = torch.unique(g_labels, return_inverse=True)
    g_counts = torch.bincount(g_codes, minlength=classes.numel())
    pos = torch.searchsorted(classes, q_labels).clamp_(max=classes.numel() - 1)
    r = torch.where(classes[pos] == q_labels, g_counts[pos], torch.zeros_like(pos))
    if excl is not None:
        has = excl >= 0
        same = torch.zeros_like(has)
        same[has] = g_labels[excl[has]] == q_labels[has]
        r = r - same.long()
    return r


def _check_depth_limits(p: _Problem, ks: tuple[int, ...], curve_max_k: int, return_neighbors: int) -> int:
    """The gallery items available to every query (:func:`available`), after checking that the cut-offs fit in it."""
    n_gallery = p.gn.shape[0]
    avail = available(n_gallery, p.excl)
    if ks[-1] > avail:
        raise ValueError(
            f"`ks` contains {ks[-1]} but only {avail} gallery items are available to a query"
            + (" (self excluded)" if avail < n_gallery else "")
            + "; lower k or enlarge the gallery."
        )
    if curve_max_k > avail:
        raise ValueError(
            f"`curve_max_k`={curve_max_k} exceeds the {avail} gallery items available to a query; lower it."
        )
    if return_neighbors > avail:
        raise ValueError(
            f"`return_neighbors`={return_neighbors} exceeds the {avail} gallery items available; lower it."
        )
    return avail
