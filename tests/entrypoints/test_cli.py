"""The ``beyondlabels`` command (beyondlabels.cli; evaluate.py runs the same entry): its help lists every task, Hydra's
own help stays reachable, it runs from any folder and writes under that folder; and the folder the callbacks write
under a user's own ``lightning.pytorch`` Trainer (no Hydra; a CSV, TensorBoard, W&B or no logger) is a run folder that
``task=report`` and ``task=compare`` accept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from beyondlabels import tasks
from beyondlabels.cli import help_text, main, task_lines
from beyondlabels.tasks import TASKS
from tests.entrypoints.helpers import evaluate_config, script_env

SCRIPT = Path(sys.executable).with_name("beyondlabels")
LOGGERS = ("csv", "tensorboard", "wandb", "none")


def test_help_lists_every_task(capsys: pytest.CaptureFixture[str]):
    for flags in (["--help"], ["-h"], ["task=report", "--help"]):
        main(flags)
        shown = capsys.readouterr().out
        assert shown == help_text()
        assert {name for name in TASKS if f"  beyondlabels task={name} " in shown} == set(TASKS)
        assert "--hydra-help" in shown and "./logs/evaluate/runs/<date>/" in shown
    main(["--tasks"])
    assert capsys.readouterr().out.splitlines() == task_lines()
    main(["--tasks"], program="python evaluate.py")
    assert capsys.readouterr().out.splitlines() == tasks.usage().splitlines()  # evaluate.py's, as before


class Encoder(L.LightningModule):
    """A user's module: ``(x, y)`` batches, ``forward`` returning embeddings, a classifier head for its loss."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 4)
        self.head = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.head(self(x)), y)

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(seed: int) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    y = torch.arange(64) % 4
    x = torch.randn(64, 8, generator=generator) + 2 * torch.nn.functional.one_hot(y, 8).float()
    return DataLoader(TensorDataset(x, y), batch_size=16)


def _logger(name: str, folder: Path):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    makers = {
        "csv": lambda: CSVLogger(folder),
        "tensorboard": lambda: TensorBoardLogger(folder),
        "wandb": lambda: WandbLogger(save_dir=folder, offline=True),
        "none": lambda: False,
    }
    return makers[name]()


@pytest.fixture(scope="module")
def user_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A run of a user's own Trainer per logger, each in its own ``default_root_dir``."""
    from beyondlabels.callbacks.lightning import RetrievalEvalCallback
    from beyondlabels.utils import close_wandb

    root = tmp_path_factory.mktemp("user_runs")
    runs = {}
    for seed, name in enumerate(LOGGERS):
        folder = root / name
        torch.manual_seed(seed)
        trainer = L.Trainer(
            default_root_dir=folder,
            max_epochs=2,
            logger=_logger(name, folder),
            callbacks=[RetrievalEvalCallback(encode_method="forward", ks=[1, 5])],
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
        )
        try:
            trainer.fit(Encoder(), _loader(seed), _loader(100 + seed))
        finally:
            close_wandb()
        runs[name] = folder
    return runs


def _final(run: Path) -> dict:
    return json.loads((run / "retrieval" / "history.jsonl").read_text().splitlines()[-1])


@pytest.mark.slow
def test_a_run_of_a_users_own_trainer_is_a_run_folder(user_runs: dict[str, Path], tmp_path: Path):
    for name, run in user_runs.items():
        assert (run / "retrieval" / "schema.json").is_file(), name
    compared = tasks.run_task(
        "compare", evaluate_config(tmp_path, "task=compare", f"runs=[{','.join(map(str, user_runs.values()))}]")
    )
    assert list(compared["runs"]) == list(LOGGERS)
    values = compared["metrics"]["retrieval/precision@1"]["values"]
    assert values == {name: _final(run)["precision@1"] for name, run in user_runs.items()}
    assert all(0 <= v <= 1 for v in values.values()) and len(set(values.values())) > 1  # four real, different runs
    report = tasks.run_task("report", evaluate_config(tmp_path, "task=report", f"runs=[{user_runs['csv']}]"))
    page = Path(report["report"]).read_text(encoding="utf-8")
    assert "precision@1" in page and "Missing or broken" not in page  # no Hydra config is no problem
    # a logger's own folder is not the run folder, and the error says which one is
    with pytest.raises(ValueError, match="pass the Trainer's default_root_dir"):
        tasks.run_task(
            "report", evaluate_config(tmp_path, "task=report", f"runs=[{user_runs['csv'] / 'lightning_logs'}]")
        )


@pytest.mark.slow
def test_the_console_script_runs_from_any_folder(user_runs: dict[str, Path], tmp_path: Path):
    assert SCRIPT.is_file(), f"{SCRIPT} is missing: install the package (pip install -e .) to get the console script"

    def command(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(SCRIPT), *args], cwd=tmp_path, env=script_env(), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-4000:]
        return done

    assert command("--help").stdout == help_text()
    assert "Hydra (" in command("--hydra-help").stdout
    assert "runs: []" in command("task=report", "--cfg", "job").stdout
    run = user_runs["tensorboard"]
    command("task=report", f"runs=[{run}]")
    (job,) = (tmp_path / "logs" / "evaluate" / "runs").iterdir()  # under the folder it was started from
    assert "precision@1" in (job / "report.html").read_text(encoding="utf-8")
    assert (job / "evaluate.log").is_file()
