"""The label audit of a labelled embedding set from its leave-one-out neighbours: suspected label errors,
near-duplicates (same-label and cross-label) and outliers (importable as :mod:`beyondlabels.functional.audit` too).

Pure torch. The input is the :class:`~beyondlabels.functional.search.Neighbors` of the one leave-one-out search
(:func:`~beyondlabels.functional.search.search_neighbors`) that the retrieval metrics already run, covering every
item, plus the items' labels; nothing here searches again.

Definitions (stated once here; :func:`audit_neighbors` computes them):

Weights
    Each of an item's ``k`` nearest other items ``j`` weighs ``w_j = max(s_j, 0)`` (its cosine score); a row whose
    weights are all zero weighs its neighbours equally.

Shares
    ``share(i, c)`` is the weighted share of item ``i``'s ``k`` neighbours that carry label ``c``. The *own share*
    is ``share(i, y_i)``; the *suggested label* is the label of largest share (ties: the smaller label code), with
    its share. The *class rate* ``r_c`` is the mean own share of the items labelled ``c``.

Label quality
    ``q_i = own_share_i / r_{y_i}``: the item's agreement with its neighbours relative to what its class achieves
    (``q = 1`` when ``r = 0``, e.g. a class of one item: no evidence against the label). An item is a *suspect* when
    its suggested label differs from its label and ``q_i < quality_threshold`` (default 0.5). Suspects are ranked by
    ascending ``q``, ties by ascending index.

Outlier score
    ``d_i = 1 - s_{i,k}`` (cosine distance to the k-th neighbour), as a robust z-score within the item's class:
    ``0.6745 (d_i - median) / MAD``; where the class's MAD is 0, ``(d_i - median) / (1.2533 · mean absolute
    deviation)``; 0 where both are 0. An *outlier* has a score above ``outlier_threshold`` (default 3.5).

Near-duplicates
    Unordered pairs ``(i, j)`` where one is among the other's ``k`` neighbours with a score of at least
    ``duplicate_threshold`` (default 0.995): *cross-label* when their labels differ, else *same-label*. Only pairs
    within the ``k`` neighbours are seen, so a group of more than ``k + 1`` copies yields only part of its pairs.

Stability
    :func:`suspect_overlap` of two ranked suspect lists: the share of the first ``m`` of each they have in common,
    ``|A ∩ B| / max(|A|, |B|)`` (1 when both are empty).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_bool, check_number, check_positive_int
from beyondlabels._internal.shares import share_span
from beyondlabels.functional._search_paths import Neighbors

__all__ = ["AuditSettings", "LabelAudit", "audit_label_shares", "audit_neighbors", "join_neighbors", "suspect_overlap"]

QUALITY_THRESHOLD = 0.5
OUTLIER_THRESHOLD = 3.5
DUPLICATE_THRESHOLD = 0.995


@dataclass(frozen=True)
class AuditSettings:
    """The settings of an audit (meanings: :func:`audit_neighbors`).

    Args:
        k: Neighbours per item.
        quality_threshold: As in :func:`audit_neighbors`.
        outlier_threshold: As in :func:`audit_neighbors`.
        duplicate_threshold: As in :func:`audit_neighbors`.
        top: Length of the ranked lists reported (suspects, outliers) and of the top list whose overlap
            (:func:`suspect_overlap`) measures stability.
        exclude_suspects: Also compute the retrieval metrics without the items of cross-label duplicate pairs.

    Examples:
        >>> AuditSettings.of({"k": 5}).k, AuditSettings.of(None)
        (5, None)
    """

    k: int = 10
    quality_threshold: float = QUALITY_THRESHOLD
    outlier_threshold: float = OUTLIER_THRESHOLD
    duplicate_threshold: float = DUPLICATE_THRESHOLD
    top: int = 20
    exclude_suspects: bool = False

    def __post_init__(self) -> None:
        for name in ("k", "top"):  # stored as Python ints
            object.__setattr__(self, name, _audit_setting(check_positive_int, getattr(self, name), name))
        _check_thresholds(self.quality_threshold, self.outlier_threshold, self.duplicate_threshold)
        _audit_setting(check_bool, self.exclude_suspects, "exclude_suspects")

    @classmethod
    def of(cls, value: AuditSettings | Mapping[str, Any] | bool | None) -> AuditSettings | None:
        """Settings from themselves, a mapping of their fields (a config), True (the defaults) or None/False (off).

        Raises:
            ValueError: On unknown fields or other types.
        """
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {f.name for f in fields(cls)}
            if unknown:
                raise ValueError(
                    f"`audit` has unknown settings {sorted(unknown)}; known: {[f.name for f in fields(cls)]}."
                )
            return cls(**dict(value))
        raise ValueError(
            f"`audit` must be AuditSettings, a mapping of its fields, True or None, got {type(value).__name__}."
        )


def _audit_setting(check: Callable[[Any, str], Any], value: Any, name: str) -> Any:
    """``check(value, name)`` with the message naming the setting as the audit's (``audit `k` must be ...``)."""
    try:
        return check(value, name)
    except ValueError as exc:
        raise ValueError(f"audit {exc}") from None


