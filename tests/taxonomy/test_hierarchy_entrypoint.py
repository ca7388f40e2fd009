"""evaluate.py task=hierarchy: report keys from the schema, values against the kernel, pred_text rows, clear errors
with line numbers and nothing written when a row is bad."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from beyondlabels.demo import demo_taxonomy
from beyondlabels.functional import (
    hierarchical_precision_recall,
    hierarchy_output_schema,
)
from tests.entrypoints.helpers import evaluate_config

REPO_ROOT = Path(__file__).resolve().parents[2]
from beyondlabels import tasks  # noqa: E402

DEMO_TAXONOMY = REPO_ROOT / "src" / "beyondlabels" / "demo" / "data" / "taxonomy.yaml"


def _cfg(tmp_path: Path, *overrides: str):
    return evaluate_config(tmp_path, "task=hierarchy", *overrides)


def _write(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_report_matches_the_kernel(tmp_path: Path):
    tax = demo_taxonomy()
    pairs = [
        ("square", "rhombus"),
        ("circle", "ellipse"),
        ("star", "polygon"),
        ("arrow", "arrow"),
        ("hexagon", "shape"),
    ]
    rows = [json.dumps({"gt": g, "pred": p, "id": 10 + i}) for i, (g, p) in enumerate(pairs)]
    rows.insert(2, json.dumps({"gt": "right_triangle", "pred_text": "A right triangle."}))
    predictions = _write(tmp_path / "p.jsonl", rows)
    output = tmp_path / "out" / "report.json"
    tasks.hierarchy.run(_cfg(tmp_path, f"taxonomy={DEMO_TAXONOMY}", f"predictions={predictions}", f"output={output}"))
    report = json.loads(output.read_text())
    gts = [g for g, _ in pairs]
    preds = [p for _, p in pairs]
    gts.insert(2, "right_triangle")
    preds.insert(2, "right_triangle")
    ref = hierarchical_precision_recall(tax.indices(preds), tax.indices(gts), tax)
    schema = hierarchy_output_schema()
    for key in schema.scalar_keys():
        assert report[key] == pytest.approx(float(ref[key])), key
    assert report["error_lca_depth_fraction"] == pytest.approx(ref["error_lca_depth_fraction"].tolist())
    assert report["rules"] == {"node": 5, "exact": 1}
    per_query = np.load(output.parent / report["per_query_file"])
    assert per_query["query_id"].tolist() == [10, 11, 2, 12, 13, 14]  # the pred_text row's id is its position


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (
            ['{"gt": "square", "pred": "rhombuz"}', '{"gt": "circel", "pred": "circle"}'],
            r"unknown taxonomy node\(s\) 'rhombuz' \(line 1\), 'circel' \(line 2\)",
        ),
        (['{"gt": "square", "pred": "square"}', "not json"], r"line 2: not valid JSON"),
        (['{"gt": "square"}'], r"line 1: give exactly one of 'pred'"),
        (['{"gt": "square", "pred": "square", "pred_text": "x"}'], r"line 1: give exactly one"),
        (
            ['{"gt": "square", "pred": "square", "id": 1}', '{"gt": "square", "pred": "circle", "id": 1}'],
            r"id 1 appears on lines 1 and 2",
        ),
        (['{"gt": "shape", "pred": "square"}'], r"'gt' is the root 'shape' on line\(s\) \[1\]"),
        (['{"gt": 3, "pred": "square"}'], r"line 1: 'gt' must be a node name"),
    ],
)
def test_bad_rows_are_named_and_nothing_is_written(tmp_path: Path, rows, match):
    predictions = _write(tmp_path / "bad.jsonl", rows)
    output = tmp_path / "out" / "report.json"
    with pytest.raises(ValueError, match=match):
        tasks.hierarchy.run(
            _cfg(tmp_path, f"taxonomy={DEMO_TAXONOMY}", f"predictions={predictions}", f"output={output}")
        )
    assert not output.parent.exists() or not any(output.parent.iterdir())


def test_missing_arguments_say_what_is_needed(tmp_path: Path):
    with pytest.raises(ValueError, match="task=hierarchy needs taxonomy=PATH"):
        tasks.hierarchy.run(_cfg(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        tasks.hierarchy.run(_cfg(tmp_path, f"taxonomy={DEMO_TAXONOMY}", f"predictions={tmp_path / 'none.jsonl'}"))
