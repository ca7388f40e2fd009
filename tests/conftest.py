"""Shared test set-up: offline W&B in temporary folders, few threads, the repository root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# The child processes the tests start (DDP workers, scripts given to `python -c`) import the test helpers as the
# package `tests` too, as pytest's `pythonpath` lets this process do.
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.fixture(autouse=True)
def _offline_wandb(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test talks to a W&B server or writes into $HOME."""
    base = tmp_path_factory.getbasetemp() / "wandb-home"
    base.mkdir(exist_ok=True)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(base / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(base / "data"))
    monkeypatch.setenv("WANDB_ARTIFACT_DIR", str(base / "artifacts"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "2")


# Scripts that tests launch in subprocesses (DDP) are not test modules.
collect_ignore_glob = ["*_script.py"]
