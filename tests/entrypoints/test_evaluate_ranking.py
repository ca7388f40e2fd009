"""evaluate.py task=ranking end to end on TREC files with negative grades, ties and one-sided queries: the report
against trec_eval (pytrec-eval-terrier, reading the files with its own parsers), the per-query file, and the console
table with one row per metric and its interval."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

from beyondlabels import tasks  # noqa: E402
from beyondlabels.io import read_evaluation_run  # noqa: E402
from tests.entrypoints.helpers import evaluate_config
from tests.oracles.bootstrap import numpy_percentile_bootstrap

NEW = {
    "map": "map",
    "recip_rank": "recip_rank",
    "bpref": "bpref",
    "recall@5": "recall_5",
    "recall@10": "recall_10",
    "success@1": "success_1",
    "success@5": "success_5",
    "success@10": "success_10",
}


def _files(tmp_path: Path, seed: int = 2):
    """TREC qrels with grades -2..3 and a run with tied scores; query 450 is only in the run, 451 only in the qrels."""
    rng = random.Random(seed)
    qrels_lines, run_lines = [], []
    for q in range(401, 441):
        for d in range(25):
            doc = f"D{q}-{d}"
            if rng.random() < 0.6:
                qrels_lines.append(f"{q} 0 {doc} {rng.choice([-2, -1, 0, 0, 1, 2, 3])}")
            if d < 18:
                run_lines.append(f"{q} Q0 {doc} {d + 1} {rng.randrange(6) / 2} sys")
    qrels_lines.append("451 0 D451-0 1")
    run_lines.append("450 Q0 D450-0 1 1.0 sys")
    (tmp_path / "qrels.txt").write_text("\n".join(qrels_lines) + "\n", encoding="utf-8")
    (tmp_path / "run.txt").write_text("\n".join(run_lines) + "\n", encoding="utf-8")
    return pytrec_eval.parse_qrel(qrels_lines), pytrec_eval.parse_run(run_lines)


def test_ranking_task_reports_trec_eval_measures_with_intervals(tmp_path: Path, capsys: pytest.CaptureFixture):
    qrels, run = _files(tmp_path)
    output = tmp_path / "out" / "ranking.json"
    cfg = evaluate_config(
        tmp_path,
        "task=ranking",
        f"run={tmp_path / 'run.txt'}",
        f"qrels={tmp_path / 'qrels.txt'}",
        "k=[1,5,10]",
        "bootstrap_rounds=500",
        f"output={output}",
    )
    tasks.ranking.run(cfg)
    report = json.loads(output.read_text())
    reference = pytrec_eval.RelevanceEvaluator(qrels, set(NEW.values()) | {"P.5"}).evaluate(run)
    kept = sorted(q for q in reference if any(g >= 1 for g in qrels[q].values()))
    assert report["queries_without_qrels"] == ["450"] and report["queries_without_run"] == ["451"]
    assert report["num_queries"] == len(kept) and report["num_lone_queries"] == len(reference) - len(kept)
    for key, name in NEW.items():
        values = [reference[q][name] for q in kept]
        assert report[key] == pytest.approx(np.mean(values), abs=1e-12), key
        assert report["schema"]["keys"][key]["higher_is_better"] is True
        for q in kept:
            assert report["per_query"][q][key] == pytest.approx(reference[q][name], abs=1e-12), (q, key)
        # the interval: a numpy percentile bootstrap over the same queries, seeded as the task is
        low, high = numpy_percentile_bootstrap([reference[q][name] for q in kept], rounds=500, seed=11)
        assert (report[f"{key}_ci_low"], report[f"{key}_ci_high"]) == pytest.approx((low, high), abs=1e-12), key
    back = read_evaluation_run(output).per_query()
    assert np.allclose(
        np.sort(back["map"][~np.isnan(back["map"])]), np.sort([reference[q]["map"] for q in kept]), rtol=0, atol=1e-12
    )

    text = capsys.readouterr().out
    rows = {
        line.split("│")[1].strip(): line.split("│")[-2].strip() for line in text.splitlines() if line.count("│") >= 4
    }
    assert not any(key.endswith(("_ci_low", "_ci_high")) for key in rows)  # bounds are not rows of their own
    for key in (*NEW, "precision@5", "ndcg@10", "r_precision"):
        value, low, high = (float(x) for x in re.fullmatch(r"(\S+)  \[(\S+), (\S+)\]", rows[key]).groups())
        assert (value, low, high) == (
            round(report[key], 4),
            round(report[f"{key}_ci_low"], 4),
            round(report[f"{key}_ci_high"], 4),
        ), key
    assert rows["num_queries"] == str(len(kept)) and rows["judged@5"] == f"{report['judged@5']:.4f}"
