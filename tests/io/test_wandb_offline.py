"""Tests for beyondlabels.io.wandb_offline against runs written by the installed wandb.

Real offline runs are created once per module (wandb.init and Lightning's WandbLogger) in a
temporary directory, with every W&B directory pointed there so nothing touches $HOME or the
network. wandb-core's own log reader (``wandb leet inspect --json``) serves as an
independent reference for record counts, record types, history values, config and
summary; wandb's legacy Python ``DataStore`` is used too where the installed wandb still
ships it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

wandb = pytest.importorskip("wandb")

from beyondlabels.io import (  # noqa: E402
    IncompleteRunError,
    OfflineRun,
    find_offline_runs,
    iter_record_bytes,
    iter_records,
    read_offline_run,
)
from beyondlabels.io.wandb_offline import BLOCK_LEN  # noqa: E402

N_STEPS = 300  # enough history to fill several 32 KiB blocks
BIG = "x" * 70_000  # a config value larger than two blocks: forces FIRST/MIDDLE/LAST chunks
PL_STEPS = [0, 10, 20, 30]


@dataclass
class Runs:
    root: Path
    env: dict[str, str]
    plain: Path  # .wandb written by wandb.init / wandb.log
    lightning: Path  # .wandb written through pytorch_lightning's WandbLogger


def _offline_env(base: Path) -> dict[str, str]:
    env = {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_DIR": str(base / "wandb_dir"),
        "WANDB_CACHE_DIR": str(base / "cache"),
        "WANDB_CONFIG_DIR": str(base / "config"),
        "WANDB_DATA_DIR": str(base / "data"),
    }
    for key in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    return env


def _only_log(save_dir: Path) -> Path:
    logs = find_offline_runs(save_dir)
    assert len(logs) == 1, logs
    # wandb's writer may still be writing after finish(): wait until the log is complete before using its bytes
    assert read_offline_run(logs[0], wait_s=60).complete
    return logs[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("wandb_offline")
    env = _offline_env(base)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)

        plain_dir = base / "multirun" / "0"
        plain_dir.mkdir(parents=True)
        run = wandb.init(
            mode="offline",
            dir=plain_dir,
            project="bl-test",
            name="plain",
            config={"lr": 0.01, "model": {"dim": 8, "name": "clip"}, "big": BIG},
        )
        for i in range(N_STEPS):
            run.log({"loss": 1.0 / (i + 1), "val/recall@1": i / N_STEPS, "nested": {"a": i}})
        table = wandb.Table(columns=["query", "rank"], data=[["cat", 1], ["dog", 3]])
        run.log({"retrievals": table})
        run.summary["best_recall"] = 0.75
        run.finish()

        from pytorch_lightning.loggers import WandbLogger

        pl_dir = base / "multirun" / "1"
        pl_dir.mkdir(parents=True)
        logger = WandbLogger(offline=True, save_dir=str(pl_dir), project="bl-test", name="pl")
        logger.log_hyperparams({"lr": 3e-4, "optimizer": {"name": "adamw", "betas": [0.9, 0.98]}})
        for step in PL_STEPS:
            logger.log_metrics({"train/loss": 2.0 - step / 100, "epoch": step // 10}, step=step)
        logger.finalize("success")
        wandb.finish()

    return Runs(base, env, _only_log(plain_dir), _only_log(pl_dir))


# --- wandb-core as an independent reader -----------------------------------------------


def _leet(runs: Runs, path: Path, *extra: str) -> str:
    env = {**os.environ, **runs.env}
    cmd = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", *extra, str(path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "No such command" in proc.stderr + proc.stdout:
        pytest.skip("this wandb has no `wandb leet inspect`")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _leet_records(runs: Runs, path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _leet(runs, path).splitlines() if line.strip()]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """wandb-core prints nested key paths joined with '.'."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


