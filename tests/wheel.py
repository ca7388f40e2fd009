"""The wheel as a user gets it, built from the files git tracks (tests/test_packaging.py, tests/downstream/)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def tracked_copy(dest: Path) -> Path:
    """The files git tracks, as they are in the working tree, copied to ``dest``: the build sees no ``build/``,
    ``*.egg-info`` or other untracked file of the checkout, and writes none into it."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, check=True, capture_output=True).stdout
    for rel in filter(None, listed.decode().split("\0")):
        src = REPO_ROOT / rel
        if src.is_file():  # a tracked file deleted in the working tree is not part of it
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def build_wheel(folder: Path) -> tuple[Path, Path]:
    """Build the wheel of a tracked copy of the checkout in ``folder``; ``(wheel, tree)``."""
    tree = tracked_copy(folder / "tree")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(folder / "dist"), str(tree)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = (folder / "dist").glob("beyondlabels-*.whl")
    return wheel, tree
