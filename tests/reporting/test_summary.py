"""beyondlabels.reporting.summary: the end-of-run summary read back as a person reads it (the printed lines) and
checked against a numpy oracle over the history; its width, its colour codes, its notes, its full table as Markdown
and the paths it ends with."""

from __future__ import annotations

import io
import json
import math
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from beyondlabels.functional.crossmodal import crossmodal_output_schema
from beyondlabels.functional.hierarchy import hierarchy_output_schema
from beyondlabels.functional.retrieval import retrieval_output_schema
from beyondlabels.functional.zeroshot import zeroshot_output_schema
from beyondlabels.metrics.intervals import (
    confidence_interval_keys,
    with_confidence_intervals,
)
from beyondlabels.reporting.summary import (
    print_summary,
    run_locations,
    summarize_run_folder,
    summary_markdown,
)
from beyondlabels.schema import KeySpec, OutputSchema

UP, DOWN, PLAIN = KeySpec("scalar", True), KeySpec("scalar", False), KeySpec("scalar", None)
COUNT = KeySpec("scalar", None, count=True)
KEYS = {"a": UP, "b": DOWN, "n": COUNT, "c": PLAIN, "a_ci_low": UP, "a_ci_high": UP}
ROW = re.compile(
    r"^  (?P<key>\S+)(?: (?P<arrow>[↑↓]))?\s+(?P<last>\S+)(?:\s+\[(?P<low>\S+), (?P<high>\S+)\])?"
    r"(?:\s+(?P<best>\S+) \((?P<step>\d+)\))?\s+(?P<change>\S+)$"
)


def _write_family(folder: Path, records: list[dict], schema: OutputSchema | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if schema is not None:
        (folder / "schema.json").write_text(json.dumps(schema.to_json()))


def _printed(summary, full: bool = False, width: int = 80, locations: list | None = None, **console_options) -> str:
    console = Console(file=io.StringIO(), width=width, **console_options)
    print_summary(summary, console=console, full=full, locations=locations)
    return console.file.getvalue()


def _rows(text: str) -> dict[str, dict[str, dict]]:
    """``{family: {key: fields}}`` of the printed table lines."""
    families: dict[str, dict[str, dict]] = {}
    current = None
    for line in text.splitlines():
        heading = re.match(r"^(\S+)/  ", line)
        if heading:
            current = families.setdefault(heading.group(1), {})
        elif current is not None and (match := ROW.match(line)):
            current[match.group("key")] = match.groupdict()
    return families


def _number(text: str | None) -> float | None:
    return None if text in (None, "—") else float(text)


# ---- the numbers against an oracle ----------------------------------------------------------------------------------


def _history(rng: np.random.Generator, n: int) -> tuple[list[dict], dict[str, np.ndarray], np.ndarray]:
    steps = np.sort(rng.choice(np.arange(1, 10_000), size=n, replace=False))
    values = {
        "a": np.round(rng.uniform(0, 1, n), 2),  # rounded: ties, which go to the earliest evaluation
        "b": rng.uniform(1, 50, n),
        "n": rng.integers(0, 40, n).astype(float),
        "c": rng.normal(size=n),
    }
    values["a"][rng.integers(0, n)] = np.nan  # a NaN evaluation is never the best
    records = []
    for i in range(n):
        record = {"step": int(steps[i]), "epoch": i, **{k: float(v[i]) for k, v in values.items()}}
        record["n"] = int(values["n"][i])
        record["a_ci_low"], record["a_ci_high"] = float(values["a"][i]) - 0.1, float(values["a"][i]) + 0.1
        records.append(record)
    return records, values, steps


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_value_is_the_oracles(tmp_path: Path, seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 12))
    records, values, steps = _history(rng, n)
    if not math.isnan(values["a"][-1]):
        records[-1]["a"] = float(values["a"][-1])
    failed = {"step": int(steps[-1]) + 5, "epoch": n, "error": "RuntimeError: out of\nmemory"}
    schema = OutputSchema(KEYS, headline=["b", "a"])
    _write_family(tmp_path / "fam", [*records, failed], schema)
    summary = summarize_run_folder(tmp_path)
    for full in (False, True):
        text = _printed(summary, full=full, locations=[])
        rows = _rows(text)["fam"]
        assert list(rows) == (["a", "b", "n", "c"] if full else ["b", "a"])
        for key, row in rows.items():
            v = values[key]
            assert _number(row["last"]) == pytest.approx(v[-1], abs=5e-5, nan_ok=True), key
            assert _number(row["change"]) == pytest.approx(v[-1] - v[0], abs=1e-4, nan_ok=True), key
            mode = {"a": "max", "b": "min"}.get(key)
            assert row["arrow"] == {"max": "↑", "min": "↓", None: None}[mode]
            if mode is None:
                assert row["best"] is None
                continue
            best = int(np.nanargmax(v) if mode == "max" else np.nanargmin(v))  # the first of equal values
            assert _number(row["best"]) == pytest.approx(v[best], abs=5e-5) and int(row["step"]) == steps[best], key
        a = rows["a"]
        if math.isnan(values["a"][-1]):
            assert a["last"] == "nan"
        assert _number(a["low"]) == pytest.approx(records[-1]["a_ci_low"], abs=5e-5, nan_ok=True)
        assert _number(a["high"]) == pytest.approx(records[-1]["a_ci_high"], abs=5e-5, nan_ok=True)
        assert f"fam/  {n} evaluations, steps {steps[0]}–{steps[-1]}, 1 failed" in text
        assert f"  1 failed evaluation, the last at step {failed['step']}: RuntimeError: out of memory" in text
    if full:
        assert re.search(r"^  n +\d+ +[+-]\d+$", text, re.MULTILINE), "counts print as integers, without best"


