"""The project's own evaluation files, read back for comparison and statistics.

Every evaluation callback writes, into its folder (by default ``<trainer.default_root_dir>/<prefix>/``)::

    history.jsonl                     one evaluation record per line, in order (appended, never rewritten; see
                                      HistoryLog): {"step", "epoch", "<scalar key>": float, ...,
                                      "<curve key>": [float, ...], "per_query_file": "per_query/step_000000020.npz"}
                                      or, for a failed evaluation, {"step", "epoch", "error": "Type: message"}
    schema.json                       OutputSchema.to_json() of the (un-prefixed) keys of the records
    per_query/step_{step:09d}.npz     "query_id" (int64 [Q]) and one [Q] array per per-query key of the schema
                                      (compressed), for the evaluations the retention policy keeps (StepRetention)

A ``history.json`` (one JSON list of the same records) is read as well.

A *run folder* (a Hydra job folder) holds one such folder per callback; a Hydra *multirun folder* holds numbered run
folders ``0/``, ``1/``, ... whose ``.hydra/overrides.yaml`` names the job's overrides. ``evaluate.py task=retrieval``
writes the same information for one offline evaluation as a JSON report (``report.json`` by default: a ``schema``
entry, scalars and curves at the top level, ``per_query_file`` beside it); it reads back as a run with one record at
step 0.

Examples:
    >>> import json, tempfile
    >>> from beyondlabels.schema import KeySpec, OutputSchema
    >>> folder = Path(tempfile.mkdtemp()) / "3" / "retrieval"
    >>> folder.mkdir(parents=True)
    >>> records = [{"step": 10, "epoch": 0, "map@r": 0.4}, {"step": 20, "epoch": 1, "map@r": 0.3},
    ...            {"step": 30, "epoch": 1, "error": "RuntimeError: out of memory"}]
    >>> HistoryLog(folder / "history.jsonl").write(records)
    >>> _ = (folder / "schema.json").write_text(json.dumps(OutputSchema({"map@r": KeySpec("scalar", True)}).to_json()))
    >>> run = read_evaluation_run(folder)
    >>> run.name, run.prefix, run.final(), run.best("map@r")["step"], len(run.failures)
    ('3', 'retrieval', {'map@r': 0.3}, 10, 1)
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from beyondlabels._internal.checks import check_choice, check_positive_int, is_int, is_number
from beyondlabels._internal.files import read_file, walk
from beyondlabels._internal.parse import (
    CENSUS_BYTES,
    JSONSyntaxError,
    check_json_size,
    json_census,
    load_npz,
    parse_json,
    parse_yaml,
    read_json,
    read_text,
)
from beyondlabels.io.atomic import atomic_file, save_npz
from beyondlabels.io.paths import inside, is_inside
from beyondlabels.io.run_lock import RunFolderLock
from beyondlabels.schema import OutputSchema

__all__ = [
    "HISTORY_FILE",
    "LEGACY_HISTORY_FILE",
    "REPORT_FILE",
    "SCHEMA_FILE",
    "EvaluationRun",
    "HistoryLog",
    "HistoryReplacedError",
    "StepRetention",
    "QUERY_KIND_COLUMNS",
    "find_evaluation_runs",
    "query_values",
    "evaluation_schema",
    "read_evaluation_run",
    "read_history",
    "run_label",
    "run_overrides",
    "save_per_query",
]

log = logging.getLogger(__name__)

HISTORY_FILE = "history.jsonl"
LEGACY_HISTORY_FILE = "history.json"  # the history as one JSON list of records, read as well as history.jsonl
SCHEMA_FILE = "schema.json"
REPORT_FILE = "report.json"  # evaluate.py's default report name
# The most bytes read of each file (a history of 100,000 evaluations of 60 keys is about 150 MB).
MAX_HISTORY_BYTES = 1 << 30
MAX_SCHEMA_BYTES = 16 << 20
MAX_REPORT_BYTES = 256 << 20
MAX_OVERRIDES_BYTES = 1 << 20
# Fields of a history record that are not metric values.
_BOOKKEEPING = frozenset({"step", "epoch", "per_query_file", "error"})

_EXPECTED = (
    f"a {HISTORY_FILE} (one evaluation record per line) or {LEGACY_HISTORY_FILE}, a callback folder holding one "
    f"(e.g. <run>/retrieval/), "
    f"a run folder, a Hydra multirun folder, or an evaluate.py report (JSON with a 'schema' entry)"
)


def _natural_key(path: Path) -> tuple[tuple[Any, ...], ...]:
    """Sort key that orders job folders 0, 1, 2, ..., 10 numerically (then by text)."""
    return tuple(
        tuple((0, int(tok), "") if tok.isdigit() else (1, 0, tok) for tok in re.split(r"(\d+)", part) if tok)
        for part in path.parts
    )


def _is_report(file: Path) -> bool:
    """Whether ``file`` is an evaluate.py report (a JSON object with a ``schema`` entry), not a link out of its
    folder; False when unreadable."""
    if not is_inside(file.parent, file.name):
        return False
    try:
        data = read_json(file, str(file), max_bytes=MAX_REPORT_BYTES)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "schema" in data


def find_evaluation_runs(path: str | os.PathLike[str]) -> list[Path]:
    """Every evaluation history under ``path``: the JSON files to give :func:`read_evaluation_run`.

    ``path`` may be a ``history.jsonl`` / ``history.json`` (or an evaluate.py report) itself, a callback folder, a run
    folder or a multirun folder; folders are searched recursively (symlinked folders are not followed) for
    ``history.jsonl`` (or ``history.json``) files and for ``report.json`` files that are evaluate.py reports. The result
    is sorted by path, numbered job folders in numeric order (``2/`` before ``10/``).

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

    def too_deep(folder: Path) -> None:
        log.warning("%s: not searched for evaluation histories, nor anything below it: folders nest too deep", folder)

    for folder, dirnames, filenames in walk(root, on_too_deep=too_deep):  # no link followed, depth bounded
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # .hydra, .git, ...
        history = next((name for name in (HISTORY_FILE, LEGACY_HISTORY_FILE) if name in filenames), None)
        if history is not None and not (folder / history).is_symlink():
            found.append(folder / history)  # both in one folder (a resumed older run): the current format
        if REPORT_FILE in filenames and _is_report(folder / REPORT_FILE):
            found.append(folder / REPORT_FILE)
    if not found:
        raise FileNotFoundError(
            f"no evaluation history under {root}: searched it and all its sub-folders for {HISTORY_FILE} or "
            f"{LEGACY_HISTORY_FILE} (written by "
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
    try:
        inside(run_folder, ".hydra/overrides.yaml", "the Hydra overrides")
        loaded = parse_yaml(read_text(overrides_file, str(overrides_file), MAX_OVERRIDES_BYTES), str(overrides_file))
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable Hydra overrides %s: %s", overrides_file, exc)
        return []
    if not isinstance(loaded, list):
        return []
    kept = [str(o) for o in loaded if isinstance(o, (str, int, float, bool)) or o is None]
    if len(kept) != len(loaded):
        log.warning("%s: ignoring %d override(s) that are not strings", overrides_file, len(loaded) - len(kept))
    return kept


def run_label(run_folder: str | os.PathLike[str]) -> str:
    """The display name of a run folder: its name plus its Hydra overrides when it has any, e.g. ``"1 (seed=2)"``.

    Overrides are read from ``<run_folder>/.hydra/overrides.yaml``; a missing or unreadable file gives the bare name.
    """
    folder = Path(run_folder)
    overrides = run_overrides(folder)
    name = folder.name or str(folder)
    return f"{name} ({', '.join(overrides)})" if overrides else name


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
        file: The file that was read (``history.jsonl``, ``history.json`` or the report).
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
    _per_query_cache: dict[int, dict[str, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

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
            keys.update({k: None for k, v in record.items() if k not in _BOOKKEEPING and is_number(v)})
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
        return {k: self._value(k, record[k]) for k in self.scalar_keys() if is_number(record.get(k))}

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
            raise KeyError(
                f"{key!r} is not a scalar key of {self.path / SCHEMA_FILE}; scalars: {self.schema.scalar_keys()}"
            )
        mode = self.schema.mode(key)
        if mode is None:
            raise ValueError(f"{key!r} has no direction in {self.path / SCHEMA_FILE} (a count or setting); use final()")
        best: dict[str, Any] | None = None
        for record in self.records:
            value = record.get(key)
            if not is_number(value) or math.isnan(value):
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
            ValueError: if the file is not a readable npz archive, or ``per_query_file`` leads out of the folder
                (an absolute path, ``..``, a symbolic link: :func:`beyondlabels.io.paths.inside`).
        """
        records = self.records
        if not records:
            raise KeyError(f"{self.file}: no successful evaluation, so no per-query values")
        if step is None:
            record = records[-1]
        else:
            record = next((r for r in records if int(r["step"]) == int(step)), None)
            if record is None:
                raise KeyError(
                    f"{self.file}: no successful evaluation at step {step}; steps with results: {self.steps}"
                )
        at = int(record["step"])
        if at in self._per_query_cache:
            return dict(self._per_query_cache[at])
        rel = record.get("per_query_file")
        if not rel:
            raise FileNotFoundError(f"{self.file}: the evaluation at step {at} names no per_query_file")
        file = inside(self.path, rel, f"{self.file}: the per_query_file of step {at}")
        if not file.is_file():
            raise FileNotFoundError(
                f"per-query file {file} of the evaluation at step {at} (named in {self.file}) is missing: "
                "the callback's retention policy keeps the files of the latest and the best evaluation and of "
                f"every keep_every_n-th (steps with files: {self.steps_with_per_query()}); "
                "save_per_query='all' keeps every one"
            )
        try:
            arrays = load_npz(file, f"per-query file {file}")
        except OSError as exc:
            raise ValueError(f"per-query file {file} is not a readable .npz archive: {exc}") from exc
        self._per_query_cache[at] = arrays
        return dict(arrays)

    def steps_with_per_query(self) -> list[int]:
        """Steps of the successful evaluations whose per-query file is on disk."""
        return [int(r["step"]) for r in self.records if self._per_query_on_disk(r.get("per_query_file"))]

    def _per_query_on_disk(self, name: Any) -> bool:
        if not name or not is_inside(self.path, name):
            return False
        return (self.path / name).is_file()

    def _value(self, key: str, value: Any) -> float | int:
        spec = self.schema.get(key) if self.schema is not None else None
        if spec is not None and spec.count and float(value).is_integer():
            return int(value)
        return float(value)


def _read_json(file: Path, what: str, max_bytes: int = MAX_HISTORY_BYTES) -> Any:
    try:
        return read_json(file, f"{file}: malformed {what}", max_bytes=max_bytes)
    except OSError as exc:
        raise ValueError(f"{file}: unreadable {what}: {exc}") from exc


def _check_values(record: Mapping[str, Any], where: str) -> None:
    """A metric value is a number or NaN (undefined), never an infinity; a curve is a list of such numbers."""
    for key, value in record.items():
        if key in _BOOKKEEPING:
            continue
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and math.isinf(v) for v in values):
            shown = key if len(key) <= 80 else key[:77] + "..."
            raise ValueError(f"{where}: the value of {shown!r} is infinite, which no metric value is")


def _read_schema(file: Path) -> OutputSchema | None:
    if not file.is_file() and not file.is_symlink():
        return None
    inside(file.parent, file.name, "the output schema")
    try:
        return OutputSchema.from_json(_read_json(file, "output schema", MAX_SCHEMA_BYTES))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{file}: malformed output schema: {exc}") from exc


def _check_history(file: Path, history: Any) -> list[dict[str, Any]]:
    if not isinstance(history, list):
        raise ValueError(
            f"{file}: malformed history: expected a JSON list of evaluation records, got a {type(history).__name__}"
        )
    for index, record in enumerate(history):
        if not isinstance(record, dict):
            raise ValueError(
                f"{file}: malformed history: record #{index} is not an object (got {type(record).__name__})"
            )
        step = record.get("step")
        if not is_int(step):
            raise ValueError(f"{file}: malformed history: record #{index} has no integer 'step' (got {step!r})")
        _check_values(record, f"{file}: malformed history: record #{index}")
    return history


def read_history(file: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a ``history.jsonl`` (one JSON object per line; blank lines skipped) or of a legacy
    ``history.json`` (one JSON list).

    A last line that does not parse is what a write cut short leaves (a full disk, a killed process): it is left out
    with a warning, and the callback's next write removes it. Anything malformed before it is an error.

    Raises:
        ValueError: a line other than the last is not a JSON object with an integer ``step`` (the message names the
            file and the line), or a legacy file is malformed.
    """
    file = Path(file)
    if file.suffix != ".jsonl":
        return _check_history(file, _read_json(file, "history"))
    try:
        data = read_file(file, "the evaluation history", MAX_HISTORY_BYTES).removeprefix(b"\xef\xbb\xbf")
    except OSError as exc:
        raise ValueError(f"{file}: unreadable history: {exc}") from exc
    if len(data) >= CENSUS_BYTES:  # the records are parsed a line at a time: their keys are not shared
        check_json_size(json_census(data), f"{file}: malformed history", shared_keys=False, holds_text=False)
    records: list[dict[str, Any]] = []
    start, number, end = 0, 0, len(data.rstrip())
    while start < end:
        stop = data.find(b"\n", start)
        stop = len(data) if stop < 0 else stop
        line, start, number = data[start:stop], stop + 1, number + 1
        if not line.strip():
            continue
        try:
            record = parse_json(line, f"{file}: malformed history: line {number}")
        except JSONSyntaxError as exc:
            if start >= end:
                log.warning("%s: ignoring its last line, cut short by an interrupted write (%d bytes)", file, len(line))
                break
            raise ValueError(f"{file}: malformed history: line {number} is not valid JSON ({exc.detail})") from None
        step = record.get("step") if isinstance(record, dict) else None
        if not is_int(step):
            raise ValueError(
                f"{file}: malformed history: line {number} is not an evaluation record with an integer 'step'"
            )
        _check_values(record, f"{file}: malformed history: line {number}")
        records.append(record)
    return records


class HistoryReplacedError(RuntimeError):
    """The history file was replaced or cut by someone else since this process last wrote it: another process writes
    into the folder. The file is left as it is."""


class HistoryLog:
    """The evaluation history of one callback folder on disk, ``history.jsonl``: one JSON record per line.

    :meth:`write` makes the file hold exactly the records it is given (the callback's whole history, in memory). The
    first write after the log is made (a new fit, a resumed run whose file holds evaluations past its checkpoint)
    replaces the file atomically; every later write only appends the records not yet on disk, so a write costs the
    same however many evaluations came before. A write cut short (a full disk, a kill) leaves at most a partial last
    line, which :func:`read_history` ignores and the next write cuts away; no record already on disk is touched, and
    the records that failed stay pending in memory for the next write.

    One writer: the first write takes the folder's lock (:class:`~beyondlabels.io.run_lock.RunFolderLock`, shared
    with this process's other writers of the folder; :meth:`close` gives it back), so a second process writing the
    same history is refused with a :class:`~beyondlabels.io.run_lock.RunFolderInUseError`. A file replaced or cut
    under the log after it wrote (another file in its place, or fewer bytes than it wrote: someone else writes there)
    is never rewritten: every later write raises :class:`HistoryReplacedError` and leaves the file as it is.

    Examples:
        >>> import tempfile
        >>> log = HistoryLog(Path(tempfile.mkdtemp()) / "history.jsonl")
        >>> log.write([{"step": 10, "map@r": 0.4}])
        >>> log.write([{"step": 10, "map@r": 0.4}, {"step": 20, "map@r": 0.5}])  # appends one line
        >>> [r["step"] for r in read_history(log.path)], log.path.read_text().count("\\n")
        ([10, 20], 2)
        >>> log.close()
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._written: int | None = None  # records known to be on disk (None: none yet, rewrite)
        self._size = 0  # bytes of those records
        self._inode: tuple[int, int] | None = None  # (device, inode) of the file written
        self._replaced: str | None = None  # what was found when the file was replaced under the log
        self._lock: Any = None

    def write(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Bring the file in line with ``records``, appending when it already holds a prefix of them.

        Raises:
            RunFolderInUseError: if another process holds the folder's lock.
            HistoryReplacedError: if the file was replaced or cut under the log since it last wrote.
            OSError: a failed write (nothing on disk damaged; the records stay pending).
        """
        if self._replaced is not None:
            raise HistoryReplacedError(self._replaced)
        if self._lock is None:
            self._lock = RunFolderLock(self.path.parent).acquire()
        if self._written is not None:
            self._check_unchanged()
            if self._written <= len(records):
                new = records[self._written :]
                if new:
                    self._append(_lines(new), len(records))
                return
        data = _lines(records)
        with atomic_file(self.path) as handle:
            handle.write(data)
        self._written, self._size, self._inode = len(records), len(data), self._identity()

    def close(self) -> None:
        """Give back the folder's lock (the next write takes it again)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _identity(self) -> tuple[int, int] | None:
        try:
            info = self.path.stat()
        except OSError:
            return None
        return info.st_dev, info.st_ino

    def _check_unchanged(self) -> None:
        """Raise :class:`HistoryReplacedError` unless the file is the one this log wrote and still holds at least
        what was written."""
        try:
            info = self.path.stat()
            found = "another file" if (info.st_dev, info.st_ino) != self._inode else None
            if found is None and info.st_size < self._size:
                found = f"{info.st_size} bytes, fewer than the {self._size} written"
        except FileNotFoundError:
            found = "no file"
        except OSError as exc:
            raise OSError(f"{self.path}: cannot be checked before appending ({exc})") from exc
        if found is not None:
            self._replaced = (
                f"{self.path} was replaced or cut since this run last wrote it ({found} there now): another process "
                f"writes into {self.path.parent}. It is left as it is and this run writes no more of its history "
                "there (the records stay in the callback's memory and checkpoint); give each run a folder of its own."
            )
            raise HistoryReplacedError(self._replaced)

    def _append(self, data: bytes, count: int) -> None:
        with open(self.path, "r+b") as handle:
            handle.truncate(self._size)  # a partial line left by an earlier failed write
            handle.seek(self._size)
            try:
                handle.write(data)
                handle.flush()
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    handle.truncate(self._size)
                if isinstance(exc, OSError) and exc.filename is None:  # a full disk's error names no file
                    exc.filename = str(self.path)
                raise
        self._written, self._size = count, self._size + len(data)


def _lines(records: Sequence[Mapping[str, Any]]) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode("utf-8")


class StepRetention:
    """Which evaluations keep their step files (per-query values, per-evaluation pictures), decided as evaluations
    arrive, at a cost that does not grow with their number.

    Kept: the latest evaluation (so also the one at the end of fit), the best by ``best`` under ``mode`` (``"max"``
    or ``"min"``; ties keep the earlier; NaN never counts as best), and every ``every_n``-th successful evaluation
    counting from the first (the 1st, the ``every_n + 1``-th, ...). ``every_n=1`` keeps everything.

    Examples:
        >>> keep = StepRetention(every_n=3, best="map@r", mode="max")
        >>> dropped = [keep.add(step, {"map@r": v}) for step, v in [(1, 0.2), (2, 0.9), (3, 0.5), (4, 0.4), (5, 0.3)]]
        >>> dropped, sorted(keep.kept)
        ([[], [], [], [3], []], [1, 2, 4, 5])
    """

    def __init__(self, every_n: int = 10, best: str | None = None, mode: str | None = None) -> None:
        every_n = check_positive_int(every_n, "every_n", hint="1 keeps every evaluation")
        if best is not None:
            check_choice(mode, "mode", ("max", "min"), what="'max' or 'min' when `best` is set")
        self.every_n, self.best, self.mode = every_n, best, mode
        self.count = 0
        self.latest: int | None = None
        self.best_step: int | None = None
        self.best_value: float | None = None
        self.kept: set[int] = set()
        self._transient: set[int] = set()  # kept steps that are not periodic: held while they are the latest or best

    def add(self, step: int, record: Mapping[str, Any]) -> list[int]:
        """Account for a new successful evaluation at ``step``; returns the steps whose files are no longer kept."""
        before = {s for s in (self.latest, self.best_step) if s is not None}
        periodic = self.count % self.every_n == 0
        self.count += 1
        value = record.get(self.best) if self.best is not None else None
        if is_number(value) and not math.isnan(value):
            better = self.best_value is None or (
                value > self.best_value if self.mode == "max" else value < self.best_value
            )
            if better:
                self.best_step, self.best_value = step, float(value)
        self.latest = step
        self.kept.add(step)
        if not periodic:
            self._transient.add(step)
        dropped = sorted(s for s in before if s in self._transient and s not in (self.latest, self.best_step))
        for s in dropped:
            self.kept.discard(s)
            self._transient.discard(s)
        return dropped


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
        path=file.parent,
        name=name,
        prefix=prefix,
        history=[record],
        schema=schema,
        file=file,
        run_folder=file,
        overrides=overrides,
    )


def read_evaluation_run(folder: str | os.PathLike[str]) -> EvaluationRun:
    """Read one callback's evaluations: its folder (holding ``history.jsonl``), the history file itself, an
    evaluate.py report, or a run folder holding exactly one evaluation history.

    Raises:
        FileNotFoundError: if no history is there (the message says what was searched and what is expected).
        ValueError: if the history (or ``schema.json``, or the report) is malformed; the message names the file;
            or if a run folder holds several histories (use :func:`find_evaluation_runs`).
    """
    path = Path(folder)
    if path.is_dir():
        own = next((path / n for n in (HISTORY_FILE, LEGACY_HISTORY_FILE) if (path / n).is_file()), None)
        if own is not None:
            file = inside(path, own.name, "the evaluation history")
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
    if file.suffix == ".jsonl":
        history = read_history(file)
    else:
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


# Per-query columns that tell several kinds of query in one file apart: the cross-modal file holds the image queries
# (direction 0) and the caption queries (direction 1) in one table, and an image and a caption may share an id.
QUERY_KIND_COLUMNS = ("direction",)


def query_values(
    arrays: Mapping[str, np.ndarray], key: str, file: str | os.PathLike[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The query ids and float64 values of ``key`` in a per-query file's arrays (:meth:`EvaluationRun.per_query`).

    When the file holds several kinds of query (a column of :data:`QUERY_KIND_COLUMNS` with more than one value),
    only the rows of the kind that ``key`` belongs to are returned: the kind whose rows hold its values (e.g. the
    image queries for ``image_to_text_recall@1``, NaN on every caption row). A key with values in several kinds
    keeps every row.

    Raises:
        ValueError: if ``key`` or ``query_id`` is not in the arrays (naming ``file`` and what it holds).

    Examples:
        >>> arrays = {"query_id": np.array([0, 1, 0, 1, 2]), "direction": np.array([0, 0, 1, 1, 1]),
        ...           "image_to_text_recall@1": np.array([1.0, 0.0, np.nan, np.nan, np.nan]),
        ...           "text_to_image_recall@1": np.array([np.nan, np.nan, 1.0, 1.0, 0.0])}
        >>> ids, values = query_values(arrays, "text_to_image_recall@1")
        >>> ids.tolist(), values.tolist()
        ([0, 1, 2], [1.0, 1.0, 0.0])
    """
    if key not in arrays or "query_id" not in arrays:
        raise ValueError(f"{file or 'the per-query file'} lacks {key!r} or 'query_id' (it holds {sorted(arrays)})")
    ids, values = np.asarray(arrays["query_id"]), np.asarray(arrays[key], dtype=np.float64)
    for column in QUERY_KIND_COLUMNS:
        kinds = np.asarray(arrays[column]) if column in arrays else None
        if kinds is None or kinds.shape != values.shape or np.unique(kinds).size < 2:
            continue
        with_values = np.unique(kinds[~np.isnan(values)])
        if with_values.size == 1:
            keep = kinds == with_values[0]
            ids, values = ids[keep], values[keep]
    return ids, values


def save_per_query(
    path: str | os.PathLike[str], per_query: Mapping[str, Any], schema: OutputSchema | None = None
) -> Path:
    """Write per-query values as an ``.npz`` in the layout :meth:`EvaluationRun.per_query` reads.

    The archive is zlib-compressed (about 20 KB per 1,000 queries for the retrieval family's 18 arrays, against
    143 KB uncompressed); values keep their dtype, so statistics computed from a file equal those computed in memory.

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
    save_npz(path, arrays)
    return path
