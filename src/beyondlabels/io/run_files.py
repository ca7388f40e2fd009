"""The project's own evaluation files, read back for comparison and statistics.

Every evaluation callback writes, into its folder (by default ``<trainer.default_root_dir>/<prefix>/``)::

    history.json                      list of evaluation records, in order:
                                      {"step", "epoch", "<scalar key>": float, ..., "<curve key>": [float, ...],
                                       "per_query_file": "per_query/step_000000020.npz"}
                                      or, for a failed evaluation, {"step", "epoch", "error": "Type: message"}
    schema.json                       OutputSchema.to_json() of the (un-prefixed) keys of the records
    per_query/step_{step:09d}.npz     "query_id" (int64 [Q]) and one [Q] array per per-query key of the schema

A *run folder* (a Hydra job folder) holds one such folder per callback; a Hydra *multirun folder* holds numbered run
folders ``0/``, ``1/``, ... whose ``.hydra/overrides.yaml`` names the job's overrides. ``evaluate.py task=retrieval``
writes the same information for one offline evaluation as a JSON report (``report.json`` by default: a ``schema``
entry, scalars and curves at the top level, ``per_query_file`` beside it); it reads back as a run with one record at
step 0.

Example:
    >>> import json, tempfile
    >>> from beyondlabels.schema import KeySpec, OutputSchema
    >>> folder = Path(tempfile.mkdtemp()) / "3" / "retrieval"
    >>> folder.mkdir(parents=True)
    >>> records = [{"step": 10, "epoch": 0, "map@r": 0.4}, {"step": 20, "epoch": 1, "map@r": 0.3},
    ...            {"step": 30, "epoch": 1, "error": "RuntimeError: out of memory"}]
    >>> _ = (folder / "history.json").write_text(json.dumps(records))
    >>> _ = (folder / "schema.json").write_text(json.dumps(OutputSchema({"map@r": KeySpec("scalar", True)}).to_json()))
    >>> run = read_evaluation_run(folder)
    >>> run.name, run.prefix, run.final(), run.best("map@r")["step"], len(run.failures)
    ('3', 'retrieval', {'map@r': 0.3}, 10, 1)
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from beyondlabels.schema import OutputSchema

__all__ = [
    "HISTORY_FILE",
    "REPORT_FILE",
    "SCHEMA_FILE",
    "EvaluationRun",
    "find_evaluation_runs",
    "evaluation_schema",
    "read_evaluation_run",
    "run_label",
    "run_overrides",
    "save_per_query",
]

log = logging.getLogger(__name__)

HISTORY_FILE = "history.json"
SCHEMA_FILE = "schema.json"
REPORT_FILE = "report.json"  # evaluate.py's default report name
# Fields of a history record that are not metric values.
_BOOKKEEPING = frozenset({"step", "epoch", "per_query_file", "error"})

_EXPECTED = (
    f"a {HISTORY_FILE} (a JSON list of evaluation records), a callback folder holding one (e.g. <run>/retrieval/), "
    f"a run folder, a Hydra multirun folder, or an evaluate.py report (JSON with a 'schema' entry)"
)


def _natural_key(path: Path) -> tuple[tuple[Any, ...], ...]:
    """Sort key that orders job folders 0, 1, 2, ..., 10 numerically (then by text)."""
    return tuple(
        tuple((0, int(tok), "") if tok.isdigit() else (1, 0, tok) for tok in re.split(r"(\d+)", part) if tok)
        for part in path.parts
    )


def _is_report(file: Path) -> bool:
    """Whether ``file`` is an evaluate.py report (a JSON object with a ``schema`` entry); False when unreadable."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "schema" in data


