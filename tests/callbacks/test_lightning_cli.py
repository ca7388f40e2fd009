"""Every callback configured through LightningCLI (jsonargparse reads their type hints), under each Lightning
package: a YAML config with every family (the R-precision evaluator as a ``class_path`` of its own),
``--trainer.callbacks+=`` on the command line, and ``--print_config`` printing a config that builds the same
callbacks again."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.callbacks.package_toy import CLASS_NAMES, callbacks_module

pytest.importorskip("jsonargparse", reason="LightningCLI needs jsonargparse (the `test` extra)")
pytest.importorskip("lightning", reason="the `lightning` package is part of the test extras")

PACKAGES = {
    "lightning.pytorch": ("tests.callbacks.cli_toy.LightningDualEncoder", "tests.callbacks.cli_toy.LightningPairData"),
    "pytorch_lightning": ("tests.callbacks.cli_toy.PLDualEncoder", "tests.callbacks.cli_toy.PLPairData"),
}
TAXONOMY = {"AB": "root", "CD": "root", "alpha": "AB", "beta": "AB", "gamma": "CD", "delta": "CD"}


def _config(package: str, tmp_path: Path) -> dict:
    ours = callbacks_module(package).__name__
    model, data = PACKAGES[package]
    (tmp_path / "tree.yaml").write_text(yaml.safe_dump({"root": "root", "parent": TAXONOMY}))

    def callback(name: str, **init_args) -> dict:
        return {"class_path": f"{ours}.{name}", "init_args": init_args}

    callbacks = [
        callback(
            "RetrievalEvalCallback",
            ks=[1, 3],
            prog_bar=["precision@1"],
            dataloader_idx=0,
            strict=True,
            bootstrap_rounds=50,
        ),
        callback(
            "CrossModalEvalCallback", ks=[1, 3], max_captions_per_image=1, strict=True, confidence_intervals=False
        ),
        callback("ZeroShotEvalCallback", class_names=list(CLASS_NAMES), templates=["a {}"], ks=[1, 2], strict=True),
        callback(
            "HierarchyEvalCallback", taxonomy=str(tmp_path / "tree.yaml"), class_names=list(CLASS_NAMES), strict=True
        ),
        callback(
            "RPrecisionEvalCallback",
            evaluator={"class_path": "tests.callbacks.cli_toy.ColourEvaluator"},
            num_prompts=12,
            num_candidates=4,
            top_r=[1, 2],
            near_duplicate_threshold=None,
            every_n_steps=2,
            strict=True,
            bootstrap_rounds=50,
        ),
        callback("ConvergenceMonitor", monitor="retrieval/precision@1", window=2, rounds=100),
        {
            "class_path": f"{package}.callbacks.ModelCheckpoint",
            "init_args": {"dirpath": str(tmp_path / "ckpt"), "monitor": "retrieval/precision@1", "mode": "max"},
        },
    ]
    trainer = {
        "max_epochs": 1,
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": str(tmp_path),
        "callbacks": callbacks,
    }
    return {"trainer": trainer, "model": {"class_path": model}, "data": {"class_path": data}}


def _ours(callback) -> bool:
    return type(callback).__module__.startswith("beyondlabels.callbacks")


def _cli(package: str, args: list[str]):
    cli = __import__(f"{package}.cli", fromlist=["LightningCLI"])
    return cli.LightningCLI(args=args, run=False, save_config_callback=None)


@pytest.mark.parametrize("package", list(PACKAGES))
def test_a_yaml_config_with_every_family_fits(package: str, tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_config(package, tmp_path)))
    cli = _cli(
        package,
        [
            "--config",
            str(path),
            "--trainer.callbacks+=" + f"{callbacks_module(package).__name__}.RetrievalEvalCallback",
            "--trainer.callbacks.prefix=cli",
            "--trainer.callbacks.ks=[1]",
        ],
    )
    kinds = [type(c).__name__ for c in cli.trainer.callbacks if _ours(c)]
    assert kinds == [
        "RetrievalEvalCallback",
        "CrossModalEvalCallback",
        "ZeroShotEvalCallback",
        "HierarchyEvalCallback",
        "RPrecisionEvalCallback",
        "ConvergenceMonitor",
        "RetrievalEvalCallback",
    ]
    retrieval = cli.trainer.callbacks[0]
    assert retrieval.ks == (1, 3) and retrieval.prog_bar == ("precision@1",) and retrieval.strict
    added = next(c for c in cli.trainer.callbacks if getattr(c, "prefix", None) == "cli")
    assert added.ks == (1,)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    evaluations = [c for c in cli.trainer.callbacks if hasattr(c, "history") and hasattr(c, "feed")]
    assert len(evaluations) == 6 and all(c.history and "error" not in c.history[-1] for c in evaluations)
    rprecision = next(c for c in evaluations if c.prefix == "rprecision")
    assert rprecision.metric.num_candidates == 4 and type(rprecision.evaluator).__name__ == "ColourEvaluator"


@pytest.mark.parametrize("package", list(PACKAGES))
def test_print_config_round_trips(package: str, tmp_path: Path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_config(package, tmp_path)))
    with pytest.raises(SystemExit):
        _cli(package, ["--config", str(path), "--print_config"])
    printed = capsys.readouterr().out
    again = tmp_path / "printed.yaml"
    again.write_text(printed)
    first, second = _cli(package, ["--config", str(path)]), _cli(package, ["--config", str(again)])

    def shown(value) -> str:  # objects (the evaluator) by their class
        return (
            repr(value) if isinstance(value, (str, int, float, tuple, list, dict, type(None))) else type(value).__name__
        )

    def settings(cli) -> list[tuple[str, dict]]:
        return [
            (
                type(c).__name__,
                {k: shown(v) for k, v in vars(c).items() if not k.startswith("_") and k not in ("metric", "schema")},
            )
            for c in cli.trainer.callbacks
            if _ours(c)
        ]

    assert settings(first) == settings(second) and len(settings(first)) == 6
    options = yaml.safe_load(printed)["trainer"]["callbacks"][0]["init_args"]
    assert {"every_n_epochs", "dataloader", "dataloader_idx", "test_dataloader", "prefix", "strict"} <= set(options)
