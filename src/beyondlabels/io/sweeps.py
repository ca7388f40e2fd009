"""The jobs of a sweep grouped by setting: a *setting* is a job's Hydra overrides without its seed overrides.

Three modules are named after sweeps, one per layer: :mod:`beyondlabels.functional.sweeps` the statistics,
:mod:`beyondlabels.io.sweeps` the reading and grouping of the job folders, :mod:`beyondlabels.reporting.sweeps` the
tables and pictures; each name reads as what a sweep is to its layer.

A Hydra job folder names its command-line overrides in ``.hydra/overrides.yaml`` (:func:`run_overrides`). Two jobs
belong to one *group* when their overrides, the seed keys (default ``seed``) and the keys of where a job runs and logs
(:data:`RUN_KEYS`: a resumed job's ``ckpt_path``, ``paths.*``, ``logger``, the device count, ...) left out, are the same
set; the seed overrides tell the group's jobs apart (``"seed=2"``; ``""`` for a job without one). The *group key*
(:func:`sweep_group`) is the setting as one stable string: its overrides sorted and joined by ``,`` (the same jobs give
the same key in whatever order the command line named them); train.py gives it to W&B as the run's ``group``.

Examples:
    >>> sweep_group(["seed=2", "model.lr=0.003", "experiment=shapes_smoke"])
    'experiment=shapes_smoke,model.lr=0.003'
    >>> split_overrides(["+seed=2", "model.lr=0.003"])
    (['model.lr=0.003'], ['+seed=2'])
    >>> sweep_group(
    ...     ["model.lr=0.003", "seed=2", "ckpt_path=/ckpt/last.ckpt", "paths.log_dir=/scratch", "trainer.devices=4"]
    ... )
    'model.lr=0.003'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from beyondlabels.io.run_files import EvaluationRun, run_overrides

__all__ = ["RUN_KEYS", "SEED_KEYS", "SweepJob", "group_jobs", "override_name", "split_overrides", "sweep_group"]

SEED_KEYS = ("seed",)
# Override keys (and key prefixes: ``paths`` covers ``paths.log_dir``) that say where and how a job runs and logs, not
# what it trains; a job resumed with ``ckpt_path=`` or run on more devices stays in its setting's group.
RUN_KEYS = (
    "ckpt_path",
    "paths",
    "hydra",
    "logger",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.enable_progress_bar",
)


def _is_run_key(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in RUN_KEYS)


def override_name(override: str) -> str:
    """The config key an override sets: ``"model.lr"`` for ``"model.lr=0.003"``, ``"+seed=1"`` or ``"~seed"``.

    Examples:
        >>> override_name("++trainer.max_epochs=3"), override_name("~logger"), override_name("data@x=y")
        ('trainer.max_epochs', 'logger', 'data@x')
    """
    return override.lstrip("+~").split("=", 1)[0]


def _check_seed_keys(seed_keys: Sequence[str]) -> tuple[str, ...]:
    keys = (seed_keys,) if isinstance(seed_keys, str) else tuple(seed_keys)
    if not all(isinstance(k, str) and k for k in keys):
        raise ValueError(f"seed_keys must be config keys such as [seed] or [seed,data.seed], got {seed_keys!r}")
    return keys


def split_overrides(overrides: Sequence[str], seed_keys: Sequence[str] = SEED_KEYS) -> tuple[list[str], list[str]]:
    """``(setting, seeds)``: the overrides of other keys than ``seed_keys`` and :data:`RUN_KEYS`, and those of
    ``seed_keys``, in order."""
    keys = _check_seed_keys(seed_keys)
    setting = [o for o in overrides if override_name(o) not in keys and not _is_run_key(override_name(o))]
    seeds = [o for o in overrides if override_name(o) in keys]
    return setting, seeds


def sweep_group(overrides: Sequence[str], seed_keys: Sequence[str] = SEED_KEYS) -> str:
    """The group key of a job (the module docstring); ``""`` when the job has no override but seeds."""
    setting, _ = split_overrides(overrides, seed_keys)
    return ",".join(sorted(setting))


@dataclass
class SweepJob:
    """One job of a sweep: its run folder, its evaluations by prefix, its setting and its seed.

    Attributes:
        folder: The run folder (a report's file for an evaluate.py report).
        runs: ``{prefix: EvaluationRun}`` of the job's callbacks.
        overrides: Every Hydra override of the job.
        setting: The overrides without the seed keys (the group).
        seed: The seed overrides joined by ``,`` (``""`` without one); jobs of one group with the same seed get
            `` #2``, `` #3``, ... appended.
    """

    folder: Path
    runs: dict[str, EvaluationRun] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    setting: list[str] = field(default_factory=list)
    seed: str = ""


def group_jobs(runs: Sequence[EvaluationRun], seed_keys: Sequence[str] = SEED_KEYS) -> dict[str, list[SweepJob]]:
    """The jobs of ``runs`` (evaluations read with :func:`beyondlabels.io.read_evaluation_run`, one per callback of each
    run folder) grouped by setting: ``{group key: [SweepJob, ...]}`` in the order the runs are given. A job without
    a seed override is a group of its own, keyed by its folder.

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> def job(n, overrides):
        ...     (root / n / ".hydra").mkdir(parents=True)
        ...     _ = (root / n / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\\n" for o in overrides))
        ...     return EvaluationRun(
        ...         root / n / "retrieval", n, "retrieval", [], run_folder=root / n, overrides=overrides
        ...     )
        >>> groups = group_jobs([job("0", ["lr=1", "seed=1"]), job("1", ["lr=2", "seed=1"]),
        ...                      job("2", ["lr=1", "seed=2"]), job("3", ["lr=1"])])
        >>> [(key if key.startswith("lr") else Path(key).name, [j.seed for j in jobs]) for key, jobs in groups.items()]
        [('lr=1', ['seed=1', 'seed=2']), ('lr=2', ['seed=1']), ('3', [''])]
    """
    keys = _check_seed_keys(seed_keys)
    jobs: dict[Path, SweepJob] = {}
    for run in runs:
        folder = Path(run.run_folder or run.path)
        job = jobs.get(folder)
        if job is None:
            overrides = list(run.overrides) if run.overrides else run_overrides(folder)
            setting, seeds = split_overrides(overrides, keys)
            job = jobs[folder] = SweepJob(folder, {}, overrides, setting, ",".join(seeds))
        job.runs[run.prefix] = run
    groups: dict[str, list[SweepJob]] = {}
    for job in jobs.values():
        key = sweep_group(job.overrides, keys) if job.seed else str(job.folder)  # without a seed: a group of its own
        groups.setdefault(key, []).append(job)
    for members in groups.values():
        seen: dict[str, int] = {}
        for job in members:
            seen[job.seed] = seen.get(job.seed, 0) + 1
            if seen[job.seed] > 1:
                job.seed = f"{job.seed} #{seen[job.seed]}".strip()
    return groups
