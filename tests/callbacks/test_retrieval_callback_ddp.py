"""World size 1 and 2 (gloo DDP through the Trainer) give identical retrieval metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("ddp_trainer_script.py")


def _run(tmp_path: Path, devices: int) -> list[dict]:
    out = tmp_path / f"world{devices}" / "result.json"
    out.parent.mkdir(parents=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PL_DISABLE_FORK="1", WANDB_MODE="offline")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), str(devices)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return [json.loads(p.read_text()) for p in sorted(out.parent.glob("result.rank*.json"))]


@pytest.mark.slow
def test_two_process_ddp_equals_single_process(tmp_path: Path):
    (single,) = _run(tmp_path, 1)
    ranks = _run(tmp_path, 2)
    assert len(ranks) == 2 and all(r["world_size"] == 2 for r in ranks)
    assert single["history"][0]["num_queries"] == 37, "the padded repeat was dropped"
    def values(history: list[dict]) -> list[dict]:  # each rank takes fewer optimiser steps, so drop "step"
        return [{k: v for k, v in h.items() if k != "step"} for h in history]

    for rank in ranks:
        # identical values on every rank, and identical to world size 1
        assert rank["logged"] == single["logged"]
        assert values(rank["history"]) == values(single["history"])
        assert "error" not in rank["history"][0]
