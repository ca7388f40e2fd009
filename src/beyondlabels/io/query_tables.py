"""The per-query values of one metric at many evaluations of a run, as one table: the input of checkpoint selection.

Each evaluation callback keeps ``per_query/step_<step>.npz`` for the evaluations its retention policy keeps (the
latest, the best, every ``keep_every_n``-th; ``save_per_query='all'``: every one), each holding ``query_id`` and one
array per per-query key (:mod:`beyondlabels.io.run_files`). :func:`per_query_table` reads the files of the chosen
evaluations and lines them up by query id into ``[queries, evaluations]``; :func:`align_by_query_id` does the same for
columns already in memory (what the in-training selection keeps).

Rules (stated once)
    - **The same queries everywhere.** A query is kept when it has a finite value at every evaluation of the table;
      the others (absent from a file, NaN: a lone query, a query the metric leaves out) are left out and counted
      (``dropped``), so every checkpoint is compared on the same queries. Rows are in ascending query id.
    - **One kind of query.** In a file that holds several kinds of query (the cross-modal family's image and caption
      queries), only the rows of the kind the key belongs to are read
      (:func:`~beyondlabels.io.run_files.query_values`).
    - **Labels.** When every file has a ``label`` column for the rows read, the table carries each query's label
      (from the latest evaluation; a query whose label differs between files is reported in ``label_changes``).
    - Every path is checked to stay inside the callback's folder (:func:`beyondlabels.io.paths.inside`); a file that
      cannot be read, or whose ids repeat, is a ``ValueError`` naming it.

Examples:
    >>> ids, table, dropped = align_by_query_id([([3, 1, 2], [0.5, 1.0, 0.0]), ([1, 2, 4], [1.0, float("nan"), 1.0])])
    >>> ids.tolist(), table.tolist(), dropped
    ([1], [[1.0, 1.0]], 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beyondlabels._internal.parse import load_npz
from beyondlabels.io.paths import inside
from beyondlabels.io.run_files import QUERY_KIND_COLUMNS, EvaluationRun, query_values

__all__ = ["PerQueryTable", "align_by_query_id", "per_query_table"]

LABEL = "label"


@dataclass(frozen=True)
class PerQueryTable:
    """One metric's per-query values at several evaluations of a run, lined up by query.

    Attributes:
        key: The per-query key (un-prefixed, e.g. ``precision@1``).
        steps: The evaluations' steps (``trainer.global_step``), one per column, in order.
        query_ids: int64 ``[queries]``, ascending.
        values: float64 ``[queries, evaluations]``, finite.
        labels: int64 ``[queries]`` or None (when the files hold no labels).
        dropped: Queries left out (absent from a file or NaN at an evaluation).
        label_changes: Queries kept whose label differs between files.
    """

    key: str
    steps: list[int]
    query_ids: np.ndarray
    values: np.ndarray
    labels: np.ndarray | None
    dropped: int
    label_changes: int = 0


def _column(ids: Any, values: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    ids, values = np.asarray(ids).reshape(-1), np.asarray(values, dtype=np.float64).reshape(-1)
    if ids.shape != values.shape or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ValueError(f"{where}: expected one integer query id per value, got {ids.shape} {ids.dtype} ids")
    if np.unique(ids).size != ids.size:
        raise ValueError(f"{where}: query ids repeat ({ids.size - np.unique(ids).size} duplicates)")
    return ids.astype(np.int64), values


def align_by_query_id(
    columns: Sequence[tuple[Any, Any]], where: Sequence[str] | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(query_ids, table [queries, columns], dropped)``: the queries with a finite value in every column of
    ``columns`` (each ``(ids, values)``), in ascending id, and how many others there were (rules: the module
    docstring).

    Raises:
        ValueError: when a column's ids are not integers, do not match its values in number, or repeat (naming the
            column by ``where``, or by its position).
    """
    if not columns:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0)), 0
    parsed = [_column(i, v, where[n] if where else f"column {n}") for n, (i, v) in enumerate(columns)]
    every = np.unique(np.concatenate([ids for ids, _ in parsed]))
    common = every
    for ids, values in parsed:
        common = np.intersect1d(common, ids[np.isfinite(values)], assume_unique=True)
    table = np.empty((common.size, len(parsed)), dtype=np.float64)
    for n, (ids, values) in enumerate(parsed):
        order = np.argsort(ids, kind="stable")
        table[:, n] = values[order][np.searchsorted(ids[order], common)]
    return common, table, int(every.size - common.size)


def _read_step(run: EvaluationRun, step: int, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str]:
    """``(ids, values, labels or None, file name)`` of ``key`` at the evaluation of ``step``."""
    record = next((r for r in run.records if int(r["step"]) == int(step)), None)
    if record is None:
        raise KeyError(f"{run.file}: no successful evaluation at step {step}; steps with results: {run.steps}")
    name = record.get("per_query_file")
    if not name:
        raise FileNotFoundError(f"{run.file}: the evaluation at step {step} names no per_query_file")
    file = inside(run.path, name, f"{run.file}: the per_query_file of step {step}")
    try:
        arrays = load_npz(file, f"per-query file {file}")
    except OSError as exc:
        raise ValueError(f"per-query file {file} is not readable: {exc}") from exc
    ids, values = query_values(arrays, key, file)
    labels = arrays.get(LABEL)
    several_kinds = any(c in arrays and np.unique(arrays[c]).size > 1 for c in QUERY_KIND_COLUMNS)
    if labels is None or several_kinds or np.asarray(labels).shape != np.asarray(arrays["query_id"]).shape:
        labels = None
    elif not np.issubdtype(np.asarray(labels).dtype, np.integer):
        labels = None  # labels of another kind (strings) are not class indices
    return ids, values, labels, str(file)


def per_query_table(run: EvaluationRun, key: str, steps: Sequence[int] | None = None) -> PerQueryTable:
    """The values of ``key`` at the evaluations ``steps`` of ``run`` (default: every one whose per-query file is on
    disk), lined up by query id (rules: the module docstring).

    Raises:
        KeyError: a step with no successful evaluation.
        FileNotFoundError: an evaluation named that has no per-query file (the retention policy removed it).
        ValueError: a file that is unreadable, leads out of the folder, lacks ``key`` or ``query_id``, or repeats ids.
    """
    chosen = [int(s) for s in (run.steps_with_per_query() if steps is None else steps)]
    columns, labels, names = [], [], []
    for step in chosen:
        ids, values, step_labels, name = _read_step(run, step, key)
        columns.append((ids, values))
        labels.append(None if step_labels is None else (ids, np.asarray(step_labels, dtype=np.int64)))
        names.append(name)
    query_ids, table, dropped = align_by_query_id(columns, names)
    found, changes = None, 0
    if labels and all(item is not None for item in labels):
        per_step = []
        for label_ids, label_values in labels:  # a file of one kind of query: its labels are its rows'
            order = np.argsort(label_ids, kind="stable")
            per_step.append(label_values[order][np.searchsorted(label_ids[order], query_ids)])
        stacked = np.stack(per_step, axis=1) if per_step else np.zeros((0, 0), dtype=np.int64)
        found = stacked[:, -1] if stacked.size else np.zeros(0, dtype=np.int64)
        changes = int((stacked != found[:, None]).any(axis=1).sum()) if stacked.size else 0
    return PerQueryTable(key, chosen, query_ids, table, found, dropped, changes)
