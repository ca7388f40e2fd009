"""evaluate.py: the offline contract (npz in, JSON + PNG out) checked against an independent numpy computation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from helpers import run_script  # noqa: E402

pytestmark = pytest.mark.slow


def _loo_reference(x: np.ndarray, labels: np.ndarray, k: int) -> dict[str, float]:
    """Leave-one-out precision@k, R-precision and MAP@R with a plain per-query loop (no lone queries)."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    sims = x @ x.T
    p_at_k, r_prec, map_r = [], [], []
    for q in range(len(x)):
        others = np.delete(np.arange(len(x)), q)
        ranked = others[np.argsort(-sims[q, others], kind="stable")]
        rel = (labels[ranked] == labels[q]).astype(float)
        r = int(rel.sum())
        p_at_k.append(rel[:k].mean())
        r_prec.append(rel[:r].mean())
        precisions = np.cumsum(rel[:r]) / np.arange(1, r + 1)
        map_r.append((precisions * rel[:r]).sum() / r)
    return {f"precision@{k}": float(np.mean(p_at_k)), "r_precision": float(np.mean(r_prec)), "map@r": float(np.mean(map_r))}


def test_retrieval_report_matches_reference(tmp_path: Path):
    rng = np.random.default_rng(0)
    labels = np.array(["gothic", "baroque", "bauhaus", "tudor"])[np.arange(60) % 4]
    centres = rng.normal(size=(4, 12))
    x = (centres[np.arange(60) % 4] + 1.2 * rng.normal(size=(60, 12))).astype(np.float32)
    np.savez(tmp_path / "emb.npz", embeddings=x, labels=labels)
    out = tmp_path / "out" / "report.json"
    result = run_script("evaluate.py", "task=retrieval", f"input={tmp_path / 'emb.npz'}", f"output={out}", "k=[1,3,7]", f"paths.log_dir={tmp_path / 'logs'}")
    report = json.loads(out.read_text())
    for key in ("precision@1", "precision@3", "precision@7", "r_precision", "map@r", "num_queries", "num_lone_queries"):
        assert key in report
    _, ints = np.unique(labels, return_inverse=True)
    for k in (1, 3, 7):
        ref = _loo_reference(x, ints, k)
        assert report[f"precision@{k}"] == pytest.approx(ref[f"precision@{k}"], abs=1e-9)
    assert report["r_precision"] == pytest.approx(ref["r_precision"], abs=1e-9)
    assert report["map@r"] == pytest.approx(ref["map@r"], abs=1e-9)
    assert report["num_queries"] == 60 and report["num_lone_queries"] == 0
    assert report["num_labels"] == 4
    assert len(report["precision_curve"]) == 20 and report["precision_curve"][0] == report["precision@1"]
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "precision@1" in result.stdout


def test_missing_input_is_a_clear_error(tmp_path: Path):
    with pytest.raises(AssertionError, match="input=PATH.npz"):
        run_script("evaluate.py", "task=retrieval", f"paths.log_dir={tmp_path}")
    np.savez(tmp_path / "bad.npz", vectors=np.ones((3, 2)))
    with pytest.raises(AssertionError, match="lacks the array"):
        run_script("evaluate.py", "task=retrieval", f"input={tmp_path / 'bad.npz'}", f"paths.log_dir={tmp_path}")


def test_wandb_logging_and_run_comparison(tmp_path: Path):
    """evaluate.py wandb=true writes an offline run; task=compare reads runs back and tabulates their finals."""
    rng = np.random.default_rng(1)
    for name, noise in (("sharp", 0.3), ("blurry", 3.0)):
        labels = np.arange(40) % 4
        x = (rng.normal(size=(4, 8))[labels] + noise * rng.normal(size=(40, 8))).astype(np.float32)
        np.savez(tmp_path / f"{name}.npz", embeddings=x, labels=labels)
        run_script("evaluate.py", f"input={tmp_path / f'{name}.npz'}", f"output={tmp_path / name / 'report.json'}", "wandb=true", f"hydra.run.dir={tmp_path / 'runs' / name}")
    table_path = tmp_path / "compare.json"
    result = run_script("evaluate.py", "task=compare", f"runs=[{tmp_path / 'runs'}]", f"output={table_path}", "metrics=[retrieval/precision@1,retrieval/map@r]", f"hydra.run.dir={tmp_path / 'cmp'}")
    table = json.loads(table_path.read_text())
    assert len(table) == 2
    reports = {name: json.loads((tmp_path / name / "report.json").read_text()) for name in ("sharp", "blurry")}
    got = sorted(row["retrieval/map@r"] for row in table.values())
    assert got == pytest.approx(sorted(r["map@r"] for r in reports.values()))
    assert reports["sharp"]["map@r"] > reports["blurry"]["map@r"]
    assert "final metrics per run" in result.stdout
