"""Two trainings into one run folder at once (two jobs started in the same second, a colleague reusing a folder): the
second refuses at once, naming the folder and the first; the first's files are whole and its own."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from beyondlabels.io.run_files import read_history
from beyondlabels.io.run_lock import LOCK_FILE
from tests.ddp import child_env

SCRIPT = Path(__file__).with_name("two_writers_script.py")
ROOT = Path(__file__).resolve().parents[2]


def _start(folder: Path, name: str, *hold: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(folder), name, *map(str, hold)],
        cwd=ROOT,
        env=child_env(OMP_NUM_THREADS="1", PL_DISABLE_FORK="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_the_second_training_into_a_folder_refuses_and_the_first_keeps_its_records(tmp_path: Path):
    folder, go = tmp_path / "run", tmp_path / "go"
    first = _start(folder, "a", go)
    try:
        started = folder / "a.started"
        for _ in range(2400):  # the first training has written its first evaluation and is paused
            if started.exists() or first.poll() is not None:
                break
            time.sleep(0.05)
        assert started.exists(), first.communicate(timeout=60)
        history = folder / "retrieval" / "history.jsonl"
        before = history.read_bytes()
        second = _start(folder, "b")
        out, err = second.communicate(timeout=300)
        assert second.returncode == 3, err[-4000:]
        assert "refused:" in out and str(folder / "retrieval") in out and f"pid {first.pid}" in out
        assert history.read_bytes() == before  # the second wrote nothing
    finally:
        go.write_text("go")
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-4000:]
    records = read_history(history)
    assert [r["step"] for r in records] == eval(out.split("steps", 1)[1])  # its own records, all of them
    assert not (folder / "retrieval" / LOCK_FILE).exists()  # given back at the end of fit: the folder is free again


@pytest.mark.slow
def test_train_py_refuses_a_locked_run_folder_before_hydra_writes_into_it(tmp_path: Path):
    from beyondlabels.io.run_lock import RunFolderLock
    from tests.entrypoints.helpers import script_env

    folder = tmp_path / "run"
    with RunFolderLock(folder):
        result = subprocess.run(
            [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={folder}", "logger=none"],
            cwd=tmp_path,
            env=script_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "is being written by another process" in text and str(folder) in text, text[-3000:]
    assert not (folder / ".hydra").exists()  # the other run's config and overrides are untouched
