"""Graded relevance between classes: a C x C gain matrix that retrieval metrics read beside binary relevance.

Definition
    ``gains[i, j]`` in ``[0, 1]`` is the credit a query of class ``classes[i]`` earns for retrieving an item of class
    ``classes[j]``; the diagonal is 1 (the same class is fully relevant). The matrix need not be symmetric. Binary
    relevance (same label) is the identity matrix: metrics computed with :meth:`ClassGains.identity` equal the binary
    ones. Taxonomy- and profile-derived matrices plug in here; any hand-made matrix does too.

Examples:
    >>> gains = ClassGains(torch.tensor([[1.0, 0.5], [0.5, 1.0]]), ["square", "rectangle"], name="shape")
    >>> codes, _ = encode_labels(["rectangle", "square"])
    >>> gains.class_index(codes)
    tensor([1, 0])
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from beyondlabels.functional.labels import encode_labels

__all__ = ["ClassGains"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class ClassGains:
    """A validated class-gain matrix with the label codes of its rows (see the module docstring).

    Args:
        gains: ``[C, C]`` float tensor or array, finite, within ``[0, 1]``, 1 on the diagonal.
        classes: The C labels (ints or strings, coded by :func:`~beyondlabels.functional.labels.encode_labels`) of
            the rows and columns, in matrix order; distinct.
        name: Prefix of the graded keys (``<name>_precision@k``, ``<name>_ndcg@k``): a letter, then letters, digits
            or underscores.
        mistake_stats: Optional ``{stat: [C, C] matrix}`` of class-pair values where larger means a nearer miss (e.g.
            the depth of the classes' lowest common ancestor): retrieval then reports ``<name>_mistake_<stat>``, the
            mean over the queries whose top-1 neighbour has another label of ``matrix[class(query), class(top 1)]``.

    Raises:
        ValueError: naming the argument, for a non-square or out-of-range matrix, a diagonal other than 1, repeated
            or missing classes, or a bad name.
    """

    def __init__(
        self, gains: Any, classes: Sequence[Any], name: str = "graded", mistake_stats: dict[str, Any] | None = None
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"`name` must start with a letter and hold only letters, digits or '_', got {name!r}.")
        matrix = torch.as_tensor(np.asarray(gains) if not isinstance(gains, Tensor) else gains).to(torch.float64)
        if matrix.dim() != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] == 0:
            raise ValueError(f"`gains` must be a non-empty square [C, C] matrix, got shape {tuple(matrix.shape)}.")
        if not bool(torch.isfinite(matrix).all()) or bool((matrix < 0).any()) or bool((matrix > 1).any()):
            raise ValueError("`gains` must hold finite values within [0, 1]; rescale the similarity matrix first.")
        if not bool((torch.diagonal(matrix) == 1).all()):
            bad = torch.nonzero(torch.diagonal(matrix) != 1).flatten()[:5].tolist()
            raise ValueError(f"`gains` must be 1 on the diagonal (same class = fully relevant); rows {bad} are not.")
        codes, _ = encode_labels(list(classes), "classes")
        if codes.numel() != matrix.shape[0]:
            raise ValueError(
                f"`classes` has {codes.numel()} labels for a {matrix.shape[0]} x {matrix.shape[0]} matrix; "
                "they must match."
            )
        sorted_codes, order = torch.sort(codes)
        if codes.numel() > 1 and bool((sorted_codes[1:] == sorted_codes[:-1]).any()):
            raise ValueError("`classes` holds the same label twice; each row of `gains` needs its own class.")
        stats: dict[str, Tensor] = {}
        for stat, values in (mistake_stats or {}).items():
            if not isinstance(stat, str) or not _NAME.match(stat):
                raise ValueError(
                    f"`mistake_stats` names must start with a letter and hold letters, digits or '_', got {stat!r}."
                )
            table = torch.as_tensor(np.asarray(values) if not isinstance(values, Tensor) else values).to(torch.float64)
            if table.shape != matrix.shape or not bool(torch.isfinite(table).all()):
                raise ValueError(
                    f"`mistake_stats[{stat!r}]` must be a finite {tuple(matrix.shape)} matrix, "
                    f"got shape {tuple(table.shape)}."
                )
            stats[stat] = table
        self.name = name
        self.mistake_stats = stats
        self.gains = matrix
        self.classes = list(classes)
        self._sorted_codes = sorted_codes
        self._order = order

    @classmethod
    def identity(cls, classes: Sequence[Any], name: str = "graded") -> ClassGains:
        """Binary relevance written as a gain matrix (metrics equal the binary ones)."""
        return cls(torch.eye(len(classes), dtype=torch.float64), classes, name)

    @property
    def num_classes(self) -> int:
        return self.gains.shape[0]

    def class_index(self, labels: Tensor, name: str = "labels") -> Tensor:
        """Row of each label code in the matrix.

        Raises:
            ValueError: if a label is not among ``classes`` (the first few are named).
        """
        codes = self._sorted_codes.to(labels.device)
        pos = torch.searchsorted(codes, labels).clamp_(max=codes.numel() - 1)
        found = codes[pos] == labels
        if not bool(found.all()):
            missing = torch.unique(labels[~found])[:5].tolist()
            raise ValueError(
                f"`{name}` holds labels {missing} that the gain matrix {self.name!r} does not list; add them to its "
                "`classes` (and a row and column of gains)."
            )
        return self._order.to(labels.device)[pos]

    def __repr__(self) -> str:
        return f"ClassGains(name={self.name!r}, num_classes={self.num_classes})"
