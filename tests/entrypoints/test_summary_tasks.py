"""evaluate.py task=compare and task=report on finished run folders print the run summary train.py ends with (the
family's headline keys), and ``full_table=true`` prints every key; the table compare returns (and saves) keeps every
key whatever is printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from beyondlabels import tasks  # noqa: E402
from beyondlabels.schema import KeySpec, OutputSchema  # noqa: E402
from tests.entrypoints.helpers import EVALUATE_CONF

UP, DOWN, COUNT = KeySpec("scalar", True), KeySpec("scalar", False), KeySpec("scalar", None, count=True)
KEYS = {"map@r": UP, "precision@1": UP, "mean_rank": DOWN, "num_queries": COUNT}
SCHEMA = OutputSchema(KEYS, headline=["precision@1", "map@r"])


def _cfg(tmp_path: Path, *overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(EVALUATE_CONF)):
        cfg = compose(config_name="evaluate", overrides=[f"paths.log_dir={tmp_path / 'logs'}", *overrides])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "job")
    return cfg


def _run_folder(root: Path, values: list[float], seed: int) -> Path:
    (root / ".hydra").mkdir(parents=True)
    (root / ".hydra" / "config.yaml").write_text(f"seed: {seed}\n")
    (root / ".hydra" / "overrides.yaml").write_text(f"- seed={seed}\n")
    (root / "retrieval").mkdir()
    records = [
        {"step": 10 * (i + 1), "epoch": i, "map@r": v, "precision@1": v + 0.1, "mean_rank": 5 - v, "num_queries": 40}
        for i, v in enumerate(values)
    ]
    (root / "retrieval" / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (root / "retrieval" / "schema.json").write_text(json.dumps(SCHEMA.to_json()))
    return root


def _table_rows(text: str) -> list[str]:
    return re.findall(r"^  (\S+) [↑↓]? *\d", text, re.MULTILINE)


def test_compare_of_one_run_prints_its_summary(tmp_path: Path, capsys: pytest.CaptureFixture):
    run = _run_folder(tmp_path / "run", [0.2, 0.5, 0.4], seed=1)
    table = tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs=[{run}]"))
    out = capsys.readouterr().out
    assert "run summary" in out and "retrieval/  3 evaluations, steps 10–30" in out
    assert _table_rows(out) == ["precision@1", "map@r"]
    assert re.search(r"^  map@r ↑ +0\.4000 +0\.5000 \(20\) +\+0\.2000$", out, re.MULTILINE), out
    assert re.search(rf"^run folder: +{re.escape(str(run))}$", out, re.MULTILINE)
    assert list(table["metrics"]) == [f"retrieval/{k}" for k in KEYS], "the table returned holds every key"
    full = tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs=[{run}]", "full_table=true"))
    assert _table_rows(capsys.readouterr().out) == ["map@r", "precision@1", "mean_rank", "num_queries"]
    assert full == table
    tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs=[{run}]", "metrics=[retrieval/mean_rank]"))
    assert "final metrics per run" in capsys.readouterr().out, "named keys: the comparison table of those keys"


def test_compare_of_several_runs_prints_their_headline_keys(tmp_path: Path, capsys: pytest.CaptureFixture):
    a = _run_folder(tmp_path / "runs" / "a", [0.2, 0.5], seed=1)
    _run_folder(tmp_path / "runs" / "b", [0.3, 0.35], seed=2)
    out_file = tmp_path / "cmp.json"
    table = tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs=[{a.parent}]", f"output={out_file}"))
    out = capsys.readouterr().out
    assert "headline metrics per run" in out and "2 headline keys of 4; every key: full_table=true" in out
    assert "retrieval/precision@1" in out and "retrieval/map@r" in out and "retrieval/mean_rank" not in out
    assert json.loads(out_file.read_text()) == table and "retrieval/mean_rank" in table["metrics"], "output=: every key"
    tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs=[{a.parent}]", "full_table=true"))
    out = capsys.readouterr().out
    assert "final metrics per run" in out and "retrieval/mean_rank" in out and "headline keys of" not in out


def test_report_prints_the_summary_of_each_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture):
    run = _run_folder(tmp_path / "run", [0.2, 0.5], seed=1)
    result = tasks.run_task("report", _cfg(tmp_path, "task=report", f"runs=[{run}]", f"output={tmp_path / 'r.html'}"))
    out = capsys.readouterr().out
    assert _table_rows(out) == ["precision@1", "map@r"] and out.rstrip().endswith(f"report: {result['report']}")
    tasks.run_task("report", _cfg(tmp_path, "task=report", f"runs=[{run}]", "full_table=true"))
    assert _table_rows(capsys.readouterr().out) == ["map@r", "precision@1", "mean_rank", "num_queries"]


@pytest.mark.parametrize("task", ["compare", "report"])
def test_full_table_must_be_a_boolean(tmp_path: Path, task: str):
    run = _run_folder(tmp_path / "run", [0.2], seed=1)
    with pytest.raises(
        ValueError, match="`full_table` must be True or False \\(true: every key.*\\), got 'yes please'\\.$"
    ):
        tasks.run_task(task, _cfg(tmp_path, f"task={task}", f"runs=[{run}]", "full_table=yes please"))
