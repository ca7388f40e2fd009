"""Files from elsewhere, as an attacker or a careless colleague leaves them: each case ends within seconds in a result
or in a ValueError of ours that names the file, never a hang, a RecursionError, a MemoryError or a number that is not
one (SECURITY.md lists the rule each case holds to)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from beyondlabels._internal.files import read_file, walk
from beyondlabels._internal.parse import parse_json, parse_yaml
from beyondlabels.io.atomic import write_json
from beyondlabels.io.qrels import load_qrels
from beyondlabels.io.run_files import find_evaluation_runs, read_history
from beyondlabels.io.run_folders import read_run_folder
from beyondlabels.io.taxonomy_files import read_taxonomy
from beyondlabels.metrics.intervals import with_confidence_intervals
from beyondlabels.reporting.html_report import report_html
from beyondlabels.reporting.summary import summarize_run_folder, summary_lines
from beyondlabels.schema import KeySpec, OutputSchema
from tests.faults import disk_full


def _schema(*keys: str) -> dict:
    """The schema.json of scalars ``keys`` (better when higher), each with its interval bounds."""
    schema = OutputSchema({k: KeySpec("scalar", True) for k in keys})
    return with_confidence_intervals(schema, keys).to_json()


SCHEMA = _schema("map@r")


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the block takes longer than ``seconds``."""

    def expire(*_):
        raise TimeoutError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _family(run: Path, prefix: str, records: list[dict], schema: dict = SCHEMA) -> Path:
    folder = run / prefix
    folder.mkdir(parents=True)
    (folder / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "schema.json").write_text(json.dumps(schema))
    return folder


# ---- named pipes --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", [".hydra/config.yaml", ".hydra/overrides.yaml", "retrieval/media/media.json"])
def test_a_named_pipe_in_a_run_folder_never_hangs_the_report(tmp_path: Path, where: str):
    run = tmp_path / "run"
    _family(run, "retrieval", [{"step": 4, "epoch": 0, "map@r": 0.25}])
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(run / where)
    with within(20):
        page = report_html([run])
        folder = read_run_folder(run)
    assert "0.2500" in page
    problems = [*folder.problems, *(p for f in folder.families for p in f.problems)]
    if where.endswith("media.json"):
        assert any("named pipe" in p and "media.json" in p for p in problems), problems
    elif where.endswith("config.yaml"):
        assert any("config.yaml" in p for p in problems), problems


@pytest.mark.parametrize("name", ["history.jsonl", "qrels.json", "qrels.txt", "taxonomy.yaml"])
def test_a_named_pipe_in_place_of_a_file_is_a_value_error_naming_it(tmp_path: Path, name: str):
    path = tmp_path / name
    os.mkfifo(path)
    reader = {"history.jsonl": read_history, "taxonomy.yaml": read_taxonomy}.get(name, load_qrels)
    with within(20), pytest.raises(ValueError, match="named pipe") as refused:
        reader(path)
    assert str(path) in str(refused.value)


def test_a_file_larger_than_its_reader_reads_is_refused_before_reading(tmp_path: Path):
    path = tmp_path / "big.json"
    with open(path, "wb") as handle:  # a sparse file: large, and nothing written
        handle.truncate(2 << 30)
    with within(20), pytest.raises(ValueError, match="more than the") as refused:
        read_file(path, "the report", 1 << 30)
    assert str(path) in str(refused.value)


# ---- deep folders -------------------------------------------------------------------------------------------------


def test_a_thousand_nested_folders_are_walked_without_recursion(tmp_path: Path, caplog):
    run = tmp_path / "run"
    _family(run, "retrieval", [{"step": 4, "epoch": 0, "map@r": 0.25}])
    deep = run / "x"
    deep.mkdir()
    for _ in range(1100):  # one at a time: pathlib's and os's own makedirs recurse
        deep = deep / "d"
        os.mkdir(deep)
    try:
        with within(60):
            assert [p.parent.name for p in find_evaluation_runs(run)] == ["retrieval"]
            assert "0.2500" in report_html([run])
            levels = sum(1 for _ in walk(run, max_depth=2000))
    finally:  # removed here, bottom up: shutil.rmtree (pytest's clean-up of old temporary folders) recurses
        while deep != run:
            os.rmdir(deep)
            deep = deep.parent
    assert "folders nest too deep" in caplog.text
    assert levels == 1 + 1 + 1100 + 1  # run, x, its 1,100 nested folders, retrieval


