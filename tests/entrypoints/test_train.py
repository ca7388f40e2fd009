"""train.py end to end in subprocesses: fast_dev_run, a short run read back from its offline W&B log, a multirun."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from helpers import run_script  # noqa: E402

from beyondlabels.io import find_offline_runs, read_offline_run
from beyondlabels.io.run_files import read_history

pytestmark = pytest.mark.slow


def test_fast_dev_run(tmp_path: Path):
    result = run_script("train.py", "debug=fdr", f"paths.log_dir={tmp_path}")
    assert "final validation metrics" in result.stdout
    assert not find_offline_runs(tmp_path), "fast_dev_run logs nothing"


def test_short_run_logs_offline_wandb_and_csv(tmp_path: Path):
    result = run_script("train.py", "experiment=shapes_smoke", f"paths.log_dir={tmp_path}", "seed=3")
    (wandb_file,) = find_offline_runs(tmp_path)
    run = read_offline_run(wandb_file)
    keys = set(run.keys())
    expected = {"train/loss", "val/loss", "retrieval/precision@1", "retrieval/precision@5", "retrieval/r_precision", "retrieval/map@r", "retrieval/num_queries"}
    expected |= {"zeroshot/top1", "zeroshot/top5", "zeroshot/balanced_accuracy", "crossmodal/image_to_text_recall@1", "crossmodal/text_to_image_recall@1"}
    assert expected <= keys, sorted(expected - keys)
    assert "val/zeroshot_acc" not in keys, "zero-shot accuracy moved from the module to ZeroShotEvalCallback"
    assert run.summary["crossmodal/num_texts"] == 16 * 4 and run.summary["zeroshot/num_classes"] == 16
    assert run.config["seed"] == 3 and run.config["optimized_metric"] == "retrieval/precision@1"
    assert run.summary["retrieval/num_queries"] == 16 * 4  # smoke: 4 validation pictures of each of 16 classes
    output_dir = wandb_file.parents[2]
    # the logged numbers are the means of the last evaluation's per-query file, whose hits follow from each query's
    # first relevant rank
    history = read_history(output_dir / "retrieval" / "history.jsonl")
    with np.load(output_dir / "retrieval" / history[-1]["per_query_file"]) as pq:
        assert pq["query_id"].shape == (64,)
        for k in (1, 5, 10):
            np.testing.assert_array_equal(pq[f"hit@{k}"], (pq["first_relevant_rank"] <= k).astype(float))
        np.testing.assert_array_equal(pq["precision@1"], pq["hit@1"])
        for key in ("precision@1", "precision@5", "r_precision", "map@r"):
            assert run.summary[f"retrieval/{key}"] == pytest.approx(np.mean(pq[key]), rel=1e-12, abs=1e-15), key
    # the CSV log holds the same final retrieval number
    rows = list(csv.DictReader((output_dir / "csv" / "metrics.csv").open()))
    csv_values = [float(r["retrieval/precision@1"]) for r in rows if r.get("retrieval/precision@1")]
    assert csv_values[-1] == pytest.approx(run.summary["retrieval/precision@1"], abs=1e-6)
    # last.ckpt is the final state (resumable), whatever the best checkpoint was
    import torch

    last = torch.load(output_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["epoch"] == 1 and last["global_step"] == 2 * (16 * 8 // 32)  # 2 epochs of 4 batches
    assert str(output_dir) in result.stdout and "retrieval/precision@1" in result.stdout


def test_multirun_makes_one_wandb_run_per_job(tmp_path: Path):
    # One epoch while validation runs every 2: no validation at all, so only the evaluation at the end of fit gives
    # each job its numbers (and the value train.py returns to the sweeper).
    run_script(
        "train.py", "-m", "seed=1,2", "experiment=shapes_smoke", "trainer.max_epochs=1", "trainer.check_val_every_n_epoch=2",
        "logger=wandb", f"paths.log_dir={tmp_path}",
    )
    runs = [read_offline_run(p) for p in find_offline_runs(tmp_path)]
    assert len(runs) == 2
    assert len({r.run_id for r in runs}) == 2
    assert sorted(r.config["seed"] for r in runs) == [1, 2]
    for run in runs:
        assert "retrieval/precision@1" in run.summary and run.exit_code == 0
    # each job has its own folder (sweep dir / job number), with the evaluation's own files
    assert {p.parents[2].name for p in find_offline_runs(tmp_path)} == {"0", "1"}
    for job in (p.parents[2] for p in find_offline_runs(tmp_path)):
        history = read_history(job / "retrieval" / "history.jsonl")
        assert [h["step"] for h in history] == [4]
        with np.load(job / "retrieval" / history[0]["per_query_file"]) as pq:
            np.testing.assert_array_equal(pq["precision@1"], (pq["first_relevant_rank"] == 1).astype(float))
            assert history[0]["precision@1"] == pytest.approx(np.mean(pq["precision@1"]), rel=1e-12, abs=1e-15)
    # each job's W&B summary holds its own evaluation's value
    by_seed = {r.config["seed"]: r.summary["retrieval/precision@1"] for r in runs}
    by_job = {}
    for job in (p.parents[2] for p in find_offline_runs(tmp_path)):
        seed = int(yaml.safe_load((job / ".hydra" / "config.yaml").read_text())["seed"])
        by_job[seed] = read_history(job / "retrieval" / "history.jsonl")[0]["precision@1"]
    assert by_seed.keys() == by_job.keys() == {1, 2}
    for seed in (1, 2):
        assert by_seed[seed] == pytest.approx(by_job[seed], rel=1e-12, abs=1e-15), seed


def test_optuna_sweep_optimises_the_returned_objective(tmp_path: Path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    run_script(
        "train.py", "hparams_search=shapes_optuna", "experiment=shapes_smoke", "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.n_startup_trials=2", "logger=csv", "trainer.max_epochs=1", f"paths.log_dir={tmp_path}",
    )
    (results,) = tmp_path.glob("train/multiruns/*/optimization_results.yaml")
    best = yaml.safe_load(results.read_text())
    assert set(best["best_params"]) >= {"model.lr", "model.conv_width"}
    # the best value is the largest of the trials' final retrieval/precision@1 (direction: maximize), and the best
    # parameters are that trial's
    trials = []
    for job in sorted(p.parent for p in tmp_path.glob("train/multiruns/*/*/retrieval")):
        final = read_history(job / "retrieval" / "history.jsonl")[-1]["precision@1"]
        overrides = dict(o.split("=", 1) for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()))
        trials.append((final, overrides))
    assert len(trials) == 2
    final, overrides = max(trials, key=lambda trial: trial[0])
    assert best["best_value"] == pytest.approx(final, abs=1e-12)
    for name in ("model.lr", "model.conv_width"):
        assert float(best["best_params"][name]) == pytest.approx(float(overrides[name]), rel=1e-12), name
