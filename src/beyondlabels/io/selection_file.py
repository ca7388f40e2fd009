"""``selection.json``: what checkpoint selection found over a run's evaluations of one metric, beside the evaluation
callback's history (``<run>/<prefix>/selection.json``), written by the evaluation callback during fit (its
``selection=`` option, :class:`beyondlabels.callbacks.selection.CheckpointSelection`) and by ``evaluate.py
task=select``; read by the run summary and the HTML report.

The file holds :func:`beyondlabels.functional.selection.select_checkpoints`'s output (the evaluations' steps and
means, the MCS p-values and the set, the best step and value, the corrected estimate and its interval, negative flips
and per-class regressions from the best evaluation to the latest, forgetting events) with ``version``, ``key`` (the
un-prefixed per-query key), ``monitor`` (as logged, ``<prefix>/<key>``) and, when known, ``checkpoints``: the files of
the run's ModelCheckpoints with their step and whether that step is in the set.

Examples:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> data = {"version": 1, "key": "precision@1", "monitor": "retrieval/precision@1", "steps": [10, 20],
    ...         "means": [0.5, 0.6], "pvalues": [0.02, 1.0], "in_set": [False, True], "set_steps": [20],
    ...         "best_step": 20, "best_value": 0.6, "estimate": 0.58, "ci_low": 0.5, "ci_high": 0.66,
    ...         "size": 0.1, "confidence": 0.95, "mode": "max"}
    >>> _ = write_selection(folder, data)
    >>> read_selection(folder).set_steps, read_selection(folder).level
    ([20], 0.9)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beyondlabels._internal.checks import is_int, is_number
from beyondlabels._internal.parse import parse_json
from beyondlabels.io.atomic import write_json
from beyondlabels.io.paths import inside

__all__ = ["SELECTION_FILE", "Selection", "read_selection", "write_selection"]

SELECTION_FILE = "selection.json"
VERSION = 1
_MAX_BYTES = 64 << 20  # a selection over 1,000 evaluations and 10,000 classes is a few MB


@dataclass(frozen=True)
class Selection:
    """What ``selection.json`` says (the fields the summary and the report show; ``data`` holds the whole file).

    Attributes:
        file: The file read.
        key: The per-query key (un-prefixed).
        monitor: The key as logged (``retrieval/precision@1``).
        mode: ``"max"`` or ``"min"``.
        level: The set's level ``1 - size`` (0.9).
        steps: The evaluations considered, with ``means`` (the key's mean over the queries) and ``pvalues``.
        set_steps: The steps in the set.
        best_step: The evaluation with the best mean; ``best_value`` that mean.
        estimate: The selection-corrected estimate, ``ci_low`` / ``ci_high`` its interval at ``confidence``.
        regressed: Per-class regressions from the best evaluation to the latest: ``{"label", "n", "reference_mean",
            "current_mean", "pvalue", "adjusted"}`` of each class called regressed.
        negative_flip_rate: From the best evaluation to the latest (NaN when not known).
        latest_step: The latest evaluation.
        checkpoints: ``{"file", "step", "in_set"}`` of the saved checkpoints (step None when unknown; ``in_set`` None
            for a step that is not among the evaluations considered).
        data: The whole file.
    """

    file: Path
    key: str
    monitor: str
    mode: str
    level: float
    steps: list[int]
    means: list[float]
    pvalues: list[float]
    set_steps: list[int]
    best_step: int
    best_value: float
    estimate: float
    ci_low: float
    ci_high: float
    confidence: float
    latest_step: int | None = None
    negative_flip_rate: float = math.nan
    regressed: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict, repr=False)


def write_selection(folder: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    """Write ``data`` as ``<folder>/selection.json`` (atomically, ``version`` added) and return its path."""
    path = Path(folder) / SELECTION_FILE
    write_json(path, {"version": VERSION, **data}, indent=1)
    return path


def _numbers(data: dict[str, Any], name: str, where: str, kind: str = "number") -> list[Any]:
    values = data.get(name)
    check = is_int if kind == "int" else is_number
    if not isinstance(values, list) or not all(check(v) for v in values):
        raise ValueError(f"{where}: {name!r} must be a list of {kind}s, got {type(values).__name__}")
    return [int(v) if kind == "int" else float(v) for v in values]


def _number(data: dict[str, Any], name: str, where: str, kind: str = "number") -> Any:
    value = data.get(name)
    if not (is_int(value) if kind == "int" else is_number(value)):
        raise ValueError(f"{where}: {name!r} must be a {kind}, got {value!r}")
    return int(value) if kind == "int" else float(value)


def _regressed(data: dict[str, Any], where: str) -> list[dict[str, Any]]:
    classes = data.get("classes") or {}
    if not isinstance(classes, dict):
        raise ValueError(f"{where}: 'classes' must be an object of per-class lists")
    if not classes:
        return []
    names = ("label", "n", "reference_mean", "current_mean", "pvalue", "adjusted", "regressed")
    columns = {name: classes.get(name) for name in names}
    lengths = {len(v) if isinstance(v, list) else -1 for v in columns.values()}
    if len(lengths) != 1 or -1 in lengths:
        raise ValueError(f"{where}: 'classes' must hold lists of one length: {', '.join(names)}")
    rows = [dict(zip(names, values)) for values in zip(*columns.values())]
    return [{k: v for k, v in row.items() if k != "regressed"} for row in rows if row["regressed"] is True]


def _checkpoints(data: dict[str, Any], where: str) -> list[dict[str, Any]]:
    found = data.get("checkpoints") or []
    if not isinstance(found, list) or not all(
        isinstance(c, dict)
        and isinstance(c.get("file"), str)
        and (c.get("step") is None or is_int(c["step"]))
        and c.get("in_set") in (True, False, None)
        for c in found
    ):
        raise ValueError(f"{where}: 'checkpoints' must be a list of {{'file', 'step', 'in_set'}} objects")
    return [{"file": c["file"], "step": c.get("step"), "in_set": c.get("in_set")} for c in found]


def read_selection(folder: str | os.PathLike[str]) -> Selection | None:
    """The ``selection.json`` of an evaluation callback's folder; None when there is none.

    Raises:
        ValueError: the file is unreadable, leads out of the folder, is too large, or does not hold a selection
            (the message names the file and the field).
    """
    folder = Path(folder)
    if not (folder / SELECTION_FILE).exists() and not (folder / SELECTION_FILE).is_symlink():
        return None
    path = inside(folder, SELECTION_FILE, "the checkpoint selection")
    where = str(path)
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise ValueError(f"{where}: larger than the {_MAX_BYTES} bytes a selection file is read up to")
        data = parse_json(path.read_bytes(), where)
    except OSError as exc:
        raise ValueError(f"{where}: unreadable ({exc})") from exc
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"{where}: not a checkpoint selection of version {VERSION}")
    steps = _numbers(data, "steps", where, "int")
    means, pvalues = _numbers(data, "means", where), _numbers(data, "pvalues", where)
    if not (len(steps) == len(means) == len(pvalues)):
        raise ValueError(f"{where}: 'steps', 'means' and 'pvalues' must have one entry per evaluation")
    size = _number(data, "size", where)
    if not 0 < size < 1:
        raise ValueError(f"{where}: 'size' must lie in (0, 1), got {size}")
    flips = data.get("flips") if isinstance(data.get("flips"), dict) else {}
    rate = flips.get("negative_flip_rate")
    key, monitor, mode = data.get("key"), data.get("monitor"), data.get("mode")
    if not isinstance(key, str) or not isinstance(monitor, str) or mode not in ("max", "min"):
        raise ValueError(f"{where}: 'key' and 'monitor' must be strings and 'mode' 'max' or 'min'")
    return Selection(
        file=path,
        key=key,
        monitor=monitor,
        mode=mode,
        level=round(1.0 - size, 10),
        steps=steps,
        means=means,
        pvalues=pvalues,
        set_steps=_numbers(data, "set_steps", where, "int"),
        best_step=_number(data, "best_step", where, "int"),
        best_value=_number(data, "best_value", where),
        estimate=_number(data, "estimate", where),
        ci_low=_number(data, "ci_low", where),
        ci_high=_number(data, "ci_high", where),
        confidence=_number(data, "confidence", where),
        latest_step=data["latest_step"] if is_int(data.get("latest_step")) else None,
        negative_flip_rate=float(rate) if is_number(rate) else math.nan,
        regressed=_regressed(data, where),
        checkpoints=_checkpoints(data, where),
        data=data,
    )
