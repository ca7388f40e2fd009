"""One rule that turns any label (ints, strings, numpy arrays, lists) into int64 codes, used everywhere.

Rule
    Integer labels (Python ints, integer numpy arrays or tensors, lists of ints) keep their values as int64 codes.
    Any other label (strings, bytes, tuples, ...) is coded by a stable hash: the first 8 bytes of the BLAKE2b
    digest of the text ``str(label)`` (UTF-8), read as a little-endian int64 with the sign bit cleared.
    The code of a label therefore depends on the label alone — not on batch order, batch size, rank or what else
    was seen — so samples encoded in different batches, processes or files agree, and a gathered gallery needs
    no shared dictionary. Names are kept beside the codes for reports. Two distinct strings share a code with
    probability about ``2**-63`` per pair. So ``1`` and ``"1"`` (or ``"1"`` and ``" 1"``) are two classes; a list
    that mixes such spellings of one label gets a warning (:func:`encode_labels`).

Examples:
    >>> codes, names = encode_labels(["gothic", "baroque", "gothic"])
    >>> codes[0] == codes[2], codes[0] != codes[1]
    (tensor(True), tensor(True))
    >>> names[int(codes[1])]
    'baroque'
    >>> encode_labels([3, 1, 3])
    (tensor([3, 1, 3]), {3: '3', 1: '1'})
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["encode_labels", "label_code"]

_SIGN_CLEAR = (1 << 63) - 1


def label_code(label: Hashable) -> int:
    """The int64 code of one label under the module's rule.

    Examples:
        >>> label_code(7), label_code("7") == label_code("7"), label_code("7") == 7
        (7, True, False)
    """
    if isinstance(label, (bool, np.bool_)):
        raise ValueError(f"labels must be ints or strings, got the boolean {label!r}; map it to an int first.")
    if isinstance(label, (int, np.integer)):
        return int(label)
    if isinstance(label, (float, np.floating)):
        raise ValueError(
            f"labels must be ints or strings, got the float {label!r}; round it to an int class id or pass its name."
        )
    digest = hashlib.blake2b(str(label).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _SIGN_CLEAR


def encode_labels(labels: Any, name: str = "labels") -> tuple[Tensor, dict[int, str]]:
    """Codes and display names of a batch or a whole set of labels (see the module rule).

    Args:
        labels: A 1-D integer tensor or numpy array (returned as int64, same device), or any sequence / 1-D array of
            ints, strings or other hashables.
        name: The argument name used in error messages.

    Returns:
        ``(codes, names)``: an int64 tensor ``[N]`` and a dict ``code -> str(label)`` of the distinct labels in order
        of first appearance.

    Raises:
        ValueError: for floats, booleans, or an array that is not 1-D (the message names ``name``).

    Warns:
        UserWarning: when two labels of different codes read the same once surrounding spaces are stripped (``1``
            and ``"1"``, ``"cat"`` and ``" cat"``): one class written two ways becomes two classes by the rule.
    """
    if isinstance(labels, Tensor):
        if labels.dim() != 1:
            raise ValueError(f"`{name}` must be 1-D, got shape {tuple(labels.shape)}.")
        if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise ValueError(
                f"`{name}` must hold integer class ids or strings, got a {labels.dtype} tensor; "
                "map labels to ints first."
            )
        codes = labels.to(torch.long)
        return codes, {int(v): str(int(v)) for v in torch.unique(codes).tolist()}
    if isinstance(labels, np.ndarray):
        if labels.ndim != 1:
            raise ValueError(f"`{name}` must be 1-D, got shape {labels.shape}.")
        if np.issubdtype(labels.dtype, np.integer):
            codes = torch.from_numpy(labels.astype(np.int64, copy=False))
            return codes, {int(v): str(int(v)) for v in np.unique(labels)}
        if labels.dtype == np.bool_ or np.issubdtype(labels.dtype, np.floating):
            raise ValueError(f"`{name}` must hold integer class ids or strings, got a {labels.dtype} array.")
        labels = labels.tolist()
    if isinstance(labels, (str, bytes)) or not isinstance(labels, (Sequence, Iterable)):
        raise ValueError(f"`{name}` must be a 1-D sequence of labels, got {type(labels).__name__}.")
    values = list(labels)
    names: dict[int, str] = {}
    firsts: dict[int, Any] = {}
    codes = []
    for value in values:
        if isinstance(value, Tensor) and value.numel() == 1:
            value = value.item()
        try:
            code = label_code(value)
        except ValueError as exc:
            raise ValueError(f"`{name}`: {exc}") from None
        codes.append(code)
        if code not in names:
            names[code], firsts[code] = str(value), value
    _warn_two_ways(firsts, name)
    return torch.tensor(codes, dtype=torch.long), names


def _warn_two_ways(firsts: dict[int, Any], name: str) -> None:
    """Warn when labels of different codes read the same once spaces are stripped (``1`` and ``"1"``, ``"cat"`` and
    ``" cat"``): the rule makes them two classes, which is rarely what a mixed list means."""
    by_text: dict[str, Any] = {}
    pairs = []
    for value in firsts.values():
        text = str(value).strip()
        if text in by_text:
            pairs.append((by_text[text], value))
        else:
            by_text[text] = value
    if pairs:
        shown = ", ".join(f"{a!r} and {b!r}" for a, b in pairs[:3])
        shown += f" ({len(pairs)} pairs)" if len(pairs) > 3 else ""
        warnings.warn(
            f"`{name}`: {shown} are one label written two ways, and they are coded as different classes (an int "
            "keeps its value, a string is hashed with its spaces: beyondlabels.functional.labels); convert the labels "
            "to one type, without surrounding spaces, if they name one class.",
            UserWarning,
            stacklevel=3,
        )
