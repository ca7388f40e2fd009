"""Read the runs that W&B writes offline, without an account or a network.

wandb (up to 0.31, the version this reader is tested with) ships no public reader for offline runs and writes no
``wandb-summary.json`` in offline mode. Everything the run logged lives in the transaction
log ``<save_dir>/wandb/offline-run-<date>-<id>/run-<id>.wandb``. This module reads that log
so that tests, notebooks and sweep post-processing can look at offline runs directly.

File format (a LevelDB-style record log, as written by wandb-core):

* a 7-byte file header: ``b":W&B"``, a little-endian ``uint16`` magic ``0xBEE1`` and a
  ``uint8`` version ``0``;
* the file is divided into 32 KiB blocks (the file header counts towards block 0);
* each block holds chunks, each with a 7-byte header ``<IHB``: CRC-32 (zlib/IEEE, computed
  over the chunk-type byte followed by the payload), payload length, chunk type;
* chunk types: 1 FULL, 2 FIRST, 3 MIDDLE, 4 LAST; a record larger than the space left in a
  block is split into FIRST, MIDDLE..., LAST chunks;
* a block tail shorter than a chunk header is zero padding;
* every reassembled payload is a serialized ``wandb.proto.wandb_internal_pb2.Record``.

Typical use (needs a real run on disk, so written as plain text)::

    from beyondlabels.io import find_offline_runs, read_offline_run

    for path in find_offline_runs("multirun/2024-05-01/12-00-00"):
        run = read_offline_run(path)
        print(run.name, run.config["lr"], run.summary["val/recall@1"])
        steps_and_values = run.series("val/recall@1")

Nested values are kept as wandb stores them: ``wandb.log({"a": {"b": 1}})`` is stored under
the nested key path ``("a", "b")`` and read back as ``{"a": {"b": 1}}``; a flat key that
contains a slash (``"val/recall@1"``, the usual Lightning style) stays one flat key. Media and
tables logged with ``wandb.log`` come back as wandb's JSON descriptor dict, e.g.
``run.summary["table"]["_type"] == "table-file"``.

Complete and incomplete logs: wandb writes an ``exit`` record as the last record of a run that finished
(``wandb.finish()``). wandb's writer runs in another process and may still be writing when ``finish()``
returns, so a log without that record is not taken as the whole run: :func:`read_offline_run` polls the
file for up to ``wait_s`` seconds, then raises :class:`IncompleteRunError` (or, with
``allow_incomplete=True``, returns what is there with ``complete=False``).

Files from elsewhere: the log is opened as a regular file only (a named pipe in its place is a ``ValueError``, never
a hang) and each value's JSON is parsed under :mod:`beyondlabels._internal.parse`'s rules (nesting at most 64 deep,
a key repeated in one object refused, memory bounded); a key path (``nested_key``) of more than 64 parts is refused.
A value that is not a finite number (``NaN``, ``Infinity``, ``-Infinity``, also inside a list or dict) is never
shown as a number: it is read as None and listed in :attr:`OfflineRun.non_finite` with where it was.
"""

from __future__ import annotations

import math
import os
import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beyondlabels._internal.checks import check_number
from beyondlabels._internal.files import open_file, walk
from beyondlabels._internal.parse import MAX_DEPTH, parse_json

__all__ = [
    "IncompleteRunError",
    "OfflineRun",
    "find_offline_runs",
    "iter_record_bytes",
    "iter_records",
    "read_offline_run",
]

FILE_HEADER_LEN = 7
FILE_IDENT = b":W&B"
FILE_MAGIC = 0xBEE1
FILE_VERSION = 0
BLOCK_LEN = 32 * 1024
CHUNK_HEADER_LEN = 7

_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_FILE_HEADER = struct.Struct("<4sHB")
_CHUNK_HEADER = struct.Struct("<IHB")
# CRC-32 of the chunk-type byte alone: the seed the payload's CRC continues from.
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (_FULL, _FIRST, _MIDDLE, _LAST)}

# Internal bookkeeping wandb keeps under this top-level key in config and summary.
_INTERNAL_KEY = "_wandb"


class IncompleteRunError(RuntimeError):
    """An offline W&B log has no final ``exit`` record: its run is still being written, or its process died
    before ``wandb.finish()``. Reading it would give partial data."""


class _Truncated(Exception):
    """The log ends inside a record: normal for a run that is still being written."""


def _corrupt(path: Path, offset: int, what: str) -> ValueError:
    return ValueError(f"{path}: corrupt W&B run log at byte {offset}: {what}")


