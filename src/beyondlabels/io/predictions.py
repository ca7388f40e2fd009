"""Saved predictions for taxonomy-aware evaluation: one JSON object per line (JSONL).

Format
    Each non-empty line is ``{"gt": NODE, "pred": NODE}`` (a predicted node name) or ``{"gt": NODE, "pred_text": TEXT}``
    (a free-text answer, mapped to a node by :class:`~beyondlabels.taxonomy.text.TextToNode`), with an optional integer
    ``"id"`` (default: the row's position among the rows, from 0). Other keys are ignored. Ids must be unique.

Lines are UTF-8 (a byte-order mark at the start is dropped) and parsed by the rules of
:mod:`beyondlabels._internal.parse` (a key repeated in one object and nesting deeper than 64 are errors). Errors name
the file and line: invalid JSON, a missing or non-string ``gt``, neither or both of ``pred`` and ``pred_text``, a bad,
repeated or out-of-int64 id, and unknown node names (the first few, with their line numbers).

Examples:
    >>> import tempfile, pathlib
    >>> from beyondlabels.taxonomy import Taxonomy
    >>> tax = Taxonomy({"b": "a", "c": "b"}, root="a")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     file = pathlib.Path(tmp, "p.jsonl")
    ...     _ = file.write_text('{"gt": "c", "pred": "b"}\\n{"gt": "c", "pred_text": "a c", "id": 7}\\n')
    ...     rows = read_hierarchy_predictions(file, tax)
    >>> rows.gt.tolist(), rows.pred.tolist(), rows.ids.tolist(), rows.texts, rows.line_numbers
    ([2, 2], [1, -1], [0, 7], [None, 'a c'], [1, 2])
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from beyondlabels._internal.checks import is_int
from beyondlabels._internal.parse import JSONSyntaxError, parse_json, read_text, text_lines
from beyondlabels.taxonomy import Taxonomy

__all__ = ["HierarchyPredictions", "read_hierarchy_predictions"]

_SHOW = 5


@dataclass
class HierarchyPredictions:
    """Rows of a predictions file.

    Attributes:
        gt: int64 ``[N]`` true node indices.
        pred: int64 ``[N]`` predicted node indices, ``-1`` where the row gives ``pred_text`` instead.
        ids: int64 ``[N]`` sample ids.
        texts: the ``pred_text`` of each row (None for ``pred`` rows).
        line_numbers: 1-based line of each row in the file.
    """

    gt: Tensor
    pred: Tensor
    ids: Tensor
    texts: list[str | None]
    line_numbers: list[int]


def read_hierarchy_predictions(path: str | os.PathLike[str], taxonomy: Taxonomy) -> HierarchyPredictions:
    """Read and validate a predictions file against ``taxonomy`` (format and errors: the module docstring).

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: naming the file, the line(s) and the problem.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"predictions file {path} does not exist; pass predictions=PATH.jsonl")
    gt_names: list[str] = []
    pred_names: list[str | None] = []
    texts: list[str | None] = []
    ids: list[int] = []
    lines: list[int] = []
    for number, line in enumerate(text_lines(read_text(path, f"predictions file '{path}'")), start=1):
        if not line.strip():
            continue
        where = f"predictions file '{path}', line {number}"
        try:
            row = parse_json(line, where)
        except JSONSyntaxError as err:
            raise ValueError(f"{where}: not valid JSON ({err.detail}); each line must be one JSON object") from None
        if not isinstance(row, dict):
            raise ValueError(
                f'{where}: expected a JSON object like {{"gt": ..., "pred": ...}}, got {type(row).__name__}'
            )
        if not isinstance(row.get("gt"), str) or not row["gt"]:
            raise ValueError(f"{where}: 'gt' must be a node name (a non-empty string), got {row.get('gt')!r}")
        has_pred, has_text = "pred" in row, "pred_text" in row
        if has_pred == has_text:
            raise ValueError(f"{where}: give exactly one of 'pred' (a node name) and 'pred_text' (a free-text answer)")
        value = row["pred"] if has_pred else row["pred_text"]
        if not isinstance(value, str) or (has_pred and not value):
            key = "pred" if has_pred else "pred_text"
            raise ValueError(f"{where}: '{key}' must be a string, got {value!r}")
        sample_id = row.get("id", len(ids))
        if not is_int(sample_id) or not -(1 << 63) <= sample_id < 1 << 63:
            raise ValueError(f"{where}: 'id' must be an integer of int64, got {str(sample_id)[:40]}")
        gt_names.append(row["gt"])
        pred_names.append(value if has_pred else None)
        texts.append(None if has_pred else value)
        ids.append(sample_id)
        lines.append(number)
    if not gt_names:
        raise ValueError(f"predictions file '{path}' holds no rows; expected one JSON object per line")
    unknown = [
        (n, name)
        for n, names in zip(lines, zip(gt_names, pred_names))
        for name in names
        if name is not None and name not in taxonomy
    ]
    if unknown:
        shown = ", ".join(f"{name!r} (line {n})" for n, name in unknown[:_SHOW])
        more = f", ... ({len(unknown)} in all)" if len(unknown) > _SHOW else ""
        raise ValueError(
            f"predictions file '{path}': unknown taxonomy node(s) {shown}{more}; the taxonomy has {len(taxonomy)} "
            f"nodes (e.g. {', '.join(repr(x) for x in taxonomy.nodes[:3])}); check the names or the taxonomy"
        )
    seen: dict[int, int] = {}
    for n, sample_id in zip(lines, ids):
        if sample_id in seen:
            raise ValueError(
                f"predictions file '{path}': id {sample_id} appears on lines {seen[sample_id]} and {n}; "
                "ids must be unique"
            )
        seen[sample_id] = n
    index = taxonomy.indices
    return HierarchyPredictions(
        gt=index(gt_names),
        pred=torch.tensor([taxonomy.index(p) if p is not None else -1 for p in pred_names], dtype=torch.long),
        ids=torch.tensor(ids, dtype=torch.long),
        texts=texts,
        line_numbers=lines,
    )
