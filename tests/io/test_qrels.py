"""TREC and JSON qrels / run loaders, and append-only qrels updates."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest
import pytrec_eval

from beyondlabels.functional.ranking import judge_run, ranking_metrics
from beyondlabels.io.qrels import load_qrels, load_run, update_qrels


def test_trec_files(tmp_path: Path):
    (tmp_path / "qrels.txt").write_text(
        "# judged by two assessors\n301 0 d1 2\n301 0 d2 0\n\n302 0 d9 1\n", encoding="utf-8"
    )
    (tmp_path / "run.txt").write_text(
        "301 Q0 d2 1 3.5 sys\n301 Q0 d1 2 1.25 sys\n302 Q0 d7 1 0.4 sys\n", encoding="utf-8"
    )
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
        ("q.txt", "301 0 d1 -1.5\n", load_qrels, r"q.txt:1: grade -1\.5 is not an int; grades are ints"),
        ("q.txt", "301 0 d1 high\n", load_qrels, r"q.txt:1: grade 'high' is not a number"),
        ("q.json", '{"1": {"a": true}}', load_qrels, "is not an int"),
        ("q.txt", "301 0 d1 1\n301 0 d1 2\n", load_qrels, "judged twice"),
        ("q.json", '{"1": {"a": 1.5}}', load_qrels, "is not an int"),
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


def _trec_eval_style_files(tmp_path: Path):
    """Graded TREC qrels in the style of trec_eval's test files and TREC web qrels (-2 junk, -1 pooled, 0..4), and a
    run whose rank column disagrees with its scores and whose scores tie."""
    rng = random.Random(5)
    qrels_lines, run_lines = [], []
    for q in range(351, 371):
        for d in range(30):
            doc = f"FR94{q}-{d:03d}"
            if rng.random() < 0.6:
                qrels_lines.append(f"{q} 0 {doc} {rng.choice([-2, -1, 0, 0, 0, 1, 2, 4])}")
            if d < 22:
                run_lines.append(f"{q} Q0 {doc} {d + 1} {rng.randrange(8) / 4:.2f} tag1")
    (tmp_path / "qrels.rel_level").write_text("\n".join(qrels_lines) + "\n", encoding="utf-8")
    (tmp_path / "results.test").write_text("\n".join(run_lines) + "\n", encoding="utf-8")
    return qrels_lines, run_lines


def test_trec_eval_style_graded_qrels_with_negative_grades(tmp_path: Path):
    qrels_lines, run_lines = _trec_eval_style_files(tmp_path)
    qrels, run = load_qrels(tmp_path / "qrels.rel_level"), load_run(tmp_path / "results.test")
    # pytrec_eval's own readers as the reference
    assert qrels == pytrec_eval.parse_qrel(qrels_lines) and run == pytrec_eval.parse_run(run_lines)
    assert min(g for j in qrels.values() for g in j.values()) == -2
    judged = judge_run(run, qrels)
    out = ranking_metrics(judged.ranked, judged.num_retrieved, judged.pool, ks=(5, 10))
    reference = pytrec_eval.RelevanceEvaluator(
        pytrec_eval.parse_qrel(qrels_lines), {"map", "bpref", "recip_rank", "P.5,10", "ndcg_cut.10"}
    ).evaluate(pytrec_eval.parse_run(run_lines))
    pq = out["per_query"]
    for i, query in enumerate(judged.queries):
        assert pq["num_relevant"][i] > 0
        for key, name in (
            ("map", "map"),
            ("bpref", "bpref"),
            ("recip_rank", "recip_rank"),
            ("precision@5", "P_5"),
            ("ndcg_linear@10", "ndcg_cut_10"),
        ):
            assert pq[key][i].item() == pytest.approx(reference[query][name], abs=1e-12), (query, key)
    assert len(judged.queries) == 20
