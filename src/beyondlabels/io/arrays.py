"""Saved embeddings on disk: the ``.npz`` layout evaluate.py reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from beyondlabels.functional.labels import encode_labels


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

    Example:
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
    if not path.is_file():
        raise FileNotFoundError(f"input file {path} does not exist; pass input=PATH.npz with arrays 'embeddings' and 'labels'")
    with np.load(path, allow_pickle=False) as data:
        missing = [name for name in ("embeddings", "labels") if name not in data.files]
        if missing:
            raise ValueError(f"{path} lacks the array(s) {missing}; it holds {data.files}. Save embeddings (N×D) and labels (N).")
        embeddings = np.asarray(data["embeddings"])
        labels = np.asarray(data["labels"])
        ids = np.asarray(data["ids"]) if "ids" in data.files else np.arange(len(labels))
    if embeddings.ndim != 2 or not np.issubdtype(embeddings.dtype, np.floating):
        raise ValueError(f"'embeddings' in {path} must be a 2-D float array (N×D), got shape {embeddings.shape} dtype {embeddings.dtype}")
    if labels.ndim != 1 or len(labels) != len(embeddings):
        raise ValueError(f"'labels' in {path} must be 1-D with one label per embedding row ({len(embeddings)}), got shape {labels.shape}")
    if ids.ndim != 1 or len(ids) != len(embeddings) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"'ids' in {path} must be 1-D integers, one per embedding row ({len(embeddings)}), got shape {ids.shape} dtype {ids.dtype}")
    codes, names = encode_labels(labels, name=f"'labels' in {path}")
    return EmbeddingSet(
        embeddings=torch.from_numpy(embeddings.astype(np.float32, copy=False)),
        labels=codes,
        ids=torch.from_numpy(ids.astype(np.int64)),
        label_names=names,
    )
