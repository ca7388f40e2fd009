"""World size 1 and 2 (gloo DDP through the Trainer) give identical retrieval metrics; strict failures stop every
rank."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ddp import child_env

SCRIPT = Path(__file__).with_name("ddp_trainer_script.py")


def _launch(
    tmp_path: Path, devices: int, mode: str, package: str = "pytorch_lightning"
) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / f"{mode}-world{devices}-{package}" / "result.json"
    out.parent.mkdir(parents=True)
    env = child_env(OMP_NUM_THREADS="1", PL_DISABLE_FORK="1", WANDB_MODE="offline")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), str(devices), mode, package],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    return proc, out


def _run(tmp_path: Path, devices: int, mode: str, package: str = "pytorch_lightning") -> list[dict]:
    proc, out = _launch(tmp_path, devices, mode, package)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return [json.loads(p.read_text()) for p in sorted(out.parent.glob("result.rank*.json"))]


def _values(history: list[dict]) -> list[dict]:
    """Each rank takes fewer optimiser steps, only DDP drops a padding copy, and wall times differ: compare everything
    else."""
    return [
        {k: v for k, v in h.items() if k not in ("step", "num_duplicates", "per_query_file", "eval_seconds")}
        for h in history
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "package"),
    [("dicts", "pytorch_lightning"), ("tuples", "pytorch_lightning"), ("dicts", "lightning.pytorch")],
)
def test_two_process_ddp_equals_single_process(
    tmp_path: Path, mode: str, package: str, monkeypatch: pytest.MonkeyPatch
):
    if package == "lightning.pytorch":
        pytest.importorskip("lightning", reason="the `lightning` package is part of the test extras")
    # the tests themselves run as one task of a job: the runs they start are their own and must not join it
    for name, value in {
        "SLURM_NTASKS": "4",
        "SLURM_JOB_NAME": "tests",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "3",
        "SLURM_NODEID": "0",
        "RANK": "3",
        "LOCAL_RANK": "3",
        "WORLD_SIZE": "4",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }.items():
        monkeypatch.setenv(name, value)
    (single,) = _run(tmp_path, 1, mode, package)
    ranks = _run(tmp_path, 2, mode, package)
    assert len(ranks) == 2 and all(r["world_size"] == 2 and r["package"].startswith(package) for r in ranks)
    # the wall time of an evaluation is rank 0's on every rank (files and media included)
    assert ranks[0]["logged"]["retrieval/eval_seconds"] == ranks[1]["logged"]["retrieval/eval_seconds"] > 0
    assert single["history"][0]["num_duplicates"] == 0
    for rank in ranks:
        # 37 items over 2 ranks: the sampler repeats one, which the metric drops by id
        assert [h["num_duplicates"] for h in rank["history"]] == [1]
        assert rank["history"][0]["num_queries"] + rank["history"][0]["num_lone_queries"] == 37
        # identical values on every rank, and identical to world size 1
        timing = ("retrieval/num_duplicates", "retrieval/eval_seconds")
        assert {k: v for k, v in rank["logged"].items() if k not in timing} == {
            k: v for k, v in single["logged"].items() if k not in timing
        }
        assert _values(rank["history"]) == _values(single["history"])


@pytest.mark.slow
def test_strict_file_errors_on_rank_zero_stop_every_rank(tmp_path: Path):
    proc, out = _launch(tmp_path, 2, "strict_file_error")
    assert proc.returncode != 0
    assert "not_a_folder" in proc.stderr  # rank 0's own error (the folder cannot be created under a file)
    assert not list(out.parent.glob("result.rank*.json")), "no rank went on training after the failure"


@pytest.mark.slow
def test_a_failure_on_one_rank_after_compute_fails_the_evaluation_on_every_rank(tmp_path: Path):
    """The last rank fails between the metric's compute and the intervals (a collective: the ranks share the
    bootstrap rounds): every rank records the failure, none waits in the intervals, training finishes."""
    ranks = _run(tmp_path, 2, "compute_error_last_rank")
    assert len(ranks) == 2
    for rank in ranks:
        assert len(rank["history"]) == 1 and "error" in rank["history"][0], rank["history"]
        assert "retrieval/precision@1" not in rank["logged"]
    assert "injected" in ranks[1]["history"][0]["error"]


@pytest.mark.slow
def test_a_rank_without_samples_contributes_nothing(tmp_path: Path):
    """Rank 1 feeds no sample: the evaluation completes, and both ranks log what one process computes on rank 0's
    samples (gloo aborted the job with a collective mismatch before)."""
    (reference,) = _run(tmp_path, 1, "rank0_shard")
    ranks = _run(tmp_path, 2, "empty_rank")
    assert len(ranks) == 2
    assert len(reference["history"]) == 1 and "error" not in reference["history"][0]
    assert reference["history"][0]["num_queries"] == 19
    for rank in ranks:
        assert _values(rank["history"]) == _values(reference["history"])
        assert rank["history"][0]["num_duplicates"] == 0
        assert rank["logged"]["retrieval/precision@1"] == reference["logged"]["retrieval/precision@1"]
