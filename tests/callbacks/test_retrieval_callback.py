"""RetrievalEvalCallback inside real Trainer runs: values, schedule, failures, resume, W&B media."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger, WandbLogger

from beyondlabels.callbacks import RetrievalEvalCallback
from beyondlabels.io import read_offline_run
from beyondlabels.io.run_files import read_history
from tests.callbacks.toy import (
    LinearEncoder,
    PointDataModule,
    brute_force_precision_at_1_and_r_precision,
)


def _trainer(tmp_path: Path, callbacks: list, max_epochs: int = 2, logger=False, **kwargs) -> pl.Trainer:
    return pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=max_epochs,
        accelerator="cpu",
        devices=1,
        callbacks=callbacks,
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        **kwargs,
    )


def _final_embeddings(model: LinearEncoder, dm: PointDataModule) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        emb = model.proj(torch.from_numpy(dm.eval_set.points)).numpy()
    return emb, dm.eval_set.labels


def test_logged_values_match_a_brute_force_oracle_on_the_final_model(tmp_path: Path):
    dm, model = PointDataModule(), LinearEncoder()
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1, 5), num_mismatches=0)
    trainer = _trainer(tmp_path, [callback], max_epochs=3, logger=CSVLogger(tmp_path), num_sanity_val_steps=2)
    trainer.fit(model, dm)
    assert [h["epoch"] for h in callback.history] == [0, 1, 2], "one evaluation per epoch, none for the sanity check"
    p1, rp = brute_force_precision_at_1_and_r_precision(*_final_embeddings(model, dm))
    last = callback.history[-1]
    assert last["precision@1"] == pytest.approx(p1, abs=1e-9)
    assert last["r_precision"] == pytest.approx(rp, abs=1e-9)
    assert last["num_queries"] == 37 and last["num_lone_queries"] == 0
    assert float(trainer.callback_metrics["retrieval/precision@1"]) == pytest.approx(p1, abs=1e-6)
    csv_text = (Path(trainer.logger.log_dir) / "metrics.csv").read_text()
    assert "retrieval/precision@1" in csv_text and "retrieval/map@r" in csv_text
    # on-disk fallback: the history and one precision@k curve per evaluation
    saved = read_history(tmp_path / "retrieval" / "history.jsonl")
    assert [h["precision@1"] for h in saved] == [h["precision@1"] for h in callback.history]
    assert saved[-1]["precision_curve"][0] == pytest.approx(p1) and len(saved[-1]["precision_curve"]) == 5
    assert (tmp_path / "retrieval" / "precision_curve.png").read_bytes()[:4] == b"\x89PNG"
    # per-query values of every evaluation, at the step of the evaluation
    assert [h["per_query_file"] for h in saved] == [f"per_query/step_{h['step']:09d}.npz" for h in saved]
    with np.load(tmp_path / "retrieval" / saved[-1]["per_query_file"]) as per_query:
        assert per_query["query_id"].tolist() == list(range(37))
        assert float(np.nanmean(per_query["precision@1"])) == pytest.approx(p1, abs=1e-12)
    schema = json.loads((tmp_path / "retrieval" / "schema.json").read_text())
    assert schema["keys"]["mean_first_relevant_rank"]["higher_is_better"] is False


def test_shallow_mode_logs_every_key_but_the_depth_r_ones(tmp_path: Path):
    dm, model = PointDataModule(), LinearEncoder()
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1, 5), num_mismatches=0, deep_metrics=False)
    trainer = _trainer(tmp_path, [callback], max_epochs=1, logger=CSVLogger(tmp_path))
    trainer.fit(model, dm)
    p1, _ = brute_force_precision_at_1_and_r_precision(*_final_embeddings(model, dm))
    last = callback.history[-1]
    assert last["precision@1"] == pytest.approx(p1, abs=1e-9) and last["num_queries"] == 37
    deep_words = ("r_precision", "map@r", "first_relevant_rank")
    assert not [k for k in last if any(w in k for w in deep_words)]
    assert not [k for k in callback.schema if any(w in k for w in deep_words)]
    assert "precision@1_ci_low" in callback.schema  # the intervals of the other keys are still there
    header = (Path(trainer.logger.log_dir) / "metrics.csv").read_text().splitlines()[0]
    assert "retrieval/precision@5" in header and not any(w in header for w in deep_words)
    with np.load(tmp_path / "retrieval" / last["per_query_file"]) as per_query:
        assert "first_relevant_rank" not in per_query and "precision@5" in per_query


def test_every_n_steps_schedule(tmp_path: Path):
    callback = RetrievalEvalCallback(every_n_epochs=None, every_n_steps=3, num_mismatches=0, evaluate_at_fit_end=False)
    _trainer(tmp_path, [callback], max_epochs=2).fit(LinearEncoder(), PointDataModule())  # 8 steps per epoch
    assert [h["step"] for h in callback.history] == [3, 6, 9, 12, 15]


def test_step_evaluations_reach_the_logger_at_their_step_despite_log_every_n_steps(tmp_path: Path):
    """Lightning throttles on_step logging to log_every_n_steps (default 50): every evaluation must still reach every
    logger, at Lightning's logging step of the batch it follows (one less than the step of history.jsonl and the
    per-query files, ``trainer.global_step``, as Lightning logs a batch's metrics at the step before its update)."""
    callback = RetrievalEvalCallback(every_n_epochs=None, every_n_steps=5, num_mismatches=0, save_per_query="all")
    logger = CSVLogger(tmp_path, name="csv", version="")
    trainer = _trainer(tmp_path, [callback], max_epochs=3, logger=logger)  # 24 steps, log_every_n_steps=50
    trainer.fit(LinearEncoder(), PointDataModule())
    steps = [h["step"] for h in callback.history]
    assert steps == [5, 10, 15, 20, 24], "every 5 steps, plus one at the end of fit (step 24)"
    rows = list(csv.DictReader((Path(logger.log_dir) / "metrics.csv").open()))
    logged = [
        (int(r["step"]), int(r["epoch"]), float(r["retrieval/precision@1"]))
        for r in rows
        if r.get("retrieval/precision@1")
    ]
    assert logged == [(h["step"] - 1, h["epoch"], pytest.approx(h["precision@1"], abs=1e-12)) for h in callback.history]
    saved = read_history(tmp_path / "retrieval" / "history.jsonl")
    assert [h["step"] for h in saved] == steps
    assert sorted(p.name for p in (tmp_path / "retrieval" / "per_query").iterdir()) == [
        f"step_{s:09d}.npz" for s in steps
    ]


