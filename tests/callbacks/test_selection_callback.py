"""Checkpoint selection inside Lightning: kept current after every evaluation of fit, logged in the evaluation's own row
at its logging step, written to selection.json with the numbers the kernel gives on the per-query files the callback
kept, ModelCheckpoint files matched to the set, a resumed run selecting what an unbroken one does, and failures that
never stop training. The statistics are tested in tests/functional/test_selection.py and test_regressions.py."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from beyondlabels.callbacks import RetrievalEvalCallback
from beyondlabels.callbacks.selection import CheckpointSelection
from beyondlabels.functional.selection import select_checkpoints
from beyondlabels.io import per_query_table, read_evaluation_run, read_selection
from tests.callbacks.toy import LinearEncoder, PointDataModule

SETTINGS = {"rounds": 200, "seed": 3}


def _evaluation(**kwargs) -> RetrievalEvalCallback:
    options = {
        "every_n_epochs": 1,
        "num_mismatches": 0,
        "confidence_intervals": False,
        "keep_every_n": 2,
        "keep_best": "precision@1",
        "selection": CheckpointSelection("precision@1", **SETTINGS),
        **kwargs,
    }
    return RetrievalEvalCallback(**options)


def _fit(root: Path, callbacks: list, max_epochs: int, ckpt_path: str | None = None, logger=False) -> pl.Trainer:
    trainer = pl.Trainer(
        default_root_dir=root,
        max_epochs=max_epochs,
        accelerator="cpu",
        callbacks=callbacks,
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
    )
    trainer.fit(LinearEncoder(lr=0.3), PointDataModule(n_eval=120), ckpt_path=ckpt_path)
    return trainer


def test_selection_is_logged_with_the_evaluation_and_written_from_the_kept_files(tmp_path: Path):
    evaluation = _evaluation()
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1)
    logger = CSVLogger(tmp_path)
    _fit(tmp_path, [evaluation, checkpoints], max_epochs=5, logger=logger)

    # the file: the kernel's numbers over the per-query files the callback kept (read back from disk)
    run = read_evaluation_run(tmp_path / "retrieval")
    table = per_query_table(run, "precision@1")
    assert table.steps == run.steps_with_per_query() and len(table.steps) >= 3
    expected = select_checkpoints(
        torch.as_tensor(table.values), table.steps, labels=torch.as_tensor(table.labels), **SETTINGS
    )
    written = json.loads((tmp_path / "retrieval" / "selection.json").read_text())
    assert {k: written[k] for k in expected} == json.loads(json.dumps(expected))
    assert written["monitor"] == "retrieval/precision@1" and expected["classes"]["label"] == [0, 1, 2, 3]

    # the logs: one row per evaluation holding its scalars and the selection's, at Lightning's logging step
    with open(Path(logger.log_dir) / "metrics.csv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r.get("retrieval/precision@1")]
    assert len(rows) == len(run.records) == 5
    last = rows[-1]
    assert all(r["selection/set_size"] for r in rows), "every evaluation's row holds the selection"
    assert float(last["selection/set_size"]) == len(expected["set_steps"])
    assert float(last["selection/best_step"]) == expected["best_step"]
    assert float(last["selection/best_estimate"]) == pytest.approx(expected["estimate"], rel=1e-6)
    assert float(last["selection/negative_flip_rate"]) == pytest.approx(expected["flips"]["negative_flip_rate"])
    assert [int(r["step"]) for r in rows] == [r["step"] - 1 for r in run.records]  # the logging step

    # the saved checkpoints, each with its step and whether that step is in the set (None: not considered)
    saved = read_selection(tmp_path / "retrieval").checkpoints
    assert sorted(Path(c["file"]).name for c in saved) == sorted(p.name for p in (tmp_path / "ckpt").glob("*.ckpt"))
    for c in saved:
        assert c["in_set"] == (c["step"] in expected["set_steps"] if c["step"] in expected["steps"] else None)


@pytest.mark.slow
def test_a_resumed_run_selects_what_an_unbroken_one_does(tmp_path: Path):
    whole = _evaluation(save_dir=tmp_path / "whole")
    _fit(tmp_path / "whole_root", [whole], max_epochs=4)
    first = _evaluation(save_dir=tmp_path / "resumed")
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1)
    _fit(tmp_path / "resumed_root", [first, checkpoint], max_epochs=2)
    state = torch.load(tmp_path / "ckpt" / "epoch=1-step=16.ckpt", weights_only=True)  # tensors and plain data
    assert any("selection" in s for s in state["callbacks"].values())
    resumed = _evaluation(save_dir=tmp_path / "resumed")
    _fit(tmp_path / "resumed_root", [resumed], max_epochs=4, ckpt_path=str(tmp_path / "ckpt" / "epoch=1-step=16.ckpt"))
    assert sorted(resumed.selection.columns) == sorted(whole.selection.columns)
    selections = [{k: v for k, v in c.selection.last.items() if k != "checkpoints"} for c in (resumed, whole)]
    assert selections[0] == selections[1]


def test_a_failing_selection_never_stops_training(tmp_path: Path, caplog, monkeypatch):
    evaluation = _evaluation()
    monkeypatch.setattr(evaluation.selection, "compute", lambda: 1 / 0)
    with caplog.at_level(logging.ERROR):
        _fit(tmp_path, [evaluation], max_epochs=2)
    assert "the checkpoint selection failed (ZeroDivisionError" in caplog.text
    assert len(evaluation.history) == 2
    strict = _evaluation(strict=True, save_dir=tmp_path / "strict")
    monkeypatch.setattr(strict.selection, "compute", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        _fit(tmp_path / "strict_root", [strict], max_epochs=1)


def test_the_selection_key_must_be_a_per_query_key_with_a_direction():
    with pytest.raises(ValueError, match="`selection` selects by 'num_queries'"):
        RetrievalEvalCallback(selection=CheckpointSelection("num_queries"))
    with pytest.raises(ValueError, match="`selection` must be a beyondlabels.callbacks.selection.CheckpointSelection"):
        RetrievalEvalCallback(selection="precision@1")
    with pytest.raises(ValueError, match="`size` must be a number in \\(0, 1\\)"):
        CheckpointSelection(size=0)


def test_the_retention_policy_keeps_the_latest_the_best_and_every_n_th():
    """The component's columns follow the files' rule (StepRetention): here every 3rd, the best and the latest."""
    selection = CheckpointSelection("p", rounds=50)
    selection.bind("max", 3, "x")
    means = [0.2, 0.9, 0.5, 0.4, 0.3, 0.6, 0.1]
    for step, mean in enumerate(means, start=1):
        selection.observe(step, {"query_id": [0, 1], "p": [mean, mean]})
    assert sorted(selection.columns) == [1, 2, 4, 7]  # 1st and 4th (every 3rd), 2 (best), 7 (latest)
    state = selection.state_dict()
    again = CheckpointSelection("p", rounds=50)
    again.bind("max", 3, "x")
    again.load_state_dict(state)
    for copy in (selection, again):
        copy.observe(8, {"query_id": [0, 1], "p": [0.0, 0.0]})
    assert sorted(again.columns) == sorted(selection.columns) == [1, 2, 4, 7, 8]  # 7 was the 7th: periodic
    again.load_state_dict({"steps": "broken"})  # a malformed state is ignored
    assert sorted(again.columns) == [1, 2, 4, 7, 8]


def test_the_selection_changes_neither_training_nor_the_evaluation(tmp_path: Path):
    """The same fit with and without the selection: the same weights at the end and the same evaluation records (the
    selection draws from its own generator and touches no global state)."""
    runs = {}
    for name, selection in (("with", CheckpointSelection("precision@1", rounds=100)), ("without", None)):
        evaluation = _evaluation(every_n_epochs=None, every_n_steps=3, selection=selection, save_dir=tmp_path / name)
        torch.manual_seed(0)
        model = LinearEncoder(lr=0.3)
        pl.Trainer(
            default_root_dir=tmp_path / name,
            max_epochs=3,
            accelerator="cpu",
            callbacks=[evaluation],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        ).fit(model, PointDataModule(n_eval=60))
        records = [{k: v for k, v in r.items() if k != "eval_seconds"} for r in evaluation.history]
        runs[name] = (model.proj.weight.detach().clone(), records, torch.rand(3))
    assert torch.equal(runs["with"][0], runs["without"][0])
    assert runs["with"][1] == runs["without"][1] and len(runs["with"][1]) == 8
    assert torch.equal(runs["with"][2], runs["without"][2])  # the global generator is where it would have been
