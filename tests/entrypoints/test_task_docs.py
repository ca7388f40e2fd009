"""The entry point's own help names every task: evaluate.py's docstring and the header comment of conf/evaluate.yaml
each show a command line of every task of beyondlabels.tasks.TASKS, and of no other."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from helpers import REPO_ROOT  # noqa: E402

from beyondlabels.tasks import TASKS  # noqa: E402


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
    docstring = ast.get_docstring(ast.parse((REPO_ROOT / "evaluate.py").read_text(encoding="utf-8")))
    assert docstring is not None
    assert _named(docstring) == set(TASKS)


def test_evaluate_config_header_names_every_task():
    header = _header_comment(REPO_ROOT / "conf" / "evaluate.yaml")
    assert header and _named(header) == set(TASKS)