def _check_file_header(path: Path, header: bytes) -> None:
    if len(header) < FILE_HEADER_LEN:
        raise ValueError(
            f"{path}: not a W&B run log (only {len(header)} bytes, shorter than the {FILE_HEADER_LEN}-byte file header)"
        )
    ident, magic, version = _FILE_HEADER.unpack(header)
    if ident != FILE_IDENT or magic != FILE_MAGIC:
        raise ValueError(
            f"{path}: not a W&B run log (file header {header!r} does not start with "
            f"{FILE_IDENT!r} and magic 0x{FILE_MAGIC:04X})"
        )
    if version != FILE_VERSION:
        raise ValueError(f"{path}: unsupported W&B run log version {version} (this reader knows {FILE_VERSION})")


def _iter_chunks(path: Path, fp: Any) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(offset, chunk_type, payload)`` for each chunk; raise ``_Truncated`` at a cut."""
    block_start = 0
    start = FILE_HEADER_LEN  # the file header occupies the start of block 0
    block = _check_and_read_first_block(path, fp)
    while block:
        full_block = len(block) == BLOCK_LEN
        off = start
        while True:
            left = len(block) - off
            if left < CHUNK_HEADER_LEN:
                if not full_block:
                    # End of file. Leftover bytes are a chunk header still being written.
                    if left:
                        raise _Truncated
                    return
                if block[off:].strip(b"\x00"):
                    raise _corrupt(path, block_start + off, "non-zero block padding")
                break
            checksum, length, ctype = _CHUNK_HEADER.unpack_from(block, off)
            pos = block_start + off
            end = off + CHUNK_HEADER_LEN + length
            if ctype not in _TYPE_CRC:
                raise _corrupt(path, pos, f"unknown chunk type {ctype}")
            if end > len(block):
                if not full_block:
                    raise _Truncated  # payload not written yet
                raise _corrupt(path, pos, f"chunk of {length} bytes runs past its block")
            payload = block[off + CHUNK_HEADER_LEN : end]
            if zlib.crc32(payload, _TYPE_CRC[ctype]) != checksum:
                raise _corrupt(path, pos, "checksum mismatch")
            yield pos, ctype, payload
            off = end
        block_start += BLOCK_LEN
        start = 0
        block = fp.read(BLOCK_LEN)


def _check_and_read_first_block(path: Path, fp: Any) -> bytes:
    block = fp.read(BLOCK_LEN)
    _check_file_header(path, block[:FILE_HEADER_LEN])
    return block


def iter_record_bytes(path: str | os.PathLike[str], *, strict: bool = False) -> Iterator[bytes]:
    """Yield the serialized payload of every record in a ``.wandb`` log, in order.

    Chunks are reassembled and their CRCs checked. A log that ends inside a record (a run
    that is still being written, or a copy taken mid-write) stops cleanly after the last
    complete record; pass ``strict=True`` to raise ``ValueError`` instead. A file that is
    not a W&B log, or one with a bad checksum, chunk type or padding, raises ``ValueError``
    naming the path.
    """
    path = _resolve_log(path)
    with open_file(path, "the W&B run log", max_bytes=None) as fp:
        parts: list[bytes] = []
        first_pos = 0
        try:
            for pos, ctype, payload in _iter_chunks(path, fp):
                if ctype == _FULL:
                    if parts:
                        raise _corrupt(path, pos, "FULL chunk inside a split record")
                    yield payload
                elif ctype == _FIRST:
                    if parts:
                        raise _corrupt(path, pos, "FIRST chunk inside a split record")
                    parts = [payload]
                    first_pos = pos
                else:
                    if not parts:
                        raise _corrupt(path, pos, "MIDDLE/LAST chunk without a FIRST chunk")
                    parts.append(payload)
                    if ctype == _LAST:
                        yield b"".join(parts)
                        parts = []
            if parts:
                raise _Truncated
        except _Truncated:
            if strict:
                where = f"the record starting at byte {first_pos}" if parts else "a record"
                raise ValueError(
                    f"{path}: truncated W&B run log: the file ends inside {where} ({os.path.getsize(path)} bytes)"
                ) from None


def iter_records(path: str | os.PathLike[str], *, strict: bool = False) -> Iterator[Any]:
    """Yield every record of a ``.wandb`` log as a ``wandb_internal_pb2.Record``.

    ``path`` is the ``.wandb`` file or a run directory holding one. See
    :func:`iter_record_bytes` for how truncated and corrupt logs are handled; a payload
    that is not a valid ``Record`` also raises ``ValueError`` naming the path.
    """
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    path = _resolve_log(path)
    for index, payload in enumerate(iter_record_bytes(path, strict=strict)):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except DecodeError as exc:
            raise ValueError(f"{path}: corrupt W&B run log: record #{index} is not a valid Record ({exc})") from exc
        yield record


def find_offline_runs(root: str | os.PathLike[str]) -> list[Path]:
    """Return every ``.wandb`` log under ``root`` (e.g. a Hydra multirun folder), sorted.

    Symlinked directories such as wandb's ``latest-run`` are not followed, so each run is
    listed once. ``root`` may also be a ``.wandb`` file itself.
    """
    root = Path(root)
    if root.is_file():
        return [root] if root.suffix == ".wandb" else []
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such directory")
    found = [
        folder / name
        for folder, _dirnames, filenames in walk(root)  # no link followed, depth bounded
        for name in filenames
        if name.endswith(".wandb") and not (folder / name).is_symlink()
    ]
    return sorted(found)


def _resolve_log(path: str | os.PathLike[str]) -> Path:
    """Map a run directory (or a folder holding exactly one run) to its ``.wandb`` file."""
    path = Path(path)
    if not path.is_dir():
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or directory")
        return path
    direct = sorted(p for p in path.glob("*.wandb") if p.is_file())
    candidates = direct or find_offline_runs(path)
    if len(candidates) != 1:
        raise ValueError(
            f"{path}: expected one .wandb run log, found {len(candidates)}; "
            "pass the .wandb file or use find_offline_runs()"
        )
    return candidates[0]


@dataclass
class OfflineRun:
    """What one offline run logged, decoded from its ``.wandb`` log.

    ``config``, each ``history`` row and ``summary`` are plain dicts of JSON-decoded values;
    wandb's own bookkeeping under ``"_wandb"`` is dropped. History rows carry wandb's
    ``_step``, ``_runtime`` and ``_timestamp`` next to the logged keys (Lightning's
    ``WandbLogger`` adds ``trainer/global_step``). ``summary`` replays the log: every history
    row updates it and explicit summary updates (``run.summary[k] = v``) override it, so it
    ends with the last value of every key. ``exit_code`` is ``None`` while the run has not
    finished. ``complete`` is True when the log ends with wandb's ``exit`` record (the run finished and
    everything it logged is in the log); :func:`read_offline_run` returns an incomplete run only when
    asked to (``allow_incomplete=True``). ``non_finite``: ``(where, key, value)`` of every value that was NaN or
    infinite and is read as None (``where``: ``"config"``, ``"summary"`` or ``"history step <n>"``).
    """

    path: Path
    run_id: str = ""
    project: str = ""
    name: str = ""
    group: str = ""  # the run's W&B group ("" when it has none)
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    complete: bool = False
    non_finite: list[tuple[str, str, str]] = field(default_factory=list)

    def keys(self, *, internal: bool = False) -> list[str]:
        """Sorted top-level keys that appear in any history row.

        wandb's own ``_step``/``_runtime``/``_timestamp`` are left out unless
        ``internal=True``.

        >>> rows = [{"_step": 0, "loss": 1.0}, {"_step": 1, "acc": 0.5}]
        >>> OfflineRun(Path("x.wandb"), history=rows).keys()
        ['acc', 'loss']
        >>> OfflineRun(Path("x.wandb"), history=rows).keys(internal=True)
        ['_step', 'acc', 'loss']
        """
        seen = {k for row in self.history for k in row}
        return sorted(k for k in seen if internal or not k.startswith("_"))

    def series(self, key: str) -> list[tuple[int, Any]]:
        """``(_step, value)`` for every history row that logged ``key``.

        >>> rows = [{"_step": 0, "loss": 1.0}, {"_step": 1}, {"_step": 2, "loss": 0.5}]
        >>> OfflineRun(Path("x.wandb"), history=rows).series("loss")
        [(0, 1.0), (2, 0.5)]
        """
        return [(row.get("_step"), row[key]) for row in self.history if key in row]


def _item_path(path: Path, item: Any) -> Sequence[str]:
    """The key path of a history/summary/config item: ``nested_key`` if set, else ``key``; at most
    :data:`~beyondlabels._internal.parse.MAX_DEPTH` parts."""
    if len(item.nested_key) > MAX_DEPTH:
        shown = "/".join(item.nested_key[:3])
        raise ValueError(
            f"{path}: a key path of {len(item.nested_key)} parts ({shown}/...), more than the {MAX_DEPTH} a value may "
            "nest"
        )
    return tuple(item.nested_key) or (item.key,)


def _set_path(target: dict[str, Any], keys: Sequence[str], value: Any) -> None:
    for key in keys[:-1]:
        child = target.get(key)
        if not isinstance(child, dict):
            child = target[key] = {}
        target = child
    target[keys[-1]] = value


def _del_path(target: dict[str, Any], keys: Sequence[str]) -> None:
    for key in keys[:-1]:
        target = target.get(key)
        if not isinstance(target, dict):
            return
    target.pop(keys[-1], None)


def _decode(path: Path, item: Any, where: str, run: OfflineRun) -> Any:
    """The value of an item, parsed under the module's rules; non-finite numbers as None, listed in ``run``."""
    keys = _item_path(path, item)
    name = "/".join(keys)
    shown = name if len(name) <= 120 else name[:117] + "..."
    value = parse_json(item.value_json, f"{path}: value of {shown!r}", nonfinite="keep")
    return _finite(value, lambda v: run.non_finite.append((where, name[:200], repr(v))))