def test_the_full_table_file_holds_the_same_numbers(tmp_path: Path):
    records, values, steps = _history(np.random.default_rng(5), 6)
    records[-1]["a"] = values["a"][-1] = 0.5
    schema = OutputSchema(KEYS, headline=["a"])
    _write_family(tmp_path / "fam|x", records, schema)
    text = summary_markdown(summarize_run_folder(tmp_path, extra={"val/loss": 0.00015, "fam|x/a": 1.0}))
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| metric")]
    cells = [[c.strip() for c in line.strip("| ").split(" | ")] for line in lines]
    table = {row[0].strip("*"): row for row in cells}
    assert "## fam\\|x/: 6 evaluations" in text, "a | in a name does not break the table"
    assert table["a"][0] == "**a**" and table["b"][0] == "b", "headline keys are bold"
    for key in ("a", "b", "n", "c"):
        _, arrow, last, interval, best, step, first, change = table[key]
        v = values[key]
        assert float(last) == pytest.approx(v[-1], abs=5e-5) and float(first) == pytest.approx(v[0], abs=5e-5)
        assert float(change) == pytest.approx(v[-1] - v[0], abs=1e-4)
        if key in ("a", "b"):
            i = int(np.nanargmax(v) if key == "a" else np.nanargmin(v))
            assert float(best) == pytest.approx(v[i], abs=5e-5) and int(step) == steps[i] and arrow in "↑↓"
        else:
            assert best == step == arrow == ""
        assert bool(interval) == (key == "a")
    assert table["val/loss"] == ["val/loss", "0.00015"], "other values keep their small digits"
    assert "fam\\|x/a" not in table


# ---- what a person sees -------------------------------------------------------------------------------------------


def _demo_like_folder(root: Path, steps: list[int]) -> None:
    """A folder with the demo's four families (their real schemas, intervals as the callbacks add them)."""
    rng = np.random.default_rng(3)
    graded = {"graded": ["hierarchical", "profile"], "mistake_stats": {"hierarchical": ["lca_depth"]}}
    schemas = {
        "retrieval": retrieval_output_schema((1, 5, 10), **graded),
        "crossmodal": crossmodal_output_schema((1, 5, 10)),
        "zeroshot": zeroshot_output_schema((1, 5)),
        "hierarchy": hierarchy_output_schema(),
    }
    for prefix, schema in schemas.items():
        schema = with_confidence_intervals(schema, confidence_interval_keys(schema))
        records = []
        for i, step in enumerate(steps):
            record = {"step": step, "epoch": i}
            for key in schema.scalar_keys():
                scale = 1000 if "rank" in key else 1  # mean ranks: 4 digits before the point
                record[key] = int(rng.integers(0, 100_000)) if schema[key].count else float(rng.uniform(0, 1) * scale)
            records.append(record)
        _write_family(root / prefix, records, schema)


