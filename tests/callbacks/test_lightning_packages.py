"""Every callback under each Lightning package (``lightning.pytorch`` and ``pytorch_lightning``), as its user would
attach it: the package's own Trainer, module, ModelCheckpoint / EarlyStopping / LearningRateMonitor and loggers in
one run; the same numbers under both; a clear error naming the import when the packages are mixed; each package
working with the other one absent."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from beyondlabels.io import read_offline_run  # noqa: E402
from tests.callbacks.package_toy import all_callbacks, callbacks_module, toy_classes
from tests.ddp import child_env

pytest.importorskip("lightning", reason="the `lightning` package is part of the test extras")

PACKAGES = ["lightning.pytorch", "pytorch_lightning"]
REPO = Path(__file__).resolve().parents[2]


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
    )
    options.update(kwargs)
    return pl.Trainer(**options)


def _fit_everything(package: str, tmp_path: Path):
    """A fit with every callback, the package's own callbacks and a CSV and an offline W&B logger."""
    import wandb

    DualEncoder, _, PairData = toy_classes(package)
    loggers = __import__(f"{package}.loggers", fromlist=["CSVLogger"])
    callbacks = all_callbacks(package, str(tmp_path / "ckpt"))
    logger = [
        loggers.CSVLogger(str(tmp_path), name="csv", version=""),
        loggers.WandbLogger(save_dir=str(tmp_path), offline=True, project="packages"),
    ]
    trainer = _trainer(package, tmp_path, callbacks, logger=logger, log_every_n_steps=1)
    try:
        trainer.fit(DualEncoder(), datamodule=PairData())
    finally:
        wandb.finish()
    return trainer, callbacks


def test_every_callback_runs_under_both_packages_with_the_same_numbers(tmp_path: Path):
    histories = {}
    for package in PACKAGES:
        folder = tmp_path / package
        trainer, callbacks = _fit_everything(package, folder)
        evaluations = [c for c in callbacks if hasattr(c, "history") and hasattr(c, "prefix") and hasattr(c, "schema")]
        assert len(evaluations) == 5
        for callback in evaluations:
            assert callback.history, f"{callback.prefix} never evaluated under {package}"
            assert not [h for h in callback.history if "error" in h], callback.history
            assert (folder / callback.prefix / "schema.json").is_file()
        # the package's own callbacks saw our keys: the checkpoint kept the best precision@1 of the history
        checkpoint, stopping, monitor = callbacks[6], callbacks[7], callbacks[5]
        retrieval = evaluations[0]
        best = max(h["precision@1"] for h in retrieval.history)
        assert float(checkpoint.best_model_score) == pytest.approx(best)
        assert Path(checkpoint.best_model_path).is_file()
        assert float(stopping.best_score) == pytest.approx(best)
        assert [step for step, _ in monitor.series] == [h["step"] for h in retrieval.history]
        # every logger got the evaluations (and the package's LearningRateMonitor its rates): the CSV file and the
        # offline W&B run (with the curve media)
        csv = (folder / "csv" / "metrics.csv").read_text()
        assert (
            "retrieval/precision@1" in csv
            and "zeroshot/top1" in csv
            and "rprecision/r_precision" in csv
            and "lr-SGD" in csv
        )
        run = read_offline_run(folder)
        assert {"retrieval/precision@1", "retrieval/precision_curve_table", "hierarchy/hF"} <= set(run.keys())
        histories[package] = {
            c.prefix: [{k: v for k, v in h.items() if k != "eval_seconds"} for h in c.history] for c in evaluations
        }
    assert histories["lightning.pytorch"] == histories["pytorch_lightning"]


@pytest.mark.parametrize("package", PACKAGES)
def test_a_module_without_validation_loop_is_evaluated_at_train_epoch_end(package: str, tmp_path: Path):
    _, TrainOnlyEncoder, PairData = toy_classes(package)
    data = PairData()
    callback = callbacks_module(package).RetrievalEvalCallback(
        ks=(1,), dataloader=data.val_dataloader(), strict=True, confidence_intervals=False
    )
    trainer = _trainer(package, tmp_path, [callback], max_epochs=3)
    trainer.fit(TrainOnlyEncoder(), train_dataloaders=data.train_dataloader())
    assert [h["epoch"] for h in callback.history] == [0, 1, 2]


@pytest.mark.parametrize(
    ("callback_package", "trainer_package", "fix"),
    [
        (
            "pytorch_lightning",
            "lightning.pytorch",
            "from beyondlabels.callbacks.lightning import RetrievalEvalCallback",
        ),
        ("lightning.pytorch", "pytorch_lightning", "from beyondlabels.callbacks import RetrievalEvalCallback"),
    ],
)
def test_mixed_packages_raise_an_error_that_names_the_fix(
    callback_package: str, trainer_package: str, fix: str, tmp_path: Path
):
    DualEncoder, _, PairData = toy_classes(trainer_package)
    callback = callbacks_module(callback_package).RetrievalEvalCallback()
    own = __import__(f"{trainer_package}.callbacks", fromlist=["ModelCheckpoint"])
    trainer = _trainer(
        trainer_package,
        tmp_path,
        [callback, own.ModelCheckpoint(dirpath=str(tmp_path), monitor="retrieval/precision@1", mode="max")],
    )
    with pytest.raises(TypeError) as raised:
        trainer.fit(DualEncoder(), datamodule=PairData())
    message = str(raised.value)
    assert fix in message and f"is a {callback_package} callback" in message and "Expected a parent" not in message


