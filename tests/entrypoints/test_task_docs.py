"""The entry point's own help names every task: evaluate.py's docstring (made from the task registry,
beyondlabels.families) and ``python evaluate.py --tasks`` show a command line of every task of
beyondlabels.tasks.TASKS, and of no other; the header comment of evaluate.yaml (the package's configs) names only tasks
that exist and points to ``--tasks``."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from beyondlabels.tasks import TASKS  # noqa: E402
from tests.entrypoints.helpers import EVALUATE_CONF, REPO_ROOT


def _named(text: str) -> set[str]:
    return set(re.findall(r"python evaluate\.py task=([A-Za-z_]+)", text))


def _header_comment(config: Path) -> str:
    lines = config.read_text(encoding="utf-8").splitlines()
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line)
    return "\n".join(header)


def test_evaluate_docstring_names_every_task():
    spec = importlib.util.spec_from_file_location("evaluate_entry", REPO_ROOT / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.__doc__ is not None and "{tasks}" not in module.__doc__
    assert _named(module.__doc__) == set(TASKS)


def test_evaluate_tasks_option_prints_every_task():
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "evaluate.py"), "--tasks"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert _named(result.stdout) == set(TASKS) and all(line.startswith("python evaluate.py task=") for line in lines)


def test_evaluate_config_header_names_only_tasks_and_points_to_the_list():
    header = _header_comment(EVALUATE_CONF / "evaluate.yaml")
    assert header and _named(header) and _named(header) <= set(TASKS) and "python evaluate.py --tasks" in header
