"""Everyday Trainer settings, under each Lightning package: the evaluation follows what the user told Lightning.

Each case runs with the package's own Trainer, LightningModule and DataModule (``package_toy``): several validation
loaders, every ``precision=``, ``torch.compile``, keys through Lightning's logging (one CSV row per validation, a
user's key of the same name said), ``fast_dev_run``, ``limit_val_batches``, ``validate()`` / ``test()``, a cadence
that never meets the validation schedule, a datamodule without ``val_dataloader``, and ``metric.scalars`` for
``self.log_dict``. The reference numbers come from a brute-force search on the model's own embeddings (``toy``)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from tests.callbacks.package_toy import (
    PairDataset,
    all_callbacks,
    callbacks_module,
    toy_classes,
)
from tests.callbacks.toy import brute_force_precision_at_1_and_r_precision

pytest.importorskip("lightning", reason="the `lightning` package is part of the test extras")

PACKAGES = ["lightning.pytorch", "pytorch_lightning"]
FAST = dict(ks=(1,), num_mismatches=0, confidence_intervals=False, strict=True)


def _trainer(package: str, tmp_path: Path, callbacks: list, **kwargs):
    pl = __import__(package, fromlist=["Trainer"])
    options = dict(
        default_root_dir=str(tmp_path),
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
    )
    options.update(kwargs)
    return pl.Trainer(**options)


def _retrieval(package: str, **options):
    return callbacks_module(package).RetrievalEvalCallback(**{**FAST, **options})


def _csv_logger(package: str, tmp_path: Path):
    loggers = __import__(f"{package}.loggers", fromlist=["CSVLogger"])
    return loggers.CSVLogger(str(tmp_path), name="csv", version="")


def _rows(logger) -> list[dict]:
    return list(csv.DictReader((Path(logger.log_dir) / "metrics.csv").open()))


def _oracle_precision_at_1(model, dataset: PairDataset, dtype: torch.dtype = torch.float32) -> float:
    """Leave-one-out P@1 by brute force on the embeddings of ``model`` (in ``dtype``) of every item of ``dataset``."""
    with torch.no_grad():
        points = torch.from_numpy(dataset.points).to(dtype)
        emb = model.image_proj.to(dtype)(points).double().numpy()
    return brute_force_precision_at_1_and_r_precision(emb, dataset.labels)[0]


# ---- several validation loaders --------------------------------------------------------------------------------------
def _two_loaders(package: str, named: bool = False):
    """A module validating several loaders and a datamodule giving two: the 24 items of ``eval_set`` and 16 others
    (a list, or a dict ``{"a": ..., "b": ...}``)."""
    DualEncoder, _, PairData = toy_classes(package)

    class TwoLoaders(PairData):
        def val_dataloader(self):
            loaders = [DataLoader(self.eval_set, batch_size=8), DataLoader(PairDataset(16, 3), batch_size=8)]
            return dict(zip("ab", loaders)) if named else loaders

    class PerLoader(DualEncoder):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            pass

    return PerLoader, TwoLoaders


@pytest.mark.parametrize("package", PACKAGES)
def test_two_validation_loaders_evaluate_the_first_one_and_say_so(package: str, tmp_path: Path, caplog):
    PerLoader, TwoLoaders = _two_loaders(package)
    stopping = __import__(f"{package}.callbacks", fromlist=["EarlyStopping"]).EarlyStopping(
        monitor="retrieval/precision@1", mode="max", patience=10
    )
    first, second = _retrieval(package), _retrieval(package, prefix="second", dataloader_idx=1)
    model, data = PerLoader(), TwoLoaders()
    with caplog.at_level(logging.INFO, logger="beyondlabels"):
        _trainer(package, tmp_path, [first, second, stopping]).fit(model, datamodule=data)
    assert [h["num_queries"] for h in first.history] == [24, 24]  # the first loader: the 24 items of eval_set
    assert [h["num_queries"] for h in second.history] == [16, 16]
    assert first.history[-1]["precision@1"] == pytest.approx(_oracle_precision_at_1(model, data.eval_set))
    assert float(stopping.best_score) == pytest.approx(max(h["precision@1"] for h in first.history))
    said = [r.getMessage() for r in caplog.records if "2 loaders" in r.getMessage()]
    assert len(said) == 2 and "dataloader_idx=0" in said[0] and "dataloader_idx=1" in said[1], said


@pytest.mark.parametrize("package", PACKAGES)
def test_a_loader_index_out_of_range_is_named(package: str, tmp_path: Path):
    PerLoader, TwoLoaders = _two_loaders(package, named=True)
    with pytest.raises(ValueError, match=r"dataloader_idx=2.*'a', 'b'"):
        _trainer(package, tmp_path, [_retrieval(package, dataloader_idx=2)], max_epochs=1).fit(
            PerLoader(), datamodule=TwoLoaders()
        )
    named = _retrieval(package, dataloader_idx="b")
    _trainer(package, tmp_path, [named], max_epochs=1).fit(PerLoader(), datamodule=TwoLoaders())
    assert [h["num_queries"] for h in named.history] == [16]


@pytest.mark.parametrize("package", PACKAGES)
def test_a_failed_evaluation_tells_the_monitors_why_their_key_is_missing(package: str, tmp_path: Path, caplog):
    """EarlyStopping then reports the key as not available and hints at self.log; our error says the cause."""
    DualEncoder, _, PairData = toy_classes(package)

    class Broken(DualEncoder):
        def encode_image(self, images):
            if not self.training:
                raise RuntimeError("encoder exploded")
            return super().encode_image(images)

    own = __import__(f"{package}.callbacks", fromlist=["EarlyStopping"])
    stopping = own.EarlyStopping(monitor="retrieval/precision@1", mode="max", strict=False)
    with caplog.at_level(logging.ERROR, logger="beyondlabels"):
        _trainer(package, tmp_path, [_retrieval(package, strict=False), stopping], max_epochs=1).fit(
            Broken(), datamodule=PairData()
        )
    (said,) = [r.getMessage() for r in caplog.records if "encoder exploded" in r.getMessage()]
    assert (
        "EarlyStopping(monitor='retrieval/precision@1') will find no value" in said and "not a missing self.log" in said
    )


# ---- precision -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("precision", ["64-true", "bf16-true", "16-true", "bf16-mixed", "16-mixed"])
def test_every_family_evaluates_under_every_precision(package: str, precision: str, tmp_path: Path):
    """The batches are converted by the trainer's precision plugin and the module runs in its forward context (as
    Lightning runs validation_step); the R-precision evaluator keeps its own precision."""
    DualEncoder, _, PairData = toy_classes(package)
    callbacks = [
        c for c in all_callbacks(package, str(tmp_path / "ckpt")) if hasattr(c, "history") and hasattr(c, "feed")
    ]
    model, data = DualEncoder(), PairData()
    _trainer(package, tmp_path, callbacks, max_epochs=1, precision=precision).fit(model, datamodule=data)
    for callback in callbacks:
        assert callback.history and not [h for h in callback.history if "error" in h], (
            callback.prefix,
            callback.history,
        )
    if precision == "64-true":  # the double model's embeddings, searched in float64 by the oracle
        retrieval = callbacks[0]
        assert retrieval.history[-1]["precision@1"] == pytest.approx(
            _oracle_precision_at_1(model, data.eval_set, torch.float64)
        )


# ---- torch.compile ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_a_compiled_module_without_validation_step_is_evaluated_at_train_epoch_end(package: str, tmp_path: Path):
    _, TrainOnlyEncoder, PairData = toy_classes(package)
    data = PairData()
    callback = _retrieval(package, dataloader=data.val_dataloader())
    trainer = _trainer(package, tmp_path, [callback], max_epochs=3)
    trainer.fit(torch.compile(TrainOnlyEncoder(), backend="eager"), train_dataloaders=data.train_dataloader())
    assert [h["epoch"] for h in callback.history] == [0, 1, 2]


@pytest.mark.parametrize("package", PACKAGES)
def test_a_compiled_module_with_validation_step_is_evaluated_in_its_validation_loop(package: str, tmp_path: Path):
    DualEncoder, _, PairData = toy_classes(package)
    callback = _retrieval(package, evaluate_at_fit_end=False)
    _trainer(package, tmp_path, [callback], max_epochs=2).fit(
        torch.compile(DualEncoder(), backend="eager"), datamodule=PairData()
    )
    assert [h["epoch"] for h in callback.history] == [0, 1]


# ---- keys through Lightning's logging --------------------------------------------------------------------------------
def _logging_module(package: str, key: str | None = None):
    DualEncoder, _, _ = toy_classes(package)

    class Logs(DualEncoder):
        def validation_step(self, batch, batch_idx):
            self.log("val/own", 1.0)
            if key is not None:
                self.log(key, 0.0)

    return Logs()


@pytest.mark.parametrize("package", PACKAGES)
def test_each_validation_is_one_row_with_the_users_step_and_epoch(package: str, tmp_path: Path):
    _, _, PairData = toy_classes(package)
    callback = _retrieval(package)
    logger = _csv_logger(package, tmp_path)
    _trainer(package, tmp_path, [callback], max_epochs=2, logger=logger, log_every_n_steps=1).fit(
        _logging_module(package), datamodule=PairData()
    )
    rows = _rows(logger)
    ours = [r for r in rows if r["retrieval/precision@1"]]
    assert len(ours) == len(callback.history) == 2
    for row, record in zip(ours, callback.history):
        assert row["val/own"] == "1.0" and int(row["epoch"]) == record["epoch"], row
        assert float(row["retrieval/precision@1"]) == pytest.approx(record["precision@1"])
    # the user's validation row is the one Lightning writes at the step of the epoch's last training batch
    assert [int(r["step"]) for r in ours] == [h["step"] - 1 for h in callback.history]
    assert not [r for r in rows if r["val/own"] and not r["retrieval/precision@1"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_step_evaluations_are_logged_at_their_training_batchs_row_step_with_the_epoch(package: str, tmp_path: Path):
    DualEncoder, _, PairData = toy_classes(package)
    callback = _retrieval(package, every_n_epochs=None, every_n_steps=3, evaluate_at_fit_end=False)
    logger = _csv_logger(package, tmp_path)
    _trainer(package, tmp_path, [callback], max_epochs=2, logger=logger, log_every_n_steps=1).fit(
        DualEncoder(), datamodule=PairData()
    )
    assert [h["step"] for h in callback.history] == [3, 6]
    rows = _rows(logger)
    ours = [r for r in rows if r["retrieval/precision@1"]]
    assert [(int(r["step"]), int(r["epoch"])) for r in ours] == [(2, 0), (5, 1)]
    train_steps = {int(r["step"]) for r in rows if r["train/loss"]}
    assert {2, 5} <= train_steps  # the rows of the batches after whose optimiser step the evaluations ran


@pytest.mark.parametrize("package", PACKAGES)
def test_a_users_key_of_the_same_name_is_said(package: str, tmp_path: Path, caplog):
    _, _, PairData = toy_classes(package)
    callback = _retrieval(package, strict=False)
    with caplog.at_level(logging.WARNING, logger="beyondlabels"):
        _trainer(package, tmp_path, [callback], max_epochs=2).fit(
            _logging_module(package, "retrieval/precision@1"), datamodule=PairData()
        )
    said = [
        r.getMessage()
        for r in caplog.records
        if "retrieval/precision@1" in r.getMessage() and "also logged" in r.getMessage()
    ]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert "prefix" in said[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_a_key_clash_raises_in_strict_mode(package: str, tmp_path: Path):
    _, _, PairData = toy_classes(package)
    trainer = _trainer(package, tmp_path, [_retrieval(package)], max_epochs=1)
    with pytest.raises(ValueError, match="retrieval/precision@1.*also logged"):
        trainer.fit(_logging_module(package, "retrieval/precision@1"), datamodule=PairData())


@pytest.mark.parametrize("package", PACKAGES)
def test_checkpoint_and_early_stopping_follow_our_number(package: str, tmp_path: Path):
    DualEncoder, _, PairData = toy_classes(package)
    own = __import__(f"{package}.callbacks", fromlist=["ModelCheckpoint"])
    checkpoint = own.ModelCheckpoint(
        dirpath=str(tmp_path / "ckpt"), monitor="retrieval/precision@1", mode="max", save_top_k=1
    )
    callback = _retrieval(package)
    _trainer(package, tmp_path, [callback, checkpoint], max_epochs=3, enable_checkpointing=True).fit(
        DualEncoder(), datamodule=PairData()
    )
    best = max(h["precision@1"] for h in callback.history)
    assert float(checkpoint.best_model_score) == pytest.approx(best)


# ---- fast_dev_run, limit_val_batches ---------------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_fast_dev_run_evaluates_and_writes_no_files(package: str, tmp_path: Path):
    DualEncoder, _, PairData = toy_classes(package)
    callback = callbacks_module(package).RetrievalEvalCallback(ks=(1,), strict=True, bootstrap_rounds=50)
    _trainer(package, tmp_path, [callback], fast_dev_run=True).fit(DualEncoder(), datamodule=PairData())
    assert callback.history and "error" not in callback.history[0]
    assert callback.history[0]["num_queries"] == 8  # one batch, as Lightning validates one batch
    assert not (tmp_path / "retrieval").exists()


@pytest.mark.parametrize("package", PACKAGES)
def test_limit_val_batches_is_followed_and_said_once(package: str, tmp_path: Path, caplog):
    DualEncoder, _, PairData = toy_classes(package)
    callback, fraction = _retrieval(package), _retrieval(package, prefix="fraction")
    with caplog.at_level(logging.INFO, logger="beyondlabels"):
        _trainer(package, tmp_path, [callback], limit_val_batches=2).fit(DualEncoder(), datamodule=PairData())
        _trainer(package, tmp_path, [fraction], max_epochs=1, limit_val_batches=0.5).fit(
            DualEncoder(), datamodule=PairData()
        )
    assert [h["num_queries"] for h in callback.history] == [16, 16]
    assert [h["num_queries"] for h in fraction.history] == [8]  # int(3 batches * 0.5) = 1 batch, as Lightning
    said = [r.getMessage() for r in caplog.records if "limit_val_batches" in r.getMessage()]
    assert len(said) == 2 and "2 of 3 batches" in said[0], said
    explicit = _retrieval(package, limit_batches=1)
    _trainer(package, tmp_path, [explicit], max_epochs=1, limit_val_batches=2).fit(DualEncoder(), datamodule=PairData())
    assert [h["num_queries"] for h in explicit.history] == [8]  # the callback's own limit wins


# ---- validate(), test() ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_validate_after_fit_returns_our_keys_and_leaves_the_history_alone(package: str, tmp_path: Path):
    DualEncoder, _, PairData = toy_classes(package)
    callback = _retrieval(package)
    model, data = DualEncoder(), PairData()
    trainer = _trainer(package, tmp_path, [callback])
    trainer.fit(model, datamodule=data)
    history, on_disk = list(callback.history), (tmp_path / "retrieval" / "history.jsonl").read_text()
    (results,) = trainer.validate(model, datamodule=data)
    assert results["retrieval/precision@1"] == pytest.approx(_oracle_precision_at_1(model, data.eval_set), abs=1e-6)
    assert results["retrieval/precision@1"] == pytest.approx(history[-1]["precision@1"], abs=1e-6)
    assert callback.history == history and (tmp_path / "retrieval" / "history.jsonl").read_text() == on_disk


@pytest.mark.parametrize("package", PACKAGES)
def test_validate_before_fit_evaluates(package: str, tmp_path: Path):
    DualEncoder, _, PairData = toy_classes(package)
    model, data = DualEncoder(), PairData()
    (results,) = _trainer(package, tmp_path, [_retrieval(package)]).validate(model, datamodule=data)
    assert results["retrieval/precision@1"] == pytest.approx(_oracle_precision_at_1(model, data.eval_set), abs=1e-6)


@pytest.mark.parametrize("package", PACKAGES)
def test_test_evaluates_the_test_loader_under_test_keys(package: str, tmp_path: Path):
    DualEncoder, _, PairData = toy_classes(package)

    class WithTest(PairData):
        def test_dataloader(self):
            return DataLoader(PairDataset(20, 5), batch_size=8)

    class Tested(DualEncoder):
        def test_step(self, batch, batch_idx):
            pass

    model, data = Tested(), WithTest()
    callback = _retrieval(package)
    (results,) = _trainer(package, tmp_path, [callback]).test(model, datamodule=data)
    assert results["retrieval/test/num_queries"] == 20
    assert results["retrieval/test/precision@1"] == pytest.approx(
        _oracle_precision_at_1(model, PairDataset(20, 5)), abs=1e-6
    )
    assert "retrieval/precision@1" not in results and callback.history == []
    # without a test_dataloader method: the loaders given to test()
    (results,) = _trainer(package, tmp_path, [_retrieval(package)]).test(model, dataloaders=data.val_dataloader())
    assert results["retrieval/test/num_queries"] == 24  # the loader test() was given


# ---- schedule --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_a_cadence_that_never_meets_validation_is_said_at_setup(package: str, tmp_path: Path, caplog):
    DualEncoder, _, PairData = toy_classes(package)
    callback = _retrieval(package, every_n_epochs=3, evaluate_at_fit_end=False)
    with caplog.at_level(logging.WARNING, logger="beyondlabels"):
        _trainer(package, tmp_path, [callback], max_epochs=4, check_val_every_n_epoch=2).fit(
            DualEncoder(), datamodule=PairData()
        )
    said = [r.getMessage() for r in caplog.records if "check_val_every_n_epoch=2" in r.getMessage()]
    assert (
        len(said) == 1 and "every_n_epochs=3" in said[0] and "every 6 epochs" in said[0] and "max_epochs=4" in said[0]
    ), said
    assert callback.history == []
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="beyondlabels"):  # every validation, or every other: nothing to say
        for n, every in ((1, 2), (4, 2), (2, 4)):
            _trainer(
                package, tmp_path, [_retrieval(package, every_n_epochs=n)], max_epochs=1, check_val_every_n_epoch=every
            ).fit(DualEncoder(), datamodule=PairData())
    assert not [r for r in caplog.records if "check_val_every_n_epoch" in r.getMessage()]


# ---- where the evaluation loader comes from --------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_a_datamodule_without_val_dataloader_is_refused_at_setup_by_name(package: str, tmp_path: Path):
    DualEncoder, _, PairData = toy_classes(package)
    pl = __import__(package, fromlist=["LightningDataModule"])

    class TrainOnly(pl.LightningDataModule):
        def train_dataloader(self):
            return PairData().train_dataloader()

    with pytest.raises(ValueError, match=r"`dataloader`.*val_dataloader"):
        _trainer(package, tmp_path, [_retrieval(package)]).fit(DualEncoder(), datamodule=TrainOnly())


@pytest.mark.parametrize("package", PACKAGES)
def test_the_validation_loaders_given_to_fit_are_evaluated(package: str, tmp_path: Path):
    DualEncoder, _, PairData = toy_classes(package)
    data, model = PairData(), DualEncoder()
    callback = _retrieval(package)
    _trainer(package, tmp_path, [callback]).fit(
        model, train_dataloaders=data.train_dataloader(), val_dataloaders=data.val_dataloader()
    )
    assert [h["num_queries"] for h in callback.history] == [24, 24]
    assert callback.history[-1]["precision@1"] == pytest.approx(_oracle_precision_at_1(model, data.eval_set))


# ---- metric.scalars for self.log_dict --------------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
def test_log_dict_of_a_metrics_scalars_in_the_users_own_module(package: str, tmp_path: Path):
    from beyondlabels.metrics import EmbeddingRetrieval

    DualEncoder, _, PairData = toy_classes(package)

    class OwnMetric(DualEncoder):
        def __init__(self):
            super().__init__()
            self.retrieval = EmbeddingRetrieval(ks=(1, 3))

        def validation_step(self, batch, batch_idx):
            self.retrieval.update(self.encode_image(batch["image"]), batch["label"], batch["id"])

        def on_validation_epoch_end(self):
            self.log_dict(self.retrieval.scalars(self.retrieval.compute(), prefix="val/"))
            self.retrieval.reset()

    model, data = OwnMetric(), PairData()
    trainer = _trainer(package, tmp_path, [], max_epochs=1)
    trainer.fit(model, datamodule=data)
    assert float(trainer.callback_metrics["val/precision@1"]) == pytest.approx(
        _oracle_precision_at_1(model, data.eval_set), abs=1e-6
    )
    assert float(trainer.callback_metrics["val/num_queries"]) == len(data.eval_set)
    assert "val/precision_curve" not in trainer.callback_metrics and "val/per_query" not in trainer.callback_metrics


# ---- how each logger spells our keys (the README's table) ------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("package", PACKAGES)
def test_each_logger_spells_our_keys_as_the_readme_says(package: str, tmp_path: Path):
    """CSV, W&B and TensorBoard keep ``retrieval/precision@1``; Lightning's MLFlowLogger drops every character but
    letters, digits, ``_ - . /`` and space (``retrieval/precision1``, ``retrieval/mapr``). Read back with each
    logger's own reader, at the step of the user's validation row."""
    pytest.importorskip("tensorboard", reason="needs the `tensorboard` extra")
    pytest.importorskip("mlflow", reason="needs the `mlflow` extra")
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing import event_accumulator

    from beyondlabels.io import read_offline_run
    from beyondlabels.utils import close_wandb

    DualEncoder, _, PairData = toy_classes(package)
    loggers = __import__(f"{package}.loggers", fromlist=["CSVLogger"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    made = [
        _csv_logger(package, tmp_path),
        loggers.TensorBoardLogger(str(tmp_path), name="tb"),
        loggers.MLFlowLogger(
            experiment_name="keys", tracking_uri=uri, artifact_location=(tmp_path / "artifacts").as_uri()
        ),
        loggers.WandbLogger(save_dir=str(tmp_path), offline=True, project="keys"),
    ]
    callback = _retrieval(package, evaluate_at_fit_end=False)
    try:
        _trainer(package, tmp_path, [callback], max_epochs=2, logger=made).fit(
            _logging_module(package), datamodule=PairData()
        )
    finally:
        close_wandb()
    expected = [(h["step"] - 1, h["precision@1"]) for h in callback.history]
    rows = [r for r in _rows(made[0]) if r["retrieval/precision@1"]]
    assert [(int(r["step"]), float(r["retrieval/precision@1"])) for r in rows] == expected
    events = event_accumulator.EventAccumulator(made[1].log_dir)
    events.Reload()
    assert [(e.step, pytest.approx(e.value, abs=1e-6)) for e in events.Scalars("retrieval/precision@1")] == expected
    client = MlflowClient(tracking_uri=uri)
    assert {"retrieval/precision@1", "retrieval/map@r"}.isdisjoint(client.get_run(made[2].run_id).data.metrics)
    for spelled, key in (("retrieval/precision1", "precision@1"), ("retrieval/mapr", "map@r")):
        got = [(m.step, m.value) for m in client.get_metric_history(made[2].run_id, spelled)]
        assert got == [(h["step"] - 1, pytest.approx(h[key], abs=1e-12)) for h in callback.history], spelled
    run = read_offline_run(tmp_path)
    step_of = dict(run.series("trainer/global_step"))
    assert [(step_of[s], v) for s, v in run.series("retrieval/precision@1")] == expected
