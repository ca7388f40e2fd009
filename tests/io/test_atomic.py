"""Every file kind the project writes survives a full disk and a killed write: the previous version stays whole, no
temporary stays behind (or a later start removes it), and the history log loses no record it was given."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from beyondlabels.io.atomic import (  # noqa: E402
    remove_stale_temporaries,
    save_figure,
    save_torch,
    write_json,
    write_text,
)
from beyondlabels.io.run_files import HistoryLog, HistoryReplacedError, read_history, save_per_query  # noqa: E402
from tests.faults import disk_full, killed_before_rename

REPO = Path(__file__).resolve().parents[2]


def _figure():
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    return fig


WRITERS = {
    "json report": (lambda p: write_json(p, {"map@r": 0.5}), lambda p: json.loads(p.read_text())["map@r"] == 0.5),
    "text": (lambda p: write_text(p, "x" * 5000), lambda p: p.read_text() == "x" * 5000),
    "npz (per-query)": (
        lambda p: save_per_query(p, {"query_id": np.arange(500), "precision@1": np.ones(500)}),
        lambda p: np.load(p)["precision@1"].sum() == 500,
    ),
    "png": (lambda p: save_figure(_figure(), p), lambda p: p.read_bytes()[:4] == b"\x89PNG"),
    "torch (cache shard)": (
        lambda p: save_torch({"features": torch.ones(50, 8)}, p),
        lambda p: torch.load(p)["features"].sum() == 400,
    ),
}
SUFFIX = {"npz (per-query)": ".npz", "png": ".png"}


@pytest.mark.parametrize("fault", ["full disk", "stopped before the rename"])
@pytest.mark.parametrize("kind", list(WRITERS))
def test_a_failed_write_leaves_the_previous_file_whole_and_no_temporary(kind: str, fault: str, tmp_path: Path):
    write, check = WRITERS[kind]
    path = tmp_path / f"file{SUFFIX.get(kind, '.bin')}"
    write(path)
    before = path.read_bytes()
    if fault == "full disk":
        with disk_full(tmp_path) as failed, pytest.raises(OSError, match="No space left"):
            write(path)
        assert failed, "the fault was injected"
    else:
        with killed_before_rename(), pytest.raises(KeyboardInterrupt):
            write(path)
    assert path.read_bytes() == before and check(path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_process_killed_before_its_rename_leaves_a_temporary_that_the_next_start_removes(tmp_path: Path):
    script = f"""
import os, sys
from beyondlabels.io.atomic import write_json
os.replace = lambda *a: os._exit(9)  # the process dies between the temporary and the rename
write_json({str(tmp_path / "schema.json")!r}, {{"keys": {{}}}})
"""
    (tmp_path / "schema.json").write_text('{"old": true}')
    assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == 9
    left = [p.name for p in tmp_path.iterdir() if p.name != "schema.json"]
    assert len(left) == 1 and left[0].startswith(".schema.json.") and left[0].endswith(".tmp")
    assert json.loads((tmp_path / "schema.json").read_text()) == {"old": True}
    (tmp_path / "per_query").mkdir()
    (tmp_path / "per_query" / ".step_000000010.npz.0123456789ab.tmp").write_bytes(b"half")
    (tmp_path / "keep.tmp").write_text("not ours")
    removed = remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted([left[0], ".step_000000010.npz.0123456789ab.tmp"])
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["keep.tmp", "schema.json"]


def test_the_history_log_survives_a_full_disk_mid_append(tmp_path: Path):
    log = HistoryLog(tmp_path / "history.jsonl")
    records = [{"step": s, "epoch": 0, "map@r": s / 100} for s in (10, 20, 30)]
    log.write(records[:2])
    with disk_full(tmp_path), pytest.raises(OSError):
        log.write(records)  # half of the third line reaches the disk, then the disk is full
    # readable meanwhile: the cut line is left out (the writer cut it again on the failure), the rest untouched
    assert read_history(log.path) == records[:2]
    log.write(records)  # the next write appends the pending record once
    assert read_history(log.path) == records
    assert log.path.read_text().count("\n") == 3


def test_a_cut_last_line_is_ignored_and_the_next_write_removes_it(tmp_path: Path, caplog):
    log = HistoryLog(tmp_path / "history.jsonl")
    records = [{"step": 1, "epoch": 0}, {"step": 2, "epoch": 0}]
    log.write(records[:1])
    with open(log.path, "ab") as handle:  # what a kill in the middle of an append leaves
        handle.write(b'{"step": 2, "ep')
    assert read_history(log.path) == records[:1] and "cut short" in caplog.text
    log.write(records)
    assert read_history(log.path) == records and log.path.read_text().count("\n") == 2
    (tmp_path / "bad.jsonl").write_text('{"step": 1}\n{oops\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        read_history(tmp_path / "bad.jsonl")


def test_the_history_log_appends_and_rewrites_once_per_start(tmp_path: Path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"step": 99, "epoch": 9}\n')  # a killed run's evaluation past its checkpoint
    log = HistoryLog(path)
    log.write([{"step": 1, "epoch": 0}])  # the first write of a fit makes the file hold exactly the history
    assert read_history(path) == [{"step": 1, "epoch": 0}]
    inode = path.stat().st_ino
    log.write([{"step": 1, "epoch": 0}, {"step": 2, "epoch": 0}])
    assert path.stat().st_ino == inode, "later writes append to the same file"
    log.close()


@pytest.mark.parametrize("how", ["cut", "replaced", "removed"])
def test_a_history_changed_under_its_log_is_never_rewritten(tmp_path: Path, how: str):
    """Someone else writes there: the log stops with an error at every later write and leaves their file as it is."""
    path = tmp_path / "history.jsonl"
    log = HistoryLog(path)
    log.write([{"step": 1, "epoch": 0}, {"step": 2, "epoch": 0}])
    theirs = '{"step": 7, "epoch": 0}\n'
    if how == "cut":
        path.write_text(theirs[:5])
    elif how == "replaced":  # another file of more bytes in its place
        (tmp_path / "other.jsonl").write_text(theirs * 3)
        os.replace(tmp_path / "other.jsonl", path)
    else:
        path.unlink()
    before = path.read_bytes() if path.exists() else None
    for _ in range(2):
        with pytest.raises(HistoryReplacedError, match="replaced or cut since this run last wrote it"):
            log.write([{"step": 1, "epoch": 0}, {"step": 2, "epoch": 0}, {"step": 3, "epoch": 0}])
    assert (path.read_bytes() if path.exists() else None) == before
    log.close()


def test_library_code_writes_files_only_through_the_atomic_helpers():
    """A plain write_text / np.savez / savefig / torch.save to a path would leave a truncated file on a full disk
    (a write into a handle the caller opened atomically says so with ``# atomic: ...``)."""
    plain = re.compile(
        r"\.write_text\(|\.write_bytes\(|np\.savez(_compressed)?\(|\bfig\.savefig\(|torch\.save\(|open\([^)]*[\"'][wa]b?[\"']"
    )
    allowed = {"src/beyondlabels/io/atomic.py"}  # the helpers themselves
    offenders = []
    for path in sorted(
        [*(REPO / "src").rglob("*.py"), *(REPO / "callbacks").rglob("*.py"), REPO / "evaluate.py", REPO / "train.py"]
    ):
        rel = str(path.relative_to(REPO))
        if rel in allowed:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            exempt = "# atomic:" in line or "``" in line or ">>>" in line or line.lstrip().startswith("...")
            if plain.search(code) and not exempt:
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)
