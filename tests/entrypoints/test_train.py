"""train.py end to end in subprocesses: fast_dev_run, a short run read back from its offline W&B log, a multirun."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

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
    assert 0.0 <= run.summary["retrieval/precision@1"] <= 1.0
    assert run.summary["retrieval/num_queries"] == 16 * 4  # smoke: 4 validation pictures of each of 16 classes
    # the CSV log holds the same final retrieval number
    output_dir = wandb_file.parents[2]
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
        assert [h["step"] for h in history] == [4] and 0.0 <= history[0]["precision@1"] <= 1.0


def test_optuna_sweep_optimises_the_returned_objective(tmp_path: Path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    run_script(
        "train.py", "hparams_search=shapes_optuna", "experiment=shapes_smoke", "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.n_startup_trials=2", "logger=csv", "trainer.max_epochs=1", f"paths.log_dir={tmp_path}",
    )
    import yaml

    (results,) = tmp_path.glob("train/multiruns/*/optimization_results.yaml")
    best = yaml.safe_load(results.read_text())
    assert 0.0 <= best["best_value"] <= 1.0 and set(best["best_params"]) >= {"model.lr", "model.conv_width"}
    # the best value is the retrieval/precision@1 that one of the trials logged
    logged = set()
    for metrics_csv in tmp_path.glob("train/multiruns/*/*/csv/metrics.csv"):
        rows = list(csv.DictReader(metrics_csv.open()))
        logged.update(float(r["retrieval/precision@1"]) for r in rows if r.get("retrieval/precision@1"))
    assert any(abs(best["best_value"] - v) < 1e-6 for v in logged)
