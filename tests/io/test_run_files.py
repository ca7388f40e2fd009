"""beyondlabels.io.run_files: reading the evaluation files the callbacks and evaluate.py write."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from beyondlabels.io import (
    EvaluationRun,
    evaluation_schema,
    find_evaluation_runs,
    read_evaluation_run,
    run_label,
    save_per_query,
)
from beyondlabels.schema import KeySpec, OutputSchema

SCHEMA = OutputSchema(
    {
        "precision@1": KeySpec("scalar", True),
        "mean_first_relevant_rank": KeySpec("scalar", False),
        "num_queries": KeySpec("scalar", None, count=True),
        "precision_curve": KeySpec("curve", True),
    },
    {
        "query_id": KeySpec("per_query", None),
        "precision@1": KeySpec("per_query", True),
        "first_relevant_rank": KeySpec("per_query", False),
    },
)


def write_callback_folder(
    folder: Path,
    records: list[dict],
    schema: OutputSchema | None = SCHEMA,
    per_query: bool = True,
    overrides: list[str] | None = None,
) -> Path:
    """A callback folder as the callbacks write it (run folder = folder.parent); per-query files for successes."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for record in records:
        record = dict(record)
        if per_query and "error" not in record:
            rel = f"per_query/step_{record['step']:09d}.npz"
            (folder / "per_query").mkdir(exist_ok=True)
            q = np.arange(4, dtype=np.int64) + 100
            np.savez(
                folder / rel,
                query_id=q,
                **{
                    "precision@1": np.full(4, record["step"] / 100.0),
                    "first_relevant_rank": np.array([1.0, 2.0, np.nan, 1.0]),
                },
            )
            record["per_query_file"] = rel
        out.append(record)
    (folder / "history.json").write_text(json.dumps(out))
    if schema is not None:
        (folder / "schema.json").write_text(json.dumps(schema.to_json()))
    if overrides is not None:
        (folder.parent / ".hydra").mkdir(parents=True, exist_ok=True)
        (folder.parent / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return folder


RECORDS = [
    {
        "step": 10,
        "epoch": 0,
        "precision@1": 0.5,
        "mean_first_relevant_rank": 3.0,
        "num_queries": 40,
        "precision_curve": [0.5, 0.4],
    },
    {
        "step": 20,
        "epoch": 1,
        "precision@1": 0.7,
        "mean_first_relevant_rank": 4.0,
        "num_queries": 40,
        "precision_curve": [0.7, 0.6],
    },
    {
        "step": 30,
        "epoch": 2,
        "precision@1": 0.6,
        "mean_first_relevant_rank": 2.0,
        "num_queries": 39,
        "precision_curve": [0.6, 0.5],
    },
    {"step": 40, "epoch": 3, "error": "RuntimeError: CUDA out of memory"},
]


@pytest.fixture
def multirun(tmp_path: Path) -> Path:
    """A Hydra multirun folder with jobs 0, 1, 2 and 10 (numeric order matters), each a run folder."""
    root = tmp_path / "multiruns" / "2026-11-30_05-00-00"
    for job, seed in ((0, 1), (1, 2), (2, 3), (10, 11)):
        write_callback_folder(root / str(job) / "retrieval", RECORDS, overrides=[f"seed={seed}", "model.lr=0.01"])
        (root / str(job) / "wandb").mkdir()  # other things a run folder holds
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


def test_find_accepts_file_callback_run_and_multirun_folders(multirun: Path) -> None:
    found = find_evaluation_runs(multirun)
    assert found == [multirun / job / "retrieval" / "history.json" for job in ("0", "1", "2", "10")]
    assert find_evaluation_runs(multirun / "1") == [multirun / "1" / "retrieval" / "history.json"]
    assert find_evaluation_runs(multirun / "1" / "retrieval") == [multirun / "1" / "retrieval" / "history.json"]
    assert find_evaluation_runs(multirun / "1" / "retrieval" / "history.json") == [
        multirun / "1" / "retrieval" / "history.json"
    ]


def test_no_history_says_what_was_searched_and_expected(tmp_path: Path) -> None:
    (tmp_path / "run" / "wandb").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as excinfo:
        find_evaluation_runs(tmp_path / "run")
    message = str(excinfo.value)
    assert str(tmp_path / "run") in message and "history.json" in message and "multirun folder" in message
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_evaluation_runs(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="history.json"):
        read_evaluation_run(tmp_path / "run")


def test_read_run(multirun: Path) -> None:
    run = read_evaluation_run(multirun / "1" / "retrieval")
    assert isinstance(run, EvaluationRun)
    assert run.path == multirun / "1" / "retrieval" and run.file == run.path / "history.json"
    assert run.name == "1 (seed=2, model.lr=0.01)" and run.prefix == "retrieval"
    assert len(run.history) == 4 and run.schema == SCHEMA
    assert run.steps == [10, 20, 30] and [f["step"] for f in run.failures] == [40]
    # the last evaluation failed: final() is the last *successful* one, scalars only, counts as ints
    assert run.final() == {"precision@1": 0.6, "mean_first_relevant_rank": 2.0, "num_queries": 39}
    assert isinstance(run.final()["num_queries"], int)
    # the run folder itself (one callback) reads the same
    assert read_evaluation_run(multirun / "1") == run


def test_best_follows_the_schema_direction(multirun: Path) -> None:
    run = read_evaluation_run(multirun / "0" / "retrieval")
    assert run.best("precision@1")["step"] == 20  # higher is better
    assert run.best("mean_first_relevant_rank")["step"] == 30  # lower is better
    with pytest.raises(ValueError, match="no direction"):
        run.best("num_queries")
    with pytest.raises(KeyError, match="precision_curve"):
        run.best("precision_curve")


def test_best_skips_nan_and_keeps_the_first_of_ties(tmp_path: Path) -> None:
    records = [
        {"step": 1, "epoch": 0, "precision@1": float("nan")},
        {"step": 2, "epoch": 0, "precision@1": 0.4},
        {"step": 3, "epoch": 0, "precision@1": 0.4},
    ]
    run = read_evaluation_run(write_callback_folder(tmp_path / "r" / "retrieval", records, per_query=False))
    assert run.best("precision@1")["step"] == 2
    only_nan = read_evaluation_run(write_callback_folder(tmp_path / "n" / "retrieval", records[:1], per_query=False))
    assert only_nan.best("precision@1") is None
    assert math.isnan(only_nan.final()["precision@1"])


def test_without_schema(tmp_path: Path) -> None:
    run = read_evaluation_run(write_callback_folder(tmp_path / "run" / "retrieval", RECORDS, schema=None))
    assert run.schema is None and run.name == "run"
    assert run.final() == {"precision@1": 0.6, "mean_first_relevant_rank": 2.0, "num_queries": 39.0}
    with pytest.raises(ValueError, match="schema.json"):
        run.best("precision@1")


def test_per_query(multirun: Path) -> None:
    run = read_evaluation_run(multirun / "2" / "retrieval")
    last = run.per_query()
    assert list(last) == ["query_id", "precision@1", "first_relevant_rank"]
    assert last["query_id"].dtype == np.int64 and last["query_id"].tolist() == [100, 101, 102, 103]
    assert last["precision@1"].tolist() == [0.3] * 4  # step 30: the last successful evaluation
    assert run.per_query(step=10)["precision@1"].tolist() == [0.1] * 4
    with pytest.raises(KeyError, match="40"):
        run.per_query(step=40)  # the failed evaluation
    (run.path / "per_query" / "step_000000020.npz").unlink()
    with pytest.raises(FileNotFoundError, match="step_000000020.npz"):
        run.per_query(step=20)


def test_per_query_file_not_named(tmp_path: Path) -> None:
    run = read_evaluation_run(write_callback_folder(tmp_path / "r" / "retrieval", RECORDS, per_query=False))
    with pytest.raises(FileNotFoundError, match="names no per_query_file"):
        run.per_query()


@pytest.mark.parametrize(
    "text,match",
    [
        ('[{"step": 1, "epoch": 0, "precision@1": 0.5}', "not valid JSON"),
        ('{"step": 1}', "expected a JSON list"),
        ("[1, 2]", "record #0 is not an object"),
        ('[{"epoch": 0, "precision@1": 0.5}]', "no integer 'step'"),
    ],
)
def test_malformed_history_names_the_file(tmp_path: Path, text: str, match: str) -> None:
    folder = tmp_path / "run" / "retrieval"
    folder.mkdir(parents=True)
    (folder / "history.json").write_text(text)
    with pytest.raises(ValueError, match=match) as excinfo:
        read_evaluation_run(folder)
    assert str(folder / "history.json") in str(excinfo.value)


def test_malformed_schema_names_the_file(tmp_path: Path) -> None:
    folder = write_callback_folder(tmp_path / "run" / "retrieval", RECORDS)
    (folder / "schema.json").write_text('{"keys": {"precision@1": {"kind": "histogram", "higher_is_better": true}}}')
    with pytest.raises(ValueError, match="schema.json") as excinfo:
        read_evaluation_run(folder)
    assert "histogram" in str(excinfo.value)


def test_run_label(tmp_path: Path) -> None:
    assert run_label(tmp_path / "plain") == "plain"
    (tmp_path / "job" / ".hydra").mkdir(parents=True)
    (tmp_path / "job" / ".hydra" / "overrides.yaml").write_text("[]\n")
    assert run_label(tmp_path / "job") == "job"
    (tmp_path / "job" / ".hydra" / "overrides.yaml").write_text("- seed=2\n- data.batch_size=64\n")
    assert run_label(tmp_path / "job") == "job (seed=2, data.batch_size=64)"


def test_two_callbacks_in_one_run_folder(tmp_path: Path) -> None:
    write_callback_folder(tmp_path / "run" / "retrieval", RECORDS)
    t2i = OutputSchema({"r_precision": KeySpec("scalar", True)})
    write_callback_folder(
        tmp_path / "run" / "t2i", [{"step": 10, "epoch": 0, "r_precision": 0.25}], schema=t2i, per_query=False
    )
    found = find_evaluation_runs(tmp_path / "run")
    assert [f.parent.name for f in found] == ["retrieval", "t2i"]
    with pytest.raises(ValueError, match="holds 2 evaluation histories"):
        read_evaluation_run(tmp_path / "run")
    schema = evaluation_schema(tmp_path / "run")
    assert schema.scalar_keys() == [
        "retrieval/precision@1",
        "retrieval/mean_first_relevant_rank",
        "retrieval/num_queries",
        "t2i/r_precision",
    ]
    assert schema.mode("retrieval/mean_first_relevant_rank") == "min"
    assert evaluation_schema(tmp_path / "elsewhere") is None


def test_save_per_query_round_trip(tmp_path: Path) -> None:
    values = {
        "label": torch.tensor([7, 7, 9]),
        "query_id": torch.tensor([5, 6, 7], dtype=torch.int32),
        "precision@1": torch.tensor([1.0, 0.0, float("nan")], dtype=torch.float64),
        "first_relevant_rank": torch.tensor([1.0, 3.0, float("nan")], dtype=torch.float64),
        "not_in_schema": torch.zeros(3),
    }
    path = save_per_query(tmp_path / "pq" / "step_000000001.npz", values, SCHEMA)
    with np.load(path) as data:
        assert data.files == ["query_id", "precision@1", "first_relevant_rank"]  # schema order, schema keys only
        assert data["query_id"].tolist() == [5, 6, 7]
        assert np.isnan(data["precision@1"][2]) and data["first_relevant_rank"][:2].tolist() == [1.0, 3.0]
        assert data["query_id"].dtype == np.int64 and data["precision@1"].dtype == np.float64
    with zipfile.ZipFile(path) as archive:
        assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    assert sorted(p.name for p in (tmp_path / "pq").iterdir()) == ["step_000000001.npz"]  # no temporary left
    with pytest.raises(ValueError, match="query_id"):
        save_per_query(tmp_path / "x.npz", {"precision@1": torch.zeros(3)})
    with pytest.raises(ValueError, match="'precision@1' must be 1-D"):
        save_per_query(tmp_path / "x.npz", {"query_id": torch.arange(3), "precision@1": torch.zeros(2)})


def test_report_json_reads_as_one_evaluation(tmp_path: Path) -> None:
    folder = tmp_path / "eval_job"
    folder.mkdir()
    save_per_query(folder / "report.per_query.npz", {"query_id": np.arange(3), "precision@1": np.ones(3)})
    report = {
        "task": "retrieval",
        "precision@1": 0.75,
        "num_queries": 3,
        "precision_curve": [0.75],
        "ks": [1],
        "num_items": 3,
        "num_labels": 2,
        "per_query_file": "report.per_query.npz",
        "settings": {},
        "schema": SCHEMA.to_json(),
    }
    (folder / "report.json").write_text(json.dumps(report))
    (folder / "other.json").write_text(json.dumps({"not": "a report"}))
    assert find_evaluation_runs(tmp_path) == [folder / "report.json"]
    run = read_evaluation_run(folder / "report.json")
    assert run.prefix == "retrieval" and run.name == "eval_job" and run.schema == SCHEMA
    assert run.final() == {"precision@1": 0.75, "num_queries": 3}
    assert run.per_query()["precision@1"].tolist() == [1.0, 1.0, 1.0]
