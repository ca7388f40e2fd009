"""Label pairs of retrieved results for the mismatch analysis: a CSV or ``.npz`` with one row per retrieved item."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from beyondlabels._internal.parse import load_npz, read_text

__all__ = ["load_mismatch_pairs"]


def load_mismatch_pairs(path: str | Path, rank_max: int = 1) -> tuple[list[str], list[str], list[str]]:
    """``(query labels of the analysed rows, their retrieved labels, the query label of each query)`` from a CSV
    (columns ``query_label``, ``retrieved_label``, optional ``rank``) or an ``.npz`` with those arrays. Without
    ``rank`` every row is one query at rank 1; with it, rows of rank <= ``rank_max`` are analysed and the rank-1 rows
    give one query each (the class frequencies).

    Examples:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "pairs.csv"
        >>> _ = path.write_text("query_label,retrieved_label,rank\\ncat,cat,1\\ncat,dog,2\\ndog,cat,1\\n")
        >>> load_mismatch_pairs(path, rank_max=2)
        (['cat', 'cat', 'dog'], ['cat', 'dog', 'cat'], ['cat', 'dog'])

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: naming the missing column, a bad rank or an empty file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"pairs file {path} does not exist; pass pairs=PATH.csv (query_label, retrieved_label[, rank])"
        )
    if path.suffix == ".npz":
        cols = {n: np.asarray(a).tolist() for n, a in load_npz(path, f"pairs file {path}").items()}
    else:
        try:
            rows = list(csv.DictReader(io.StringIO(read_text(path, f"pairs file {path}"), newline="")))
        except csv.Error as err:
            raise ValueError(f"pairs file {path} is not a readable CSV: {err}") from None
        for number, row in enumerate(rows, start=2):
            if None in row or None in row.values():
                raise ValueError(
                    f"pairs file {path}, line {number}: the row's fields do not match the header's "
                    f"{len(rows[0])} columns"
                )
        cols = {k: [row[k] for row in rows] for k in (rows[0].keys() if rows else [])}
    missing = [c for c in ("query_label", "retrieved_label") if c not in cols]
    if missing:
        raise ValueError(
            f"pairs file {path} lacks the column(s) {missing}; it has {sorted(map(str, cols))}. Give query_label and "
            "retrieved_label (optional rank)."
        )
    q = [str(v) for v in cols["query_label"]]
    r = [str(v) for v in cols["retrieved_label"]]
    if not q or len(q) != len(r):
        raise ValueError(f"pairs file {path} must hold one or more rows with both labels, got {len(q)} and {len(r)}")
    if "rank" not in cols:
        return q, r, q
    ranks = [_rank(v) for v in cols["rank"]]
    if len(ranks) != len(q):
        raise ValueError(f"pairs file {path}: the `rank` column holds {len(ranks)} values for {len(q)} rows")
    if None in ranks:
        bad = next(v for v, k in zip(cols["rank"], ranks) if k is None)
        raise ValueError(f"pairs file {path}: the `rank` column must hold integers >= 1, got {str(bad)[:40]!r}")
    if min(ranks) < 1:
        raise ValueError(f"pairs file {path}: the `rank` column must hold integers >= 1, got {min(ranks)}")
    keep = [i for i, k in enumerate(ranks) if k <= rank_max]
    return [q[i] for i in keep], [r[i] for i in keep], [q[i] for i, k in enumerate(ranks) if k == 1]


def _rank(value: object) -> int | None:
    """A rank written as a decimal integer (``3``, spaces around it allowed; not ``1_0``, ``3.0`` or ``0x3``), None
    otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = value.strip() if isinstance(value, str) else ""
    if 0 < len(text) <= 18 and text.isascii() and text.isdigit():
        return int(text)
    return None
