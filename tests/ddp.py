"""Multi-process tests: gloo groups whose ranks meet through a file in the test's temporary folder, so no TCP port is
chosen (a port found free and then closed can be taken by another process before the workers bind it), and the
environment of a child that starts its own run, without the job variables of whatever launched the tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def gloo_store(tmp_path: Path) -> str:
    """A rendezvous file for one multi-process run; it must not exist yet (a file left by an earlier run would hold
    that run's keys)."""
    path = Path(tmp_path) / "gloo-store"
    assert not path.exists(), f"{path} exists: one store per run"
    return str(path)


def quiet_trainer_options(root: str | Path) -> dict[str, Any]:
    """The Trainer options of the multi-process scripts: no logger, checkpoint, progress bar or model summary, and
    Lightning's own files under `root`."""
    return {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": str(root),
    }


def init_gloo(rank: int, world: int, store: str) -> None:
    """Join the gloo group of `world` ranks that meet at the file `store` (from `gloo_store`), one thread a rank."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=Path(store).as_uri(), rank=rank, world_size=world)


# Variables through which a launcher (torchrun, SLURM, MPI, LSF, an outer Lightning run) tells a process its place in
# a job, and the seed Lightning exports: a child that inherits them from the test process would join, or size itself
# for, a job that is not its own.
_JOB_NAMES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "NODE_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "PL_GLOBAL_SEED",
        "PL_SEED_WORKERS",
    }
)
# BEYONDLABELS_JOB_TAG: the run-folder tag a job hands to the processes it starts (beyondlabels._internal.run_names)
_JOB_PREFIXES = (
    "SLURM_",
    "TORCHELASTIC_",
    "OMPI_",
    "PMI_",
    "PMIX_",
    "LSB_",
    "JSM_",
    "PL_TRAINER_",
    "BEYONDLABELS_JOB_",
)


def child_env(**overrides: str) -> dict[str, str]:
    """This process's environment without any launcher's job variables, plus `overrides`: what a child that starts
    its own (single- or multi-process) run should see."""
    env = {k: v for k, v in os.environ.items() if k not in _JOB_NAMES and not k.startswith(_JOB_PREFIXES)}
    env.update(overrides)
    return env
