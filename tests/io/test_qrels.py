"""TREC and JSON qrels / run loaders, and append-only qrels updates."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from beyondlabels.functional.ranking import judge_run
from beyondlabels.io.qrels import load_qrels, load_run, update_qrels


def test_trec_files(tmp_path: Path):
    (tmp_path / "qrels.txt").write_text("# judged by two assessors\n301 0 d1 2\n301 0 d2 0\n\n302 0 d9 1\n", encoding="utf-8")
    (tmp_path / "run.txt").write_text("301 Q0 d2 1 3.5 sys\n301 Q0 d1 2 1.25 sys\n302 Q0 d7 1 0.4 sys\n", encoding="utf-8")
    qrels, run = load_qrels(tmp_path / "qrels.txt"), load_run(tmp_path / "run.txt")
    assert qrels == {"301": {"d1": 2, "d2": 0}, "302": {"d9": 1}}
    assert run == {"301": {"d2": 3.5, "d1": 1.25}, "302": {"d7": 0.4}}
    assert judge_run(run, qrels).ranked[0].tolist() == [0.0, 2.0]


def test_json_files_with_unjudged_and_list_runs(tmp_path: Path):
    (tmp_path / "qrels.json").write_text(json.dumps({"q1": {"a": 1, "b": None}}), encoding="utf-8")
    (tmp_path / "run.json").write_text(json.dumps({"q1": ["b", "a", "c"]}), encoding="utf-8")
    (tmp_path / "scores.json").write_text(json.dumps({"q1": {"a": 0.5, "b": 0.7}}), encoding="utf-8")
    assert load_qrels(tmp_path / "qrels.json") == {"q1": {"a": 1, "b": None}}
    assert load_run(tmp_path / "run.json") == {"q1": ["b", "a", "c"]}
    assert load_run(tmp_path / "scores.json") == {"q1": {"a": 0.5, "b": 0.7}}


@pytest.mark.parametrize(
    ("name", "text", "loader", "match"),
    [
        ("q.txt", "301 0 d1\n", load_qrels, r"q.txt:1: a TREC qrels line has 4 columns"),
        ("q.txt", "301 0 d1 -1\n", load_qrels, "int >= 0"),
        ("q.txt", "301 0 d1 1\n301 0 d1 2\n", load_qrels, "judged twice"),
        ("q.json", '{"1": {"a": 1.5}}', load_qrels, "int >= 0"),
        ("q.json", "[1, 2]", load_qrels, "object"),
        ("r.txt", "301 Q0 d1 1 high sys\n", load_run, "not a number"),
        ("r.txt", "301 Q0 d1 1 1.0 sys\n301 Q0 d1 2 0.5 sys\n", load_run, "listed twice"),
        ("r.json", '{"1": ["a", "a"]}', load_run, "listed twice"),
        ("r.json", '{"1": {"a": "x"}}', load_run, "score"),
        ("r.txt", "", load_run, "no ranked documents"),
    ],
)
def test_malformed_files_are_clear_errors(tmp_path: Path, name, text, loader, match):
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        loader(tmp_path / name)


def test_missing_file(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="qrels file"):
        load_qrels(tmp_path / "none.txt")


def test_updates_are_append_only_and_changes_are_reported(caplog: pytest.LogCaptureFixture):
    old = {"1": {"a": 1, "b": None, "c": 0}, "2": {"x": 2}}
    new = {"1": {"a": 2, "b": 1, "d": 0}, "2": {"x": 2}, "3": {"y": 1}}
    with caplog.at_level(logging.WARNING):
        update = update_qrels(old, new)
    changes = {(c.query, c.document): (c.old, c.new) for c in update.changes}
    assert changes == {("1", "a"): (1, 2), ("1", "c"): (0, None)}  # b was unjudged: judging it is an addition
    assert update.qrels == {"1": {"a": 2, "b": 1, "c": None, "d": 0}, "2": {"x": 2}, "3": {"y": 1}}
    assert update.added == 3 and "append-only" in caplog.text
    kept = update_qrels(old, new, on_change="keep")
    assert kept.qrels["1"]["a"] == 1 and kept.qrels["1"]["c"] == 0 and kept.qrels["1"]["b"] == 1
    with pytest.raises(ValueError, match="2 existing judgement"):
        update_qrels(old, new, on_change="error")
    grown = update_qrels(old, {**old, "1": {**old["1"], "b": 2}, "3": {"y": 1}}, on_change="error")
    assert grown.changes == [] and grown.added == 2
