"""Run the Hydra entry points in a subprocess, the way users do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.ddp import child_env

REPO_ROOT = Path(__file__).resolve().parents[2]
# train.py's configs (the project's conf/, with the package's configs on its search path) and those of evaluate.py and
# the beyondlabels command (shipped in the package: beyondlabels.conf.EVALUATE_SEARCHPATH)
TRAIN_CONF = REPO_ROOT / "conf"
EVALUATE_CONF = REPO_ROOT / "src" / "beyondlabels" / "conf" / "beyondlabels" / "evaluate"


def config_dir(config_name: str) -> Path:
    """The folder of the primary config ``config_name`` (``train`` or ``evaluate``)."""
    return EVALUATE_CONF if config_name == "evaluate" else TRAIN_CONF


def script_env() -> dict[str, str]:
    """The environment of an entry point run as its own program: offline W&B, and not attached to the W&B service of
    this test process (wandb exports WANDB_SERVICE to children, which would then share the test process's runs), and
    not part of any job that launched the tests (`child_env`)."""
    env = child_env(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="2")
    env.pop("WANDB_SERVICE", None)
    return env


def evaluate_config(tmp_path: Path, *overrides: str) -> Any:
    """The composed ``evaluate.yaml`` (:data:`EVALUATE_CONF`) with ``overrides``, logging under ``tmp_path/logs`` and
    writing its job files to ``tmp_path/job`` (what ``evaluate.py`` gets from Hydra, without a subprocess)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(EVALUATE_CONF)):
        cfg = compose(config_name="evaluate", overrides=[f"paths.log_dir={tmp_path / 'logs'}", *overrides])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "job")
    return cfg


def run_script(script: str, *overrides: str, cwd: Path = REPO_ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    env = script_env()
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / script), *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{script} {' '.join(overrides)} failed ({result.returncode}):\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
        )
    return result
