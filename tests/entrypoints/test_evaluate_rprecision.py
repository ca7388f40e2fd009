"""``evaluate.py task=rprecision``: npz in, a JSON report checked against the definition, settings and evaluator
identity recorded, per-sample file written; missing arrays named; one end-to-end subprocess run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from beyondlabels.functional.rprecision import draw_candidate_sets  # noqa: E402
from beyondlabels.io.candidate_sets import save_candidate_sets  # noqa: E402
from tests.entrypoints.helpers import evaluate_config, run_script

REPO_ROOT = Path(__file__).resolve().parents[2]
from beyondlabels import tasks  # noqa: E402


def _data(n: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    txt = rng.normal(size=(n, 16)).astype(np.float32)
    img = (txt + 1.5 * rng.normal(size=(n, 16))).astype(np.float32)
    return img, txt


def _oracle_hits(img: np.ndarray, txt: np.ndarray, rows: np.ndarray) -> np.ndarray:
    a = img / np.linalg.norm(img, axis=1, keepdims=True)
    b = txt / np.linalg.norm(txt, axis=1, keepdims=True)
    return np.array([float(all(a[q] @ b[d] < a[q] @ b[q] for d in ds)) for q, ds in enumerate(rows)])


def test_report_holds_the_keys_settings_and_evaluator(tmp_path: Path):
    img, txt = _data()
    ids = np.arange(60) + 500
    identity = {"model": "tiny", "pretrained": "sha256:abc", "preprocess": "resize 32"}
    np.savez(
        tmp_path / "in.npz",
        image_embeddings=img,
        text_embeddings=txt,
        ids=ids,
        evaluator=json.dumps(identity),
        captions=np.array([f"caption {i}" for i in range(60)]),
    )
    out = tmp_path / "out" / "r.json"
    tasks.rprecision.run(
        evaluate_config(
            tmp_path,
            "task=rprecision",
            f"input={tmp_path / 'in.npz'}",
            f"output={out}",
            "num_candidates=10",
            "top_r=[1,5]",
            "repeats=1",
            "seed=3",
            "rprecision.hard_negatives=true",
        )
    )
    report = json.loads(out.read_text())
    sets = draw_candidate_sets(torch.from_numpy(txt), torch.from_numpy(ids), num_candidates=10, seed=3)
    hits = _oracle_hits(img.astype(np.float64), txt.astype(np.float64), sets.distractor_ids.numpy() - 500)
    assert report["r_precision"] == pytest.approx(hits.mean(), abs=1e-12)
    for key in ("r_precision@5", "text_to_image_r_precision", "hard_r_precision", "clip_score", "r_precision_std"):
        assert key in report
    assert report["chance"] == pytest.approx(0.1) and report["num_samples"] == 60 and report["num_candidates"] == 10
    assert len(report["r_precision_curve"]) == 10
    assert report["settings"]["protocol"] == "folds" and report["settings"]["seed"] == 3
    assert report["evaluator"] == identity
    with np.load(out.parent / report["per_query_file"]) as pq:
        np.testing.assert_array_equal(pq["query_id"], ids)
        np.testing.assert_array_equal(pq["r_precision"], hits)


def test_pinned_sets_and_missing_arrays(tmp_path: Path):
    img, txt = _data(seed=1)
    np.savez(tmp_path / "in.npz", image_embeddings=img, text_embeddings=txt)
    sets = draw_candidate_sets(torch.from_numpy(txt), num_candidates=8, seed=9)
    save_candidate_sets(sets, tmp_path / "sets.npz")
    out = tmp_path / "r.json"
    tasks.rprecision.run(
        evaluate_config(
            tmp_path,
            "task=rprecision",
            f"input={tmp_path / 'in.npz'}",
            f"output={out}",
            "num_candidates=8",
            "top_r=[1]",
            f"rprecision.candidate_sets={tmp_path / 'sets.npz'}",
        )
    )
    hits = _oracle_hits(img.astype(np.float64), txt.astype(np.float64), sets.distractor_ids.numpy())
    with np.load(tmp_path / json.loads(out.read_text())["per_query_file"]) as pq:
        np.testing.assert_array_equal(pq["r_precision"], hits)
    np.savez(tmp_path / "bad.npz", image_embeddings=img)
    with pytest.raises(ValueError, match="text_embeddings"):
        tasks.rprecision.run(evaluate_config(tmp_path, "task=rprecision", f"input={tmp_path / 'bad.npz'}"))


@pytest.mark.slow
def test_command_line(tmp_path: Path):
    img, txt = _data(n=40, seed=2)
    np.savez(tmp_path / "in.npz", image_embeddings=img, text_embeddings=txt)
    out = tmp_path / "r.json"
    run_script(
        "evaluate.py",
        "task=rprecision",
        f"input={tmp_path / 'in.npz'}",
        f"output={out}",
        "num_candidates=20",
        "top_r=[1,5,10]",
        "repeats=10",
        "protocol=resample",
        "seed=0",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    report = json.loads(out.read_text())
    assert report["settings"]["protocol"] == "resample" and report["settings"]["repeats"] == 10
    # ten redraws of the seeded sets (repeat 0..9), each scored by the numpy oracle: the report holds the mean and
    # the spread (ddof 0) of the ten draws' R-precision, the per-sample file each sample's mean over the draws
    hits = np.stack(
        [
            _oracle_hits(
                img.astype(np.float64),
                txt.astype(np.float64),
                draw_candidate_sets(
                    torch.from_numpy(txt), num_candidates=20, seed=0, repeat=rep
                ).distractor_ids.numpy(),
            )
            for rep in range(10)
        ]
    )
    assert 0.1 < hits.mean() < 0.9 and hits.mean(axis=1).std() > 0  # the draws differ, the value is informative
    assert report["r_precision"] == pytest.approx(hits.mean(), abs=1e-12)
    assert report["r_precision_std"] == pytest.approx(hits.mean(axis=1).std(), abs=1e-12)
    with np.load(out.parent / report["per_query_file"]) as pq:
        np.testing.assert_array_equal(pq["query_id"], np.arange(40))
        np.testing.assert_allclose(pq["r_precision"], hits.mean(axis=0), rtol=0, atol=1e-15)
