"""A report made from a downloaded run folder carries nothing from outside that folder, and one hostile family file
(nested a hundred thousand deep, linked out of the folder) is named as a problem while the other families render."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beyondlabels.io.run_files import read_evaluation_run
from beyondlabels.io.run_folders import read_run_folder
from beyondlabels.reporting.html_report import report_html

DEEP = "[" * 100_000 + "]" * 100_000


def _png(path: Path, color: tuple[int, int, int]) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (7, 5), color).save(path, format="PNG")
    return path.read_bytes()


def _family(run: Path, prefix: str, value: float) -> Path:
    folder = run / prefix
    folder.mkdir(parents=True)
    (folder / "history.jsonl").write_text(json.dumps({"step": 4, "epoch": 0, "map@r": value}) + "\n")
    (folder / "schema.json").write_text(json.dumps({"keys": {"map@r": {"kind": "scalar", "higher_is_better": True}}}))
    return folder


@pytest.fixture()
def secret(tmp_path: Path) -> tuple[Path, bytes]:
    """A picture of the reader's own, outside every run folder."""
    data = _png(tmp_path / "home" / "private.png", (13, 37, 42))
    return tmp_path / "home" / "private.png", data


def _embedded(page: str, data: bytes) -> bool:
    return base64.b64encode(data).decode() in page


def test_a_png_linked_into_a_family_folder_from_outside_is_not_embedded(tmp_path: Path, secret):
    file, data = secret
    folder = _family(tmp_path / "run", "retrieval", 0.5)
    os.symlink(file, folder / "confidence_intervals.png")
    (folder / "embedding_projection").mkdir()
    os.symlink(file, folder / "embedding_projection" / "step_000000004.png")
    page = report_html([tmp_path / "run"])
    assert not _embedded(page, data)
    assert "symbolic link" in page and "0.5000" in page


def test_a_linked_media_folder_or_manifest_entry_is_not_read(tmp_path: Path, secret):
    file, data = secret
    outside_media = tmp_path / "home" / "media"
    outside_media.mkdir()
    os.symlink(file, outside_media / "x.png")
    manifest = {"format": 1, "prefix": "a", "step": 4, "epoch": 0, "figures": [{"name": "x", "file": "x.png"}]}
    (outside_media / "media.json").write_text(json.dumps(manifest))
    a = _family(tmp_path / "run", "a", 0.25)
    os.symlink(outside_media, a / "media")
    b = _family(tmp_path / "run", "b", 0.75)
    (b / "media").mkdir()
    os.symlink(file, b / "media" / "x.png")
    (b / "media" / "media.json").write_text(json.dumps({**manifest, "prefix": "b"}))
    page = report_html([tmp_path / "run"])
    assert not _embedded(page, data)
    assert "0.2500" in page and "0.7500" in page


def test_config_and_histories_linked_from_outside_are_not_read(tmp_path: Path):
    private = tmp_path / "home" / "notes.yaml"
    private.parent.mkdir()
    private.write_text("password: hunter2\n")
    run = tmp_path / "run"
    _family(run, "retrieval", 0.5)
    os.symlink(private.parent, run / ".hydra")
    os.symlink(private, private.parent / "config.yaml")
    linked = run / "linked"
    linked.mkdir()
    history = tmp_path / "home" / "history.jsonl"
    history.write_text(json.dumps({"step": 1, "map@r": 0.123456}) + "\n")
    os.symlink(history, linked / "history.jsonl")
    page = report_html([run])
    assert "hunter2" not in page and "0.1235" not in page
    assert "0.5000" in page


def test_a_per_query_file_named_outside_the_folder_is_refused(tmp_path: Path):
    np.savez(tmp_path / "elsewhere.npz", query_id=np.arange(3), score=np.ones(3))
    folder = _family(tmp_path / "run", "retrieval", 0.5)
    for name in (str(tmp_path / "elsewhere.npz"), "../../elsewhere.npz"):
        (folder / "history.jsonl").write_text(json.dumps({"step": 4, "map@r": 0.5, "per_query_file": name}) + "\n")
        run = read_evaluation_run(folder)
        with pytest.raises(ValueError, match=r"per_query_file.*leaves its folder"):
            run.per_query()
        assert run.steps_with_per_query() == []


def test_a_job_folder_linked_out_of_a_multirun_is_not_read(tmp_path: Path):
    sweep = tmp_path / "multirun"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    _family(sweep / "0", "retrieval", 0.5)
    _family(tmp_path / "home" / "job", "retrieval", 0.987654)
    os.symlink(tmp_path / "home" / "job", sweep / "1")
    page = report_html([sweep])
    assert "0.9877" not in page and "0.5000" in page


@pytest.mark.parametrize(
    "file, text",
    [
        ("history.jsonl", DEEP + "\n"),
        ("history.jsonl", json.dumps({"step": 4, "map@r": 0.1}) + "\n" + DEEP + "\n" + json.dumps({"step": 5}) + "\n"),
        ("schema.json", DEEP),
        ("media/media.json", DEEP),
        ("media/media.json", '{"format": 1, "figures": ' + DEEP + "}"),
        ("history.json", DEEP),
    ],
)
def test_one_family_nested_a_hundred_thousand_deep_is_named_and_the_others_render(tmp_path: Path, file, text):
    run = tmp_path / "run"
    _family(run, "a_good", 0.25)
    bad = _family(run, "bad", 0.5)
    _family(run, "z_good", 0.75)
    (bad / file).parent.mkdir(parents=True, exist_ok=True)
    (bad / file).write_text(text)
    if file == "history.json":  # read only without a history.jsonl
        (bad / "history.jsonl").unlink()
    folder = read_run_folder(run)
    problems = next(f for f in folder.families if f.prefix == "bad").problems
    assert any("nested more than" in p for p in problems), problems
    page = report_html([run])
    assert "0.2500" in page and "0.7500" in page and "nested more than" in page


def test_hydra_overrides_nested_a_hundred_thousand_deep_are_named_not_fatal(tmp_path: Path, caplog):
    run = tmp_path / "run"
    _family(run, "retrieval", 0.25)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text(DEEP)
    page = report_html([run])
    assert "0.2500" in page
    assert "nested more than" in caplog.text


def test_a_yaml_bomb_in_the_overrides_is_refused_at_once(tmp_path: Path, caplog):
    lines = ["- &a0 [x, x, x, x, x, x, x, x, x]"] + [f"- &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 12)]
    run = tmp_path / "run"
    _family(run, "retrieval", 0.25)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text("\n".join(lines) + "\n")
    assert "0.2500" in report_html([run])
    assert "aliases are expanded" in caplog.text