def test_the_summary_fits_80_columns_and_30_lines(tmp_path: Path):
    _demo_like_folder(tmp_path, [1_234_567, 2_345_678, 9_999_999])  # 7-digit steps
    text = _printed(summarize_run_folder(tmp_path), locations=[])
    lines = text.rstrip("\n").splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert len(lines) <= 20
    rows = _rows(text)
    assert list(rows["retrieval"]) == ["precision@1", "r_precision", "map@r", "ndcg@10"]
    assert list(rows["hierarchy"]) == ["hP", "hR", "hF"] and list(rows["zeroshot"]) == ["top1", "balanced_accuracy"]
    assert len(rows["crossmodal"]) == 4


def test_no_colour_codes_unless_a_terminal(tmp_path: Path):
    _demo_like_folder(tmp_path, [4, 8])
    summary = summarize_run_folder(tmp_path)
    assert "\x1b[" not in _printed(summary, locations=[])
    styled = _printed(summary, locations=[], force_terminal=True, color_system="standard")
    assert "\x1b[" in styled, "a terminal gets styles"


def test_notes_events_and_problems(tmp_path: Path):
    notes = {"audit_num_suspects": "suspected label errors", "audit_num_outliers": "outliers"}
    keys = {"p": UP, "audit_num_suspects": COUNT, "audit_num_outliers": COUNT}
    schema = OutputSchema(keys, headline=["p"], notes=notes)
    records = [{"step": s, "epoch": 0, "p": 0.5, "audit_num_suspects": 30, "audit_num_outliers": 5} for s in (10, 20)]
    _write_family(tmp_path / "retrieval", records, schema)
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text(
        "epoch,step,convergence/retrieval/p/window_mean,convergence/retrieval/p/plateau,"
        "convergence/retrieval/p/plateau_p,"
        "convergence/val/loss/window_mean,convergence/val/loss/downturn,convergence/val/loss/downturn_p\n"
        "0,10,0.5,0,0.5,,,\n1,20,0.5,1,0.012,3.0,1,0.0004\n"
    )
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metrics.csv").write_bytes(b"step,a/window_mean,a/plateau\n\xff,1,1\n")
    text = _printed(summarize_run_folder(tmp_path), locations=[])
    assert "  30 suspected label errors, 5 outliers\n" in text
    assert "  convergence of p: plateau at step 20 (p 0.012)\n" in text, "the family's own events, on its note line"
    assert "convergence of val/loss: downturn at step 20 (p 0.0004)\n" in text, "events of keys outside the families"
    problem = "convergence events not read from broken/metrics.csv: not a readable CSV log (UnicodeDecodeError"
    assert problem in text, "a problem is printed whole, on one line"
    # the events a training passes in replace the CSV's
    event = {"monitor": "retrieval/p", "event": "downturn", "step": 7, "p": 0.03}
    passed = summarize_run_folder(tmp_path, events=[event])
    assert "  convergence of p: downturn at step 7 (p 0.03)" in _printed(passed, locations=[])


def test_a_family_without_declared_headline_or_schema(tmp_path: Path):
    keys = {"x": UP, "y": UP, "z": DOWN, "w": UP, "v": UP, "u": UP, "n": COUNT}
    per_query = {k: KeySpec("per_query", True) for k in ("z", "w")}
    schema = with_confidence_intervals(OutputSchema(keys, per_query), ["z", "w"])
    record = {"step": 3, "epoch": 0, **{k: 0.25 for k in schema.scalar_keys()}}
    _write_family(tmp_path / "mine", [record], schema)
    _write_family(tmp_path / "bare", [record], None)
    rows = _rows(text := _printed(summarize_run_folder(tmp_path), locations=[]))
    assert list(rows["mine"]) == ["z", "w"], "without a declared headline: the keys with an interval"
    assert list(rows["bare"]) == ["x", "y", "z", "w"] and "no schema.json" in text
    assert "mine/  1 evaluation, step 3" in text and rows["mine"]["z"]["change"] == "—"


def test_names_from_a_file_never_reach_the_terminal_as_escapes(tmp_path: Path):
    schema = OutputSchema({"p\x1b[31m": UP}, headline=["p\x1b[31m"])
    records = [{"step": 1, "epoch": 0, "p\x1b[31m": 0.5}, {"step": 2, "epoch": 0, "error": "E\x1b]0;x\x07"}]
    _write_family(tmp_path / "fam", records, schema)
    text = _printed(summarize_run_folder(tmp_path), locations=[])
    assert "\x1b" not in text and "\x07" not in text and "p?[31m" in text


def test_a_folder_without_evaluations(tmp_path: Path):
    text = _printed(summarize_run_folder(tmp_path), locations=[])
    assert "no evaluation history under" in text