# ---- text from data is text ---------------------------------------------------------------------------------------


MATH = "$" + "\\sqrt{" * 60 + "x" + "}" * 60 + "$"


def test_mathtext_in_a_metric_key_is_drawn_as_text(tmp_path: Path):
    key = f"precision@{MATH}"
    schema = _schema(key)
    records = [{"step": s, "epoch": 0, key: 0.5, f"{key}_ci_low": 0.4, f"{key}_ci_high": 0.6} for s in (1, 2, 3)]
    run = tmp_path / "run"
    _family(run, "retrieval", records, schema)
    with within(60):
        page = report_html([run])
    assert "0.5000" in page and "RecursionError" not in page


def test_a_chart_that_fails_in_any_way_is_a_listed_problem(tmp_path: Path, monkeypatch):
    import beyondlabels.reporting.plots as plots

    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded (injected)")

    monkeypatch.setattr(plots, "save_history_band_png", broken)
    key = "map@r"
    schema = _schema(key)
    records = [{"step": s, "epoch": 0, key: 0.5, f"{key}_ci_low": 0.4, f"{key}_ci_high": 0.6} for s in (1, 2)]
    run = tmp_path / "run"
    _family(run, "retrieval", records, schema)
    page = report_html([run])
    assert "0.5000" in page and "could not be drawn: RecursionError" in page


def test_a_class_name_in_mathtext_draws_the_profiles_heatmap(tmp_path: Path):
    from beyondlabels.reporting.heatmap import save_similarity_heatmap_png

    with within(60):
        path = save_similarity_heatmap_png(np.eye(2), [MATH, "$a$"], tmp_path / "m.png")
    assert path.read_bytes().startswith(b"\x89PNG")


# ---- numbers ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "1e999"])
def test_an_infinite_metric_value_in_a_history_is_refused_and_never_shown_as_best(tmp_path: Path, value: str):
    run = tmp_path / "run"
    folder = _family(run, "retrieval", [{"step": 4, "epoch": 0, "map@r": 0.25}])
    with open(folder / "history.jsonl", "a") as handle:
        handle.write(f'{{"step": 8, "epoch": 1, "map@r": {value}}}\n{{"step": 9, "epoch": 1, "map@r": 0.5}}\n')
    with pytest.raises(ValueError, match=r"history.jsonl.*line 2") as refused:
        read_history(folder / "history.jsonl")
    assert "Infinity" in str(refused.value) or "infinite" in str(refused.value)
    lines = " ".join(str(line) for line in summary_lines(summarize_run_folder(run), full=True))
    assert "history.jsonl" in lines  # the family's file is named as unreadable
    assert not re.search(r"(?<![a-z])-?inf(?![a-z])", lines), lines  # no value shown as inf, best or last


def test_nan_written_by_the_project_is_read_as_undefined(tmp_path: Path):
    folder = _family(tmp_path / "run", "retrieval", [{"step": 4, "epoch": 0, "map@r": float("nan")}])
    (record,) = read_history(folder / "history.jsonl")
    assert np.isnan(record["map@r"])
    assert read_history(folder / "history.jsonl") == [record]  # one NaN object, as json's: two reads compare equal


# ---- YAML and JSON size -------------------------------------------------------------------------------------------


def _merge_bomb(levels: int = 12) -> str:
    lines = ["a0: &a0 {x: 1, y: 2, z: 3}"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 9)}], k{i}: 1}}")
    lines.append(f"parent: {{<<: [{', '.join([f'*a{levels - 1}'] * 9)}]}}")
    return "root: r\n" + "\n".join(lines) + "\n"


