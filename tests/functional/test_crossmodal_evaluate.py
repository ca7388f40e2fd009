"""``evaluate.py task=crossmodal``: npz in, a JSON report with the required keys checked against the numpy oracle and
the per-query file out; missing arrays are named. (Kept beside the kernel tests it reuses the oracle of.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from beyondlabels import tasks
from tests.entrypoints.helpers import evaluate_config, script_env
from tests.functional.test_crossmodal import oracle, paired_data

REPO_ROOT = Path(__file__).resolve().parents[2]

REQUIRED = [
    *(f"{d}_recall@{k}" for d in ("image_to_text", "text_to_image") for k in (1, 5, 10)),
    "image_to_text_mean_rank",
    "text_to_image_mean_rank",
    "image_to_text_median_rank",
    "text_to_image_median_rank",
    "num_images",
    "num_texts",
]


def test_report_matches_the_oracle(tmp_path: Path):
    images, texts, owner = paired_data(seed=7)
    np.savez(tmp_path / "pairs.npz", image_embeddings=images, text_embeddings=texts, text_image_index=owner)
    out = tmp_path / "out" / "report.json"
    tasks.crossmodal.run(
        evaluate_config(tmp_path, "task=crossmodal", f"input={tmp_path / 'pairs.npz'}", f"output={out}")
    )
    report = json.loads(out.read_text())
    ref = oracle(images.astype(np.float64), texts.astype(np.float64), owner)
    assert report["task"] == "crossmodal" and report["ks"] == [1, 5, 10]
    for key in REQUIRED:
        assert report[key] == pytest.approx(ref[key], abs=1e-12), key
    assert isinstance(report["num_texts"], int) and report["num_images_without_text"] == 1
    assert report["schema"]["keys"]["text_to_image_mean_rank"]["higher_is_better"] is False
    with np.load(out.parent / report["per_query_file"]) as pq:
        assert len(pq["query_id"]) == len(images) + len(texts)
        np.testing.assert_array_equal(pq["text_to_image_rank"][len(images) :], ref["t2i_ranks"])


def test_ids_and_k_are_read(tmp_path: Path):
    images, texts, owner = paired_data(seed=1, n_images=12)
    np.savez(
        tmp_path / "p.npz",
        image_embeddings=images,
        text_embeddings=texts,
        text_image_index=owner,
        image_ids=np.arange(12) + 500,
        text_ids=np.arange(len(texts)) * 2,
    )
    out = tmp_path / "r.json"
    report = tasks.crossmodal.run(
        evaluate_config(tmp_path, "task=crossmodal", f"input={tmp_path / 'p.npz'}", f"output={out}", "k=[2,3]")
    )
    assert "text_to_image_recall@2" in report and "text_to_image_recall@1" not in report
    with np.load(tmp_path / report["per_query_file"]) as pq:
        assert pq["query_id"][:12].tolist() == list(range(500, 512))


@pytest.mark.parametrize(
    "arrays,message",
    [
        (
            {"image_embeddings": np.ones((3, 2), np.float32), "text_embeddings": np.ones((2, 2), np.float32)},
            "text_image_index",
        ),
        (
            {
                "image_embeddings": np.ones((3, 2), np.float32),
                "text_embeddings": np.ones((2, 2), np.float32),
                "text_image_index": np.array([0.0, 1.0]),
            },
            "text_image_index",
        ),
        (
            {
                "image_embeddings": np.ones(3, np.float32),
                "text_embeddings": np.ones((2, 2), np.float32),
                "text_image_index": np.array([0, 1]),
            },
            "image_embeddings",
        ),
        (
            {
                "image_embeddings": np.ones((3, 2), np.float32),
                "text_embeddings": np.ones((2, 2), np.float32),
                "text_image_index": np.array([0, 7]),
            },
            "text_image_index",
        ),
    ],
)
def test_bad_files_are_named(tmp_path: Path, arrays: dict, message: str):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match=message):
        tasks.crossmodal.run(evaluate_config(tmp_path, "task=crossmodal", f"input={tmp_path / 'bad.npz'}", "k=1"))
    with pytest.raises(FileNotFoundError, match="text_image_index"):
        tasks.crossmodal.run(evaluate_config(tmp_path, "task=crossmodal", f"input={tmp_path / 'missing.npz'}"))


@pytest.mark.slow
def test_command_line(tmp_path: Path):
    import subprocess

    images, texts, owner = paired_data(seed=2, n_images=16)
    np.savez(tmp_path / "pairs.npz", image_embeddings=images, text_embeddings=texts, text_image_index=owner)
    out = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "evaluate.py"),
            "task=crossmodal",
            f"input={tmp_path / 'pairs.npz'}",
            f"output={out}",
            f"paths.log_dir={tmp_path / 'logs'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env=script_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(REQUIRED) <= set(json.loads(out.read_text()))
    assert "text_to_image_recall@1" in result.stdout