@pytest.mark.parametrize("which", ["plain", "lightning"])
def test_records_match_wandb_core_reader(runs: Runs, which: str) -> None:
    path = getattr(runs, which)
    ours = list(iter_records(path))
    ref = _leet_records(runs, path)
    assert len(ours) == len(ref) > 10
    assert [r.WhichOneof("record_type") for r in ours] == [r["type"] for r in ref]
    n_history = 0
    for rec, ref_rec in zip(ours, ref):
        if ref_rec["type"] != "history":
            continue
        n_history += 1
        row = {".".join(item.nested_key) or item.key: json.loads(item.value_json) for item in rec.history.item}
        ref_row = ref_rec["history"]["item"]
        assert row.keys() == ref_row.keys()
        assert all(_same(row[k], ref_row[k]) for k in row), (row, ref_row)
    assert n_history == (N_STEPS + 1 if which == "plain" else len(PL_STEPS))


@pytest.mark.parametrize("which", ["plain", "lightning"])
def test_summary_and_config_match_wandb_core_reader(runs: Runs, which: str) -> None:
    path = getattr(runs, which)
    run = read_offline_run(path)
    ref = json.loads(_leet(runs, path, "--summary"))
    assert (run.run_id, run.project, run.name) == (ref["run_id"], ref["project"], ref["name"])
    assert run.config == ref["config"]
    assert _flatten(run.summary).keys() == _flatten(ref["summary"]).keys()
    for key, value in _flatten(run.summary).items():
        assert _same(value, _flatten(ref["summary"])[key]), key
    assert ref["state"] == "finished" and run.exit_code == ref["exit_code"] == 0


def test_matches_legacy_python_datastore(runs: Runs) -> None:
    datastore = pytest.importorskip(
        "wandb.sdk.internal.datastore",
        reason=f"wandb {wandb.__version__} has no wandb.sdk.internal.datastore, the Python reader of the legacy (pre "
        "wandb-core) backend; the comparisons with `wandb leet inspect` check the same records",
    )
    for path in (runs.plain, runs.lightning):
        ds = datastore.DataStore()
        ds.open_for_scan(str(path))
        ref = []
        while (data := ds.scan_data()) is not None:
            ref.append(bytes(data))
        ds.close()
        assert list(iter_record_bytes(path)) == ref


# --- values ------------------------------------------------------------------------------


def test_plain_run_values(runs: Runs) -> None:
    run = read_offline_run(runs.plain)
    assert isinstance(run, OfflineRun) and run.path == runs.plain
    assert run.project == "bl-test" and run.name == "plain" and len(run.run_id) == 8
    assert runs.plain.name == f"run-{run.run_id}.wandb"
    assert run.config == {"lr": 0.01, "model": {"dim": 8, "name": "clip"}, "big": BIG}

    assert len(run.history) == N_STEPS + 1
    assert [row["_step"] for row in run.history] == list(range(N_STEPS + 1))
    assert run.series("loss") == [(i, 1.0 / (i + 1)) for i in range(N_STEPS)]
    assert run.history[7]["val/recall@1"] == pytest.approx(7 / N_STEPS)
    assert run.history[7]["nested"] == {"a": 7}
    assert {"_runtime", "_timestamp"} <= run.history[0].keys()

    table = run.history[-1]["retrievals"]
    assert table["_type"] == "table-file"
    assert (table["nrows"], table["ncols"]) == (2, 2)
    assert table["path"].startswith("media/table/")

    assert run.keys() == ["loss", "nested", "retrievals", "val/recall@1"]
    assert {"_step", "_runtime", "_timestamp"} <= set(run.keys(internal=True))
    assert run.summary["loss"] == 1.0 / N_STEPS
    assert run.summary["nested"] == {"a": N_STEPS - 1}
    assert run.summary["_step"] == N_STEPS
    assert run.summary["retrievals"] == table
    assert run.summary["best_recall"] == 0.75  # set through run.summary, not logged
    assert "_wandb" not in run.summary and "_wandb" not in run.config
    assert run.exit_code == 0