def test_yaml_merge_keys_are_counted_before_they_expand(tmp_path: Path):
    text = _merge_bomb()
    assert len(text.encode()) < 1500
    path = tmp_path / "taxonomy.yaml"
    path.write_text(text)
    start = time.perf_counter()
    with within(30), pytest.raises(ValueError, match="aliases are expanded") as refused:
        read_taxonomy(path)
    assert str(path) in str(refused.value) and time.perf_counter() - start < 10
    assert parse_yaml("a: &a {x: 1}\nb: {<<: *a, y: 2}\n", "x.yaml") == {"a": {"x": 1}, "b": {"x": 1, "y": 2}}


def test_merge_keys_in_hydra_overrides_are_counted(tmp_path: Path, caplog):
    from beyondlabels.io.run_files import run_overrides

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- " + _merge_bomb().replace("\n", "\n  ").rstrip() + "\n")
    with within(30):
        assert run_overrides(tmp_path) == []
    assert "aliases are expanded" in caplog.text


def test_json_values_are_counted_before_they_are_made(tmp_path: Path):
    """A JSON document of many small values is refused from a count of its bytes, before its objects exist."""
    text = "[" + ",".join(["{}"] * 400_000) + "]"  # 1.2 MB: 400,000 dicts would take 24 times that
    with pytest.raises(ValueError, match="more than 10 times its size"):
        _check_ratio(text)
    assert parse_json('{"a": NaN}', "x")["a"] != parse_json('{"a": NaN}', "x")["a"]
    with pytest.raises(ValueError, match="duplicate key 'q1'|appears twice"):
        parse_json("{" + ",".join(f'"q{i}": {{}}' for i in range(20_000)) + ', "q1": {}}', "x.json")


def _check_ratio(text: str) -> None:
    """:func:`parse_json` under a slack of 0, as if the file were large."""
    import beyondlabels._internal.parse as parse

    slack = parse.MEMORY_SLACK
    parse.MEMORY_SLACK = 0
    try:
        parse_json(text, "x.json")
    finally:
        parse.MEMORY_SLACK = slack


