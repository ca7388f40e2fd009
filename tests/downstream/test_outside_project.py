"""The package as a user meets it: the built wheel installed with pip into an environment of its own
(tests/downstream/environment.py), and a small outside project (tests/downstream/project/) run there from an empty
folder: its own Hydra primary config adds the shipped retrieval callback for lightning.pytorch
(``hydra.searchpath=[pkg://beyondlabels.conf]``, no value of its own but ``encode_method=forward``), its own module
with ``(x, y)`` batches is fitted, and the ``beyondlabels`` command writes the report of that run. The values logged
are checked against a numpy computation on the fitted model's embeddings.

The first run makes the environment (pip installs torch and the rest: minutes); later runs reinstall the wheel only.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from beyondlabels.tasks import TASKS
from tests.downstream import environment
from tests.wheel import build_wheel

PROJECT = Path(__file__).resolve().parent / "project"


def leave_one_out(embeddings: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """P@1 and R-precision by cosine similarity, every item a query against all the others (numpy, written apart from
    the package's kernels)."""
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit.astype(np.float64) @ unit.T.astype(np.float64)
    np.fill_diagonal(similarity, -np.inf)
    order = np.argsort(-similarity, axis=1, kind="stable")
    same = labels[order] == labels[:, None]
    sizes = np.array([(labels == label).sum() - 1 for label in labels])
    r_precision = np.array([same[i, : sizes[i]].mean() for i in range(len(labels))])
    return {"precision@1": float(same[:, 0].mean()), "r_precision": float(r_precision.mean())}


def _run(venv: Path, cwd: Path, *command: str, timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(
        list(command), cwd=cwd, env=environment.clean_env(venv), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    return done


@pytest.mark.slow
def test_an_outside_project_runs_on_the_installed_wheel(tmp_path: Path):
    started = time.monotonic()
    wheel, _ = build_wheel(tmp_path / "wheel")
    venv, made = environment.prepare(wheel)
    print(f"\nthe environment: {'made' if made['created'] else 'reused'} in {made['seconds']:.0f} s ({venv})")
    python, command = str(venv / "bin" / "python"), str(venv / "bin" / "beyondlabels")
    project = shutil.copytree(PROJECT, tmp_path / "project")  # an empty folder but the project's own files

    # the package is the wheel's, not the checkout's
    where = _run(venv, project, python, "-c", "import beyondlabels; print(beyondlabels.__file__)").stdout.strip()
    assert Path(where).is_relative_to(venv), where

    shown = _run(venv, project, command, "--help").stdout
    assert {name for name in TASKS if f"beyondlabels task={name} " in shown} == set(TASKS)

    fitted = _run(venv, project, python, "train_script.py").stdout
    (run,) = re.findall(r"^run folder: (.+)$", fitted, re.M)
    run = Path(run)
    assert run.is_relative_to(project / "outputs")  # Hydra's default folder of the project's own app
    config = (run / ".hydra" / "config.yaml").read_text()
    assert "_target_: beyondlabels.callbacks.lightning.RetrievalEvalCallback" in config
    records = [json.loads(line) for line in (run / "retrieval" / "history.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all("error" not in r for r in records)  # one evaluation per validation epoch
    saved = np.load(run / "val_embeddings.npz")
    expected = leave_one_out(saved["embeddings"], saved["labels"])
    for key, value in expected.items():
        assert records[-1][key] == pytest.approx(value, abs=1e-6), key
    assert 0.3 < expected["precision@1"] < 1  # 4 classes, chance 0.25: the model learnt, and not trivially

    reported = _run(venv, project, command, "task=report", f"runs=[{run}]").stdout
    assert re.search(rf"precision@1 ↑\s+{records[-1]['precision@1']:.4f}", reported), reported
    (job,) = (project / "logs" / "evaluate" / "runs").iterdir()
    page = (job / "report.html").read_text(encoding="utf-8")
    assert "retrieval" in page and "precision@1" in page and f"{records[-1]['precision@1']:.4f}" in page
    print(f"the outside project's test took {time.monotonic() - started:.0f} s")
