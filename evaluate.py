"""Offline evaluation of saved outputs, and comparison of runs (Hydra entry point).

{tasks}

``task=<name>`` selects a task of :data:`beyondlabels.tasks.TASKS` and its settings ``task/<name>.yaml`` (the
package's configs, :data:`beyondlabels.conf.EVALUATE_SEARCHPATH`); what each task reads and writes is described in its
module, ``beyondlabels.tasks.<name>``. The command lines above come from the task registry
(:mod:`beyondlabels.families`: each family's task, then the tools); ``python evaluate.py --tasks`` prints them,
``python evaluate.py --help`` with where outputs go. The installed package runs the same entry as the command
``beyondlabels`` (:mod:`beyondlabels.cli`), from any folder.
"""

from __future__ import annotations

import textwrap

from beyondlabels.cli import main, task_lines

PROGRAM = "python evaluate.py"
__doc__ = __doc__.format(tasks=textwrap.indent("\n".join(task_lines(PROGRAM)), "    "))


if __name__ == "__main__":
    main(program=PROGRAM)
