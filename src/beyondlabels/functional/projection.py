"""Linear projections of an embedding set for pictures: principal component analysis (PCA).

Pure torch (float64 on the device of the input); no torchmetrics, no Lightning.

Definitions (stated once)
    - The rows ``x_i`` of ``embeddings`` ``[N, D]`` are centred on their mean: ``X = x - mean(x)``.
    - With the thin SVD ``X = U S V^T`` (singular values in descending order), component ``j`` is the row ``v_j`` of
      ``V^T`` and the **coordinates** of row ``i`` are ``X_i . v_j`` (``= U_ij S_j``).
    - **Explained variance ratio** of component ``j``: its variance over the total variance,
      ``S_j^2 / sum_l S_l^2`` (the ``N - 1`` of both variances cancels; the total is the sum of every column's
      variance). For data without variance (all rows equal) every coordinate is 0 and every ratio is NaN.
    - **Sign**: an SVD fixes each component up to its sign; here the entry of ``v_j`` with the largest absolute value
      is positive (the first such entry on exact ties), so one input gives one output. Components of equal variance
      span a plane in which no single direction is preferred: only the plane is determined then.

Examples:
    >>> x = torch.tensor([[2.0, 0.0, 1.0], [-2.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, -1.0, 1.0]])
    >>> coords, ratio = pca_projection(x)
    >>> (coords.round(decimals=6) + 0.0).tolist(), ratio.round(decimals=6).tolist()
    ([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]], [0.8, 0.2])
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_int

__all__ = ["ClassProjection", "class_projection", "pca_projection"]


def pca_projection(embeddings: Any, num_components: int = 2) -> tuple[Tensor, Tensor]:
    """Coordinates of the rows of ``embeddings`` on their first principal components, and each component's explained
    variance ratio (definitions, sign rule: the module docstring).

    Args:
        embeddings: ``[N, D]`` real values (a tensor or anything ``torch.as_tensor`` takes), ``N >= 2``, finite.
        num_components: ``k``, components kept: ``1 <= k <= min(N, D)``.

    Returns:
        ``(coords [N, k], explained_variance_ratio [k])``, float64 on the device of ``embeddings``.

    Raises:
        ValueError: naming the argument, for a non-2-D, empty, one-row, complex, boolean or non-finite
            ``embeddings`` or a ``num_components`` outside ``1..min(N, D)``.

    Examples:
        >>> coords, ratio = pca_projection(torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]), num_components=1)
        >>> (coords.flatten().round(decimals=4) + 0.0).tolist(), ratio.round(decimals=6).tolist()
        ([-1.4142, 0.0, 1.4142], [1.0])
    """
    x = torch.as_tensor(embeddings)
    if x.dim() != 2:
        raise ValueError(f"`embeddings` must be a 2-D [N, D] array, got shape {tuple(x.shape)}.")
    if x.is_complex() or x.dtype == torch.bool:
        raise ValueError(f"`embeddings` must hold real numbers, got dtype {x.dtype}.")
    n, d = x.shape
    if n < 2 or d < 1:
        raise ValueError(f"`embeddings` must have at least 2 rows and 1 column for a projection, got shape {(n, d)}.")
    num_components = check_int(num_components, "num_components", minimum=1, maximum=min(n, d), hint="at most min(N, D)")
    x = x.to(torch.float64)
    if not bool(torch.isfinite(x).all()):
        raise ValueError("`embeddings` holds NaN or infinite values; a projection needs finite values.")
    centred = x - x.mean(dim=0, keepdim=True)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    components = vh[:num_components]
    largest = components.abs().argmax(dim=1)  # the first maximal entry on exact ties
    signs = torch.sign(components.gather(1, largest[:, None]))
    components = components * torch.where(signs == 0, torch.ones_like(signs), signs)
    coords = centred @ components.T
    power = s**2
    total = float(power.sum())
    if total > 0:
        ratio = power[:num_components] / total
    else:
        ratio = torch.full((num_components,), math.nan, dtype=torch.float64, device=x.device)
        coords = torch.zeros_like(coords)
    return coords, ratio


class ClassProjection(NamedTuple):
    """A 2-D picture of labelled embeddings: ``coords`` ``[N, 2]`` and ``explained`` ``[2]`` of
    :func:`pca_projection`, the distinct label codes ``classes`` ``[C]`` (ascending: the legend order) and the
    position of each row's label among them, ``class_index`` ``[N]``."""

    coords: Tensor
    explained: Tensor
    classes: Tensor
    class_index: Tensor


def class_projection(embeddings: Tensor, labels: Tensor) -> ClassProjection:
    """The 2-component PCA of ``embeddings`` ``[N, D]`` (N, D >= 2) with each row's class position.

    Examples:
        >>> emb = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
        >>> p = class_projection(emb, torch.tensor([7, 3, 7, 3]))
        >>> p.coords.shape, p.classes.tolist(), p.class_index.tolist()
        (torch.Size([4, 2]), [3, 7], [1, 0, 1, 0])
    """
    coords, explained = pca_projection(embeddings, num_components=2)
    classes, class_index = torch.unique(labels, return_inverse=True)
    return ClassProjection(coords, explained, classes, class_index)