def test_lightning_run_values(runs: Runs) -> None:
    run = read_offline_run(runs.lightning)
    assert run.project == "bl-test" and run.name == "pl"
    assert run.config["lr"] == 3e-4
    assert run.config["optimizer"] == {"name": "adamw", "betas": [0.9, 0.98]}
    assert run.series("trainer/global_step") == list(enumerate(PL_STEPS))
    assert [v for _, v in run.series("train/loss")] == [2.0 - s / 100 for s in PL_STEPS]
    assert run.summary["train/loss"] == 2.0 - PL_STEPS[-1] / 100
    assert run.summary["trainer/global_step"] == PL_STEPS[-1]
    assert {"train/loss", "epoch", "trainer/global_step"} <= set(run.keys())


def test_record_split_across_blocks(runs: Runs) -> None:
    data = runs.plain.read_bytes()
    assert len(data) > 4 * BLOCK_LEN
    # Record 1 (the file's header record) is one FULL chunk right after the file header;
    # record 2 (the run, carrying the 70 kB config value) must start with a FIRST chunk.
    first_len = int.from_bytes(data[11:13], "little")
    assert data[13] == 1  # FULL
    assert data[7 + 7 + first_len + 6] == 2  # FIRST
    records = list(iter_records(runs.plain))
    assert records[1].WhichOneof("record_type") == "run"
    assert read_offline_run(runs.plain).config["big"] == BIG


# --- paths ---------------------------------------------------------------------------------


def test_find_offline_runs(runs: Runs) -> None:
    found = find_offline_runs(runs.root / "multirun")
    assert found == sorted([runs.plain, runs.lightning])
    # wandb's latest-run symlink points at the same run; it must not be listed twice
    assert (runs.plain.parents[1] / "latest-run").is_symlink()
    assert find_offline_runs(runs.plain) == [runs.plain]
    assert find_offline_runs(runs.root / "cache") == []
    with pytest.raises(FileNotFoundError):
        find_offline_runs(runs.root / "missing")


def test_read_offline_run_accepts_directories(runs: Runs) -> None:
    by_file = read_offline_run(runs.plain)
    assert read_offline_run(runs.plain.parent) == by_file  # the run directory
    assert read_offline_run(runs.root / "multirun" / "0") == by_file  # the save_dir
    with pytest.raises(ValueError, match="found 2"):
        read_offline_run(runs.root / "multirun")


# --- damaged files -----------------------------------------------------------------------------


def test_non_wandb_files_raise(tmp_path: Path) -> None:
    text = tmp_path / "notes.wandb"
    text.write_text("these are not the records you are looking for\n")
    empty = tmp_path / "empty.wandb"
    empty.write_bytes(b"")
    for path in (text, empty):
        with pytest.raises(ValueError, match="not a W&B run log") as excinfo:
            list(iter_records(path))
        assert str(path) in str(excinfo.value)
    with pytest.raises(ValueError, match=str(text)):
        read_offline_run(text)
    with pytest.raises(FileNotFoundError):
        list(iter_records(tmp_path / "absent.wandb"))


def test_unsupported_version_raises(runs: Runs, tmp_path: Path) -> None:
    data = bytearray(runs.plain.read_bytes())
    data[6] = 7
    bad = tmp_path / "future.wandb"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="version 7"):
        list(iter_records(bad))


@pytest.mark.parametrize("offset", [200, BLOCK_LEN + 500, 3 * BLOCK_LEN + 100])
def test_corrupt_payload_raises(runs: Runs, tmp_path: Path, offset: int) -> None:
    data = bytearray(runs.plain.read_bytes())
    data[offset] ^= 0xFF
    bad = tmp_path / "corrupt.wandb"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt W&B run log") as excinfo:
        read_offline_run(bad)
    assert str(bad) in str(excinfo.value)


def test_corrupt_chunk_type_raises(runs: Runs, tmp_path: Path) -> None:
    data = bytearray(runs.plain.read_bytes())
    data[13] = 9  # chunk type of the first record
    bad = tmp_path / "badtype.wandb"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"unknown chunk type 9") as excinfo:
        list(iter_records(bad))
    assert str(bad) in str(excinfo.value)


def _payload_end(data: bytes, payload: bytes, start: int) -> int | None:
    """Where a record stored as one contiguous chunk ends in the file, found by search."""
    at = data.find(payload, start)
    return None if at < 0 else at + len(payload)


