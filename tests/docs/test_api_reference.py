"""The API reference builds from the docstrings with warnings as errors, and documents every public name."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["functional", "metrics", "taxonomy", "profiles", "io", "reporting", "tasks", "utils", "schema"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_docs.py"), str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if re.match(r"(WARNING|ERROR)\b", line)]
    assert result.returncode == 0 and not warnings, "\n".join(warnings) or output[-3000:]
    return site_dir


def anchors(page: Path) -> set[str]:
    return set(re.findall(r'id="([\w.]+)"', page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", PAGES)
def test_every_public_name_of_a_package_has_its_entry(site: Path, name: str):
    module = importlib.import_module(f"beyondlabels.{name}")
    public = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    found = anchors(site / "api" / name / "index.html")
    missing = [n for n in public if f"beyondlabels.{name}.{n}" not in found]
    assert not missing, f"beyondlabels.{name}: no entry for {missing}"


def test_every_callback_has_its_entry_with_its_arguments(site: Path):
    from beyondlabels.callbacks import pytorch_lightning as package

    html = (site / "api" / "callbacks" / "index.html").read_text(encoding="utf-8")
    found = anchors(site / "api" / "callbacks" / "index.html")
    here = ("beyondlabels.callbacks.pytorch_lightning", "beyondlabels.callbacks.base")  # shard_loader: its own entry
    missing = [n for n in package.__all__ if not any(f"{module}.{n}" in found for module in here)]
    assert not missing, f"beyondlabels.callbacks: no entry for {missing}"
    assert "every_n_epochs" in html  # the constructor's arguments, inherited from the shared base


def test_the_guides_are_pages_of_the_site(site: Path):
    for guide in ("convergence", "selection", "rprecision", "search", "adding_a_metric_family"):
        assert (site / guide / "index.html").is_file(), guide