def _check_thresholds(quality: object, outlier: object, duplicate: object) -> None:
    for name, value in (
        ("quality_threshold", quality),
        ("outlier_threshold", outlier),
        ("duplicate_threshold", duplicate),
    ):
        check_number(value, name)


@dataclass(frozen=True)
class LabelAudit:
    """The audit of ``N`` items (definitions in the module docstring); per-item tensors are ``[N]`` in item order.

    Attributes:
        own_share: float64 weighted share of the neighbours carrying the item's label.
        suggested_label: int64 label of largest share among the neighbours.
        suggested_share: float64 share of the suggested label.
        class_rate: float64 mean own share of the item's class (``r_{y_i}``).
        label_quality: float64 ``q_i``.
        is_suspect: bool.
        kth_distance: float64 cosine distance to the k-th neighbour.
        outlier_score: float64 robust z-score of ``kth_distance`` within the class.
        is_outlier: bool.
        suspects: int64 indices of the suspects, ranked.
        duplicate_pairs: int64 ``[P, 2]`` index pairs ``(i < j)``, ordered by ``(i, j)``.
        duplicate_scores: float32 ``[P]`` cosine score of each pair.
        cross_label: bool ``[P]`` whether the pair's labels differ.
        classes: int64 ``[C]`` the label codes present, ascending.
        class_items, class_suspects, class_outliers: int64 ``[C]`` counts per class.
    """

    own_share: Tensor
    suggested_label: Tensor
    suggested_share: Tensor
    class_rate: Tensor
    label_quality: Tensor
    is_suspect: Tensor
    kth_distance: Tensor
    outlier_score: Tensor
    is_outlier: Tensor
    suspects: Tensor
    duplicate_pairs: Tensor
    duplicate_scores: Tensor
    cross_label: Tensor
    classes: Tensor
    class_items: Tensor
    class_suspects: Tensor
    class_outliers: Tensor


def join_neighbors(chunks: Iterable[Neighbors], n: int) -> Neighbors:
    """The chunks of one search of ``n`` queries as one :class:`Neighbors` in query order (rows ``0..n-1``).

    Raises:
        ValueError: If the chunks do not hold every query exactly once or have different depths below the deepest.

    Examples:
        >>> a = Neighbors(torch.tensor([1]), torch.tensor([[0.5]]), torch.tensor([[0]]))
        >>> b = Neighbors(torch.tensor([0]), torch.tensor([[0.5]]), torch.tensor([[1]]))
        >>> join_neighbors([a, b], 2).indices.tolist()
        [[1], [0]]
    """
    chunks = list(chunks)
    if not chunks:
        raise ValueError("`chunks` is empty; pass the chunks of a search of every item.")
    depth = min(c.depth for c in chunks)
    rows = torch.cat([c.rows for c in chunks])
    if rows.numel() != n or not bool((torch.sort(rows).values == torch.arange(n, device=rows.device)).all()):
        raise ValueError(f"`chunks` must hold each of the {n} queries exactly once; they hold rows {rows.numel()}.")
    order = torch.argsort(rows)
    scores = torch.cat([c.scores[:, :depth] for c in chunks])[order]
    indices = torch.cat([c.indices[:, :depth] for c in chunks])[order]
    return Neighbors(rows[order], scores, indices)


