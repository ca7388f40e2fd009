"""The evaluation folder over a run: a full disk during one evaluation loses nothing, the per-query files follow the
retention policy, the plots are redrawn at a bounded cost, and every evaluation logs what it cost."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl

from beyondlabels.callbacks import RetrievalEvalCallback  # noqa: E402
from beyondlabels.io import read_evaluation_run  # noqa: E402
from beyondlabels.io.run_files import read_history  # noqa: E402
from tests.callbacks.toy import LinearEncoder, PointDataModule
from tests.faults import disk_full


def _fit(tmp_path: Path, callback, max_epochs: int = 2, **kwargs) -> pl.Trainer:
    options = dict(
        default_root_dir=str(tmp_path),
        max_epochs=max_epochs,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    options.update(kwargs)
    trainer = pl.Trainer(**options)
    trainer.fit(LinearEncoder(), PointDataModule())
    return trainer


def _temporaries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*.tmp"))


class FullDiskAt(RetrievalEvalCallback):
    """The retrieval callback with every write under its folder failing (half the bytes, then ENOSPC) during the
    evaluation at ``fault_step``; what the folder holds right after that evaluation is kept in ``after_fault``."""

    def __init__(self, fault_step: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fault_step, self.after_fault, self.failed_files = fault_step, None, []

    def evaluate(self, trainer, pl_module, final=False, **how):
        if trainer.global_step != self.fault_step:
            return super().evaluate(trainer, pl_module, final, **how)
        folder = self.output_folder(trainer)
        with disk_full(folder) as failed:
            out = super().evaluate(trainer, pl_module, final, **how)
        self.failed_files = list(failed)
        self.after_fault = {
            "history": read_history(folder / "history.jsonl"),
            "schema": json.loads((folder / "schema.json").read_text()),
            "pngs": {p.name: p.read_bytes()[:4] for p in folder.glob("*.png")},
            "temporaries": _temporaries(folder),
            "per_query": sorted(p.name for p in (folder / "per_query").glob("*.npz")),
        }
        return out


def test_a_full_disk_during_one_evaluation_loses_nothing(tmp_path: Path, caplog):
    callback = FullDiskAt(
        fault_step=6, every_n_epochs=None, every_n_steps=2, save_per_query="all", plot_every_n=1, ks=(1, 3)
    )
    with caplog.at_level(logging.ERROR):
        _fit(tmp_path, callback)  # 16 steps: evaluations at 2, 4, ..., 16
    folder = tmp_path / "retrieval"
    steps = [2, 4, 6, 8, 10, 12, 14, 16]
    # training went on, and every evaluation, the faulty one included, is in memory and then on disk
    assert [h["step"] for h in callback.history] == steps and not any("error" in h for h in callback.history)
    assert len(callback.failed_files) >= 3, "the history, the per-query file and the plots all met the full disk"
    # right after the faulty evaluation: everything already on disk is whole, no temporary is left
    after = callback.after_fault
    assert [h["step"] for h in after["history"]] == [2, 4]
    assert after["schema"]["keys"]["precision@1"]["higher_is_better"] is True
    assert after["pngs"] and all(head == b"\x89PNG" for head in after["pngs"].values())
    assert after["temporaries"] == [] and after["per_query"] == ["step_000000002.npz", "step_000000004.npz"]
    assert "No space left on device" in caplog.text and "written again at the next evaluation" in caplog.text
    # the next evaluation wrote what had failed: the record of step 6 and its per-query file
    saved = read_history(folder / "history.jsonl")
    assert [h["step"] for h in saved] == steps and saved[2] == {k: v for k, v in callback.history[2].items()}
    run = read_evaluation_run(folder)
    assert run.per_query(6)["query_id"].tolist() == list(range(37))
    assert np.nanmean(run.per_query(6)["precision@1"]) == pytest.approx(callback.history[2]["precision@1"], abs=1e-12)
    assert _temporaries(folder) == []


def test_a_full_disk_in_strict_mode_raises(tmp_path: Path):
    callback = FullDiskAt(fault_step=4, every_n_epochs=None, every_n_steps=2, strict=True)
    with pytest.raises(OSError, match="No space left"):
        _fit(tmp_path, callback)
    assert [h["step"] for h in read_history(tmp_path / "retrieval" / "history.jsonl")] == [2]


def test_per_query_files_follow_the_retention_policy(tmp_path: Path):
    """25 evaluations with keep_every_n=10: the 1st, 11th and 21st, the best by the checkpoint's key and the latest
    keep their files; the others' files are removed, and reading one says why."""
    callback = RetrievalEvalCallback(
        every_n_epochs=None, every_n_steps=1, keep_every_n=10, ks=(1,), confidence_intervals=False
    )
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), monitor="retrieval/map@r", mode="max")
    options = dict(
        default_root_dir=str(tmp_path),
        max_steps=25,
        accelerator="cpu",
        devices=1,
        callbacks=[callback, checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    pl.Trainer(**options).fit(LinearEncoder(lr=0.2), PointDataModule(n_train=200))
    records = [h for h in callback.history if "error" not in h]
    assert [h["step"] for h in records] == list(range(1, 26))
    best = max(records, key=lambda h: (h["map@r"], -h["step"]))["step"]  # ties keep the earlier
    kept = {1, 11, 21, best, 25}
    files = sorted((tmp_path / "retrieval" / "per_query").iterdir())
    assert [p.name for p in files] == [f"step_{s:09d}.npz" for s in sorted(kept)]
    run = read_evaluation_run(tmp_path / "retrieval")
    assert run.steps_with_per_query() == sorted(kept)
    removed = next(s for s in range(2, 25) if s not in kept)
    with pytest.raises(FileNotFoundError, match="retention policy"):
        run.per_query(removed)
    assert run.per_query(best)["query_id"].tolist() == list(range(37))


def test_save_per_query_all_keeps_every_file_and_false_none(tmp_path: Path):
    every = RetrievalEvalCallback(every_n_epochs=None, every_n_steps=3, save_per_query="all", keep_every_n=10)
    _fit(tmp_path / "all", every)
    assert len(list((tmp_path / "all" / "retrieval" / "per_query").iterdir())) == len(every.history) == 6
    none = RetrievalEvalCallback(every_n_epochs=None, every_n_steps=3, save_per_query=False)
    _fit(tmp_path / "none", none)
    assert not (tmp_path / "none" / "retrieval" / "per_query").exists()
    assert all("per_query_file" not in h for h in none.history)
    with pytest.raises(ValueError, match="save_per_query"):
        RetrievalEvalCallback(save_per_query="some")
    with pytest.raises(ValueError, match="keep_best"):
        RetrievalEvalCallback(keep_best="num_queries")


def test_plots_are_redrawn_every_n_evaluations_and_at_fit_end_from_a_bounded_number_of_curves(
    tmp_path: Path, monkeypatch
):
    from beyondlabels.reporting import plots

    drawn = []
    real_curves, real_band = plots.save_curves_png, plots.save_history_band_png
    monkeypatch.setattr(
        plots,
        "save_curves_png",
        lambda curves, *a, **k: (drawn.append(("curve", len(curves))), real_curves(curves, *a, **k))[1],
    )
    monkeypatch.setattr(
        plots,
        "save_history_band_png",
        lambda history, *a, **k: (drawn.append(("band", len(history))), real_band(history, *a, **k))[1],
    )
    callback = RetrievalEvalCallback(
        every_n_epochs=None, every_n_steps=1, plot_every_n=4, ks=(1, 3), bootstrap_rounds=100
    )
    _fit(tmp_path, callback, max_epochs=2, max_steps=10)
    # 10 evaluations: drawn after the 4th and the 8th, and at fit end (the 10th was not yet drawn)
    curves = [n for kind, n in drawn if kind == "curve"]
    bands = [n for kind, n in drawn if kind == "band"]
    assert curves == [4, 8, 8] and bands == [4, 8, 10]  # at most 8 curves per plot; every evaluation in the band
    png = tmp_path / "retrieval" / "precision_curve.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and (tmp_path / "retrieval" / "confidence_intervals.png").is_file()


def test_every_evaluation_logs_its_wall_time(tmp_path: Path):
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1,))
    logger = pl.loggers.CSVLogger(str(tmp_path), name="csv", version="")
    trainer = _fit(tmp_path, callback, logger=logger)
    seconds = [h["eval_seconds"] for h in callback.history]
    assert len(seconds) == 2 and all(0 < s < 60 for s in seconds)
    assert set(callback.last_timings) >= {"forward", "compute", "intervals", "files", "media", "total"}
    assert (
        callback.last_timings["total"]
        == seconds[-1]
        >= callback.last_timings["forward"] + callback.last_timings["compute"]
    )
    rows = [r for r in csv.DictReader((tmp_path / "csv" / "metrics.csv").open()) if r.get("retrieval/eval_seconds")]
    assert [float(r["retrieval/eval_seconds"]) for r in rows] == pytest.approx(seconds)
    assert float(trainer.callback_metrics["retrieval/eval_seconds"]) == pytest.approx(seconds[-1], rel=1e-6)
    assert read_history(tmp_path / "retrieval" / "history.jsonl")[-1]["eval_seconds"] == seconds[-1]
    assert callback.schema.mode("eval_seconds") is None  # no direction: checkpoints cannot monitor it by mistake


def test_a_failed_first_evaluation_is_on_disk_at_once(tmp_path: Path):
    """The history file records a failure even when no evaluation of the fit has succeeded yet."""
    callback = RetrievalEvalCallback(every_n_epochs=1, evaluate_at_fit_end=False)
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(LinearEncoder(fail_on_call=1), PointDataModule())
    (saved,) = read_history(tmp_path / "retrieval" / "history.jsonl")
    assert saved["step"] == 8 and saved["error"] == "RuntimeError: encoder exploded" and callback.history == [saved]
