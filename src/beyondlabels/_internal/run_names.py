"""A tag that tells apart two jobs started in the same second, for the default names of run folders (internal:
registered as the OmegaConf resolver ``beyondlabels.job_tag`` when the package is imported).

Hydra's default run folder is named by the time of day to the second, so two jobs started in one second (a SLURM
job array, two people sharing a results folder) would write into one folder. The configs name a run folder
``<time>_${beyondlabels.job_tag:}``, where the tag is, in this order:

- the tag of the process that started this one (``BEYONDLABELS_JOB_TAG``): the jobs of a multirun are processes of
  their own (submitit's local and SLURM launchers) that resolve the sweep folder again, and must find the folder their
  launcher made rather than one each;
- ``j<array job id>_<task id>`` in a SLURM job array (``SLURM_ARRAY_JOB_ID``, ``SLURM_ARRAY_TASK_ID``);
- ``j<job id>`` in another SLURM job (``SLURM_JOB_ID``): every task of one job shares it;
- ``r<run id>`` (its first 8 characters) under ``torchrun`` (``TORCHELASTIC_RUN_ID``): every rank shares it;
- ``p<process id>-<4 random hex digits>`` otherwise (process ids repeat across machines and containers).

The tag is fixed for the life of the process, so every place a config resolves it agrees; the first time it is
taken from the process's environment it is written there as ``BEYONDLABELS_JOB_TAG``, which the processes it starts
inherit (sbatch exports the submitting environment by default).

Examples:
    >>> job_tag({"SLURM_ARRAY_JOB_ID": "811", "SLURM_ARRAY_TASK_ID": "3", "SLURM_JOB_ID": "814"})
    'j811_3'
    >>> job_tag({"SLURM_JOB_ID": "814"}), job_tag({"TORCHELASTIC_RUN_ID": "3f2a9c1d-77"})
    ('j814', 'r3f2a9c1d')
    >>> job_tag({}) == job_tag({}) and job_tag({}).startswith(f"p{os.getpid()}-")
    True
    >>> job_tag({"BEYONDLABELS_JOB_TAG": "p811-ab12", "SLURM_JOB_ID": "814"})
    'p811-ab12'
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping

__all__ = ["RESOLVER", "job_tag", "register_resolver"]

RESOLVER = "beyondlabels.job_tag"
INHERITED = "BEYONDLABELS_JOB_TAG"
_RANDOM = secrets.token_hex(2)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _clean(value: str) -> str:
    return _UNSAFE.sub("-", value)[:40]


def job_tag(environ: Mapping[str, str] | None = None) -> str:
    """The tag of this job (rules: the module docstring); ``environ`` defaults to the process's environment, where the
    tag is then kept for the processes this one starts."""
    env = os.environ if environ is None else environ
    inherited = env.get(INHERITED)
    if inherited:
        return _clean(inherited)
    tag = _own_tag(env)
    if environ is None:
        os.environ[INHERITED] = tag
    return tag


def _own_tag(env: Mapping[str, str]) -> str:
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"j{_clean(array)}_{_clean(task)}"
    if env.get("SLURM_JOB_ID"):
        return f"j{_clean(env['SLURM_JOB_ID'])}"
    run = env.get("TORCHELASTIC_RUN_ID")
    if run and run != "none":
        return f"r{_clean(run)[:8]}"
    return f"p{os.getpid()}-{_RANDOM}"


def register_resolver() -> None:
    """Register :func:`job_tag` as the OmegaConf resolver ``beyondlabels.job_tag`` (once; nothing without
    OmegaConf)."""
    try:
        from omegaconf import OmegaConf
    except ImportError:  # pragma: no cover - hydra-core (and so OmegaConf) is a dependency
        return
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, lambda: job_tag())
