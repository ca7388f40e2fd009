"""evaluate.py task=ranking (against trec_eval) and task=abtest (baseline= / metric= / guardrails=: A/B decisions
from the per-query files of a multirun)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

from beyondlabels import tasks  # noqa: E402
from beyondlabels.io import read_evaluation_run, save_per_query  # noqa: E402
from beyondlabels.metrics.intervals import with_confidence_intervals  # noqa: E402
from beyondlabels.schema import KeySpec, OutputSchema  # noqa: E402
from tests.entrypoints.helpers import evaluate_config, run_script


def _trec_files(tmp_path: Path, seed: int = 0):
    rng = random.Random(seed)
    qrels_lines, run_lines, qrels, run = [], [], {}, {}
    for q in range(30):
        qid = str(401 + q)
        qrels[qid], run[qid] = {}, {}
        for d in range(25):
            doc = f"D{q}-{d}"
            if rng.random() < 0.7:
                grade = rng.choice([0, 0, 1, 2])
                qrels[qid][doc] = grade
                qrels_lines.append(f"{qid} 0 {doc} {grade}")
            if d < 20:
                score = rng.random()
                run[qid][doc] = score
                run_lines.append(f"{qid} Q0 {doc} 0 {score!r} sys")
    (tmp_path / "qrels.txt").write_text("\n".join(qrels_lines) + "\n")
    (tmp_path / "run.txt").write_text("\n".join(run_lines) + "\n")
    return qrels, run


def test_ranking_report_matches_trec_eval(tmp_path: Path):
    qrels, run = _trec_files(tmp_path)
    output = tmp_path / "out" / "ranking.json"
    cfg = evaluate_config(
        tmp_path,
        "task=ranking",
        f"run={tmp_path / 'run.txt'}",
        f"qrels={tmp_path / 'qrels.txt'}",
        "k=[5,10]",
        f"output={output}",
    )
    tasks.ranking.run(cfg)
    report = json.loads(output.read_text())
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"P.5,10", "ndcg_cut.5,10", "Rprec"}).evaluate(run)
    kept = [q for q in qrels if any(g >= 1 for g in qrels[q].values())]
    for k in (5, 10):
        assert report[f"precision@{k}"] == pytest.approx(np.mean([reference[q][f"P_{k}"] for q in kept]), abs=1e-12)
        assert report[f"ndcg_linear@{k}"] == pytest.approx(
            np.mean([reference[q][f"ndcg_cut_{k}"] for q in kept]), abs=1e-12
        )
        for key in ("judged_precision", "condensed_precision", "ndcg", "judged", "coverage"):
            assert f"{key}@{k}" in report
        assert report[f"precision@{k}_ci_low"] <= report[f"precision@{k}"] <= report[f"precision@{k}_ci_high"]
    assert report["r_precision"] == pytest.approx(np.mean([reference[q]["Rprec"] for q in kept]), abs=1e-12)
    assert report["num_queries"] == len(kept) and isinstance(report["num_unjudged"], int) and report["num_unjudged"] > 0
    assert set(report["per_query"]) == set(qrels) and report["per_query"]["401"]["precision@5"] == pytest.approx(
        reference["401"]["P_5"]
    )
    # the report reads back as an evaluation run, per-query file included (task=compare can pair it)
    back = read_evaluation_run(output)
    assert back.prefix == "ranking" and back.per_query()["query_id"].tolist()[:2] == [401, 402]


def test_ranking_needs_both_files(tmp_path: Path):
    with pytest.raises(ValueError, match="qrels=PATH"):
        tasks.ranking.run(evaluate_config(tmp_path, "task=ranking", f"run={tmp_path / 'run.txt'}"))


SCHEMA = with_confidence_intervals(
    OutputSchema(
        {
            "precision@1": KeySpec("scalar", True),
            "map@r": KeySpec("scalar", True),
            "num_queries": KeySpec("scalar", None, count=True),
        },
        {
            "query_id": KeySpec("per_query", None),
            "precision@1": KeySpec("per_query", True),
            "map@r": KeySpec("per_query", True),
        },
    ),
    ["precision@1", "map@r"],
)


def _job(root: Path, job: int, overrides: list[str], steps: dict[int, tuple[np.ndarray, np.ndarray]], order_seed: int):
    """A Hydra job folder with a retrieval callback folder: history.json, schema.json and per-query files."""
    folder = root / str(job) / "retrieval"
    (root / str(job) / ".hydra").mkdir(parents=True)
    (root / str(job) / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    history = []
    for step, (p1, mapr) in steps.items():
        order = np.random.default_rng(order_seed).permutation(len(p1))  # files list queries in any order
        ids = np.arange(100, 100 + len(p1))
        rel = f"per_query/step_{step:09d}.npz"
        save_per_query(folder / rel, {"query_id": ids[order], "precision@1": p1[order], "map@r": mapr[order]}, SCHEMA)
        history.append(
            {
                "step": step,
                "epoch": 0,
                "precision@1": float(p1.mean()),
                "map@r": float(mapr.mean()),
                "num_queries": len(p1),
                "per_query_file": rel,
            }
        )
    (folder / "history.json").write_text(json.dumps(history))
    (folder / "schema.json").write_text(json.dumps(SCHEMA.to_json()))


def test_compare_against_a_baseline_with_decisions(tmp_path: Path, capsys: pytest.CaptureFixture):
    rng = np.random.default_rng(0)
    n = 60
    base_p1 = rng.uniform(0.2, 0.6, n)
    base_map = rng.uniform(0.1, 0.4, n)
    multirun = tmp_path / "multirun"
    _job(multirun, 0, ["model.lr=0.001"], {10: (base_p1 - 0.2, base_map), 20: (base_p1, base_map)}, 1)
    _job(
        multirun,
        1,
        ["model.lr=0.002"],
        {20: (base_p1 + 0.1 + rng.normal(0, 0.05, n), base_map + rng.normal(0, 0.01, n))},
        2,
    )
    _job(multirun, 2, ["model.lr=0.003"], {20: (base_p1 + rng.normal(0, 0.2, n), base_map)}, 3)
    _job(multirun, 3, ["model.lr=0.004"], {20: (base_p1 + 0.1, base_map - 0.05)}, 4)
    output = tmp_path / "ab.json"
    cfg = evaluate_config(
        tmp_path,
        "task=abtest",
        f"runs=[{multirun}]",
        f"baseline={multirun / '0'}",
        "metric=retrieval/precision@1",
        "guardrails=[retrieval/map@r]",
        f"output={output}",
    )
    tasks.abtest.run(cfg)
    table = json.loads(output.read_text())
    runs = table["runs"]
    decisions = {
        label.split(" ")[0]: (entry["vs_baseline"] or {}).get("decision", "baseline") for label, entry in runs.items()
    }
    assert decisions == {"0": "baseline", "1": "better", "2": "cannot distinguish", "3": "reject"}
    one = next(e for label, e in runs.items() if label.startswith("1"))
    assert one["vs_baseline"]["n"] == n and one["vs_baseline"]["interval"]["low"] > 0
    assert one["vs_baseline"]["difference"] == pytest.approx(one["value"] - runs[table["baseline"]]["value"])
    assert table["direction"] == "max" and runs[table["baseline"]]["step"] == 20
    printed = capsys.readouterr().out
    assert "cannot distinguish" in printed and "guardrail retrieval/map@r worse by 0.0500" in printed
    # which=best reads the best evaluation of each run
    best = tasks.abtest.run(
        evaluate_config(
            tmp_path,
            "task=abtest",
            f"runs=[{multirun}]",
            f"baseline={multirun / '0'}",
            "metric=retrieval/precision@1",
            "which=best",
        )
    )
    assert best["runs"][best["baseline"]]["step"] == 20


def test_compare_errors_name_what_is_wrong(tmp_path: Path):
    rng = np.random.default_rng(1)
    multirun = tmp_path / "m"
    _job(multirun, 0, ["seed=1"], {5: (rng.uniform(size=20), rng.uniform(size=20))}, 0)
    _job(multirun, 1, ["seed=2"], {5: (rng.uniform(size=19), rng.uniform(size=19))}, 0)
    base = [f"runs=[{multirun}]", f"baseline={multirun / '0'}"]
    with pytest.raises(ValueError, match="intersect=True"):
        tasks.abtest.run(evaluate_config(tmp_path, "task=abtest", *base, "metric=retrieval/precision@1"))
    table = tasks.abtest.run(
        evaluate_config(tmp_path, "task=abtest", *base, "metric=retrieval/precision@1", "intersect=true")
    )
    assert next(e for e in table["runs"].values() if e["vs_baseline"])["vs_baseline"]["unmatched"] == 1
    with pytest.raises(ValueError, match="no direction"):
        tasks.abtest.run(evaluate_config(tmp_path, "task=abtest", *base, "metric=retrieval/num_queries"))
    with pytest.raises(ValueError, match="per-query keys"):
        tasks.abtest.run(evaluate_config(tmp_path, "task=abtest", *base, "metric=retrieval/precision@1_ci_low"))
    with pytest.raises(ValueError, match="prefix/key"):
        tasks.abtest.run(evaluate_config(tmp_path, "task=abtest", *base, "metric=precision@1"))
    with pytest.raises(ValueError, match="baseline"):
        tasks.abtest.run(evaluate_config(tmp_path, "task=abtest", f"runs=[{multirun}]", "metric=retrieval/precision@1"))


@pytest.mark.slow
def test_ranking_from_the_command_line(tmp_path: Path):
    _trec_files(tmp_path, seed=3)
    output = tmp_path / "r.json"
    run_script(
        "evaluate.py",
        "task=ranking",
        f"run={tmp_path / 'run.txt'}",
        f"qrels={tmp_path / 'qrels.txt'}",
        "k=[5,10]",
        f"output={output}",
        f"paths.log_dir={tmp_path / 'logs'}",
    )
    report = json.loads(output.read_text())
    assert report["task"] == "ranking" and "judged_precision@10" in report and report["num_queries"] > 0
