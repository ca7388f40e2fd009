"""train.py end to end in subprocesses: fast_dev_run, a short run read back from its offline W&B log, a multirun."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from beyondlabels.io import find_offline_runs, read_offline_run
from beyondlabels.io.run_files import read_history
from tests.entrypoints.helpers import run_script

pytestmark = pytest.mark.slow


def test_fast_dev_run(tmp_path: Path):
    result = run_script("train.py", "debug=fdr", f"paths.log_dir={tmp_path}")
    assert "run summary" in result.stdout and "retrieval/  1 evaluation, step 1" in result.stdout
    assert not find_offline_runs(tmp_path), "fast_dev_run logs nothing"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One smoke run (its log folder and what it printed), shared by the tests that read it back."""
    root = tmp_path_factory.mktemp("smoke")
    result = run_script("train.py", "experiment=shapes_smoke", f"paths.log_dir={root}", "seed=3")
    return root, result.stdout


def test_short_run_logs_offline_wandb_and_csv(smoke: tuple[Path, str]):
    tmp_path, stdout = smoke
    (wandb_file,) = find_offline_runs(tmp_path)
    run = read_offline_run(wandb_file)
    keys = set(run.keys())
    expected = {
        "train/loss",
        "val/loss",
        "retrieval/precision@1",
        "retrieval/precision@5",
        "retrieval/r_precision",
        "retrieval/map@r",
        "retrieval/num_queries",
    }
    expected |= {
        "zeroshot/top1",
        "zeroshot/top5",
        "zeroshot/balanced_accuracy",
        "crossmodal/image_to_text_recall@1",
        "crossmodal/text_to_image_recall@1",
    }
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
    assert str(output_dir) in stdout and "retrieval/  2 evaluations" in stdout


# What the issue names as each family's headline, in order.
HEADLINES = {
    "retrieval": ["precision@1", "r_precision", "map@r", "ndcg@10"],
    "crossmodal": [f"{way}_recall@{k}" for way in ("image_to_text", "text_to_image") for k in (1, 5)],
    "zeroshot": ["top1", "balanced_accuracy"],
    "hierarchy": ["hP", "hR", "hF"],
}
SUMMARY_ROW = re.compile(
    r"^  (?P<key>\S+) ↑ +(?P<last>\d\.\d{4})(?:  \[(?P<low>\d\.\d{4}), (?P<high>\d\.\d{4})\])? +"
    r"(?P<best>\d\.\d{4}) \((?P<step>\d+)\) +(?P<change>[+-]\d\.\d{4})$"
)


def test_the_run_ends_with_its_summary_read_against_the_history(smoke: tuple[Path, str]):
    """The end of stdout, read as a person reads it: per family the headline keys with the last value and interval,
    the best value and its step and the change since the first evaluation, each checked against history.jsonl
    (parsed here with json); at most 30 lines, table lines within 80 columns, no colour codes in a pipe; then the
    paths, with the exact wandb sync command."""
    tmp_path, stdout = smoke
    (wandb_file,) = find_offline_runs(tmp_path)
    run = wandb_file.parents[2]
    assert "\x1b[" not in stdout, "no colour codes when stdout is not a terminal"
    lines = stdout.rstrip("\n").splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("run summary"))
    summary = lines[start:]
    assert len(summary) <= 30, "\n".join(summary)
    table, paths = summary[: summary.index("")], summary[summary.index("") + 1 :]
    assert max(len(line) for line in table) <= 80, "\n".join(table)
    shown: dict[str, list[str]] = {}
    family, selection_text = None, []
    for line in table[1:]:
        if heading := re.match(r"^(\w+)/  (\d+) evaluations", line):
            family = heading.group(1)
            shown[family] = []
            records = [json.loads(x) for x in (run / family / "history.jsonl").read_text().splitlines() if x.strip()]
            records = [r for r in records if "error" not in r]
            assert int(heading.group(2)) == len(records) == 2
            continue
        row = SUMMARY_ROW.match(line)
        if row is None:
            audit = r"^  \d+ suspected label errors, \d+ outliers, \d+ cross-label duplicates$"
            assert family == "retrieval", line
            if not re.match(audit, line):  # the checkpoint selection's lines, wrapped within 80 columns
                selection_text.append(line.strip())
            continue
        key = row.group("key")
        shown[family].append(key)
        last, first = records[-1], records[0]
        assert row.group("last") == f"{last[key]:.4f}", (family, key)
        if f"{key}_ci_low" in last:
            bounds = (f"{last[f'{key}_ci_low']:.4f}", f"{last[f'{key}_ci_high']:.4f}")
            assert (row.group("low"), row.group("high")) == bounds, (family, key)
        else:
            assert row.group("low") is None
        values = [r[key] for r in records]
        best = values.index(max(values))  # higher is better for every headline key; ties: the earliest
        assert (row.group("best"), int(row.group("step"))) == (f"{values[best]:.4f}", records[best]["step"]), key
        assert row.group("change") == f"{last[key] - first[key]:+.4f}", (family, key)
    assert shown == HEADLINES
    # the demo's retrieval callback selects by precision@1: the set and the best value of selection.json, whose best
    # is the best precision@1 of the history (every evaluation is kept in a run of two)
    selection = json.loads((run / "retrieval" / "selection.json").read_text())
    text = " ".join(selection_text)
    history = (run / "retrieval" / "history.jsonl").read_text().splitlines()
    best = max(r["precision@1"] for r in map(json.loads, filter(str.strip, history)) if "error" not in r)
    assert selection["best_value"] == pytest.approx(best, abs=1e-12)
    steps = ", ".join(str(s) for s in selection["set_steps"])
    assert text.startswith(f"steps as good as the best (90%): {steps}; best precision@1 {best:.3f}, corrected"), text
    for name, keys in HEADLINES.items():  # what the summary shows is what the family declared in schema.json
        assert json.loads((run / name / "schema.json").read_text())["headline"] == keys
    where = dict(line.split(": ", 1) for line in paths)
    assert {k: v.strip() for k, v in where.items()} == {
        "run folder": str(run),
        "every key": str(run / "metrics.md"),
        "HTML report": str(run / "report.html"),
        "CSV log": str(run / "csv" / "metrics.csv"),
        "checkpoints": str(run / "checkpoints"),
        "W&B offline": f"wandb sync {wandb_file.parent}",
    }
    # the full table: every scalar of every family, with the other logged values
    full = (run / "metrics.md").read_text()
    for name in HEADLINES:
        keys = json.loads((run / name / "schema.json").read_text())["keys"]
        for key, spec in keys.items():
            if spec["kind"] == "scalar" and not key.endswith(("_ci_low", "_ci_high")):
                assert re.search(rf"^\| (\*\*)?{re.escape(key)}(\*\*)? \|", full, re.MULTILINE), (name, key)
    assert "| val/loss |" in full


def test_multirun_makes_one_wandb_run_per_job(tmp_path: Path):
    # One epoch while validation runs every 2: no validation at all, so only the evaluation at the end of fit gives
    # each job its numbers (and the value train.py returns to the sweeper).
    run_script(
        "train.py",
        "-m",
        "seed=1,2",
        "experiment=shapes_smoke",
        "trainer.max_epochs=1",
        "trainer.check_val_every_n_epoch=2",
        "logger=wandb",
        f"paths.log_dir={tmp_path}",
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
        "train.py",
        "hparams_search=shapes_optuna",
        "experiment=shapes_smoke",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.sampler.n_startup_trials=2",
        "logger=csv",
        "trainer.max_epochs=1",
        f"paths.log_dir={tmp_path}",
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
