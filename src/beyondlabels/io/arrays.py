"""Saved outputs on disk: the ``.npz`` layouts evaluate.py reads (retrieval, cross-modal, text-to-image)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from beyondlabels._internal.parse import load_npz, parse_json
from beyondlabels.functional.labels import encode_labels, label_code


@dataclass(frozen=True)
class EmbeddingSet:
    """Embeddings with int64 label codes, the names of the codes, and unique integer ids.

    ``labels`` are the codes of :func:`beyondlabels.functional.labels.encode_labels` (integer labels keep their values,
    strings are hashed); ``label_names`` maps each distinct code to its label as text, in order of first appearance.
    """

    embeddings: torch.Tensor
    labels: torch.Tensor
    ids: torch.Tensor
    label_names: dict[int, str]

    @property
    def num_labels(self) -> int:
        """The number of distinct labels."""
        return len(self.label_names)


def load_embeddings_npz(path: str | Path) -> EmbeddingSet:
    """Read ``embeddings`` (N×D floats), ``labels`` (N ints or strings) and optional ``ids`` (N ints).

    Labels are coded by the project's one rule (:func:`beyondlabels.functional.labels.encode_labels`): integer labels
    keep their values (however large or negative), strings are hashed; the names are kept for reports. Without ``ids``
    the row index is the id.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a required array is missing, shapes disagree, or labels are floats or booleans; the message
            names the array.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "e.npz")
        >>> np.savez(path, embeddings=np.eye(3, dtype=np.float32), labels=np.array(["b", "a", "b"]))
        >>> s = load_embeddings_npz(path)
        >>> s.num_labels, list(s.label_names.values()), s.ids.tolist()
        (2, ['b', 'a'], [0, 1, 2])
        >>> s.labels[0] == s.labels[2], s.labels[0] != s.labels[1]
        (tensor(True), tensor(True))
    """
    path = Path(path)
    arrays = read_npz(path, ("embeddings", "labels"), "Save embeddings (N×D) and labels (N).")
    embeddings = float_matrix(arrays, "embeddings", path)
    labels = arrays["labels"]
    if labels.ndim != 1 or len(labels) != len(embeddings):
        raise ValueError(
            f"'labels' in {path} must be 1-D with one label per embedding row ({len(embeddings)}), "
            f"got shape {labels.shape}"
        )
    ids = int_vector(arrays, "ids", path, len(embeddings), default_rows=True)
    codes, names = encode_labels(labels, name=f"'labels' in {path}")
    return EmbeddingSet(
        embeddings=embeddings,
        labels=codes,
        ids=ids,
        label_names=names,
    )


def read_npz(path: str | Path, required: tuple[str, ...], what: str) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` (no pickles; a broken archive is a ``ValueError``:
    :func:`beyondlabels._internal.parse.load_npz`), after checking that the file and the ``required`` arrays exist.

    Raises:
        FileNotFoundError: if ``path`` does not exist (the message names the arrays expected).
        ValueError: naming the missing arrays, what the file holds, and ``what`` is expected.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"input file {path} does not exist; pass input=PATH.npz with arrays {', '.join(required)}"
        )
    arrays = load_npz(path, f"input file {path}")
    missing = [name for name in required if name not in arrays]
    if missing:
        raise ValueError(f"{path} lacks the array(s) {missing}; it holds {list(arrays)}. {what}")
    return arrays


def float_matrix(arrays: dict[str, np.ndarray], name: str, path: Path) -> torch.Tensor:
    """``arrays[name]`` as an fp32 ``[N, D]`` tensor; a clear error for anything but a 2-D float array."""
    a = arrays[name]
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"'{name}' in {path} must be a 2-D float array (N×D), got shape {a.shape} dtype {a.dtype}")
    return torch.from_numpy(a.astype(np.float32, copy=False))


def int_vector(
    arrays: dict[str, np.ndarray], name: str, path: Path, size: int, default_rows: bool = False
) -> torch.Tensor | None:
    """``arrays[name]`` as int64 ``[size]``; when absent, the row positions (``default_rows``) or None."""
    if name not in arrays:
        return torch.arange(size) if default_rows else None
    a = arrays[name]
    if a.ndim != 1 or len(a) != size or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(
            f"'{name}' in {path} must be 1-D integers, {size} of them, got shape {a.shape} dtype {a.dtype}"
        )
    return torch.from_numpy(a.astype(np.int64))


def _image_and_text_npz(
    path: str | Path, hint: str, *required: str
) -> tuple[Path, dict[str, np.ndarray], dict[str, Any]]:
    """``path`` as a Path, the arrays of its ``.npz`` (``image_embeddings``, ``text_embeddings`` and ``required``
    must be there; ``hint`` says what is expected), and a dict holding the two embeddings as float tensors."""
    path = Path(path)
    names = ("image_embeddings", "text_embeddings")
    arrays = read_npz(path, names + required, hint)
    return path, arrays, {name: float_matrix(arrays, name, path) for name in names}


def load_crossmodal_npz(path: str | Path) -> dict[str, Any]:
    """``image_embeddings`` (N_img×D), ``text_embeddings`` (N_txt×D), ``text_image_index`` (N_txt ints: the row of each
    caption's image) and optional ``image_ids`` / ``text_ids`` of an ``.npz``, as tensors (ids default to the rows).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: naming the array that is missing or has the wrong shape or type.
    """
    path, arrays, out = _image_and_text_npz(
        path,
        "task=crossmodal needs image_embeddings (N_img×D), text_embeddings (N_txt×D) and text_image_index (N_txt ints: "
        "the row of each caption's image).",
        "text_image_index",
    )
    n_images, n_texts = len(out["image_embeddings"]), len(out["text_embeddings"])
    for name, size in (("text_image_index", n_texts), ("image_ids", n_images), ("text_ids", n_texts)):
        out[name] = int_vector(arrays, name, path, size, default_rows=True)
    return out


def load_rprecision_npz(path: str | Path) -> dict[str, Any]:
    """``image_embeddings`` and ``text_embeddings`` (N×D each; row i is the prompt of image i), optional ``ids``,
    ``class_ids`` (N ints), ``captions`` (N strings, returned as ``caption_codes``) and ``evaluator`` (a JSON string:
    the evaluator's identity) of an ``.npz``.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: naming the array that is missing or has the wrong shape or type.
    """
    path, arrays, out = _image_and_text_npz(
        path, "task=rprecision needs image_embeddings (N×D) and text_embeddings (N×D, row i the prompt of image i)."
    )
    n = len(out["image_embeddings"])
    for name in ("ids", "class_ids"):
        if name in arrays:
            out[name] = int_vector(arrays, name, path, n)
    if "captions" in arrays:
        a = arrays["captions"]
        if a.ndim != 1 or len(a) != n:
            raise ValueError(f"'captions' in {path} must be 1-D with {n} strings, got shape {a.shape}")
        out["caption_codes"] = torch.tensor([label_code(str(c)) for c in a.tolist()], dtype=torch.long)
    if "evaluator" in arrays:
        text = str(arrays["evaluator"].item()) if arrays["evaluator"].ndim == 0 else str(arrays["evaluator"].tolist())
        try:
            out["evaluator"] = parse_json(text, f"'evaluator' in {path}")
        except ValueError:  # not JSON (or beyond the parser's bounds): kept as the text it is
            out["evaluator"] = text
    return out
