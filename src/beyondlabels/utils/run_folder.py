"""The run folder of a Hydra job, locked before anything is written into it (``hydra.callbacks`` of the configs).

Hydra writes ``.hydra/config.yaml`` and ``.hydra/overrides.yaml`` into a job's folder before the job's code runs, so
a lock taken by ``train.py`` itself would come after a second job had already replaced the first job's overrides.
:class:`RunFolderLockCallback` takes the folder's lock (:class:`beyondlabels.io.run_lock.RunFolderLock`) at
``on_run_start``, before Hydra makes the folder, pinning the folder's name in the config so that Hydra uses the very
folder that was locked; for a multirun it locks the sweep folder at ``on_multirun_start`` and each job's folder at
``on_job_start``. A folder held by another process stops the program with the message of a
:class:`~beyondlabels.io.run_lock.RunFolderInUseError`, which names the folder and the holder; nothing is written.
(Hydra turns an exception of a callback into a warning and goes on, so the callback ends the program itself, with
``SystemExit``, as Hydra does for its own errors.)

Only the process a launcher started as rank 0 takes locks (:func:`launched_as_rank_zero`): the other ranks of a
distributed job (re-run by Lightning's launcher, ``torchrun`` or ``srun``) share rank 0's folder and write nothing
there.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from beyondlabels.io.run_lock import RunFolderInUseError, RunFolderLock

__all__ = ["RunFolderLockCallback", "launched_as_rank_zero"]

log = logging.getLogger(__name__)

# The variables by which launchers tell a process its global rank, then its rank on a node and the node's.
_GLOBAL_RANKS = ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK")
_LOCAL_RANKS = ("LOCAL_RANK", "NODE_RANK", "GROUP_RANK")


def launched_as_rank_zero(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a launcher started this process as the global rank 0 of its job (or as no rank at all).

    Examples:
        >>> launched_as_rank_zero({}), launched_as_rank_zero({"RANK": "1"}), launched_as_rank_zero({"LOCAL_RANK": "2"})
        (True, False, False)
        >>> launched_as_rank_zero({"SLURM_PROCID": "0", "LOCAL_RANK": "0"})
        True
    """
    env = os.environ if environ is None else environ
    for name in _GLOBAL_RANKS:
        if env.get(name, "").strip():
            return env[name].strip() == "0"
    return all(env.get(name, "0").strip() in ("", "0") for name in _LOCAL_RANKS)


class RunFolderLockCallback(Callback):
    """A Hydra callback that locks each job's folder before Hydra writes into it (behaviour: the module docstring).

    Configured in ``conf/hydra/default.yaml`` as ``callbacks: {run_folder_lock: {_target_: ...}}``.
    """

    def __init__(self) -> None:
        self._locks: dict[str, RunFolderLock] = {}

    def _take(self, name: str, config: DictConfig, key: str, pin: bool = True) -> None:
        if not launched_as_rank_zero():
            return
        folder = OmegaConf.select(config, key)
        if not folder:
            return
        if pin:  # `${now:...}` resolves once: Hydra uses the folder that was locked
            with read_write(config), open_dict(config):
                OmegaConf.update(config, key, str(folder), merge=False)
        try:
            self._locks[name] = RunFolderLock(str(folder)).acquire()
        except RunFolderInUseError as exc:
            raise SystemExit(f"Error: {exc}") from None

    def _give_back(self, name: str) -> None:
        lock = self._locks.pop(name, None)
        if lock is not None:
            lock.release()

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._take("run", config, "hydra.run.dir")

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._give_back("run")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._take("sweep", config, "hydra.sweep.dir")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._give_back("sweep")

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._take("job", config, "hydra.runtime.output_dir", pin=False)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        self._give_back("job")
