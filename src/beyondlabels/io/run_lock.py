"""One writer per run folder: a lock file that names the process writing into a folder.

Two trainings that write into one folder at once (two jobs started in the same second, a colleague reusing a folder)
would each replace the other's files: the histories would hold one run's records under the other's name. So every
writer of a run folder (``train.py`` for the run folder, each evaluation callback for its own folder, the history
writer, the offline tasks for the folder they write a report into) first takes the folder's lock:

- The lock is the file ``<folder>/.beyondlabels.lock``, created atomically (``O_CREAT | O_EXCL``): of two processes
  that try at once, exactly one creates it. It holds JSON naming its holder: process id, host name, start time, the
  command, and what tells a process apart from a later one with the same id (the boot id and the process's start
  time on Linux).
- A lock held by a live process is a :class:`RunFolderInUseError` that names the folder and the holder, and says what
  to do; nothing in the folder is touched.
- A lock left by a process that is gone (killed, out of memory, a machine rebooted) on the same host is *stale*: it
  is recovered (renamed away and checked, so two processes recovering it at once cannot both win) and taken, as a
  training resumed in its own folder does. A lock held on another host cannot be checked: it is in use until it is
  released, or deleted by hand once that process is known to be gone.
- Within one process the lock is shared: taking it again counts up, :meth:`RunFolderLock.release` counts down, and
  the file goes when the count reaches zero. A forked child is another process: it does not share its parent's.

Examples:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with RunFolderLock(folder) as lock:
    ...     (folder / LOCK_FILE).is_file(), holder_of(folder)["pid"] == os.getpid()
    (True, True)
    >>> (folder / LOCK_FILE).exists()
    False
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "LOCK_FILE",
    "RunFolderInUseError",
    "RunFolderLock",
    "holder_of",
    "lock_on_rank_zero",
    "writing",
]

log = logging.getLogger(__name__)

LOCK_FILE = ".beyondlabels.lock"
_FRESH_S = 30.0  # a lock file without a readable holder younger than this is one being written now

_held: dict[str, dict[str, Any]] = {}  # real path of a folder -> {"pid", "token", "count"} of this process's locks
_guard = threading.Lock()


class RunFolderInUseError(RuntimeError):
    """A run folder that another process is writing into (its lock is held). ``folder`` and ``holder`` (the lock
    file's JSON, or None when unreadable) say which."""

    def __init__(self, message: str, folder: Path | None = None, holder: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.folder, self.holder = folder, holder


def _boot_id() -> str | None:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    return None


def _process_start(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (Linux ``/proc/<pid>/stat``, field 22); None
    elsewhere."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _this_process() -> dict[str, Any]:
    pid = os.getpid()
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "boot_id": _boot_id(),
        "process_start": _process_start(pid),
        "command": " ".join(sys.argv)[:300],
    }


def holder_of(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The holder of ``folder``'s lock as its file says (``pid``, ``host``, ``started``, ``command``, ...); None when
    there is no lock or its file is unreadable."""
    try:
        with open(Path(folder) / LOCK_FILE, "rb") as handle:  # our own small file, never a pipe: O_EXCL made it
            data = json.loads(handle.read(64 << 10).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_ours(holder: dict[str, Any] | None) -> bool:
    me = _this_process()
    return (
        holder is not None
        and holder.get("pid") == me["pid"]
        and holder.get("host") == me["host"]
        and holder.get("process_start") == me["process_start"]
        and holder.get("boot_id") == me["boot_id"]
    )


def _alive(holder: dict[str, Any]) -> bool | None:
    """Whether the holding process runs: True, False, or None when it cannot be told (another host)."""
    if holder.get("host") != socket.gethostname():
        return None
    boot = _boot_id()
    if boot is not None and holder.get("boot_id") not in (None, boot):
        return False  # the machine rebooted since
    pid = holder.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        pass
    except OSError:
        return None
    started = holder.get("process_start")
    now = _process_start(pid)
    return not (started is not None and now is not None and started != now)  # a new process under an old id


def _describe(folder: Path, holder: dict[str, Any] | None, alive: bool | None) -> str:
    if holder is None:
        return (
            f"{folder} is being written by another process (its lock {folder / LOCK_FILE} was taken moments ago and "
            "does not name its holder yet)"
        )
    where = "this machine" if alive else f"host {holder.get('host')!r}"
    text = (
        f"{folder} is being written by another process: pid {holder.get('pid')} on {where}, since "
        f"{holder.get('started')} ({str(holder.get('command', ''))[:200]!r})"
    )
    if alive is None:
        text += "; from here it cannot be told whether that process still runs"
    return text


def _refusal(folder: Path, holder: dict[str, Any] | None, alive: bool | None) -> RunFolderInUseError:
    return RunFolderInUseError(
        f"{_describe(folder, holder, alive)}. One run folder has one writer, so nothing was written: give this run a "
        "folder of its own (train.py: hydra.run.dir=...; a callback: save_dir=... or the Trainer's "
        "default_root_dir), or wait until that process ends. If it has ended and its lock stayed (it ran on another "
        f"machine), delete {folder / LOCK_FILE}.",
        folder,
        holder,
    )


def _judge(path: Path) -> tuple[dict[str, Any] | None, bool | None]:
    """``(holder, alive)`` of an existing lock file: ``alive`` False for a stale one."""
    holder = holder_of(path.parent)
    if holder is None:
        try:
            age = datetime.datetime.now().timestamp() - path.stat().st_mtime
        except FileNotFoundError:
            return None, False
        return None, (False if age > _FRESH_S else True)
    return holder, _alive(holder)


def _recover(path: Path, judged: bytes) -> None:
    """Move a stale lock out of the way: rename it (atomic), and put it back if what was renamed is no longer the
    stale lock that was judged (another process recovered it and took a fresh one meanwhile)."""
    aside = path.with_name(f"{path.name}.stale-{uuid.uuid4().hex[:12]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    try:
        if aside.read_bytes() != judged:
            with contextlib.suppress(OSError):
                os.link(aside, path)
    finally:
        with contextlib.suppress(OSError):
            aside.unlink()


class RunFolderLock:
    """The lock of one run folder (behaviour: the module docstring); a context manager.

    Args:
        folder: The folder (made when missing).
        check_parent: Also refuse when the folder *above* is locked by another process (an evaluation callback's
            folder inside a run folder that ``train.py`` of another run holds).
    """

    def __init__(self, folder: str | os.PathLike[str], check_parent: bool = False) -> None:
        self.folder = Path(folder)
        self.check_parent = check_parent
        self.held = False

    @property
    def path(self) -> Path:
        return self.folder / LOCK_FILE

    def acquire(self) -> RunFolderLock:
        """Take the lock (or count up a lock this process holds).

        Raises:
            RunFolderInUseError: if another live process (or one on another host) holds it, or the folder above
                with ``check_parent``.
        """
        if self.held:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.folder)
        with _guard:
            if self.check_parent:
                self._check_parent()
            mine = _held.get(key)
            if (
                mine is not None
                and mine["pid"] == os.getpid()
                and (holder_of(self.folder) or {}).get("token") == (mine["token"])
            ):
                mine["count"] += 1
            else:
                _held[key] = {"pid": os.getpid(), "token": self._create(), "count": 1}
        self.held = True
        return self

    def _check_parent(self) -> None:
        parent = self.folder.absolute().parent
        if not (parent / LOCK_FILE).exists():
            return
        holder, alive = _judge(parent / LOCK_FILE)
        if holder is not None and not _is_ours(holder) and alive is not False:
            raise _refusal(parent, holder, alive)

    def _create(self) -> str:
        """Create the lock file (recovering a stale one); its token."""
        for _ in range(5):
            token = uuid.uuid4().hex
            record = {**_this_process(), "token": token}
            data = json.dumps(record, indent=1) + "\n"
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
            except FileExistsError:
                holder, alive = _judge(self.path)
                if _is_ours(holder):  # left by this process (a writer that never released it): take it over
                    assert holder is not None
                    return str(holder.get("token"))
                if alive is False:
                    log.warning("%s: recovering the lock of %s, which no longer runs", self.folder, holder)
                    with contextlib.suppress(OSError):
                        _recover(self.path, self.path.read_bytes())
                    continue
                raise _refusal(self.folder, holder, alive) from None
            try:
                os.write(fd, data.encode("utf-8"))
            finally:
                os.close(fd)
            return token
        raise _refusal(self.folder, holder_of(self.folder), True)

    def release(self) -> None:
        """Count down; the last release of this process removes the lock file (if it is still this process's)."""
        if not self.held:
            return
        self.held = False
        key = os.path.realpath(self.folder)
        with _guard:
            mine = _held.get(key)
            if mine is None or mine["pid"] != os.getpid():
                return
            mine["count"] -= 1
            if mine["count"] > 0:
                return
            del _held[key]
            if (holder_of(self.folder) or {}).get("token") == mine["token"]:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()

    def __enter__(self) -> RunFolderLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


@contextlib.contextmanager
def writing(folder: str | os.PathLike[str]) -> Any:
    """Hold ``folder``'s lock for the writes in the block (this process may hold it already: then it is shared).

    Raises:
        RunFolderInUseError: if another process holds it.
    """
    with RunFolderLock(folder):
        yield


def lock_on_rank_zero(
    folder: str | os.PathLike[str], rank_zero: bool, broadcast: Callable[[Any], Any], check_parent: bool = False
) -> RunFolderLock | None:
    """Take ``folder``'s lock on the process that writes (rank 0), and tell every rank the outcome, so that all of
    them raise the same :class:`RunFolderInUseError` together (no rank is left waiting in a collective call).

    Args:
        folder: The folder rank 0 writes into.
        rank_zero: Whether this process is rank 0.
        broadcast: Sends rank 0's value to every rank and returns it (``trainer.strategy.broadcast``).
        check_parent: As :class:`RunFolderLock`'s.

    Returns:
        The lock on rank 0, None on the others.
    """
    lock, refusal = None, None
    if rank_zero:
        try:
            lock = RunFolderLock(folder, check_parent=check_parent).acquire()
        except RunFolderInUseError as exc:
            refusal = str(exc)
        except OSError as exc:  # no folder can be made there: the writes will report it
            log.warning("%s: its lock could not be taken (%s: %s)", folder, type(exc).__name__, exc)
    refusal = broadcast(refusal)
    if refusal is not None:
        raise RunFolderInUseError(refusal, Path(folder))
    return lock
