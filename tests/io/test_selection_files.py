"""The per-query table of a run (files lined up by query id, one kind of query, labels) and selection.json, read as
files from elsewhere: clear errors naming the file, never another exception, never a path out of the folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beyondlabels.io import HistoryLog, per_query_table, read_evaluation_run, read_selection, save_per_query
from beyondlabels.io.paths import UnsafePathError
from beyondlabels.schema import KeySpec, OutputSchema

SCHEMA = OutputSchema({"p": KeySpec("scalar", True)}, {"p": KeySpec("per_query", True)})


def _folder(root: Path, columns: dict[int, dict[str, list]]) -> Path:
    folder = root / "retrieval"
    (folder / "per_query").mkdir(parents=True)
    (folder / "schema.json").write_text(json.dumps(SCHEMA.to_json()))
    records = []
    for step, arrays in columns.items():
        name = f"per_query/step_{step:09d}.npz"
        save_per_query(folder / name, {k: np.asarray(v) for k, v in arrays.items()})
        records.append({"step": step, "epoch": 0, "p": 0.5, "per_query_file": name})
    HistoryLog(folder / "history.jsonl").write(records)
    return folder


def test_the_table_lines_up_queries_by_id_and_keeps_labels(tmp_path: Path):
    folder = _folder(
        tmp_path,
        {
            1: {"query_id": [5, 3, 9, 7], "p": [1.0, 0.0, 1.0, 0.5], "label": [0, 1, 1, 2]},
            2: {"query_id": [3, 5, 7], "p": [1.0, np.nan, 0.0], "label": [1, 0, 3]},  # 9 absent, 5 NaN, 7 relabelled
        },
    )
    table = per_query_table(read_evaluation_run(folder), "p")
    assert table.steps == [1, 2] and table.query_ids.tolist() == [3, 7]
    assert table.values.tolist() == [[0.0, 1.0], [0.5, 0.0]]
    assert table.labels.tolist() == [1, 3] and table.label_changes == 1 and table.dropped == 2


def test_a_file_of_several_kinds_reads_the_key_s_rows_without_labels(tmp_path: Path):
    folder = _folder(
        tmp_path,
        {
            4: {
                "query_id": [0, 1, 0, 1],
                "direction": [0, 0, 1, 1],
                "p": [1.0, 0.0, np.nan, np.nan],
                "label": [1, 2, 1, 2],
            }
        },
    )
    table = per_query_table(read_evaluation_run(folder), "p")
    assert table.query_ids.tolist() == [0, 1] and table.labels is None


def test_the_table_refuses_what_it_cannot_read(tmp_path: Path):
    folder = _folder(tmp_path, {1: {"query_id": [1, 1], "p": [1.0, 0.0]}, 2: {"query_id": [1, 2], "p": [1.0, 0.0]}})
    run = read_evaluation_run(folder)
    with pytest.raises(ValueError, match="step_000000001.npz: query ids repeat"):
        per_query_table(run, "p")
    with pytest.raises(KeyError, match="no successful evaluation at step 3"):
        per_query_table(run, "p", steps=[3])
    with pytest.raises(ValueError, match="lacks 'q'"):
        per_query_table(run, "q", steps=[2])
    run.history[1]["per_query_file"] = "../../elsewhere.npz"
    with pytest.raises(UnsafePathError):
        per_query_table(run, "p", steps=[2])


VALID = {
    "version": 1,
    "key": "p",
    "monitor": "retrieval/p",
    "mode": "max",
    "steps": [1, 2],
    "means": [0.5, 0.6],
    "pvalues": [0.1, 1.0],
    "set_steps": [1, 2],
    "best_step": 2,
    "best_value": 0.6,
    "estimate": 0.59,
    "ci_low": 0.5,
    "ci_high": 0.65,
    "size": 0.1,
    "confidence": 0.95,
}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"version": 2}, "not a checkpoint selection of version 1"),
        ({"steps": [1]}, "one entry per evaluation"),
        ({"set_steps": ["x"]}, "'set_steps' must be a list of ints"),
        ({"size": 1.5}, "'size' must lie in \\(0, 1\\)"),
        ({"mode": "up"}, "'mode' 'max' or 'min'"),
        ({"classes": {"label": [1], "regressed": [True, False]}}, "'classes' must hold lists of one length"),
        ({"checkpoints": [{"file": 3}]}, "'checkpoints' must be a list"),
    ],
)
def test_a_malformed_selection_is_a_value_error_naming_the_file(tmp_path: Path, change, match):
    (tmp_path / "selection.json").write_text(json.dumps({**VALID, **change}))
    with pytest.raises(ValueError, match=match) as error:
        read_selection(tmp_path)
    assert "selection.json" in str(error.value)


def test_a_selection_linked_from_elsewhere_is_refused(tmp_path: Path):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(VALID))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "selection.json").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        read_selection(tmp_path / "run")
    assert read_selection(tmp_path) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.binary(max_size=300)
    | st.builds(
        lambda d: json.dumps(d).encode(),
        st.dictionaries(
            st.sampled_from(list(VALID)),
            st.none() | st.integers() | st.text(max_size=3) | st.lists(st.integers(), max_size=3),
        ),
    )
)
def test_any_bytes_read_as_a_selection_or_a_value_error(tmp_path: Path, data: bytes):
    (tmp_path / "selection.json").write_bytes(data)
    try:
        read_selection(tmp_path)
    except ValueError:
        pass
