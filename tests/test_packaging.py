"""The built wheel ships the top-level callbacks/ folder as beyondlabels.callbacks, the demo data, the Hydra configs
(src/beyondlabels/conf as beyondlabels.conf; the project's own conf/ stays out) and the console script."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.wheel import REPO_ROOT, build_wheel


@pytest.mark.slow
def test_wheel_contains_callbacks_demo_data_configs_and_script(tmp_path: Path):
    wheel, tree = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    expected_callbacks = {f"beyondlabels/callbacks/{p.name}" for p in (tree / "callbacks").glob("*.py")}
    assert expected_callbacks and expected_callbacks <= names, sorted(expected_callbacks - names)
    for data in ("beyondlabels/demo/data/taxonomy.yaml", "beyondlabels/demo/data/profiles.yaml"):
        assert data in names
    # every Python package folder under src/ made it into the wheel
    for init in (tree / "src").rglob("__init__.py"):
        assert init.relative_to(tree / "src").as_posix() in names
    # the package's configs, every one of them (pkg://beyondlabels.conf), and not the project's conf/ (the demo's)
    configs = {
        f"beyondlabels/conf/{p.relative_to(tree / 'src' / 'beyondlabels' / 'conf').as_posix()}"
        for p in (tree / "src" / "beyondlabels" / "conf").rglob("*.yaml")
    }
    assert len(configs) > 40 and configs <= names, sorted(configs - names)
    for config in ("beyondlabels/callbacks/lightning/retrieval", "beyondlabels/evaluate/task/report"):
        assert f"beyondlabels/conf/{config}.yaml" in names
    assert not any(name.startswith(("tests/", "conf/")) for name in names)
    # the console script
    (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[console_scripts]" in scripts and "beyondlabels = beyondlabels.cli:main" in scripts
    # and every module in the wheel is a tracked source file: nothing stale from an earlier build or a local file
    tracked = {p.relative_to(tree / "src").as_posix() for p in (tree / "src").rglob("*.py")}
    tracked |= {
        f"beyondlabels/callbacks/{p.relative_to(tree / 'callbacks').as_posix()}"
        for p in (tree / "callbacks").rglob("*.py")
    }
    shipped = {name for name in names if name.endswith(".py")}
    assert shipped <= tracked, sorted(shipped - tracked)


def test_installed_package_exposes_callbacks():
    import beyondlabels.callbacks as callbacks

    assert Path(callbacks.__file__).resolve().parent == (REPO_ROOT / "callbacks").resolve()
    assert hasattr(callbacks, "RetrievalEvalCallback")