def _finite(value: Any, found: Any) -> Any:
    """``value`` with every float that is NaN or infinite (also inside lists and dicts, nested at most 64 deep, as
    parse_json checked) replaced by None; ``found`` is told each."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        found(value)
        return None
    if isinstance(value, list):
        return [_finite(v, found) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v, found) for k, v in value.items()}
    return value


def _apply_updates(path: Path, target: dict[str, Any], record: Any, where: str, run: OfflineRun) -> None:
    """Apply a ConfigRecord or SummaryRecord (``update`` and ``remove`` items) to ``target``."""
    for item in record.update:
        _set_path(target, _item_path(path, item), _decode(path, item, where, run))
    for item in record.remove:
        _del_path(target, _item_path(path, item))


def _parse_run(path: Path) -> OfflineRun:
    """Decode every complete record of the log at ``path`` (whatever is there now)."""
    run = OfflineRun(path=path)
    for record in iter_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.run_id = r.run_id or run.run_id
            run.project = r.project or run.project
            run.name = r.display_name or run.name
            run.group = r.run_group or run.group
            _apply_updates(path, run.config, r.config, "config", run)
        elif kind == "config":
            _apply_updates(path, run.config, record.config, "config", run)
        elif kind == "history":
            row: dict[str, Any] = {}
            step = record.history.step.num if record.history.HasField("step") else len(run.history)
            for item in record.history.item:
                keys = _item_path(path, item)
                value = _decode(path, item, f"history step {step}", run)
                _set_path(row, keys, value)
                _set_path(run.summary, keys, value)
            if "_step" not in row and record.history.HasField("step"):
                row["_step"] = record.history.step.num
            run.history.append(row)
        elif kind == "summary":
            _apply_updates(path, run.summary, record.summary, "summary", run)
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
            run.complete = True
    run.config.pop(_INTERNAL_KEY, None)
    run.summary.pop(_INTERNAL_KEY, None)
    return run


def read_offline_run(
    path_or_run_dir: str | os.PathLike[str],
    *,
    wait_s: float = 30.0,
    poll_s: float = 0.1,
    allow_incomplete: bool = False,
) -> OfflineRun:
    """Read an offline run: its ``.wandb`` file, its run directory, or a folder with one run.

    A run is complete when its log holds wandb's final ``exit`` record. wandb's writer runs in another
    process and may still be writing after ``wandb.finish()`` returned, so a log without that record is
    re-read whenever it grows, for up to ``wait_s`` seconds.

    Args:
        path_or_run_dir: The ``.wandb`` log, its run directory, or a folder holding exactly one run.
        wait_s: The longest time to wait for an incomplete log to be completed (0: do not wait).
        poll_s: Seconds between two checks of the file's size while waiting.
        allow_incomplete: Return an incomplete run (``complete=False``, ``exit_code=None``, read up to its
            last complete record) instead of raising.

    Raises:
        IncompleteRunError: if the log is still incomplete after ``wait_s`` seconds and ``allow_incomplete``
            is False. The message names the file.
        ValueError: for a file that is not a W&B log, or a corrupt one (see :func:`iter_record_bytes`).
    """
    check_number(wait_s, "wait_s", at_least=0.0, finite=False, what="a number of seconds >= 0")
    check_number(poll_s, "poll_s", above=0.0, what="a number of seconds > 0")
    path = _resolve_log(path_or_run_dir)
    deadline = time.monotonic() + wait_s
    size = os.path.getsize(path)
    run = _parse_run(path)
    while not run.complete:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(poll_s, left))
        new_size = os.path.getsize(path)
        if new_size != size:  # the log is append-only: re-read only when it grew
            size = new_size
            run = _parse_run(path)
    if run.complete or allow_incomplete:
        return run
    raise IncompleteRunError(
        f"{path}: incomplete W&B run log ({size} bytes, {len(run.history)} history rows, no final 'exit' "
        f"record after waiting {wait_s:g} s): the run is still being written, or its process ended before "
        "wandb.finish(). Wait longer (wait_s=...), or pass allow_incomplete=True to read the records written so far."
    )