def find_evaluation_runs(path: str | os.PathLike[str]) -> list[Path]:
    """Every evaluation history under ``path``: the JSON files to give :func:`read_evaluation_run`.

    ``path`` may be a ``history.json`` (or an evaluate.py report) itself, a callback folder, a run folder or a
    multirun folder; folders are searched recursively (symlinked folders are not followed) for ``history.json``
    files and for ``report.json`` files that are evaluate.py reports. The result is sorted by path, numbered job
    folders in numeric order (``2/`` before ``10/``).

    Raises:
        FileNotFoundError: if ``path`` does not exist or holds no evaluation history; the message says what was
            searched and what is expected.
    """
    root = Path(path)
    if root.is_file():
        if root.suffix != ".json":
            raise FileNotFoundError(f"{root} is not an evaluation history; expected {_EXPECTED}")
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(f"{root} does not exist; expected {_EXPECTED}")
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # .hydra, .git, ...
        folder = Path(dirpath)
        if HISTORY_FILE in filenames and not (folder / HISTORY_FILE).is_symlink():
            found.append(folder / HISTORY_FILE)
        if REPORT_FILE in filenames and _is_report(folder / REPORT_FILE):
            found.append(folder / REPORT_FILE)
    if not found:
        raise FileNotFoundError(
            f"no evaluation history under {root}: searched it and all its sub-folders for {HISTORY_FILE} (written by "
            f"the evaluation callbacks into <trainer.default_root_dir>/<prefix>/, e.g. "
            f"logs/train/runs/<date>/retrieval/{HISTORY_FILE}) and for evaluate.py reports ({REPORT_FILE}). "
            f"Expected {_EXPECTED}."
        )
    return sorted(found, key=_natural_key)


