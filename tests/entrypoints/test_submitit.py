"""Sweeps through Hydra's submitit launcher: the project's SLURM preset composes on top of the plugin's config, and a
two-job multirun with ``hydra/launcher=submitit_local`` runs each job in its own process and folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from beyondlabels.io.run_files import read_history  # noqa: E402
from tests.entrypoints.helpers import REPO_ROOT, run_script


def _has_submitit() -> bool:
    try:
        return importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None
    except ModuleNotFoundError:
        return False


pytestmark = pytest.mark.skipif(
    not _has_submitit(), reason="hydra-submitit-launcher is an optional extra: pip install 'beyondlabels[cluster]'"
)


def _launcher(tmp_path: Path, *overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO_ROOT / "conf")):
        cfg = compose(
            config_name="train", overrides=[f"paths.log_dir={tmp_path}", *overrides], return_hydra_config=True
        )
    return cfg.hydra.launcher


def test_slurm_preset_extends_the_plugin_config(tmp_path: Path):
    launcher = _launcher(
        tmp_path, "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=4"
    )
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.partition == "gpu" and launcher.gpus_per_node == 4 and launcher.timeout_min == 120
    assert launcher.max_num_timeout == 0 and "signal_delay_s" in launcher  # the plugin's own fields are kept
    assert launcher.submitit_folder.startswith(str(tmp_path / "train" / "multiruns"))
    local = _launcher(tmp_path, "hydra/launcher=submitit_local")
    assert local._target_.endswith("submitit_launcher.LocalLauncher")


@pytest.mark.slow
def test_two_job_multirun_with_submitit_local(tmp_path: Path):
    run_script(
        "train.py",
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=10",
        "seed=1,2",
        "experiment=shapes_smoke",
        "trainer.max_epochs=1",
        "logger=csv",
        "~callbacks.zeroshot",
        f"paths.log_dir={tmp_path}",
    )
    (sweep,) = (tmp_path / "train" / "multiruns").iterdir()
    jobs = sorted(p for p in sweep.iterdir() if p.name.isdigit())
    assert [p.name for p in jobs] == ["0", "1"]
    seeds = []
    for job in jobs:
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        seeds.append(int(overrides.split("seed=")[1].split()[0].strip("'\"")))
        # every job trained, evaluated and wrote its own files
        history = read_history(job / "crossmodal" / "history.jsonl")
        assert history and history[-1]["num_images"] == 64
        # the logged values are numpy's reduction of the job's per-query file: recall@k of one caption per image is
        # rank <= k, averaged over the queries of that direction
        with np.load(job / "crossmodal" / history[-1]["per_query_file"]) as pq:
            for direction, code in (("image_to_text", 0), ("text_to_image", 1)):
                rank = pq[f"{direction}_rank"][pq["direction"] == code]
                assert rank.shape == (64,) and np.all(pq["num_relevant"] == 1)
                for k in (1, 5, 10):
                    assert history[-1][f"{direction}_recall@{k}"] == pytest.approx(np.mean(rank <= k), abs=1e-15), (
                        direction,
                        k,
                    )
                assert history[-1][f"{direction}_mean_rank"] == pytest.approx(rank.mean(), rel=1e-15), direction
        assert (job / "csv" / "metrics.csv").is_file() and (job / "retrieval" / "history.jsonl").is_file()
    assert sorted(seeds) == [1, 2]
    # submitit ran them as separate jobs, with their logs under the sweep folder
    logs = list((sweep / ".submitit").rglob("*_log.out"))
    assert len(logs) == 2, logs
