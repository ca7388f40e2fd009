"""A training killed with SIGKILL and resumed from its last checkpoint continues the same histories and the same W&B
run, in its own run folder or in a new one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from beyondlabels.io import find_offline_runs, iter_records, read_offline_run  # noqa: E402
from beyondlabels.io.run_files import read_history  # noqa: E402
from beyondlabels.utils import keep_wandb_run_id, resumed_wandb_run_id, wandb_run_id  # noqa: E402
from tests.entrypoints.helpers import REPO_ROOT, run_script, script_env

SMOKE = (
    "experiment=shapes_smoke",
    "trainer.max_epochs=6",
    "~callbacks.zeroshot",
    "~callbacks.hierarchy",
    "~callbacks.crossmodal",
)
STEPS_PER_EPOCH = 16 * 8 // 32


def _segments(folder: Path) -> list[tuple[Path, str, bool]]:
    """``(log, run id, resume requested)`` of every offline W&B segment under ``folder``, oldest first."""
    out = []
    for log in sorted(find_offline_runs(folder), key=lambda p: p.parent.name):
        run = read_offline_run(log, allow_incomplete=True, wait_s=0)
        resume = next(r.run.resume for r in iter_records(log) if r.WhichOneof("record_type") == "run")
        out.append((log, run.run_id, bool(resume)))
    return out


def _kill_after_two_evaluations(run_dir: Path, tmp_path: Path) -> None:
    env = script_env()
    args = [
        sys.executable,
        str(REPO_ROOT / "train.py"),
        *SMOKE,
        f"paths.log_dir={tmp_path}",
        f"hydra.run.dir={run_dir}",
    ]
    errors = tmp_path / "killed_run.stderr"
    with open(errors, "wb") as stderr:  # a file, not a pipe: nothing can block the child's writes
        proc = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        history, deadline = run_dir / "retrieval" / "history.jsonl", time.monotonic() + 300
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                if (
                    history.is_file()
                    and len(read_history(history)) >= 2
                    and (run_dir / "checkpoints" / "last.ckpt").is_file()
                ):
                    break
                time.sleep(0.05)
            assert proc.poll() is None, "the run ended before it could be killed: " + errors.read_text()[-3000:]
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("same_folder", [True, False], ids=["same-run-folder", "new-run-folder"])
def test_a_killed_run_resumes_its_histories_and_its_wandb_run(tmp_path: Path, same_folder: bool):
    first = tmp_path / "first"
    _kill_after_two_evaluations(first, tmp_path)
    ((_, killed_id, _),) = _segments(first)
    assert wandb_run_id(first) == killed_id
    second = first if same_folder else tmp_path / "second"
    run_script(
        "train.py",
        *SMOKE,
        f"paths.log_dir={tmp_path}",
        f"hydra.run.dir={second}",
        f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}",
    )
    # the evaluation history: every epoch once, steps strictly increasing, through the end of training
    steps = [h["step"] for h in read_history(second / "retrieval" / "history.jsonl")]
    assert steps == [STEPS_PER_EPOCH * (e + 1) for e in range(6)], steps
    # one W&B run: the resumed segment carries the same id, and both ask W&B to resume a run of that id (Lightning's
    # WandbLogger passes resume="allow"), so `wandb sync` of the two folders continues one run
    segments = _segments(tmp_path)
    assert {run_id for _, run_id, _ in segments} == {killed_id} and len(segments) == 2
    assert [resume for *_, resume in segments] == [True, True]
    assert wandb_run_id(second) == killed_id
    resumed = read_offline_run(segments[1][0])
    # logged with the validation's row, at the step of its epoch's last training batch (one before global_step)
    logged = [row["trainer/global_step"] + 1 for row in resumed.history if "retrieval/precision@1" in row]
    assert logged == [s for s in steps if s > logged[0] - 1] and logged[-1] == steps[-1]  # from the checkpoint on


def test_the_kept_run_id_is_found_in_the_run_folder_or_the_checkpoints_run(tmp_path: Path):
    run, other = tmp_path / "run", tmp_path / "other"
    ckpt = run / "checkpoints" / "last.ckpt"
    (run / "checkpoints").mkdir(parents=True)
    assert resumed_wandb_run_id(run, ckpt) is None and resumed_wandb_run_id(other, ckpt) is None
    keep_wandb_run_id(run, "abc123")
    assert resumed_wandb_run_id(run, ckpt) == "abc123"  # resumed in its own folder
    assert resumed_wandb_run_id(other, ckpt) == "abc123"  # resumed into a new folder
    assert resumed_wandb_run_id(run, None) is None  # trained from scratch in that folder: a new W&B run
    keep_wandb_run_id(other, "own")
    assert resumed_wandb_run_id(other, ckpt) == "own"  # the folder's own run first
    (run / "wandb_run.json").write_text("{not json")
    assert wandb_run_id(run) is None  # unreadable: a new run (with a warning), never a crash


@pytest.mark.slow
def test_a_finished_run_resumed_has_nothing_left_to_train_and_ends_with_its_numbers(tmp_path: Path):
    """Lightning's fit of a finished run's checkpoint trains and logs nothing; train.py says so, makes no evaluation
    again and ends as the run ended: exit 0, its last evaluation as the final numbers (and the sweep objective)."""
    run = tmp_path / "run"
    args = (*SMOKE[:1], "trainer.max_epochs=1", *SMOKE[2:], "logger=csv", f"paths.log_dir={tmp_path}")
    args += (f"hydra.run.dir={run}",)
    run_script("train.py", *args)
    history = read_history(run / "retrieval" / "history.jsonl")
    result = run_script("train.py", *args, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    out = result.stdout + result.stderr
    assert "nothing left to train" in out and "max_epochs=1" in out, out[-3000:]
    assert read_history(run / "retrieval" / "history.jsonl") == history  # nothing evaluated again
    final = f"{history[-1]['precision@1']:.4f}"
    lines = result.stdout.splitlines()
    family = next(i for i, line in enumerate(lines) if line.startswith("retrieval/"))  # the summary's family block
    precision = next(line for line in lines[family + 1 :] if line.strip().startswith("precision@1 "))
    assert precision.split()[2] == final, result.stdout[-3000:]  # "precision@1 ↑ <last> [...]"
