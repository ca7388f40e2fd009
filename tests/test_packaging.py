"""The built wheel ships the top-level callbacks/ folder as beyondlabels.callbacks, and the demo data."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_callbacks_and_demo_data(tmp_path: Path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(REPO_ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = tmp_path.glob("beyondlabels-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected_callbacks = {f"beyondlabels/callbacks/{p.name}" for p in (REPO_ROOT / "callbacks").glob("*.py")}
    assert expected_callbacks and expected_callbacks <= names, sorted(expected_callbacks - names)
    for data in ("beyondlabels/demo/data/taxonomy.yaml", "beyondlabels/demo/data/profiles.yaml"):
        assert data in names
    # every Python package folder under src/ made it into the wheel
    for init in (REPO_ROOT / "src").rglob("__init__.py"):
        assert init.relative_to(REPO_ROOT / "src").as_posix() in names
    assert not any(name.startswith(("tests/", "conf/")) for name in names)


def test_installed_package_exposes_callbacks():
    import beyondlabels.callbacks as callbacks

    assert Path(callbacks.__file__).resolve().parent == (REPO_ROOT / "callbacks").resolve()
    assert hasattr(callbacks, "RetrievalEvalCallback")
