"""One writer per run folder: the lock file, its holder, a live holder refused, a dead one's lock recovered, and the
default run folder names that keep two jobs of one second apart."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from beyondlabels._internal.run_names import job_tag
from beyondlabels.io.run_lock import LOCK_FILE, RunFolderInUseError, RunFolderLock, holder_of, lock_on_rank_zero
from beyondlabels.utils.run_folder import launched_as_rank_zero
from tests.ddp import child_env

HOLD = """
import sys, time
from beyondlabels.io.run_lock import RunFolderLock
lock = RunFolderLock(sys.argv[1]).acquire()
print("held", flush=True)
sys.stdin.readline()
lock.release()
"""


def _dead_pid() -> int:
    """The id of a process that has ended."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def _write_lock(folder: Path, **fields) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": "2026-01-01T00:00:00+00:00"}
    holder.update(fields)
    (folder / LOCK_FILE).write_text(json.dumps(holder))


def test_the_lock_names_its_holder_is_shared_within_a_process_and_goes_with_the_last_release(tmp_path: Path):
    first = RunFolderLock(tmp_path / "run").acquire()
    holder = holder_of(tmp_path / "run")
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname() and holder["token"]
    second = RunFolderLock(tmp_path / "run").acquire()  # another writer of this process: shared
    first.release()
    assert (tmp_path / "run" / LOCK_FILE).is_file()
    second.release()
    assert not (tmp_path / "run" / LOCK_FILE).exists()


@pytest.mark.slow
def test_a_folder_held_by_another_live_process_is_refused_naming_folder_and_holder(tmp_path: Path):
    folder = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderInUseError) as refused:
            RunFolderLock(folder).acquire()
        message = str(refused.value)
        assert str(folder) in message and f"pid {proc.pid}" in message and "this machine" in message
        assert refused.value.holder["pid"] == proc.pid
        with pytest.raises(RunFolderInUseError, match="is being written by another process"):  # also from below
            RunFolderLock(folder / "retrieval", check_parent=True).acquire()
    finally:
        proc.communicate("\n", timeout=60)
    with RunFolderLock(folder):  # released when that process let go
        assert holder_of(folder)["pid"] == os.getpid()


def test_the_stale_lock_of_a_process_that_ended_is_recovered(tmp_path: Path, caplog):
    _write_lock(tmp_path / "run", pid=_dead_pid())
    with RunFolderLock(tmp_path / "run"):
        assert holder_of(tmp_path / "run")["pid"] == os.getpid()
    assert "no longer runs" in caplog.text
    # a live process id whose start time is not the holder's: the id was reused, the lock is stale
    _write_lock(tmp_path / "reused", pid=1, process_start=-5)
    if Path("/proc/1/stat").exists():
        with RunFolderLock(tmp_path / "reused"):
            pass


def test_a_lock_of_another_host_or_one_being_written_is_not_taken(tmp_path: Path):
    _write_lock(tmp_path / "far", host="another-machine.example", pid=12345)
    with pytest.raises(RunFolderInUseError, match="cannot be told whether that process still runs") as refused:
        RunFolderLock(tmp_path / "far").acquire()
    assert "another-machine.example" in str(refused.value) and str(tmp_path / "far" / LOCK_FILE) in str(refused.value)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / LOCK_FILE).write_text("")  # created a moment ago, its holder not yet written
    with pytest.raises(RunFolderInUseError, match="taken moments ago"):
        RunFolderLock(tmp_path / "new").acquire()
    os.utime(tmp_path / "new" / LOCK_FILE, (0, 0))  # ... or left empty long ago by a process that died
    with RunFolderLock(tmp_path / "new"):
        pass


def test_every_rank_raises_what_rank_zero_found(tmp_path: Path):
    _write_lock(tmp_path / "far", host="another-machine.example")
    told = []

    def broadcast(value):
        told.append(value)
        return value

    with pytest.raises(RunFolderInUseError):
        lock_on_rank_zero(tmp_path / "far", True, broadcast)
    assert told and "another-machine.example" in told[0]
    with pytest.raises(RunFolderInUseError, match="another-machine"):  # another rank: told by rank 0
        lock_on_rank_zero(tmp_path / "free", False, lambda value: told[0])
    assert not (tmp_path / "free").exists()  # a rank other than 0 takes no lock


def test_job_tags_tell_apart_two_jobs_of_one_second():
    assert job_tag({"SLURM_ARRAY_JOB_ID": "811", "SLURM_ARRAY_TASK_ID": "3"}) == "j811_3"
    assert job_tag({"SLURM_ARRAY_JOB_ID": "811", "SLURM_ARRAY_TASK_ID": "4"}) == "j811_4"
    assert job_tag({"SLURM_JOB_ID": "9/../x"}) == "j9-..-x"  # never a path separator
    tags = {
        subprocess.run(
            [sys.executable, "-c", "from beyondlabels._internal.run_names import job_tag; print(job_tag({}))"],
            capture_output=True,
            text=True,
            env=child_env(),
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(tags) == 2 and all(t.startswith("p") for t in tags)


INHERIT = """
import subprocess, sys
from beyondlabels._internal.run_names import job_tag
print(job_tag(), flush=True)
child = "from beyondlabels._internal.run_names import job_tag; print(job_tag())"
subprocess.run([sys.executable, "-c", child], check=True)
"""


def test_the_processes_a_job_starts_take_its_tag():
    # the jobs of a submitit multirun are processes of their own that resolve the sweep folder again, each with its own
    # SLURM ids: they must find the folder of the process that launched them
    out = subprocess.run(
        [sys.executable, "-c", INHERIT], capture_output=True, text=True, check=True, env=child_env()
    ).stdout.split()
    assert len(out) == 2 and out[0] == out[1] and out[0].startswith("p")
    assert job_tag({"BEYONDLABELS_JOB_TAG": "p7-ab/../c", "SLURM_ARRAY_JOB_ID": "811", "SLURM_ARRAY_TASK_ID": "3"}) == (
        "p7-ab-..-c"
    )


def test_the_default_run_folder_carries_the_job_tag():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    root = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(version_base="1.3", config_dir=str(root)):
        cfg = compose(config_name="train", return_hydra_config=True)
    from omegaconf import OmegaConf

    run_dir = OmegaConf.select(cfg, "hydra.run.dir")
    assert run_dir.endswith(f"_{job_tag()}") and "/train/runs/" in run_dir
    assert OmegaConf.select(cfg, "hydra.callbacks.run_folder_lock._target_").endswith("RunFolderLockCallback")
    GlobalHydra.instance().clear()


def test_only_the_process_launched_as_rank_zero_takes_locks():
    assert launched_as_rank_zero({})
    assert not launched_as_rank_zero({"RANK": "1", "LOCAL_RANK": "0"})
    assert not launched_as_rank_zero({"LOCAL_RANK": "1"})  # Lightning's launcher starts ranks 1.. with it
    assert not launched_as_rank_zero({"NODE_RANK": "1"})
    assert launched_as_rank_zero({"SLURM_PROCID": "0"}) and not launched_as_rank_zero({"SLURM_PROCID": "2"})