def run_overrides(run_folder: str | os.PathLike[str]) -> list[str]:
    """The Hydra overrides of a run folder (``<run_folder>/.hydra/overrides.yaml``); empty when there are none or the
    file is unreadable."""
    overrides_file = Path(run_folder) / ".hydra" / "overrides.yaml"
    if not overrides_file.is_file():
        return []
    import yaml

    try:
        loaded = yaml.safe_load(overrides_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        log.warning("ignoring unreadable Hydra overrides %s: %s", overrides_file, exc)
        return []
    return [str(o) for o in loaded] if isinstance(loaded, list) else []


def run_label(run_folder: str | os.PathLike[str]) -> str:
    """The display name of a run folder: its name plus its Hydra overrides when it has any, e.g. ``"1 (seed=2)"``.

    Overrides are read from ``<run_folder>/.hydra/overrides.yaml``; a missing or unreadable file gives the bare name.
    """
    folder = Path(run_folder)
    overrides = run_overrides(folder)
    name = folder.name or str(folder)
    return f"{name} ({', '.join(overrides)})" if overrides else name


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class EvaluationRun:
    """The evaluations of one callback (or one evaluate.py report), read from disk.

    Attributes:
        path: The folder holding the files (the callback folder; the report's folder). ``per_query_file`` entries
            are relative to it.
        name: The run's display name: its run folder's name plus Hydra overrides when present (``"1 (seed=2)"``).
        prefix: What the keys are logged under (``retrieval`` for ``retrieval/precision@1``): the callback folder's
            name, or a report's ``task``.
        history: Every evaluation record, in order (failed ones hold ``"error"``).
        schema: The output schema of the un-prefixed keys, or None when ``schema.json`` is missing.
        file: The JSON file that was read (``history.json`` or the report).
        run_folder: The folder the run belongs to (the run folder for callbacks; the report file for reports), used
            to put the callbacks of one run in one column.
        overrides: The run folder's Hydra overrides (those in ``name``).
    """

    path: Path
    name: str
    prefix: str
    history: list[dict[str, Any]]
    schema: OutputSchema | None = None
    file: Path | None = None
    run_folder: Path | None = None
    overrides: list[str] = field(default_factory=list)
    _per_query_cache: dict[int, dict[str, np.ndarray]] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def records(self) -> list[dict[str, Any]]:
        """The successful evaluations, in order."""
        return [r for r in self.history if "error" not in r]

    @property
    def failures(self) -> list[dict[str, Any]]:
        """The failed evaluations (records with ``"error"``), in order."""
        return [r for r in self.history if "error" in r]

    def scalar_keys(self) -> list[str]:
        """The scalar keys: the schema's; without a schema, the numeric non-bookkeeping fields of the records."""
        if self.schema is not None:
            return self.schema.scalar_keys()
        keys: dict[str, None] = {}
        for record in self.records:
            keys.update({k: None for k, v in record.items() if k not in _BOOKKEEPING and _is_number(v)})
        return list(keys)

    def last(self) -> dict[str, Any] | None:
        """The last successful record (None when every evaluation failed or there was none)."""
        records = self.records
        return records[-1] if records else None

    def final(self) -> dict[str, float]:
        """The scalars of the last successful evaluation: ``{key: value}`` (un-prefixed keys; counts as ints)."""
        record = self.last()
        if record is None:
            return {}
        return {k: self._value(k, record[k]) for k in self.scalar_keys() if _is_number(record.get(k))}

    def best(self, key: str) -> dict[str, Any] | None:
        """The successful record with the best value of ``key`` under the schema's direction (max or min).

        NaN values are skipped; ties go to the earliest evaluation. Returns None when no evaluation has a number for
        ``key``.

        Raises:
            ValueError: without a schema, or when ``key`` has no direction (a count or a setting).
            KeyError: if ``key`` is not a scalar of the schema.
        """
        if self.schema is None:
            raise ValueError(f"{self.path}: no {SCHEMA_FILE}, so the direction of {key!r} is unknown; use final()")
        if key not in self.schema.scalar_keys():
            raise KeyError(f"{key!r} is not a scalar key of {self.path / SCHEMA_FILE}; scalars: {self.schema.scalar_keys()}")
        mode = self.schema.mode(key)
        if mode is None:
            raise ValueError(f"{key!r} has no direction in {self.path / SCHEMA_FILE} (a count or setting); use final()")
        best: dict[str, Any] | None = None
        for record in self.records:
            value = record.get(key)
            if not _is_number(value) or math.isnan(value):
                continue
            if best is None or (value > best[key] if mode == "max" else value < best[key]):
                best = record
        return best

    @property
    def steps(self) -> list[int]:
        """Steps of the successful evaluations."""
        return [int(r["step"]) for r in self.records]

    def per_query(self, step: int | None = None) -> dict[str, np.ndarray]:
        """The per-query arrays of the evaluation at ``step`` (default: the last successful one).

        Returns:
            ``{"query_id": int64 [Q], <per-query key>: [Q], ...}`` as stored in the npz file.

        Raises:
            KeyError: if no successful evaluation happened at ``step``.
            FileNotFoundError: if the record names no per-query file or the file is missing.
            ValueError: if the file is not a readable npz archive.
        """
        records = self.records
        if not records:
            raise KeyError(f"{self.file}: no successful evaluation, so no per-query values")
        if step is None:
            record = records[-1]
        else:
            record = next((r for r in records if int(r["step"]) == int(step)), None)
            if record is None:
                raise KeyError(f"{self.file}: no successful evaluation at step {step}; steps with results: {self.steps}")
        at = int(record["step"])
        if at in self._per_query_cache:
            return dict(self._per_query_cache[at])
        rel = record.get("per_query_file")
        if not rel:
            raise FileNotFoundError(f"{self.file}: the evaluation at step {at} names no per_query_file")
        file = self.path / rel
        if not file.is_file():
            raise FileNotFoundError(f"per-query file {file} of the evaluation at step {at} (named in {self.file}) is missing")
        try:
            with np.load(file, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise ValueError(f"per-query file {file} is not a readable .npz archive: {exc}") from exc
        self._per_query_cache[at] = arrays
        return dict(arrays)

    def _value(self, key: str, value: Any) -> float | int:
        spec = self.schema.get(key) if self.schema is not None else None
        if spec is not None and spec.count and float(value).is_integer():
            return int(value)
        return float(value)


def _read_json(file: Path, what: str) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{file}: malformed {what} (not UTF-8 text: {exc})") from exc
    except ValueError as exc:
        raise ValueError(f"{file}: malformed {what} (not valid JSON: {exc})") from exc


def _read_schema(file: Path) -> OutputSchema | None:
    if not file.is_file():
        return None
    try:
        return OutputSchema.from_json(_read_json(file, "output schema"))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{file}: malformed output schema: {exc}") from exc


def _check_history(file: Path, history: Any) -> list[dict[str, Any]]:
    if not isinstance(history, list):
        raise ValueError(f"{file}: malformed history: expected a JSON list of evaluation records, got a {type(history).__name__}")
    for index, record in enumerate(history):
        if not isinstance(record, dict):
            raise ValueError(f"{file}: malformed history: record #{index} is not an object (got {type(record).__name__})")
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"{file}: malformed history: record #{index} has no integer 'step' (got {step!r})")
    return history


def _read_report(file: Path, data: dict[str, Any]) -> EvaluationRun:
    try:
        schema = OutputSchema.from_json(data["schema"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{file}: malformed report: its 'schema' entry is not an output schema ({exc})") from exc
    record: dict[str, Any] = {"step": 0, "epoch": 0}
    for key in [*schema.scalar_keys(), *schema.curve_keys()]:
        if key in data:
            record[key] = data[key]
    if data.get("per_query_file"):
        record["per_query_file"] = data["per_query_file"]
    prefix = str(data.get("task") or file.stem)
    if file.name == REPORT_FILE:
        name, overrides = run_label(file.parent), run_overrides(file.parent)
    else:
        name, overrides = file.stem, []
    return EvaluationRun(
        path=file.parent, name=name, prefix=prefix, history=[record], schema=schema, file=file, run_folder=file, overrides=overrides
    )


def read_evaluation_run(folder: str | os.PathLike[str]) -> EvaluationRun:
    """Read one callback's evaluations: its folder (holding ``history.json``), the ``history.json`` itself, an
    evaluate.py report, or a run folder holding exactly one evaluation history.

    Raises:
        FileNotFoundError: if no history is there (the message says what was searched and what is expected).
        ValueError: if ``history.json`` (or ``schema.json``, or the report) is malformed; the message names the file;
            or if a run folder holds several histories (use :func:`find_evaluation_runs`).
    """
    path = Path(folder)
    if path.is_dir():
        if (path / HISTORY_FILE).is_file():
            file = path / HISTORY_FILE
        else:
            found = find_evaluation_runs(path)
            if len(found) != 1:
                raise ValueError(
                    f"{path} holds {len(found)} evaluation histories ({', '.join(str(f) for f in found)}); "
                    "pass one of them, or use find_evaluation_runs()"
                )
            file = found[0]
    elif path.is_file():
        file = path
    else:
        raise FileNotFoundError(f"{path} does not exist; expected {_EXPECTED}")
    data = _read_json(file, "history")
    if isinstance(data, dict) and "schema" in data:
        return _read_report(file, data)
    history = _check_history(file, data)
    callback_folder = file.parent
    return EvaluationRun(
        path=callback_folder,
        name=run_label(callback_folder.parent),
        prefix=callback_folder.name,
        history=history,
        schema=_read_schema(callback_folder / SCHEMA_FILE),
        file=file,
        run_folder=callback_folder.parent,
        overrides=run_overrides(callback_folder.parent),
    )


def evaluation_schema(run_folder: str | os.PathLike[str]) -> OutputSchema | None:
    """The output schema of every evaluation callback of a run folder, keys prefixed as logged
    (``retrieval/precision@1``); None when no callback folder there has a ``schema.json``."""
    try:
        files = find_evaluation_runs(run_folder)
    except FileNotFoundError:
        return None
    merged: OutputSchema | None = None
    for file in files:
        run = read_evaluation_run(file)
        if run.schema is not None:
            schema = run.schema.prefixed(run.prefix)
            merged = schema if merged is None else merged.merged(schema)
    return merged


def save_per_query(
    path: str | os.PathLike[str], per_query: Mapping[str, Any], schema: OutputSchema | None = None
) -> Path:
    """Write per-query values as an ``.npz`` in the layout :meth:`EvaluationRun.per_query` reads.

    Args:
        path: The file to write (replaced atomically, so a reader never sees half a file).
        per_query: ``{"query_id": [Q] ints, <key>: [Q], ...}`` as tensors or arrays (e.g. the ``per_query`` entry of
            :func:`beyondlabels.functional.embedding_retrieval_metrics`).
        schema: When given, only ``query_id`` and the keys of ``schema.per_query`` are written, in schema order (a
            schema key missing from ``per_query`` is logged as a warning).

    Raises:
        ValueError: without ``query_id``, or when an entry is not 1-D or its length differs from ``query_id``'s.
    """
    if "query_id" not in per_query:
        raise ValueError(f"per-query values need a 'query_id' vector; got {sorted(per_query)}")
    if schema is not None:
        keys = ["query_id", *(k for k in schema.per_query if k != "query_id")]
        missing = [k for k in keys if k not in per_query]
        if missing:
            log.warning("per-query values lack the schema keys %s; they are not written to %s", missing, path)
        keys = [k for k in keys if k in per_query]
    else:
        keys = ["query_id", *(k for k in per_query if k != "query_id")]
    arrays: dict[str, np.ndarray] = {}
    for key in keys:
        value = per_query[key]
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        array = np.asarray(value)
        if array.ndim != 1 or len(array) != len(arrays.get("query_id", array)):
            raise ValueError(f"per-query value {key!r} must be 1-D with one entry per query, got shape {array.shape}")
        arrays[key] = array.astype(np.int64) if key == "query_id" else array
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fp:
        np.savez(fp, **arrays)
    os.replace(tmp, path)
    return path
