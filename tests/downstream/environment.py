"""A virtual environment of its own for the built wheel, as a user's: the wheel installed with its dependencies and
``lightning`` by pip, nothing of the checkout on its path.

Installing torch and the rest takes minutes, so the environment is kept between runs, under ``build/downstream/``
(``make clean`` removes it; ``BEYONDLABELS_DOWNSTREAM_CACHE`` moves it), in a folder named by a hash of what pip
installs into it besides the wheel: the package's dependencies as pyproject.toml declares them, the ``lightning``
requirement, the interpreter. Until they change, a run only reinstalls the wheel (``--no-deps --force-reinstall``);
``pip check`` then checks the wheel's requirements against what is installed, so a dependency the wheel adds without a
change of the key is reported, not hidden.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPLETE = "complete"  # written last: a venv without it was interrupted and is made again
PIP_TIMEOUT = 1800


def lightning_requirement() -> str:
    """The ``lightning`` requirement of the test extra (the package the outside project imports)."""
    for line in (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines():
        requirement = line.strip().strip(",").strip('"')
        if requirement.startswith("lightning>") or requirement.startswith("lightning="):
            return requirement
    raise AssertionError("pyproject.toml's test extra names no lightning requirement")


def dependency_key() -> str:
    """A hash of what the environment holds besides the wheel."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the whole file then
        declared = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    else:
        with open(REPO_ROOT / "pyproject.toml", "rb") as handle:
            declared = repr(sorted(tomllib.load(handle)["project"]["dependencies"]))
    text = "\n".join([declared, lightning_requirement(), sys.version, sys.platform])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("BEYONDLABELS_DOWNSTREAM_CACHE") or REPO_ROOT / "build" / "downstream")


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(python), "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
        env=clean_env(python.parent.parent),
    )
    if done.returncode != 0:
        raise AssertionError(
            f"pip {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        )
    return done


def clean_env(venv: Path, **overrides: str) -> dict[str, str]:
    """The environment of a command in ``venv``: its bin/ first on PATH, none of the checkout's paths (the tests give
    their children PYTHONPATH=<checkout>), offline W&B."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "WANDB_SERVICE")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), WANDB_MODE="offline")
    env.update(WANDB_SILENT="true", PYTHONUNBUFFERED="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(overrides)
    return env


def prepare(wheel: Path) -> tuple[Path, dict[str, float | bool]]:
    """The environment with ``wheel`` installed, made on the first run and reused after; and what it took
    (``{"created": bool, "seconds": float}``)."""
    started = time.monotonic()
    root = cache_root()
    venv = root / f"venv-{dependency_key()}"
    python = venv / "bin" / "python"
    created = not (venv / COMPLETE).is_file()
    if created:
        for stale in root.glob("venv-*"):  # another key's, or this one interrupted: gigabytes each
            shutil.rmtree(stale, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=600)
        _pip(python, "install", "--quiet", str(wheel), lightning_requirement())
        (venv / COMPLETE).write_text(f"{wheel.name}\n")
    else:
        _pip(python, "install", "--quiet", "--no-deps", "--force-reinstall", str(wheel))
    _pip(python, "check")
    return venv, {"created": created, "seconds": time.monotonic() - started}
