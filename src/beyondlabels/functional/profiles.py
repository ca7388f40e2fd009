"""Class-to-class similarity from feature profiles (``M_feature``) and the distribution of its distinct pairs.

Definitions (stated once; the functions refer to them)

Ordinal group score
    ``S_f(A, B) = mean_k (1 - |a_k - b_k| / L)`` over the ordinal features ``k`` (``L`` = ``ordinal_max``). All
    ordinal features together form **one** group; it is unavailable when there are no ordinal features.

Set group score
    Jaccard ``|A ∩ B| / |A ∪ B|`` of the two classes' value sets. A group where **both** sets are empty is
    *unavailable* for that pair and left out; one empty set (and one not) scores 0.

``M_feature(A, B)``
    The weighted mean of the available group scores of the pair, weights ``w_g`` (default 1 each; the ordinal group
    is named ``"ordinal"`` in ``weights``). Symmetric, within ``[0, 1]``, 1 on the diagonal (a class whose every
    group is unavailable against itself — no ordinal features and only empty sets — gets 1 by definition; a pair
    with no available group gets 0).

Distinct-pair distribution
    The ``C (C - 1) / 2`` values above the diagonal. Quantiles use numpy's default linear interpolation
    (``numpy.quantile(..., method="linear")``); top pairs are ordered by similarity, ties by matrix order.

Example (the worked example of "When Labels Say No, But Embeddings Say Yes", Bauhaus vs International Style):
    >>> from beyondlabels.profiles import FeatureProfiles
    >>> p = FeatureProfiles(
    ...     {"Bauhaus": {"o": 1, "materials": ["glass/steel", "concrete", "stucco"], "elements": []},
    ...      "International": {"o": 1, "materials": ["glass/steel", "concrete"], "elements": []}},
    ...     ordinal=["o"], sets={"materials": ["glass/steel", "concrete", "stucco"], "elements": ["dome"]})
    >>> round(float(feature_similarity(p)[0, 1]), 3)
    0.833
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import (
    check_matrix,
    check_non_negative_int,
    check_number,
    check_positive_int,
    gain_labels,
)
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.profiles import FeatureProfiles

__all__ = [
    "ORDINAL_GROUP",
    "feature_similarity",
    "ordinal_group_score",
    "pair_distribution",
    "pair_values",
    "profile_class_gains",
]

ORDINAL_GROUP = "ordinal"
QUANTILES = {"median": 0.5, "p75": 0.75, "p90": 0.90, "p95": 0.95}


def ordinal_group_score(a: Any, b: Any, ordinal_max: int = 2) -> float:
    """``S_f`` of two level vectors (see the module docstring).

    Example (Gothic vs Bauhaus):
        >>> round(ordinal_group_score([1, 2, 1, 2, 2], [1, 1, 2, 0, 0]), 2)
        0.4
    """
    x, y = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if x.dim() != 1 or x.shape != y.shape or x.numel() == 0:
        raise ValueError(
            f"`a` and `b` must be non-empty level vectors of one length, got {tuple(x.shape)} and {tuple(y.shape)}."
        )
    ordinal_max = check_positive_int(ordinal_max, "ordinal_max")
    if bool(((x < 0) | (x > ordinal_max) | (y < 0) | (y > ordinal_max)).any()):
        raise ValueError(f"levels must lie within 0..{ordinal_max} (ordinal_max), got {x.tolist()} and {y.tolist()}.")
    return float((1.0 - (x - y).abs() / ordinal_max).mean())


def _weights(profiles: FeatureProfiles, weights: Mapping[str, float] | None) -> dict[str, float]:
    groups = ([ORDINAL_GROUP] if profiles.ordinal_features else []) + list(profiles.set_groups)
    out = dict.fromkeys(groups, 1.0)
    if weights is None:
        return out
    if not isinstance(weights, Mapping):
        raise ValueError(f"`weights` must be a mapping {{group: weight}}, got {type(weights).__name__}.")
    for group, w in weights.items():
        if group not in out:
            raise ValueError(
                f"`weights` names unknown group {group!r}; "
                f"the groups are {groups} ('{ORDINAL_GROUP}' = all ordinal features)."
            )
        out[group] = check_number(w, f"weights[{group!r}]", at_least=0.0)
    if sum(out.values()) == 0:
        raise ValueError("`weights` are all 0; give at least one group a positive weight.")
    return out


def feature_similarity(profiles: FeatureProfiles, weights: Mapping[str, float] | None = None) -> Tensor:
    """The ``[C, C]`` float64 matrix ``M_feature`` over ``profiles.classes`` (class order; see the module docstring).

    Args:
        profiles: the classes' :class:`~beyondlabels.profiles.FeatureProfiles`
            (:func:`~beyondlabels.io.profiles_files.load_profiles` reads them from a file or a mapping).
        weights: optional ``{group: weight}``; ``"ordinal"`` is the ordinal group, other keys are set groups.

    Raises:
        ValueError: for ``profiles`` that are not FeatureProfiles, an unknown group in ``weights``, a negative or
            non-finite weight, or all weights 0 (invalid profiles raise in
            :class:`~beyondlabels.profiles.FeatureProfiles`, naming class and feature).

    Examples:
        >>> from beyondlabels.profiles import FeatureProfiles
        >>> p = FeatureProfiles({"a": {"x": 0, "g": ["u"]}, "b": {"x": 2, "g": ["u", "v"]}}, ordinal=["x"],
        ...                     sets={"g": ["u", "v"]})
        >>> feature_similarity(p).tolist()
        [[1.0, 0.25], [0.25, 1.0]]
        >>> feature_similarity(p, weights={"ordinal": 0.0}).tolist()
        [[1.0, 0.5], [0.5, 1.0]]
    """
    if not isinstance(profiles, FeatureProfiles):
        raise ValueError(
            f"`profiles` must be FeatureProfiles, got {type(profiles).__name__}; read files or mappings with "
            "beyondlabels.io.load_profiles."
        )
    w = _weights(profiles, weights)
    c = len(profiles)
    total = torch.zeros(c, c, dtype=torch.float64)
    weight_sum = torch.zeros(c, c, dtype=torch.float64)
    if profiles.ordinal_features:
        levels = profiles.ordinal_matrix().to(torch.float64)
        score = 1.0 - (levels[:, None, :] - levels[None, :, :]).abs().mean(dim=2) / profiles.ordinal_max
        total += w[ORDINAL_GROUP] * score
        weight_sum += w[ORDINAL_GROUP]
    for group in profiles.set_groups:
        member = profiles.set_membership(group).to(torch.float64)
        inter = member @ member.T
        sizes = member.sum(dim=1)
        union = sizes[:, None] + sizes[None, :] - inter
        available = union > 0
        jaccard = torch.where(available, inter / union.clamp(min=1.0), torch.zeros_like(inter))
        total += w[group] * jaccard
        weight_sum += w[group] * available.to(torch.float64)
    out = torch.where(weight_sum > 0, total / weight_sum.clamp(min=1e-300), torch.zeros_like(total))
    out.fill_diagonal_(1.0)
    return out


def profile_class_gains(
    profiles: FeatureProfiles,
    name: str = "profile",
    labels: Sequence[Any] | str | None = None,
    weights: Mapping[str, float] | None = None,
) -> ClassGains:
    """:func:`feature_similarity` as a :class:`~beyondlabels.functional.relevance.ClassGains` for graded retrieval
    credit (``<name>_precision@k``, ``<name>_ndcg@k``).

    Args:
        profiles: the classes' :class:`~beyondlabels.profiles.FeatureProfiles`.
        name: prefix of the graded keys.
        labels: the label each class carries in the data: None (the class names, for string labels),
            ``"index"`` (class ``i`` is labelled ``i``), or one int or string per class, in class order.
        weights: group weights of :func:`feature_similarity`.

    Raises:
        ValueError: for ``labels`` of the wrong length or kind (and what :func:`feature_similarity` raises).

    Examples:
        >>> from beyondlabels.profiles import FeatureProfiles
        >>> p = FeatureProfiles({"a": {"x": 0}, "b": {"x": 1}}, ordinal=["x"], sets={})
        >>> gains = profile_class_gains(p, labels="index")
        >>> gains.classes, gains.gains.tolist()
        ([0, 1], [[1.0, 0.5], [0.5, 1.0]])
    """
    similarity = feature_similarity(profiles, weights)
    return ClassGains(similarity, gain_labels(labels, profiles.classes), name=name)


def pair_values(similarity: Any) -> Tensor:
    """The ``C (C - 1) / 2`` distinct-pair values (above the diagonal, row by row), float64.

    Examples:
        >>> pair_values([[1.0, 0.2, 0.5], [0.2, 1.0, 0.7], [0.5, 0.7, 1.0]]).tolist()
        [0.2, 0.5, 0.7]
    """
    m = check_matrix(similarity)
    i, j = torch.triu_indices(m.shape[0], m.shape[0], offset=1)
    return m[i, j]


def pair_distribution(similarity: Any, classes: Sequence[str] | None = None, top: int = 10) -> dict[str, Any]:
    """Summary of the distinct-pair distribution: ``num_pairs``, ``mean``, ``median``, ``p75``, ``p90``, ``p95``,
    ``min``, ``max`` (numpy linear quantiles) and ``top_pairs``: the ``top`` most similar pairs as
    ``[class a, class b, similarity]`` (descending; ties in matrix order).

    Raises:
        ValueError: for a matrix that is not square ``C >= 2`` and finite, ``classes`` of the wrong length, or a bad
            ``top``.

    Examples:
        >>> d = pair_distribution([[1.0, 0.2, 0.5], [0.2, 1.0, 0.7], [0.5, 0.7, 1.0]], ["a", "b", "c"], top=1)
        >>> d["num_pairs"], round(d["mean"], 4), d["median"], d["top_pairs"]
        (3, 0.4667, 0.5, [['b', 'c', 0.7]])
    """
    m = check_matrix(similarity)
    c = m.shape[0]
    if classes is None:
        classes = [str(i) for i in range(c)]
    classes = list(classes)
    if len(classes) != c:
        raise ValueError(f"`classes` has {len(classes)} names for a {c} x {c} matrix; give one name per row.")
    top = check_non_negative_int(top, "top", hint="how many pairs to list")
    values = pair_values(m)
    i, j = torch.triu_indices(c, c, offset=1)
    out: dict[str, Any] = {"num_pairs": int(values.numel()), "mean": float(values.mean())}
    for key, q in QUANTILES.items():
        out[key] = float(torch.quantile(values, q))
    out["min"], out["max"] = float(values.min()), float(values.max())
    order = torch.sort(-values, stable=True).indices[:top]
    out["top_pairs"] = [[classes[int(i[o])], classes[int(j[o])], float(values[o])] for o in order]
    return out