# ---- the paths ----------------------------------------------------------------------------------------------------


def test_the_paths_and_the_exact_commands(tmp_path: Path):
    run = tmp_path / "my runs" / "2026-01-01_12-00-00"
    times = ("20260101_120000-aaaa1111", "20260102_090000-bbbb2222", "20260103_090000-bbbb2222")
    segments = [f"offline-run-{t}" for t in times]
    for folder in ("csv", "tensorboard", "checkpoints", *(f"wandb/{name}" for name in segments)):
        (run / folder).mkdir(parents=True)
    (run / "csv" / "metrics.csv").write_text("epoch,step\n")
    (run / "tensorboard" / "events.out.tfevents.1.host").write_bytes(b"")
    (run / "mlflow.db").write_bytes(b"")
    (run / "report.html").write_text("<html></html>")
    (run / "metrics.md").write_text("# Run summary\n")
    found = dict(run_locations(run))
    assert found["run folder"] == str(run) and found["every key"] == str(run / "metrics.md")
    assert found["HTML report"] == str(run / "report.html") and found["CSV log"] == str(run / "csv" / "metrics.csv")
    assert shlex.split(found["TensorBoard"]) == ["tensorboard", "--logdir", str(run / "tensorboard")]
    assert shlex.split(found["MLflow"]) == ["mlflow", "ui", "--backend-store-uri", f"sqlite:///{run / 'mlflow.db'}"]
    # the segments of the latest W&B run, in time order (a resumed run); an older run in the folder is left out
    assert shlex.split(found["W&B offline"]) == ["wandb", "sync", *(str(run / "wandb" / name) for name in segments[1:])]
    text = _printed(summarize_run_folder(run))
    assert f"W&B offline: {found['W&B offline']}\n" in text, "one line, unwrapped, whatever its length"


def _selection_data(**changes) -> dict:
    data = {
        "key": "a",
        "monitor": "retrieval/a",
        "steps": [4, 8, 12],
        "means": [0.5, 0.889, 0.88],
        "pvalues": [0.01, 1.0, 0.4],
        "in_set": [False, True, True],
        "set_steps": [8, 12],
        "best_step": 8,
        "best_value": 0.889,
        "estimate": 0.8812,
        "ci_low": 0.8577,
        "ci_high": 0.9049,
        "latest_step": 12,
        "flips": {"reference_step": 8, "negative_flip_rate": 0.0213, "positive_flip_rate": 0.01},
        "classes": {
            "label": [3, 7],
            "n": [40, 40],
            "reference_mean": [0.9, 0.8],
            "current_mean": [0.6, 0.8],
            "down": [12, 1],
            "up": [0, 1],
            "pvalue": [0.0002, 0.75],
            "adjusted": [0.0004, 0.75],
            "regressed": [True, False],
        },
        "size": 0.1,
        "confidence": 0.95,
        "mode": "max",
        "checkpoints": [
            {"file": "/x/best.ckpt", "step": 8, "in_set": True},
            {"file": "/x/e1.ckpt", "step": 4, "in_set": False},
        ],
    }
    return {**data, **changes}


def test_the_checkpoint_selection_line(tmp_path: Path):
    """selection.json in a family folder: the steps as good as the best with the corrected best value, what got worse
    since the best and the saved checkpoints in the set, wrapped at '; ' to fit 80 columns."""
    from beyondlabels.io import write_selection

    family = tmp_path / "retrieval"
    _write_family(family, [{"step": 4, "epoch": 0, "a": 0.5}, {"step": 12, "epoch": 2, "a": 0.88}], OutputSchema(KEYS))
    write_selection(family, _selection_data())
    text = _printed(summarize_run_folder(tmp_path), locations=[])
    joined = " ".join(line.strip() for line in text.splitlines())
    assert "steps as good as the best (90%): 8, 12; best a 0.889, corrected 0.881 [0.86, 0.90]" in joined
    assert "since the best (step 8) to step 12: negative flips 2.1% of the queries; regressed classes 3" in joined
    assert "saved checkpoints in the set: best.ckpt (step 8); 1 worse" in joined
    assert max(len(line) for line in text.splitlines()) <= 80
    (family / "selection.json").write_text('{"version": 1, "steps": "many"}')
    text = _printed(summarize_run_folder(tmp_path), locations=[])
    assert "checkpoint selection not read" in text and "'steps' must be a list of ints" in text