def test_truncated_mid_block_reads_complete_records(runs: Runs, tmp_path: Path) -> None:
    data = runs.plain.read_bytes()
    full = list(iter_record_bytes(runs.plain))
    # Find two consecutive records stored whole inside block 2, located by searching the
    # file for their bytes (independent of the reader's chunk walk).
    ends, pos = [], 0
    for payload in full:
        end = _payload_end(data, payload, pos)
        ends.append(end)
        pos = end if end is not None else pos
    k = next(
        i
        for i in range(len(full) - 1)
        if ends[i] and ends[i + 1] and 2 * BLOCK_LEN < ends[i] < ends[i + 1] < 3 * BLOCK_LEN
    )
    next_len = len(full[k + 1])
    for cut in (ends[k] + 3, ends[k] + 7 + next_len // 2, ends[k] + 7 + next_len - 1):
        part = tmp_path / f"cut{cut}.wandb"
        part.write_bytes(data[:cut])
        assert list(iter_record_bytes(part)) == full[: k + 1]
        with pytest.raises(ValueError, match="truncated W&B run log"):
            list(iter_record_bytes(part, strict=True))
    # cutting exactly at a record boundary is a clean end, even in strict mode
    whole = tmp_path / "boundary.wandb"
    whole.write_bytes(data[: ends[k + 1]])
    assert list(iter_record_bytes(whole, strict=True)) == full[: k + 2]


def test_truncated_runs_match_wandb_core_reader(runs: Runs, tmp_path: Path) -> None:
    data = runs.plain.read_bytes()
    full = list(iter_record_bytes(runs.plain))
    # inside the run record split across blocks 0-2, and at arbitrary points further on
    for cut in (BLOCK_LEN + 1000, 2 * BLOCK_LEN + 4321, len(data) - 50):
        part = tmp_path / f"cut{cut}.wandb"
        part.write_bytes(data[:cut])
        ours = list(iter_record_bytes(part))
        assert ours == full[: len(ours)]
        assert len(ours) == len(_leet_records(runs, part))
    assert len(list(iter_record_bytes(tmp_path / f"cut{BLOCK_LEN + 1000}.wandb"))) == 1
    partial = read_offline_run(tmp_path / f"cut{len(data) - 50}.wandb", wait_s=0, allow_incomplete=True)
    assert partial.exit_code is None and not partial.complete and len(partial.history) == N_STEPS + 1


def test_every_cut_is_a_prefix(runs: Runs, tmp_path: Path) -> None:
    data = runs.lightning.read_bytes()
    full = list(iter_record_bytes(runs.lightning))
    part = tmp_path / "part.wandb"
    previous = 0
    for cut in range(7, len(data), 97):
        part.write_bytes(data[:cut])
        got = list(iter_record_bytes(part))
        assert got == full[: len(got)] and len(got) >= previous
        previous = len(got)
    assert previous < len(full)


def test_copied_run_directory_reads_the_same(runs: Runs, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(runs.plain.parent, copy, symlinks=True)
    assert read_offline_run(copy).history == read_offline_run(runs.plain).history


# --- incomplete logs: never partial data as if complete ----------------------------------------


@dataclass
class SmallRun:
    path: Path  # a complete copy of a small offline run's log
    data: bytes
    records: list[bytes]
    cut: int  # byte offset where the last history record starts
    n_history: int


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> SmallRun:
    """A few `log` calls in an offline run, and where its last history record starts in the file."""
    base = tmp_path_factory.mktemp("wandb_small")
    env = _offline_env(base)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        run = wandb.init(mode="offline", dir=base, project="bl-test", name="small")
        for i in range(5):
            run.log({"val/map@r": 0.1 * i})
        run.finish()
    log = _only_log(base)  # waits until wandb's writer has written the exit record
    copy = base / "complete.wandb"
    shutil.copyfile(log, copy)
    data = copy.read_bytes()
    records = list(iter_record_bytes(copy))
    parsed = list(iter_records(copy))
    last_history = max(i for i, r in enumerate(parsed) if r.WhichOneof("record_type") == "history")
    assert parsed[-1].WhichOneof("record_type") == "exit"
    payload = records[last_history]
    at = data.find(payload)
    assert at >= 0 and len(data) < BLOCK_LEN, "the small log must be one block, its records single chunks"
    cut = at - 7  # the record's chunk header
    assert data[cut + 6] == 1  # FULL chunk
    assert list(iter_record_bytes(_write(base / "check.wandb", data[:cut]), strict=True)) == records[:last_history]
    n_history = sum(r.WhichOneof("record_type") == "history" for r in parsed)
    return SmallRun(copy, data, records, cut, n_history)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


class _Clock:
    """A stand-in for the reader's ``time`` module: ``sleep`` moves the clock on at once, and the actions scheduled
    up to the new time run first (a writer appending to the log), so a test of the waiting decides every interleaving
    itself and never races a thread or the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self._actions: list[tuple[float, Any]] = []

    def at(self, t: float, action) -> None:
        self._actions.append((self.now + t, action))
        self._actions.sort(key=lambda item: item[0])

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds
        while self._actions and self._actions[0][0] <= self.now:
            self._actions.pop(0)[1]()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    import beyondlabels.io.wandb_offline as reader

    fake = _Clock()
    monkeypatch.setattr(reader, "time", fake)
    return fake


def test_complete_log_is_read_at_once(small_run: SmallRun, clock: _Clock) -> None:
    run = read_offline_run(small_run.path, wait_s=60)
    assert clock.sleeps == [], "a complete log must not wait"
    assert run.complete and run.exit_code == 0
    assert [v for _, v in run.series("val/map@r")] == pytest.approx([0.1 * i for i in range(5)])


def test_log_without_exit_record_raises_after_waiting(small_run: SmallRun, tmp_path: Path, clock: _Clock) -> None:
    part = _write(tmp_path / "run-partial.wandb", small_run.data[: small_run.cut])
    with pytest.raises(IncompleteRunError, match="incomplete W&B run log") as excinfo:
        read_offline_run(part, wait_s=0.6, poll_s=0.05)
    # it polled every poll_s up to the deadline, no longer
    assert max(clock.sleeps) <= 0.05 and sum(clock.sleeps) == pytest.approx(0.6, abs=1e-9)
    assert str(part) in str(excinfo.value) and "allow_incomplete" in str(excinfo.value)


def test_incomplete_log_on_request(small_run: SmallRun, tmp_path: Path) -> None:
    part = _write(tmp_path / "run-partial.wandb", small_run.data[: small_run.cut])
    run = read_offline_run(part, wait_s=0, allow_incomplete=True)
    full = read_offline_run(small_run.path)
    assert not run.complete and run.exit_code is None
    assert len(run.history) == small_run.n_history - 1 and run.history == full.history[:-1]


def test_waits_for_the_writer_to_finish(small_run: SmallRun, tmp_path: Path, clock: _Clock) -> None:
    """A log completed while the reader waits is read whole, as a finished run; a record the reader sees cut mid-way
    is read again once the writer has finished it."""
    part = _write(tmp_path / "run-growing.wandb", small_run.data[: small_run.cut])

    def append(data: bytes):
        def write() -> None:
            with open(part, "ab") as fp:
                fp.write(data)

        return write

    clock.at(0.5, append(small_run.data[small_run.cut : small_run.cut + 9]))  # a record cut mid-way first
    clock.at(0.8, append(small_run.data[small_run.cut + 9 :]))
    start = clock.now
    run = read_offline_run(part, wait_s=30, poll_s=0.05)
    # it returned at the first poll after the writer finished, not at the deadline
    assert 0.8 <= clock.now - start < 0.8 + 0.05 + 1e-9
    full = read_offline_run(small_run.path)
    assert run.complete and run.exit_code == 0
    assert run.history == full.history and run.summary == full.summary


def test_wait_arguments_are_checked(small_run: SmallRun) -> None:
    with pytest.raises(ValueError, match="wait_s"):
        read_offline_run(small_run.path, wait_s=-1)
    with pytest.raises(ValueError, match="poll_s"):
        read_offline_run(small_run.path, poll_s=0)
