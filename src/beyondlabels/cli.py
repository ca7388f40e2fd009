"""The ``beyondlabels`` command: the offline tasks (evaluate saved outputs, compare and report training runs) from any
folder, with the configs that ship in the package.

::

    beyondlabels task=report runs=[logs/train/runs/2026-01-01_12-00-00]
    beyondlabels task=compare runs=[run_a,run_b]
    beyondlabels --help                     # every task with a command line
    beyondlabels task=report --cfg job      # the settings a task runs with (any Hydra flag: --hydra-help)

It is a Hydra app whose configs are :data:`beyondlabels.conf.EVALUATE_SEARCHPATH` (``evaluate.yaml``: ``task=<name>``
selects ``task/<name>.yaml``); ``python evaluate.py ...`` in a clone of the repository runs this same entry. A job
writes its log and its report under ``./logs/evaluate/runs/<date>/`` of the folder it is started from
(``paths.log_dir=<folder>`` moves it; ``output=<file>`` names the report).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from beyondlabels.conf import EVALUATE_SEARCHPATH

__all__ = ["help_text", "main", "task_lines"]

PROGRAM = "beyondlabels"
HELP_FLAGS = frozenset({"--help", "-h"})


def task_lines(program: str = PROGRAM) -> list[str]:
    """A command line of every task (the registry's, :func:`beyondlabels.tasks.usage`), started with ``program``;
    read from :mod:`beyondlabels.families` alone, so the help imports no task.

    Examples:
        >>> task_lines()[0]
        'beyondlabels task=retrieval input=embeddings.npz output=report.json k=[1,5,10]'
    """
    from beyondlabels.families import tasks

    registry = "python evaluate.py "  # how the registry's lines start
    return [f"{program} {line[len(registry) :]}" for task in tasks() for line in task.usage]


def help_text(program: str = PROGRAM) -> str:
    """What ``beyondlabels --help`` prints: the command's usage, then a command line of every task
    (:func:`task_lines`), then where outputs go and how to reach Hydra's own help.

    Examples:
        >>> text = help_text()
        >>> text.splitlines()[0]
        'usage: beyondlabels task=<name> [key=value ...] [Hydra flags]'
        >>> "beyondlabels task=report runs=" in text and "--hydra-help" in text
        True
    """
    tasks = "\n".join(f"  {line}" for line in task_lines(program))
    return f"""usage: {program} task=<name> [key=value ...] [Hydra flags]

Evaluate saved outputs offline, compare training runs and write their reports (beyondlabels).

tasks:
{tasks}

A run folder is what a training run wrote: train.py's logs/train/runs/<date>/, or the default_root_dir of your own
Trainer (the folder that holds the callbacks' retrieval/, hierarchy/, ... folders).
Outputs: the job's log and report go to ./logs/evaluate/runs/<date>/ (paths.log_dir=<folder> moves them,
output=<file> names the report).
A task's settings and their values: {program} task=<name> --cfg job
Hydra's own flags (multirun, tab completion, ...): {program} --hydra-help
"""


@hydra.main(version_base="1.3", config_path=EVALUATE_SEARCHPATH, config_name="evaluate")
def evaluate(cfg: DictConfig) -> None:
    """Run the task the command line chose (``task=<name>``) on the composed config."""
    from beyondlabels.tasks import run_task
    from beyondlabels.utils import close_wandb

    try:
        run_task(HydraConfig.get().runtime.choices["task"], cfg)
    finally:
        close_wandb()


def main(argv: Sequence[str] | None = None, program: str = PROGRAM) -> None:
    """The entry point of ``beyondlabels`` (and of ``evaluate.py``, with ``program="python evaluate.py"``).

    ``--help`` / ``-h`` print :func:`help_text`; ``--tasks`` prints only the tasks' command lines; anything else goes
    to Hydra, which reads ``sys.argv`` (``argv`` is read for these flags only).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--tasks"]:
        print("\n".join(task_lines(program)))
    elif HELP_FLAGS.intersection(args):
        print(help_text(program), end="")
    else:
        evaluate()


if __name__ == "__main__":  # pragma: no cover - python -m beyondlabels.cli
    main()