def _check_inputs(neighbors: Neighbors, labels: Tensor, k: int | None) -> tuple[Tensor, Tensor, Tensor, int]:
    if not isinstance(neighbors, Neighbors):
        raise ValueError(f"`neighbors` must be a Neighbors of one search, got {type(neighbors).__name__}.")
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.is_floating_point() or labels.dtype == torch.bool:
        shape = tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__
        raise ValueError(f"`labels` must be a 1-D integer tensor of class codes, got {shape}.")
    n = labels.shape[0]
    idx, scores = neighbors.indices, neighbors.scores
    if idx.dim() != 2 or idx.shape != scores.shape or idx.shape[0] != n:
        raise ValueError(
            f"`neighbors` must hold one row per item ({n} labels), got indices {tuple(idx.shape)} and scores "
            f"{tuple(scores.shape)}; pass the search of every item, joined in item order (join_neighbors)."
        )
    if not bool((neighbors.rows == torch.arange(n, device=neighbors.rows.device)).all()):
        raise ValueError("`neighbors.rows` must be 0..N-1 in order; join the chunks with join_neighbors first.")
    depth = idx.shape[1]
    if k is None:
        k = depth
    k = check_positive_int(k, "k")
    if k > depth:
        raise ValueError(
            f"`k`={k} exceeds the {depth} neighbours searched per item (at most N - 1 = {n - 1}); "
            "lower k or search deeper."
        )
    return idx[:, :k], scores[:, :k].to(torch.float64), labels.long(), k


