"""Run a documentation block as a user runs it: saved as a script in an empty folder and run by a fresh interpreter
that sees only beyondlabels and what its own dependencies bring.

The test environment holds more than a user's (the test extra: ``lightning``, ``tensorboard``, scikit-learn, ...). A
script that imported one of those would pass here and fail for a user who installed only the package, so the
interpreter starts isolated (``python -I``: no PYTHONPATH, no user site, not the repository's root) and hides every
installed distribution outside the requirement closure of ``beyondlabels`` (its requirements without extras, theirs,
and so on): importing one raises ``ModuleNotFoundError``, and probes (``importlib.util.find_spec``,
``importlib.metadata``, which Lightning and torchmetrics use to decide what is available) find nothing, as in an
environment where it was never installed.

Example:
    >>> sorted(requirement_closure("beyondlabels") & {"torch", "pytorch-lightning", "lightning", "pytest"})
    ['pytorch-lightning', 'torch']
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Runs first in the fresh interpreter: argv[1] is {"modules": [...], "distributions": [...]} to hide, argv[2] the script
_BOOTSTRAP = """
import importlib.abc, importlib.metadata as metadata, importlib.util, json, re, runpy, sys
hidden = json.loads(sys.argv[1])
MODULES, DISTRIBUTIONS = frozenset(hidden["modules"]), frozenset(hidden["distributions"])
_find_spec, _discover = importlib.util.find_spec, metadata.Distribution.discover.__func__

def find_spec(name, package=None):
    return None if name.partition(".")[0] in MODULES else _find_spec(name, package)

def discover(cls, **kwargs):
    for dist in _discover(cls, **kwargs):
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower() not in DISTRIBUTIONS:
            yield dist

class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in MODULES:
            raise ModuleNotFoundError(f"No module named {name!r} (not a dependency of beyondlabels)", name=name)
        return None

importlib.util.find_spec, metadata.Distribution.discover = find_spec, classmethod(discover)
sys.meta_path.insert(0, Hidden())
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def requirement_closure(name: str) -> set[str]:
    """The canonical names of ``name``'s distribution and of every distribution it requires, recursively (no extras;
    requirements whose environment marker is false here left out; requirements not installed kept as names)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = canonicalize_name(todo.pop())
        if current in seen:
            continue
        seen.add(current)
        try:
            requires = metadata.requires(current) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def hidden_outside(name: str) -> dict[str, list[str]]:
    """The installed distributions outside ``name``'s requirement closure, and the top-level modules only they
    provide."""
    allowed = requirement_closure(name)
    distributions = sorted({canonicalize_name(d.metadata["Name"]) for d in metadata.distributions()} - allowed)
    modules = sorted(
        module
        for module, owners in metadata.packages_distributions().items()
        if not module.startswith("_") and not any(canonicalize_name(d) in allowed for d in owners)
    )
    return {"modules": modules, "distributions": distributions}


@dataclass(frozen=True)
class ScriptRun:
    folder: Path
    stdout: str
    stderr: str


def run_as_user_script(code: str, folder: Path, name: str = "script.py", timeout: int = 600) -> ScriptRun:
    """Write ``code`` to ``folder/name`` (``folder`` empty) and run it there, isolated as the module docstring says.

    Raises:
        AssertionError: when the script fails, with the end of its output.
    """
    assert not any(folder.iterdir()), f"{folder} is not empty"
    (folder / name).write_text(code, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(OMP_NUM_THREADS="1", WANDB_MODE="offline", COLUMNS="120")
    hidden = json.dumps(hidden_outside("beyondlabels"))
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _BOOTSTRAP, hidden, name],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{name} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return ScriptRun(folder, proc.stdout, proc.stderr)
