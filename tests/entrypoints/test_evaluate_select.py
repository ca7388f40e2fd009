"""evaluate.py task=select on a run folder: the per-query files lined up by query id (absent and NaN queries left
out), the kernel's selection over them written as selection.json and printed as the run summary prints it, the
metric chosen by name or by headline, and clear errors for runs without per-query values."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from beyondlabels import tasks  # noqa: E402
from beyondlabels.functional.retrieval import retrieval_output_schema
from beyondlabels.functional.selection import select_checkpoints
from beyondlabels.io import HistoryLog, read_selection, save_per_query, write_selection
from tests.entrypoints.helpers import evaluate_config
from tests.oracles.selection_sims import correlated_hits

STEPS = [10, 20, 30, 40, 50]


def _run_folder(root: Path, steps=STEPS, queries: int = 300) -> tuple[Path, np.ndarray, np.ndarray]:
    """A retrieval callback folder with a per-query file per step: P@1 0/1 hits of checkpoints of rising then flat
    value, labels of 6 classes; query 0 is missing at step 20 and query 1 is NaN at step 40."""
    folder = root / "run" / "retrieval"
    (folder / "per_query").mkdir(parents=True)
    schema = retrieval_output_schema((1, 5))
    (folder / "schema.json").write_text(json.dumps(schema.to_json()))
    hits = correlated_hits(np.random.default_rng(0), [0.6, 0.78, 0.8, 0.8, 0.79], queries)
    labels = np.arange(queries) % 6
    ids = np.arange(100, 100 + queries)
    records = []
    for column, step in enumerate(steps):
        values = hits[:, column].copy()
        keep = np.ones(queries, dtype=bool)
        if step == 20:
            keep[0] = False
        if step == 40:
            values[1] = np.nan
        name = f"per_query/step_{step:09d}.npz"
        save_per_query(
            folder / name, {"query_id": ids[keep], "precision@1": values[keep], "label": labels[keep]}, schema=None
        )
        mean = float(np.nanmean(values))
        records.append({"step": step, "epoch": column, "precision@1": mean, "per_query_file": name})
    HistoryLog(folder / "history.jsonl").write(records)
    return folder, hits[2:], labels[2:]


def test_select_writes_and_prints_the_kernel_s_selection(tmp_path: Path, capsys):
    folder, hits, labels = _run_folder(tmp_path)
    output = tmp_path / "out" / "select.json"
    cfg = evaluate_config(tmp_path, "task=select", f"runs=[{folder.parent}]", "rounds=300", f"output={output}")
    report = tasks.select.run(cfg)
    expected = select_checkpoints(torch.tensor(hits), STEPS, rounds=300, labels=torch.tensor(labels))
    written = json.loads((folder / "selection.json").read_text())
    assert {k: written[k] for k in expected} == json.loads(json.dumps(expected))
    assert written["queries_dropped"] == 2 and written["monitor"] == "retrieval/precision@1"
    assert json.loads(output.read_text())["selections"][0]["set_steps"] == expected["set_steps"]
    assert report["selections"][0]["best_step"] == expected["best_step"]
    printed = capsys.readouterr().out
    assert f"steps as good as the best (90%): {', '.join(str(s) for s in expected['set_steps'])};" in printed
    assert f"corrected {expected['estimate']:.3f}" in printed


def test_select_keeps_the_checkpoints_an_earlier_file_named(tmp_path: Path):
    folder, _, _ = _run_folder(tmp_path)
    earlier = {"key": "precision@1", "monitor": "retrieval/precision@1", "steps": [10], "means": [0.5]}
    earlier.update({"pvalues": [1.0], "set_steps": [10], "best_step": 10, "best_value": 0.5, "estimate": 0.5})
    earlier.update({"ci_low": 0.4, "ci_high": 0.6, "size": 0.1, "confidence": 0.95, "mode": "max"})
    files = [{"file": "a.ckpt", "step": 10, "in_set": True}, {"file": "b.ckpt", "step": 15, "in_set": True}]
    write_selection(folder, {**earlier, "checkpoints": files})
    tasks.select.run(evaluate_config(tmp_path, "task=select", f"runs=[{folder}]", "rounds=100", "size=0.2"))
    selection = read_selection(folder)
    assert selection.level == 0.8
    assert [c["in_set"] for c in selection.checkpoints] == [10 in selection.set_steps, None]  # 15: not evaluated


def test_select_chooses_the_metric_and_explains_what_is_missing(tmp_path: Path):
    folder, _, _ = _run_folder(tmp_path)
    with pytest.raises(ValueError, match="keeps no per-query values of 'num_queries'"):
        tasks.select.run(evaluate_config(tmp_path, "task=select", f"runs=[{folder}]", "metric=retrieval/num_queries"))
    with pytest.raises(ValueError, match="found no evaluation folder"):
        tasks.select.run(evaluate_config(tmp_path, "task=select", f"runs=[{folder}]", "metric=other/precision@1"))
    with pytest.raises(ValueError, match="task=select needs runs="):
        tasks.select.run(evaluate_config(tmp_path, "task=select"))
    for file in (folder / "per_query").iterdir():
        file.unlink()
    with pytest.raises(ValueError, match="no evaluation with a per-query file"):
        tasks.select.run(evaluate_config(tmp_path, "task=select", f"runs=[{folder}]", "write=false"))


def test_select_refuses_a_folder_a_training_still_writes_into(tmp_path: Path):
    from beyondlabels.io.run_lock import LOCK_FILE, RunFolderInUseError

    folder, _, _ = _run_folder(tmp_path)
    # the lock of a training that runs: another live process on this host (this test's parent)
    holder = {"pid": os.getppid(), "host": socket.gethostname(), "started": "2026-01-01T00:00:00+00:00"}
    (folder / LOCK_FILE).write_text(json.dumps(holder))
    with pytest.raises(RunFolderInUseError, match="task=select write=false prints the selection"):
        tasks.select.run(evaluate_config(tmp_path, "task=select", f"runs=[{folder}]", "rounds=100"))
    assert not (folder / "selection.json").exists()
    tasks.select.run(evaluate_config(tmp_path, "task=select", f"runs=[{folder}]", "rounds=100", "write=false"))
    assert not (folder / "selection.json").exists()
    (folder / LOCK_FILE).unlink()
    tasks.select.run(evaluate_config(tmp_path, "task=select", f"runs=[{folder}]", "rounds=100"))
    assert (folder / "selection.json").is_file() and not (folder / LOCK_FILE).exists()