def test_a_package_neutral_core_is_refused_by_name(tmp_path: Path):
    """A core is no Lightning callback: its setup says which class to use instead (Lightning then fails calling the
    hooks a core lacks, after this error)."""
    from beyondlabels.callbacks.retrieval import RetrievalEvalCore

    core = RetrievalEvalCore()
    for package, module in (
        ("lightning.pytorch", "beyondlabels.callbacks.lightning"),
        ("pytorch_lightning", "beyondlabels.callbacks"),
    ):
        DualEncoder, _, _ = toy_classes(package)
        with pytest.raises(TypeError, match=f"package-neutral core.*from {module} import RetrievalEvalCallback"):
            core.setup(_trainer(package, tmp_path, []), DualEncoder(), "fit")


def test_a_checkpoint_of_one_package_resumes_under_the_other(tmp_path: Path):
    """The state key is the same under both packages: the history of a pytorch_lightning run continues under
    lightning.pytorch."""
    first = callbacks_module("pytorch_lightning").RetrievalEvalCallback(
        ks=(1,), strict=True, confidence_intervals=False
    )
    own = __import__("pytorch_lightning.callbacks", fromlist=["ModelCheckpoint"])
    checkpoint = own.ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), filename="last", every_n_epochs=1)
    DualEncoder, _, PairData = toy_classes("pytorch_lightning")
    _trainer("pytorch_lightning", tmp_path, [first, checkpoint], max_epochs=1).fit(DualEncoder(), datamodule=PairData())
    second = callbacks_module("lightning.pytorch").RetrievalEvalCallback(
        ks=(1,), strict=True, confidence_intervals=False
    )
    assert second.state_key == first.state_key
    DualEncoder, _, PairData = toy_classes("lightning.pytorch")
    trainer = _trainer("lightning.pytorch", tmp_path, [second], max_epochs=2)
    trainer.fit(DualEncoder(), datamodule=PairData(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert [h["epoch"] for h in second.history] == [0, 1]
    assert second.history[0] == first.history[0]


def _run_without(package: str, script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh interpreter in which ``import <package>`` fails, as if it were not installed."""
    code = f"import sys\nsys.modules[{package!r}] = None\n" + textwrap.dedent(script)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300
    )


def test_only_pytorch_lightning_installed(tmp_path: Path):
    """Without the `lightning` package: every callback works with pytorch_lightning, and the lightning module says
    what to install."""
    done = _run_without(
        "lightning",
        """
        import json
        import pytorch_lightning as pl
        from tests.callbacks.package_toy import all_callbacks, toy_classes
        DualEncoder, _, PairData = toy_classes("pytorch_lightning")
        callbacks = all_callbacks("pytorch_lightning", "ckpt")
        trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, callbacks=callbacks,
                             logger=pl.loggers.CSVLogger("."), enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=".")
        trainer.fit(DualEncoder(), datamodule=PairData())
        try:
            import beyondlabels.callbacks.lightning
            message = "imported"
        except ImportError as exc:
            message = str(exc)
        print(json.dumps({"evaluated": [len(c.history) for c in callbacks[:5]], "message": message}))
    """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(n > 0 for n in out["evaluated"]), out
    assert "pip install lightning" in out["message"]


def test_lightning_callbacks_never_import_pytorch_lightning(tmp_path: Path):
    done = _run_without(
        "pytorch_lightning",
        """
        import json
        import lightning as L
        from tests.callbacks.package_toy import all_callbacks, toy_classes
        DualEncoder, _, PairData = toy_classes("lightning.pytorch")
        callbacks = all_callbacks("lightning.pytorch", "ckpt")
        trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, callbacks=callbacks,
                            logger=L.pytorch.loggers.CSVLogger("."), enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=".")
        trainer.fit(DualEncoder(), datamodule=PairData())
        print(json.dumps({"evaluated": [len(c.history) for c in callbacks[:5]]}))
    """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(n > 0 for n in json.loads(done.stdout.strip().splitlines()[-1])["evaluated"])


def test_overrides_reads_the_module_not_the_package():
    from beyondlabels.callbacks.packages import overrides

    for package in PACKAGES:
        DualEncoder, TrainOnlyEncoder, _ = toy_classes(package)
        assert overrides(DualEncoder(), "validation_step") and not overrides(TrainOnlyEncoder(), "validation_step")
        patched = TrainOnlyEncoder()
        patched.validation_step = lambda batch, batch_idx: None
        assert overrides(patched, "validation_step")
        assert not overrides(torch.nn.Linear(1, 1), "validation_step")
        # a module Lightning itself ships with a validation loop has one
        boring = __import__(f"{package}.demos.boring_classes", fromlist=["BoringModel"])
        assert overrides(boring.BoringModel(), "validation_step") and not overrides(
            boring.BoringModel(), "on_fit_start"
        )
