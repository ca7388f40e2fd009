"""beyondlabels.reporting.tables: run comparison (final / best by schema direction) and tables that never cut names."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from beyondlabels.io import OfflineRun, read_evaluation_run
from beyondlabels.reporting import (
    compare_evaluation_runs,
    compare_wandb_runs,
    print_comparison,
    print_metrics_table,
)
from beyondlabels.schema import KeySpec, OutputSchema

KS = (1, 5, 10)
SCHEMA = OutputSchema(
    {
        **{f"macro_precision@{k}": KeySpec("scalar", True) for k in KS},
        "mean_first_relevant_rank": KeySpec("scalar", False),
        "num_queries": KeySpec("scalar", None, count=True),
        "precision_curve": KeySpec("curve", True),
    }
)


def _write_run(
    folder: Path, records: list[dict], overrides: list[str] | None = None, schema: OutputSchema = SCHEMA
) -> Path:
    folder.mkdir(parents=True)
    (folder / "history.json").write_text(json.dumps(records))
    (folder / "schema.json").write_text(json.dumps(schema.to_json()))
    if overrides:
        (folder.parent / ".hydra").mkdir()
        (folder.parent / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return folder


def _records(base: float) -> list[dict]:
    def rec(step: int, p: float, rank: float, n: int) -> dict:
        return {
            "step": step,
            "epoch": step // 10,
            **{f"macro_precision@{k}": p / k for k in KS},
            "mean_first_relevant_rank": rank,
            "num_queries": n,
            "precision_curve": [p, p / 2],
        }

    return [
        rec(10, base, 5.0, 40),
        rec(20, base + 0.2, 7.0, 40),
        rec(30, base + 0.1, 3.0, 38),
        {"step": 40, "epoch": 4, "error": "ValueError: boom"},
    ]


@pytest.fixture
def two_runs(tmp_path: Path) -> list:
    a = _write_run(tmp_path / "sweep" / "0" / "retrieval", _records(0.5), ["seed=1"])
    b = _write_run(tmp_path / "sweep" / "1" / "retrieval", _records(0.3)[:3], ["seed=2"])
    return [read_evaluation_run(a), read_evaluation_run(b)]


def test_final_values(two_runs: list) -> None:
    table = compare_evaluation_runs(two_runs)
    assert table["which"] == "final"
    assert list(table["runs"]) == ["0 (seed=1)", "1 (seed=2)"]
    assert (
        table["runs"]["0 (seed=1)"]["failed_evaluations"] == 1
        and table["runs"]["1 (seed=2)"]["failed_evaluations"] == 0
    )
    # one row per scalar of the schema, in schema order, prefixed as logged; curves are not rows
    assert list(table["metrics"]) == [
        "retrieval/macro_precision@1",
        "retrieval/macro_precision@5",
        "retrieval/macro_precision@10",
        "retrieval/mean_first_relevant_rank",
        "retrieval/num_queries",
    ]
    p1 = table["metrics"]["retrieval/macro_precision@1"]
    assert p1["direction"] == "max" and p1["values"] == {
        "0 (seed=1)": pytest.approx(0.6),
        "1 (seed=2)": pytest.approx(0.4),
    }
    assert p1["steps"] == {"0 (seed=1)": 30, "1 (seed=2)": 30}  # the failed evaluation at step 40 is skipped
    assert table["metrics"]["retrieval/mean_first_relevant_rank"]["direction"] == "min"
    assert table["metrics"]["retrieval/num_queries"] == {
        "direction": None,
        "count": True,
        "values": {"0 (seed=1)": 38, "1 (seed=2)": 38},
        "steps": {"0 (seed=1)": 30, "1 (seed=2)": 30},
    }
    json.dumps(table)  # JSON-ready


def test_best_values_follow_the_direction(two_runs: list) -> None:
    table = compare_evaluation_runs(two_runs, which="best")
    p5 = table["metrics"]["retrieval/macro_precision@5"]
    assert p5["values"]["0 (seed=1)"] == pytest.approx(0.7 / 5) and p5["steps"]["0 (seed=1)"] == 20  # max
    rank = table["metrics"]["retrieval/mean_first_relevant_rank"]
    assert rank["values"]["0 (seed=1)"] == 3.0 and rank["steps"]["0 (seed=1)"] == 30  # min
    assert table["metrics"]["retrieval/num_queries"]["values"]["0 (seed=1)"] == 38  # no direction: the last value


def test_chosen_keys_and_unknown_keys(two_runs: list) -> None:
    table = compare_evaluation_runs(two_runs, keys=["retrieval/num_queries", "retrieval/macro_precision@10"])
    assert list(table["metrics"]) == ["retrieval/num_queries", "retrieval/macro_precision@10"]
    with pytest.raises(ValueError, match=r"retrieval/macro_precision@100.*retrieval/macro_precision@10'"):
        compare_evaluation_runs(two_runs, keys=["retrieval/macro_precision@100"])
    with pytest.raises(ValueError, match="which"):
        compare_evaluation_runs(two_runs, which="mean")


def test_same_names_in_two_sweeps_get_distinct_columns(tmp_path: Path) -> None:
    runs = [
        read_evaluation_run(_write_run(tmp_path / sweep / "0" / "retrieval", _records(base), ["seed=1"]))
        for sweep, base in (("2026-01-01", 0.5), ("2026-01-02", 0.2))
    ]
    table = compare_evaluation_runs(runs)
    # seed=1 is shared, so it leaves the labels; then both are "0", told apart by their sweep folders
    assert table["common_overrides"] == ["seed=1"] and table["runs"]["2026-01-01/0"]["overrides"] == ["seed=1"]
    assert list(table["runs"]) == ["2026-01-01/0", "2026-01-02/0"]
    values = table["metrics"]["retrieval/macro_precision@1"]["values"]
    assert values["2026-01-01/0"] == pytest.approx(0.6) and values["2026-01-02/0"] == pytest.approx(0.3)
    assert "every run: seed=1" in _render(table)


def test_shared_overrides_leave_the_labels(tmp_path: Path) -> None:
    runs = [
        read_evaluation_run(
            _write_run(
                tmp_path / "sweep" / str(j) / "retrieval",
                _records(0.1 * j),
                [f"seed={j}", "experiment=shapes_smoke", "trainer.max_epochs=2"],
            )
        )
        for j in range(2)
    ]
    table = compare_evaluation_runs(runs)
    assert list(table["runs"]) == ["0 (seed=0)", "1 (seed=1)"]
    assert table["common_overrides"] == ["experiment=shapes_smoke", "trainer.max_epochs=2"]
    assert compare_evaluation_runs(runs[:1])["runs"].keys() == {
        "0 (seed=0, experiment=shapes_smoke, trainer.max_epochs=2)"
    }


def test_callbacks_of_one_run_share_a_column(tmp_path: Path) -> None:
    runs = [
        read_evaluation_run(_write_run(tmp_path / "run" / "retrieval", _records(0.5))),
        read_evaluation_run(
            _write_run(
                tmp_path / "run" / "t2i",
                [{"step": 10, "epoch": 1, "r_precision": 0.25}],
                schema=OutputSchema({"r_precision": KeySpec("scalar", True)}),
            )
        ),
    ]
    table = compare_evaluation_runs(runs)
    assert list(table["runs"]) == ["run"]
    assert table["metrics"]["t2i/r_precision"]["values"] == {"run": 0.25}
    assert table["metrics"]["retrieval/num_queries"]["values"] == {"run": 38}


def _offline(name: str, rows: list[dict]) -> OfflineRun:
    summary: dict = {}
    for row in rows:
        summary.update(row)
    return OfflineRun(
        Path(f"{name}.wandb"), run_id=name, name=name, history=rows, summary=summary, exit_code=0, complete=True
    )


def test_offline_wandb_runs(tmp_path: Path) -> None:
    rows = [
        {"_step": 0, "trainer/global_step": 10, "retrieval/map@r": 0.2, "retrieval/mean_first_relevant_rank": 4.0},
        {"_step": 1, "trainer/global_step": 20, "retrieval/map@r": 0.5, "retrieval/mean_first_relevant_rank": 6.0},
        {"_step": 2, "trainer/global_step": 30, "retrieval/map@r": 0.4, "retrieval/mean_first_relevant_rank": 5.0},
    ]
    schema = OutputSchema(
        {"map@r": KeySpec("scalar", True), "mean_first_relevant_rank": KeySpec("scalar", False)}
    ).prefixed("retrieval")
    partial = _offline("b", rows[:2])
    partial.complete = False
    runs = [_offline("a", rows), partial]
    final = compare_wandb_runs(runs, schemas=[schema, None])
    assert (
        list(final["runs"]) == ["a (a)", "b (b) (incomplete)"]
        and final["runs"]["b (b) (incomplete)"]["complete"] is False
    )
    assert final["metrics"]["retrieval/map@r"]["values"] == {"a (a)": 0.4, "b (b) (incomplete)": 0.5}
    assert final["metrics"]["retrieval/map@r"]["direction"] == "max"
    best = compare_wandb_runs(runs[:1], which="best", schemas=[schema], labels=["job 0"])
    assert best["metrics"]["retrieval/map@r"]["values"] == {"job 0": 0.5} and best["metrics"]["retrieval/map@r"][
        "steps"
    ] == {"job 0": 20}
    assert best["metrics"]["retrieval/mean_first_relevant_rank"]["values"] == {"job 0": 4.0}
    # without a schema: no direction, so "best" is the last value
    assert compare_wandb_runs(runs[:1], which="best")["metrics"]["retrieval/map@r"]["values"] == {"a (a)": 0.4}


def _render(table: dict, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    print_comparison(table, console=console)
    return console.export_text()


def test_metric_names_are_never_cut_on_an_80_column_terminal(tmp_path: Path) -> None:
    """The defect: retrieval/macro_precision@1, @5 and @10 became one truncated name on 80 columns."""
    long_key = "taxonomy_and_profiles/graded_" + "very_long_metric_name_" * 3 + "precision@10"  # > 80 characters
    schema = SCHEMA.merged(OutputSchema({long_key.split("/", 1)[1]: KeySpec("scalar", True)}))
    runs = []
    for job in range(6):
        records = _records(0.1 + 0.01 * job)
        for r in records:
            if "error" not in r:
                r[long_key.split("/", 1)[1]] = 0.05 * job
        folder = _write_run(
            tmp_path / str(job) / "retrieval", records, [f"model.embed_dim={64 * (job + 1)}", f"seed={job}"], schema
        )
        runs.append(read_evaluation_run(folder))
    runs.append(
        read_evaluation_run(
            _write_run(
                tmp_path / "6" / "taxonomy_and_profiles",
                [{"step": 1, "epoch": 0, long_key.split("/", 1)[1]: 0.9}],
                schema=schema,
            )
        )
    )
    table = compare_evaluation_runs(runs)
    assert long_key in table["metrics"]
    text = _render(table)
    lines = text.splitlines()
    for key in table["metrics"]:
        # each key whole, on one line, as many times as there are tables
        assert sum(key in line for line in lines) >= 1, (key, text)
        assert text.count(key) == sum(line.count(key) for line in lines)
    for name in ("retrieval/macro_precision@1", "retrieval/macro_precision@5", "retrieval/macro_precision@10"):
        assert any(line.split("│")[1].strip() == name for line in lines if line.count("│") > 2), name
    # every run's values are shown (final precision@1 of job j is 0.2 + 0.01 j, shown as 0.2000 + ...)
    for job in range(6):
        assert f"{0.2 + 0.01 * job:.4f}" in text
    assert "0.9000" in text


def test_short_names_fit_80_columns_and_runs_continue_in_more_tables(two_runs: list, tmp_path: Path) -> None:
    many = [
        read_evaluation_run(_write_run(tmp_path / "m" / str(j) / "retrieval", _records(0.1 * j), [f"seed={j}"]))
        for j in range(8)
    ]
    text = _render(compare_evaluation_runs(many))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "(1/" in text  # split over several tables
    for j in range(8):
        assert f"{0.1 * j + 0.1:.4f}" in text  # final precision@1 of every run is somewhere
    text = _render(compare_evaluation_runs(two_runs, which="best"))
    assert "↑" in text and "↓" in text and "failed evaluation" in text and "best" in text


def test_values_format(two_runs: list) -> None:
    table = compare_evaluation_runs(two_runs, keys=["retrieval/num_queries", "retrieval/macro_precision@1"])
    table["metrics"]["retrieval/macro_precision@1"]["values"]["1 (seed=2)"] = math.nan
    text = _render(table)
    assert " 38 " in text and "0.6000" in text and "nan" in text


def test_metrics_table_uses_the_schema() -> None:
    long_key = "macro_precision_with_an_unusually_long_name_for_a_cutoff_that_does_not_fit@10"
    schema = SCHEMA.merged(OutputSchema({long_key: KeySpec("scalar", True)}))
    metrics = {
        "macro_precision@1": 0.5,
        "num_queries": 12,
        "mean_first_relevant_rank": 2.5,
        long_key: 0.25,
        "precision_curve": [0.5],
        "num_items": 13,
    }
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    print_metrics_table(metrics, title="t", schema=schema, console=console)
    text = console.export_text()
    assert long_key in text and "num_items" not in text and "precision_curve" not in text
    row = next(line for line in text.splitlines() if "num_queries" in line)
    assert "12" in row and "12.0000" not in row
    assert "↓" in next(line for line in text.splitlines() if "mean_first_relevant_rank" in line)


def test_metrics_table_shows_each_interval_in_its_metric_row(capsys: pytest.CaptureFixture) -> None:
    schema = OutputSchema(
        {
            "precision@1": KeySpec("scalar", True),
            "precision@1_ci_low": KeySpec("scalar", True),
            "precision@1_ci_high": KeySpec("scalar", True),
            "mean_rank": KeySpec("scalar", False),
            "mean_rank_ci_low": KeySpec("scalar", False),
            "num_queries": KeySpec("scalar", None, count=True),
        }
    )
    metrics = {
        "precision@1": 0.5,
        "precision@1_ci_low": 0.375,
        "precision@1_ci_high": float("nan"),
        "mean_rank": 2.5,
        "mean_rank_ci_low": 2.0,
        "num_queries": 12,
    }
    print_metrics_table(metrics, title="t", schema=schema)  # the default console: what a task prints
    lines = capsys.readouterr().out.splitlines()
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in lines if line.startswith("│")
    }
    assert rows["precision@1"] == ["↑", "0.5000  [0.3750, nan]"]
    assert "precision@1_ci_low" not in rows and "precision@1_ci_high" not in rows
    # a lone bound has no pair to join: it keeps its own row
    assert rows["mean_rank"] == ["↓", "2.5000"] and rows["mean_rank_ci_low"] == ["↓", "2.0000"]
    assert rows["num_queries"] == ["", "12"]
    assert any("[low, high]: <key>_ci_low, <key>_ci_high" in line for line in lines)
    print_metrics_table({"a": 1.0, "b": 2}, title="plain")
    text = capsys.readouterr().out
    assert "[low, high]" not in text and "1.0000" in text
