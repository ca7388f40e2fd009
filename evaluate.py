"""Offline evaluation of saved outputs, and comparison of runs (Hydra entry point).

{tasks}

``task=<name>`` selects a task of :data:`beyondlabels.tasks.TASKS` and its settings ``conf/task/<name>.yaml``; what
each task reads and writes is described in its module, ``beyondlabels.tasks.<name>``. The command lines above come
from the task registry (:mod:`beyondlabels.families`: each family's task, then the tools); ``python evaluate.py
--tasks`` prints them.
"""

from __future__ import annotations

import sys
import textwrap

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from beyondlabels.tasks import run_task, usage
from beyondlabels.utils import close_wandb

__doc__ = __doc__.format(tasks=textwrap.indent(usage(), "    "))


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    try:
        run_task(HydraConfig.get().runtime.choices["task"], cfg)
    finally:
        close_wandb()


if __name__ == "__main__":
    if sys.argv[1:] == ["--tasks"]:
        print(usage())
    else:
        main()
