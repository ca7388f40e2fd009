"""ConvergenceMonitor under two-process gloo DDP through the Trainer: a downturn seen by every rank stops every rank at
the same step (from a logged value, and from an evaluation's gathered per-query values), a downturn seen by one rank
only stops every rank too (as Lightning's EarlyStopping; an unsynced key is tested at alpha / 2 on each of the 2
ranks, so the job keeps alpha), and no run is left waiting on a rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tests.callbacks.ddp_convergence_script as script
from tests.callbacks.test_convergence import reference_events
from tests.ddp import child_env

SCRIPT = Path(__file__).with_name("ddp_convergence_script.py")


def _launch(tmp_path: Path, mode: str, timeout: float) -> tuple[int | None, str, list[dict]]:
    """Run the script on 2 ranks; on timeout kill its whole process group (the second rank is a child of the first)
    and return ``None`` as the exit status."""
    out = tmp_path / mode / "result.json"
    out.parent.mkdir(parents=True)
    env = child_env(OMP_NUM_THREADS="1", PL_DISABLE_FORK="1", WANDB_MODE="offline")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), "2", mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        code = None
    ranks = [json.loads(p.read_text()) for p in sorted(out.parent.glob("result.rank*.json"))]
    return code, output, ranks


@pytest.mark.slow
def test_a_downturn_on_every_rank_stops_every_rank_at_the_same_step(tmp_path: Path):
    code, output, ranks = _launch(tmp_path, "synced", timeout=240)
    assert code == 0, output[-6000:] if code is not None else f"a rank hung:\n{output[-6000:]}"
    events = reference_events(script.FALLING, script.WINDOW, noise_estimate="differences")
    first = next(i for event, i in events if event == "downturn")
    stop = first + 1  # one optimiser step per epoch: the value of epoch i is read at global step i + 1
    assert len(ranks) == 2 and all(r["world_size"] == 2 and r["alpha"] == 0.05 for r in ranks)  # synced=True: alpha
    for rank in ranks:
        assert rank["stopped_at"] == rank["global_step"] == rank["current_epoch"] == stop
        assert rank["series"] == [[i + 1, v] for i, v in enumerate(script.FALLING[:stop])]
        assert [(e["event"], e["step"]) for e in rank["events"]] == [(event, i + 1) for event, i in events if i < stop]
    assert ranks[0]["events"] == ranks[1]["events"] and ranks[0]["state"] == ranks[1]["state"]


@pytest.mark.slow
def test_a_downturn_on_one_rank_only_stops_every_rank_at_the_same_step(tmp_path: Path):
    """Without sync_dist each rank reads its own value: rank 0 sees the falling curve, rank 1 a rising one; each
    tests at alpha / 2 (the job keeps alpha); rank 0's stop stops both at the step after rank 0's first downturn."""
    code, output, ranks = _launch(tmp_path, "rank_local", timeout=240)
    assert code == 0, output[-6000:] if code is not None else f"a rank hung:\n{output[-6000:]}"
    assert all(r["alpha"] == 0.025 for r in ranks)
    first = next(
        i
        for event, i in reference_events(script.FALLING, script.WINDOW, alpha=0.025, noise_estimate="differences")
        if event == "downturn"
    )
    stop = first + 1  # one optimiser step per epoch: the value of epoch i is read at global step i + 1
    zero, one = ranks
    assert [e["step"] for e in zero["events"] if e["event"] == "downturn"] == [stop]
    assert "downturn" not in [e["event"] for e in one["events"]]
    for rank in ranks:
        assert rank["stopped_at"] == rank["global_step"] == rank["current_epoch"] == stop


@pytest.mark.slow
def test_a_value_skipped_on_one_rank_does_not_hang_the_run(tmp_path: Path):
    code, output, ranks = _launch(tmp_path, "rank_nan", timeout=60)
    assert code == 0, output[-6000:] if code is not None else f"a rank hung:\n{output[-6000:]}"
    assert len(ranks) == 2 and ranks[0]["current_epoch"] == ranks[1]["current_epoch"]


@pytest.mark.slow
def test_a_paired_downturn_stops_every_rank_at_the_same_step(tmp_path: Path):
    """Every rank reads the same gathered per-query values, takes the same decisions (series rule and paired
    confirmation) and stops with the others."""
    code, output, ranks = _launch(tmp_path, "paired", timeout=240)
    assert code == 0, output[-6000:] if code is not None else f"a rank hung:\n{output[-6000:]}"
    assert len(ranks) == 2 and all(r["world_size"] == 2 for r in ranks)
    zero, one = ranks
    assert (
        zero["stopped_at"] is not None
        and zero["stopped_at"] == one["stopped_at"] == zero["global_step"] == one["global_step"]
    )
    assert zero["run_state"] == one["run_state"] and zero["run_state"]["best"] is not None
    assert [e["event"] for e in zero["events"]].count("downturn") == 1
    assert zero["state"]["downturn"] == 1.0 and zero["state"]["paired_p"] <= 0.5  # alpha of the script: both rejected