@pytest.mark.slow
def test_thirty_megabytes_of_empty_objects_as_qrels_stay_within_ten_times_their_size(tmp_path: Path):
    import tracemalloc

    path = tmp_path / "qrels.json"
    path.write_text("{" + ",".join(f'"q{i}": {{}}' for i in range(2_500_000)) + "}")
    size = path.stat().st_size
    assert size > 30e6
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ValueError, match="more than 10 times its size") as refused:
            load_qrels(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(refused.value) and "aliases" not in str(refused.value)
    assert peak <= 10 * size, f"peak {peak / size:.2f} times the file"
    assert time.perf_counter() - start < 60


# ---- the offline W&B reader ---------------------------------------------------------------------------------------


def _wandb_log(path: Path, items: list[tuple[list[str], str]]) -> Path:
    """A W&B transaction log (the format of beyondlabels.io.wandb_offline) of one history row holding ``items``
    (``(key path, value JSON)``) and the final exit record."""
    from wandb.proto import wandb_internal_pb2

    history = wandb_internal_pb2.Record()
    history.history.step.num = 3
    for keys, value in items:
        item = history.history.item.add()
        if len(keys) == 1:
            item.key = keys[0]
        else:
            item.nested_key.extend(keys)
        item.value_json = value
    done = wandb_internal_pb2.Record()
    done.exit.exit_code = 0
    block = 32 * 1024
    out = bytearray(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    for record in (history, done):
        payload, first = record.SerializeToString(), True
        while True:  # chunks: FULL (1) or FIRST (2), MIDDLE (3)..., LAST (4), none past its block
            left = block - len(out) % block
            if left < 7:  # too little for a chunk header: padding
                out += b"\x00" * left
                left = block
            part, payload = payload[: left - 7], payload[left - 7 :]
            kind = (1 if not payload else 2) if first else (4 if not payload else 3)
            crc = zlib.crc32(part, zlib.crc32(bytes([kind])))
            out += struct.pack("<IHB", crc, len(part), kind) + part
            first = False
            if not payload:
                break
    path.write_bytes(bytes(out))
    return path


def test_the_offline_wandb_reader_keeps_its_values_finite_flat_and_bounded(tmp_path: Path):
    from beyondlabels.io.wandb_offline import read_offline_run

    log = _wandb_log(
        tmp_path / "run-a.wandb",
        [(["precision@1"], "Infinity"), (["recall@1"], "NaN"), (["ok"], "0.5"), (["curve"], "[1, -Infinity]")],
    )
    run = read_offline_run(log, wait_s=0)
    assert run.summary["precision@1"] is None and run.summary["recall@1"] is None and run.summary["ok"] == 0.5
    assert run.summary["curve"] == [1, None]
    assert {(where, key) for where, key, _ in run.non_finite} == {
        ("history step 3", "precision@1"),
        ("history step 3", "recall@1"),
        ("history step 3", "curve"),
    }
    cases = [
        ([(["deep"], "[" * 200_000 + "]" * 200_000)], "nested more than 64"),
        ([(["dup"], '{"a": 1, "a": 2}')], "duplicate key"),
        ([([f"k{i}" for i in range(100_000)], "1")], "key path of 100000 parts"),
    ]
    for items, expected in cases:
        bad = _wandb_log(tmp_path / "run-b.wandb", items)
        with within(30), pytest.raises(ValueError, match=expected) as refused:
            read_offline_run(bad, wait_s=0)
        assert str(bad) in str(refused.value)


# ---- writes -------------------------------------------------------------------------------------------------------


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path: Path):
    with disk_full(tmp_path), pytest.raises(OSError) as failed:
        write_json(tmp_path / "schema.json", {"keys": {}})
    assert str(tmp_path / "schema.json") in str(failed.value)


def test_a_family_folder_that_is_a_symbolic_link_is_reported(tmp_path: Path):
    run = tmp_path / "run"
    _family(run, "retrieval", [{"step": 4, "epoch": 0, "map@r": 0.25}])
    _family(tmp_path / "elsewhere", "hierarchy", [{"step": 4, "epoch": 0, "map@r": 0.875}])
    os.symlink(tmp_path / "elsewhere" / "hierarchy", run / "hierarchy")
    folder = read_run_folder(run)
    assert [f.prefix for f in folder.families] == ["retrieval"]
    assert any("hierarchy/ is a symbolic link" in p for p in folder.problems), folder.problems
    page = report_html([run])
    assert "hierarchy/ is a symbolic link" in page and "0.8750" not in page


def test_task_profiles_with_mathtext_class_names_writes_its_report_and_heatmap(tmp_path: Path):
    from beyondlabels.tasks import profiles
    from tests.entrypoints.helpers import evaluate_config

    classes = {MATH: {"size": 0, "kind": ["a"]}, "$x$": {"size": 2, "kind": ["b"]}, "plain": {"size": 1, "kind": []}}
    document = {"features": {"ordinal": {"size": "0-2"}, "sets": {"kind": ["a", "b"]}}, "classes": classes}
    (tmp_path / "profiles.json").write_text(json.dumps(document))
    cfg = evaluate_config(tmp_path, "task=profiles", f"+profiles={tmp_path / 'profiles.json'}")
    with within(120):
        report = profiles.run(cfg)
    written = json.loads((tmp_path / "job" / "profiles.json").read_text())
    assert written["classes"] == report["classes"] == list(classes) and "problems" not in written
    assert (tmp_path / "job" / "profiles.png").read_bytes().startswith(b"\x89PNG")


def test_a_task_whose_figure_fails_still_writes_its_report_and_lists_the_problem(tmp_path: Path):
    from omegaconf import OmegaConf

    from beyondlabels.tasks._common import ReportFiles

    cfg = OmegaConf.create({"output": str(tmp_path / "profiles.json"), "paths": {"output_dir": str(tmp_path)}})

    def figures(path: Path) -> None:
        raise RecursionError("maximum recursion depth exceeded (injected)")

    path = ReportFiles(cfg, "profiles.json").write({"task": "profiles"}, figures=figures)
    report = json.loads(path.read_text())
    assert report["task"] == "profiles" and "RecursionError" in report["problems"][0]
