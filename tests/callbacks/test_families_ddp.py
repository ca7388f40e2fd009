"""World size 1 and 2 (gloo DDP through the Trainer) give identical numbers for the cross-modal, zero-shot, hierarchy
and profile callbacks, for a Euclidean retrieval callback whose batches its batch_transform makes on every rank, and
for the checkpoint selection, logged alike on every rank (the retrieval family's own test:
test_retrieval_callback_ddp.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ddp import child_env

SCRIPT = Path(__file__).with_name("ddp_families_script.py")


def _run(tmp_path: Path, devices: int) -> list[dict]:
    out = tmp_path / f"world{devices}" / "result.json"
    out.parent.mkdir(parents=True)
    env = child_env(OMP_NUM_THREADS="1", PL_DISABLE_FORK="1", WANDB_MODE="offline")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), str(devices)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    return [json.loads(p.read_text()) for p in sorted(out.parent.glob("result.rank*.json"))]


def _values(history: list[dict]) -> list[dict]:
    """Each rank takes fewer optimiser steps, only DDP drops a padding copy, wall times differ and only rank 0 writes
    files: compare the rest."""
    return [
        {k: v for k, v in h.items() if k not in ("step", "num_duplicates", "eval_seconds", "per_query_file")}
        for h in history
    ]


def _steps_apart(selection: dict) -> dict:
    """A selection without its optimiser steps (which depend on the world size)."""
    flips = {k: v for k, v in selection["flips"].items() if k != "reference_step"}
    rest = {k: v for k, v in selection.items() if k not in ("steps", "set_steps", "best_step", "latest_step", "flips")}
    return {**rest, "flips": flips}


@pytest.mark.slow
def test_two_process_ddp_equals_single_process_for_every_family(tmp_path: Path):
    (single,) = _run(tmp_path, 1)
    ranks = _run(tmp_path, 2)
    assert len(ranks) == 2 and all(r["world_size"] == 2 for r in ranks)
    for name, history in single["histories"].items():
        assert len(history) == 1 and "error" not in history[0], (name, history)
        assert history[0].get("num_duplicates", 0) == 0, name
        for rank in ranks:
            got = rank["histories"][name]
            # the sampler's padding copy was dropped (cross-modal: the image and its one caption)
            assert [h.get("num_duplicates") for h in got] == [2 if name == "crossmodal" else 1], name
            assert _values(got) == _values(history), name
    for rank in ranks:  # the checkpoint selection: computed and logged alike on every rank and world size
        assert (
            rank["selection"]["steps"] == rank["selection"]["set_steps"] == [rank["histories"]["retrieval"][0]["step"]]
        )
        assert _selection(rank["selection"]) == _selection(single["selection"])
        assert rank["logged"].pop("selection/seconds") >= 0 and single["logged"].get("selection/seconds", 0) >= 0
        assert rank["logged"].pop("selection/best_step") == rank["selection"]["best_step"]
        mine = {k: v for k, v in single["logged"].items() if k not in ("selection/seconds", "selection/best_step")}
        assert rank["logged"] == mine
        assert rank["logged"]["selection/set_size"] == 1.0
    assert ranks[0]["selection"] == ranks[1]["selection"] and ranks[0]["logged"] == ranks[1]["logged"]


def _selection(selection: dict) -> dict:
    """The selection without the steps that name its evaluations (each rank takes fewer optimiser steps)."""
    out = {k: v for k, v in selection.items() if k not in ("steps", "set_steps", "best_step", "latest_step")}
    out["flips"] = {k: v for k, v in selection["flips"].items() if k != "reference_step"}
    return out
