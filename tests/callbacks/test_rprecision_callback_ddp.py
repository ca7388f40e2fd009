"""RPrecisionEvalCallback under two-process gloo DDP through the Trainer: the same numbers as world size 1 and as the
kernel fed the same embeddings in one process, the sampler's padding copy dropped by id, files written by rank 0
alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tests.callbacks.ddp_rprecision_script as script
from beyondlabels.callbacks.rprecision import select_prompts  # noqa: E402
from beyondlabels.functional.labels import label_code  # noqa: E402
from beyondlabels.functional.rprecision import text_image_r_precision  # noqa: E402
from beyondlabels.io.run_files import read_history  # noqa: E402
from tests.ddp import child_env

SCRIPT = Path(script.__file__)
FILES = ("evaluator.json", "history.jsonl", "schema.json", "r_precision_curve.png", "confidence_intervals.png")


def _start(tmp_path: Path, devices: int) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"world{devices}" / "result.json"
    out.parent.mkdir(parents=True)
    env = child_env(OMP_NUM_THREADS="1", PL_DISABLE_FORK="1", WANDB_MODE="offline")  # Lightning picks its own ranks
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), str(devices)],
        env=env,
        cwd=out.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group
    )
    return proc, out


def _results(proc: subprocess.Popen, out: Path) -> list[dict]:
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-6000:]
    return [json.loads(p.read_text()) for p in sorted(out.parent.glob("result.rank*.json"))]


def _direct() -> dict:
    """The kernel on the embeddings of the same prompts and pictures, computed here in one process and one batch."""
    ids, prompts = select_prompts(script.POOL, script.NUM_PROMPTS, script.PROMPT_SEED)
    evaluator = script.make_evaluator()
    images = torch.stack([script.prompt_image(p) for p in prompts])
    codes = torch.tensor([label_code(p) for p in prompts])
    out = text_image_r_precision(
        evaluator.encode_images(images),
        evaluator.encode_texts(prompts),
        torch.tensor(ids),
        caption_codes=codes,
        **script.SETTINGS,
    )
    out["ids"] = ids
    return out


@pytest.mark.slow
def test_two_process_ddp_equals_world_size_one_and_the_kernel(tmp_path: Path):
    runs = {devices: _start(tmp_path, devices) for devices in (1, 2)}  # both at once: most of the time is start-up
    try:
        (single,) = _results(*runs[1])
        ranks = _results(*runs[2])
    finally:
        for proc, _ in runs.values():
            if (
                proc.poll() is None
            ):  # a hung run (e.g. a rank stuck in a collective): stop its process group, ranks included
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    direct = _direct()

    assert [(r["world_size"], r["global_rank"], r["launch_rank"]) for r in ranks] == [(2, 0, 0), (2, 1, 1)]
    assert single["world_size"] == 1
    n = script.NUM_PROMPTS
    assert n % 2 == 1  # DistributedSampler pads 37 prompts to 38 over two ranks

    # one evaluation per run; the padding copy is counted on both ranks and dropped
    for run, duplicates in [(single, 0), *[(r, 1) for r in ranks]]:
        (record,) = run["history"]
        assert record["num_samples"] == n and record["num_duplicates"] == duplicates
        assert run["logged"]["rprecision/num_samples"] == n and run["logged"]["rprecision/num_duplicates"] == duplicates

    # the logged scalars: identical on both ranks and to world size 1 (everything but the step, the duplicates and the
    # wall time, which is rank 0's on both ranks)
    assert ranks[0]["logged"]["rprecision/eval_seconds"] == ranks[1]["logged"]["rprecision/eval_seconds"] > 0
    skip = {"step", "num_duplicates", "per_query_file", "eval_seconds"}
    keys = sorted(set(single["logged"]) - {"rprecision/num_duplicates", "rprecision/eval_seconds"})
    assert len(keys) >= 20 and set(ranks[0]["logged"]) == set(single["logged"])
    for rank in ranks:
        for key in keys:
            assert rank["logged"][key] == pytest.approx(single["logged"][key], abs=1e-6, rel=0), key
        for key, value in single["history"][0].items():
            if key not in skip:
                np.testing.assert_allclose(rank["history"][0][key], value, rtol=0, atol=1e-6, err_msg=key)

    # ... and equal to the kernel fed the same embeddings directly (every scalar and the curve)
    record = ranks[0]["history"][0]
    scalars = [k for k, v in direct.items() if isinstance(v, torch.Tensor) and v.dim() == 0]
    assert {
        "r_precision",
        "r_precision_std",
        "r_precision@3",
        "text_to_image_r_precision",
        "hard_r_precision",
        "clip_score",
    } <= set(scalars)
    for key in scalars:
        assert record[key] == pytest.approx(float(direct[key]), abs=1e-6, rel=0), key
        assert ranks[1]["logged"][f"rprecision/{key}"] == pytest.approx(float(direct[key]), abs=1e-6, rel=0), key
    np.testing.assert_allclose(record["r_precision_curve"], direct["r_precision_curve"].numpy(), rtol=0, atol=1e-6)
    assert (
        0.0 < float(direct["r_precision"]) < 1.0 and 0.0 < float(direct["text_to_image_r_precision"]) < 1.0
    )  # informative

    # files: rank 0 alone writes them (each rank's callback was given its own folder)
    folder0, folder1 = Path(ranks[0]["save_dir"]), Path(ranks[1]["save_dir"])
    assert folder0 != folder1 and folder0.name == "files.rank0"
    assert all((folder0 / f).is_file() for f in FILES)
    assert not folder1.exists(), sorted(p.name for p in folder1.rglob("*"))
    assert read_history(folder0 / "history.jsonl") == ranks[0]["history"]
    with np.load(folder0 / record["per_query_file"]) as per_query:
        assert per_query["query_id"].tolist() == direct["ids"]  # 37 unique ids, the padding copy gone
        np.testing.assert_array_equal(per_query["rank"], direct["per_query"]["rank"].numpy())
        np.testing.assert_allclose(
            per_query["clip_score"], direct["per_query"]["clip_score"].numpy(), rtol=0, atol=1e-5
        )
    assert all((Path(single["save_dir"]) / f).is_file() for f in FILES)
