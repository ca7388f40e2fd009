"""Candidate-set files: the pinned distractors of text-to-image R-precision
(:class:`~beyondlabels.functional.rprecision.CandidateSets`) as an ``.npz`` with the arrays ``query_ids`` ``[N]`` and
``distractor_ids`` ``[N, R − 1]``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from beyondlabels._internal.parse import load_npz
from beyondlabels.functional.rprecision import CandidateSets
from beyondlabels.io.atomic import save_npz

__all__ = ["load_candidate_sets", "save_candidate_sets"]


def save_candidate_sets(sets: CandidateSets, path: str | Path) -> None:
    """Write candidate sets to an ``.npz`` (arrays ``query_ids``, ``distractor_ids``) to pin a protocol.

    Examples:
        >>> import tempfile, os
        >>> s = CandidateSets(torch.tensor([0, 1]), torch.tensor([[1], [0]]))
        >>> p = os.path.join(tempfile.mkdtemp(), "sets.npz"); save_candidate_sets(s, p)
        >>> load_candidate_sets(p).distractor_ids.tolist()
        [[1], [0]]
    """
    path = Path(path)
    if path.suffix != ".npz":  # as np.savez names the file
        path = path.with_name(path.name + ".npz")
    save_npz(
        path,
        {"query_ids": sets.query_ids.cpu().numpy(), "distractor_ids": sets.distractor_ids.cpu().numpy()},
        compressed=False,
    )


def load_candidate_sets(path: str | Path) -> CandidateSets:
    """Read candidate sets written by :func:`save_candidate_sets` (no pickles; a broken archive is a ``ValueError``).

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if the file is not an ``.npz`` archive, lacks ``query_ids`` / ``distractor_ids``, holds ids that
            are not integers (a float id is never rounded), or their shapes do not fit.
    """
    data = load_npz(path, f"candidate sets file {path}")
    if "query_ids" not in data or "distractor_ids" not in data:
        raise ValueError(f"`path` {path} holds {sorted(data)}; candidate sets need `query_ids` and `distractor_ids`.")
    for name in ("query_ids", "distractor_ids"):
        if not np.issubdtype(data[name].dtype, np.integer):
            raise ValueError(f"`path` {path}: `{name}` must hold integer ids, got {data[name].dtype}.")
        if data[name].dtype == np.uint64 and data[name].size and data[name].max() > np.iinfo(np.int64).max:
            raise ValueError(f"`path` {path}: `{name}` holds ids beyond int64.")
    q = torch.from_numpy(data["query_ids"].astype(np.int64))
    d = torch.from_numpy(data["distractor_ids"].astype(np.int64))
    if q.dim() != 1 or d.dim() != 2 or d.shape[0] != q.shape[0]:
        raise ValueError(
            f"`path` {path}: `query_ids` {tuple(q.shape)} and `distractor_ids` {tuple(d.shape)} "
            "must be [N] and [N, R-1]."
        )
    return CandidateSets(q, d)