def _grouped_median(values: Tensor, groups: Tensor, n_groups: int) -> Tensor:
    """Median of ``values`` within each group (mean of the two middle values for even counts)."""
    order = torch.argsort(values, stable=True)
    order = order[torch.argsort(groups[order], stable=True)]
    sorted_values = values[order]
    counts = torch.bincount(groups, minlength=n_groups)
    starts = torch.cumsum(counts, 0) - counts
    present = counts > 0
    lo = (starts + (counts - 1).clamp(min=0) // 2).clamp(max=max(values.numel() - 1, 0))
    hi = (starts + counts // 2).clamp(max=max(values.numel() - 1, 0))
    med = (sorted_values[lo] + sorted_values[hi]) / 2
    return torch.where(present, med, torch.zeros_like(med))


def audit_neighbors(
    neighbors: Neighbors,
    labels: Tensor,
    *,
    k: int | None = None,
    quality_threshold: float = QUALITY_THRESHOLD,
    outlier_threshold: float = OUTLIER_THRESHOLD,
    duplicate_threshold: float = DUPLICATE_THRESHOLD,
    label_shares: Mapping[str, Tensor] | None = None,
) -> LabelAudit:
    """Audit ``N`` labelled items from their leave-one-out neighbours (definitions in the module docstring).

    Args:
        neighbors: The search of every item (``rows`` ``0..N-1``; see :func:`join_neighbors`), depth ``>= k``.
        labels: int ``[N]`` class codes.
        k: Neighbours used per item (default: the searched depth).
        quality_threshold: Suspects have ``label_quality`` below it (and another suggested label).
        outlier_threshold: Outliers have ``outlier_score`` above it.
        duplicate_threshold: Near-duplicate pairs have a cosine score of at least it.
        label_shares: The per-item part, computed beforehand (e.g. share by share by several processes):
            :func:`audit_label_shares` of every item, the shares' values concatenated in share order.

    Returns:
        A :class:`LabelAudit`.

    Raises:
        ValueError: On neighbours that do not cover every item in order, bad labels, ``k`` beyond the searched depth,
            or non-finite thresholds.

    Examples:
        Items 0-2 form a cluster labelled 0, item 3 sits in it with label 1, items 4-6 are labelled 1 elsewhere:

        >>> from beyondlabels.functional.search import search_neighbors
        >>> x = torch.tensor([[1.0, 0.1], [1.0, 0.2], [1.0, 0.0], [1.0, 0.15], [0.1, 1.0], [0.2, 1.0], [0.0, 1.0]])
        >>> nb = join_neighbors(search_neighbors(x, 2), 7)
        >>> a = audit_neighbors(nb, torch.tensor([0, 0, 0, 1, 1, 1, 1]))
        >>> a.suspects.tolist(), a.suggested_label[3].item(), a.suggested_share[3].item()
        ([3], 0, 1.0)
        >>> a.label_quality[3].item(), round(a.class_rate[3].item(), 2)
        (0.0, 0.75)
    """
    idx, s, y, k = _check_inputs(neighbors, labels, k)
    _check_thresholds(quality_threshold, outlier_threshold, duplicate_threshold)
    classes, y_code = torch.unique(y, return_inverse=True)
    n_classes = classes.numel()
    if label_shares is None:
        own, suggested, suggested_share = _label_shares(idx, s, y_code, classes, 0)
    else:
        own, suggested, suggested_share = _given_shares(label_shares, y.shape[0])
    counts = torch.bincount(y_code, minlength=n_classes)
    rate_c = torch.zeros(n_classes, dtype=torch.float64, device=y.device).index_add_(0, y_code, own) / counts
    rate = rate_c[y_code]
    quality = torch.where(rate > 0, own / torch.where(rate > 0, rate, torch.ones_like(rate)), torch.ones_like(own))
    is_suspect = (suggested != y) & (quality < quality_threshold)
    rank = torch.argsort(quality, stable=True)
    suspects = rank[is_suspect[rank]]
    dist = 1.0 - s[:, k - 1]
    z = _outlier_scores(dist, y_code, counts)
    is_outlier = z > outlier_threshold
    pairs, pair_scores = _duplicate_pairs(neighbors, idx, k, duplicate_threshold)
    cross = y[pairs[:, 0]] != y[pairs[:, 1]]

    return LabelAudit(
        own_share=own,
        suggested_label=suggested,
        suggested_share=suggested_share,
        class_rate=rate,
        label_quality=quality,
        is_suspect=is_suspect,
        kth_distance=dist,
        outlier_score=z,
        is_outlier=is_outlier,
        suspects=suspects,
        duplicate_pairs=pairs,
        duplicate_scores=pair_scores,
        cross_label=cross,
        classes=classes,
        class_items=counts,
        class_suspects=torch.bincount(y_code[is_suspect], minlength=n_classes),
        class_outliers=torch.bincount(y_code[is_outlier], minlength=n_classes),
    )


def audit_label_shares(
    neighbors: Neighbors, labels: Tensor, *, k: int | None = None, share: tuple[int, int] | None = None
) -> dict[str, Tensor]:
    """The per-item part of :func:`audit_neighbors` for the items of ``share=(i, n)`` (the i-th of n contiguous
    near-equal runs of the items; all by default): float64 ``own_share``, int64 ``suggested_label`` and float64
    ``suggested_share`` (definitions in the module docstring). :func:`audit_neighbors` takes the shares' values back,
    concatenated in share order, as ``label_shares``.

    Examples:
        >>> from beyondlabels.functional.search import search_neighbors
        >>> x = torch.tensor([[1.0, 0.1], [1.0, 0.2], [1.0, 0.0], [1.0, 0.15], [0.1, 1.0], [0.2, 1.0], [0.0, 1.0]])
        >>> nb, y = join_neighbors(search_neighbors(x, 2), 7), torch.tensor([0, 0, 0, 1, 1, 1, 1])
        >>> parts = [audit_label_shares(nb, y, share=(i, 2)) for i in range(2)]
        >>> joined = {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
        >>> audit_neighbors(nb, y, label_shares=joined).suspects.tolist()
        [3]
    """
    idx, s, y, k = _check_inputs(neighbors, labels, k)
    classes, y_code = torch.unique(y, return_inverse=True)
    lo, hi = share_span(y.shape[0], share)
    own, suggested, suggested_share = _label_shares(idx[lo:hi], s[lo:hi], y_code, classes, lo)
    return {"own_share": own, "suggested_label": suggested, "suggested_share": suggested_share}


def _given_shares(label_shares: Mapping[str, Tensor], n: int) -> tuple[Tensor, Tensor, Tensor]:
    """``own_share``, ``suggested_label`` and ``suggested_share`` of :func:`audit_label_shares`, checked."""
    if not isinstance(label_shares, Mapping) or not all(
        isinstance(label_shares.get(key), Tensor) and label_shares[key].shape == (n,) for key in _SHARE_KEYS
    ):
        raise ValueError(
            f"`label_shares` must map {list(_SHARE_KEYS)} to [{n}] tensors (audit_label_shares of every item)."
        )
    return tuple(label_shares[key] for key in _SHARE_KEYS)  # type: ignore[return-value]


_SHARE_KEYS = ("own_share", "suggested_label", "suggested_share")


def _label_shares(idx: Tensor, s: Tensor, y_code: Tensor, classes: Tensor, lo: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each item's weighted share of neighbours with its own label, its suggested label (the label of the largest
    weighted share, the smaller label on ties) and that share, for the items ``lo, lo + 1, ...`` whose neighbours
    ``idx`` and scores ``s`` are given (``y_code``: every item's class position)."""
    n, n_classes, device = idx.shape[0], classes.numel(), y_code.device
    nl = y_code[idx]  # [n, k] neighbour class positions
    w = s.clamp(min=0)
    w = torch.where(w.sum(dim=1, keepdim=True) > 0, w, torch.ones_like(w))
    w = w / w.sum(dim=1, keepdim=True)
    own = (w * (nl == y_code[lo : lo + n, None])).sum(dim=1)

    # Weighted share of every (item, label) present among the neighbours, then the largest per item.
    key = torch.arange(n, device=device)[:, None] * n_classes + nl
    uniq, inverse = torch.unique(key.flatten(), return_inverse=True)
    sums = torch.zeros(uniq.numel(), dtype=torch.float64, device=device).index_add_(0, inverse, w.flatten())
    order = torch.argsort(-sums, stable=True)  # keys ascend, so equal sums keep the smaller label first
    order = order[torch.argsort(uniq[order] // n_classes, stable=True)]
    row_of = uniq[order] // n_classes
    first = torch.ones_like(row_of, dtype=torch.bool)
    first[1:] = row_of[1:] != row_of[:-1]
    best = order[first]
    return own, classes[uniq[best] % n_classes], sums[best]


def _outlier_scores(dist: Tensor, y_code: Tensor, counts: Tensor) -> Tensor:
    """The robust z-score of each item's k-th neighbour distance within its class (MAD, else mean absolute
    deviation, else 0)."""
    n_classes = counts.numel()
    med = _grouped_median(dist, y_code, n_classes)
    dev = (dist - med[y_code]).abs()
    mad = _grouped_median(dev, y_code, n_classes)
    mean_ad = torch.zeros(n_classes, dtype=torch.float64, device=dist.device).index_add_(0, y_code, dev) / counts
    mad_i, mean_i = mad[y_code], mean_ad[y_code]
    centred = dist - med[y_code]
    return torch.where(
        mad_i > 0,
        0.6745 * centred / torch.where(mad_i > 0, mad_i, torch.ones_like(mad_i)),
        torch.where(
            mean_i > 0,
            centred / (1.2533 * torch.where(mean_i > 0, mean_i, torch.ones_like(mean_i))),
            torch.zeros_like(centred),
        ),
    )


def _duplicate_pairs(neighbors: Neighbors, idx: Tensor, k: int, duplicate_threshold: float) -> tuple[Tensor, Tensor]:
    """The distinct pairs ``(i, j)``, ``i < j``, found within each other's ``k`` neighbours at a score of at least
    ``duplicate_threshold``, and the largest score found of each."""
    n, device = idx.shape[0], idx.device
    close = neighbors.scores[:, :k] >= duplicate_threshold
    qi = torch.arange(n, device=device)[:, None].expand(-1, k)[close]
    qj = idx[close]
    found_scores = neighbors.scores[:, :k][close].to(torch.float32)
    lo, hi = torch.minimum(qi, qj), torch.maximum(qi, qj)
    pair_key = lo * n + hi
    pair_uniq, pair_inv = torch.unique(pair_key, return_inverse=True)
    pair_scores = torch.full((pair_uniq.numel(),), -2.0, dtype=torch.float32, device=device)
    pair_scores = pair_scores.scatter_reduce(0, pair_inv, found_scores, reduce="amax")
    pairs = (
        torch.stack([pair_uniq // n, pair_uniq % n], dim=1)
        if pair_uniq.numel()
        else torch.zeros((0, 2), dtype=torch.long, device=device)
    )
    return pairs, pair_scores


def suspect_overlap(previous: Tensor, current: Tensor, m: int) -> float:
    """The share of the first ``m`` entries of two ranked suspect lists (ids) they have in common:
    ``|A ∩ B| / max(|A|, |B|)``, 1.0 when both are empty.

    Raises:
        ValueError: If ``m`` is not a positive int or a list is not 1-D.

    Examples:
        >>> (suspect_overlap(torch.tensor([4, 9, 2]), torch.tensor([9, 4, 7]), 2),
        ...  suspect_overlap(torch.tensor([4, 9, 2]), torch.tensor([9, 1]), 3))
        (1.0, 0.3333333333333333)
    """
    m = check_positive_int(m, "m")
    for name, value in (("previous", previous), ("current", current)):
        if not isinstance(value, Tensor) or value.dim() != 1:
            raise ValueError(f"`{name}` must be a 1-D tensor of ids, ranked, got {type(value).__name__}.")
    a, b = set(previous[:m].tolist()), set(current[:m].tolist())
    if not a and not b:
        return 1.0
    return len(a & b) / max(len(a), len(b))