def test_a_final_evaluation_runs_when_fit_ends_between_evaluations(tmp_path: Path):
    """check_val_every_n_epoch=2 with max_epochs=1 runs no validation at all: the run must still end with numbers."""
    callback = RetrievalEvalCallback(every_n_epochs=1, num_mismatches=0)
    trainer = _trainer(tmp_path, [callback], max_epochs=1, check_val_every_n_epoch=2)
    trainer.fit(LinearEncoder(), PointDataModule())
    assert [h["step"] for h in callback.history] == [8]
    assert "retrieval/precision@1" in trainer.callback_metrics
    off = RetrievalEvalCallback(every_n_epochs=1, num_mismatches=0, evaluate_at_fit_end=False)
    _trainer(tmp_path / "off", [off], max_epochs=1, check_val_every_n_epoch=2).fit(LinearEncoder(), PointDataModule())
    assert off.history == []


def test_no_final_evaluation_when_the_last_step_was_evaluated(tmp_path: Path):
    callback = RetrievalEvalCallback(every_n_epochs=1, num_mismatches=0)
    _trainer(tmp_path, [callback], max_epochs=2).fit(LinearEncoder(), PointDataModule())
    assert [h["step"] for h in callback.history] == [8, 16]


class NoValidation(pl.LightningModule):
    """A module with no validation_step: Lightning runs no validation loop for it."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = LinearEncoder()

    def encode_image(self, x):
        return self.inner.encode_image(x)

    def training_step(self, batch, batch_idx):
        return self.inner.proj(batch["image"]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_epoch_mode_without_a_validation_loop_evaluates_at_train_epoch_end(tmp_path: Path, caplog):
    callback = RetrievalEvalCallback(every_n_epochs=1, num_mismatches=0)
    with caplog.at_level("INFO"):
        _trainer(tmp_path, [callback], max_epochs=2).fit(NoValidation(), PointDataModule())
    assert [(h["epoch"], h["step"]) for h in callback.history] == [(0, 8), (1, 16)]
    assert "has no validation loop" in caplog.text


def test_a_failing_evaluation_is_logged_and_training_continues(tmp_path: Path, caplog):
    model = LinearEncoder(fail_on_call=1)  # first encode call of the first evaluation raises
    callback = RetrievalEvalCallback(every_n_epochs=1, num_mismatches=0)
    trainer = _trainer(tmp_path, [callback], max_epochs=2)
    trainer.fit(model, PointDataModule())
    assert trainer.current_epoch == 2, "training ran to the end"
    assert "error" in callback.history[0] and "encoder exploded" in callback.history[0]["error"]
    assert "precision@1" in callback.history[1]
    assert "failed and was skipped" in caplog.text


def test_strict_mode_raises(tmp_path: Path):
    callback = RetrievalEvalCallback(every_n_epochs=1, strict=True, num_mismatches=0)
    with pytest.raises(RuntimeError, match="encoder exploded"):
        _trainer(tmp_path, [callback]).fit(LinearEncoder(fail_on_call=1), PointDataModule())


def test_resume_from_checkpoint_continues_the_same_history(tmp_path: Path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    first = RetrievalEvalCallback(every_n_epochs=1, num_mismatches=0)
    _trainer(tmp_path, [first, checkpoint], max_epochs=2).fit(LinearEncoder(), PointDataModule())
    assert [h["epoch"] for h in first.history] == [0, 1]

    resumed = RetrievalEvalCallback(every_n_epochs=1, num_mismatches=0)
    trainer = _trainer(tmp_path, [resumed, ModelCheckpoint(dirpath=tmp_path / "ckpt2")], max_epochs=4)
    trainer.fit(LinearEncoder(), PointDataModule(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert [h["epoch"] for h in resumed.history] == [0, 1, 2, 3]
    assert resumed.history[:2] == first.history


def test_resuming_a_finished_run_evaluates_nothing_new(tmp_path: Path):
    """A run resumed after it ended evaluates nothing new: the last evaluated step is part of the state."""
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    first = RetrievalEvalCallback(every_n_epochs=2, num_mismatches=0)
    _trainer(tmp_path, [first, checkpoint], max_epochs=3).fit(LinearEncoder(), PointDataModule())
    assert [h["step"] for h in first.history] == [16, 24]  # epoch 1, then the end of fit
    # Resuming the finished run trains nothing and so evaluates nothing: the restored history is the checkpoint's
    # (last.ckpt was written at the end of epoch 3, before the final evaluation).
    resumed = RetrievalEvalCallback(every_n_epochs=2, num_mismatches=0)
    _trainer(tmp_path, [resumed, ModelCheckpoint(dirpath=tmp_path / "ckpt2")], max_epochs=3).fit(
        LinearEncoder(), PointDataModule(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt")
    )
    assert resumed.history == first.history[:1]


def test_schedule_defaults_to_every_validation_epoch_and_every_n_steps_alone_switches_to_steps():
    assert (RetrievalEvalCallback().every_n_epochs, RetrievalEvalCallback().every_n_steps) == (1, None)
    assert (
        RetrievalEvalCallback(every_n_steps=7).every_n_epochs,
        RetrievalEvalCallback(every_n_steps=7).every_n_steps,
    ) == (None, 7)


def test_load_state_dict_ignores_garbage():
    callback = RetrievalEvalCallback()
    callback.load_state_dict({"history": "not a list", "last_step_evaluated": "x"})
    assert callback.history == [] and callback.state_dict()["last_step_evaluated"] == -1


def test_state_key_distinguishes_instances():
    a = RetrievalEvalCallback(prefix="retrieval")
    b = RetrievalEvalCallback(prefix="retrieval_text", encode_method="encode_text")
    assert a.state_key != b.state_key


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"every_n_epochs": 1, "every_n_steps": 5}, "at most one of every_n_epochs and every_n_steps"),
        ({"every_n_epochs": 0}, "every_n_epochs"),
        ({"limit_batches": -1}, "limit_batches"),
        ({"num_mismatches": -1}, "num_mismatches"),
        ({"prefix": "retrieval/"}, "prefix"),
        ({"ks": (0,)}, "k"),
        ({"prog_bar": ["precision@3"]}, "prog_bar"),
        ({"prog_bar": "precision@1"}, "prog_bar"),
        ({"save_dir": True}, "save_dir"),
        ({"encode_method": ""}, "encode_method"),
        ({"precision": "fp64"}, "precision"),
        ({"deep_metrics": "no"}, "deep_metrics"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RetrievalEvalCallback(**kwargs)


def test_missing_encode_method_is_reported_at_setup(tmp_path: Path):
    callback = RetrievalEvalCallback(encode_method="embed")
    with pytest.raises(AttributeError, match="encode_method"):
        _trainer(tmp_path, [callback]).fit(LinearEncoder(), PointDataModule())


@pytest.mark.slow
def test_wandb_media_and_scalars_reach_the_offline_run(tmp_path: Path):
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="beyondlabels-test")
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1, 5), num_mismatches=4)
    try:
        _trainer(tmp_path, [callback], max_epochs=2, logger=logger, log_every_n_steps=1).fit(
            LinearEncoder(), PointDataModule()
        )
    finally:
        import wandb

        wandb.finish()
    run = read_offline_run(tmp_path)
    keys = set(run.keys())
    assert {"retrieval/precision@1", "retrieval/r_precision", "retrieval/map@r", "retrieval/precision@5"} <= keys
    # a custom chart is stored as its data table, "<key>_table"
    assert {"retrieval/precision_curve_table", "retrieval/worst_mismatches"} <= keys
    curve = run.summary["retrieval/precision_curve_table"]
    assert curve["_type"] == "table-file" and curve["nrows"] == 5  # k = 1..5
    assert run.summary["retrieval/precision@1"] == pytest.approx(callback.history[-1]["precision@1"], abs=1e-6)
    table = run.summary["retrieval/worst_mismatches"]
    assert table["_type"] == "table-file" and table["nrows"] <= 4
