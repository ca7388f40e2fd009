"""evaluate.py task=report (the HTML report of run and multirun folders) and the report train.py writes at the end of
fit."""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from beyondlabels import tasks  # noqa: E402
from tests.entrypoints.helpers import EVALUATE_CONF, REPO_ROOT, run_script, script_env


def _cfg(tmp_path: Path, *overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(EVALUATE_CONF)):
        cfg = compose(
            config_name="evaluate", overrides=["task=report", f"paths.log_dir={tmp_path / 'logs'}", *overrides]
        )
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "job")
    return cfg


def _run_folder(root: Path, value: float) -> Path:
    (root / ".hydra").mkdir(parents=True)
    (root / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (root / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (root / "retrieval").mkdir()
    record = {"step": 4, "epoch": 0, "map@r": value, "map@r_ci_low": value - 0.1, "map@r_ci_high": value + 0.1}
    (root / "retrieval" / "history.jsonl").write_text(json.dumps(record) + "\n")
    return root


def test_report_of_a_run_and_a_multirun(tmp_path: Path):
    run = _run_folder(tmp_path / "run", 0.25)
    sweep = tmp_path / "multirun"
    _run_folder(sweep / "0", 0.5)
    _run_folder(sweep / "1", 0.75)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    output = tmp_path / "out" / "r.html"
    result = tasks.run_task("report", _cfg(tmp_path, f"runs=[{run},{sweep}]", f"output={output}", "title='A & B'"))
    assert result == {"report": str(output), "runs": [str(run), str(sweep)]}
    text = output.read_text(encoding="utf-8")
    assert "<title>A &amp; B</title>" in text
    for value in (0.25, 0.5, 0.75):
        assert f'data-value="{value!r}"' in text
    assert '<table class="sweep">' in text
    # without output: report.html in the job's folder
    default = tasks.run_task("report", _cfg(tmp_path, f"runs={run}"))
    assert Path(default["report"]) == tmp_path / "job" / "report.html" and Path(default["report"]).is_file()


def test_report_errors_name_the_argument_and_what_to_pass(tmp_path: Path):
    with pytest.raises(ValueError, match=r"task=report needs runs=\[PATH"):
        tasks.run_task("report", _cfg(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"runs: .*nowhere does not exist"):
        tasks.run_task("report", _cfg(tmp_path, f"runs=[{tmp_path / 'nowhere'}]"))
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        tasks.run_task("report", _cfg(tmp_path, f"runs=[{tmp_path / 'file.txt'}]"))
    (tmp_path / "photos" / "2024").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"photos is not a run folder .* nor a multirun folder"):
        tasks.run_task("report", _cfg(tmp_path, f"runs=[{tmp_path / 'photos'}]"))
    run = _run_folder(tmp_path / "run", 0.5)
    with pytest.raises(ValueError, match=r"needs both baseline=GROUP .* and metric=KEY"):
        tasks.run_task("report", _cfg(tmp_path, f"runs=[{run}]", "baseline='model.lr=0.001'"))
    with pytest.raises(
        ValueError,
        match=r"`level` must be a number in \(0, 1\) \(e\.g\. 0\.05, the family-wise error rate .*\), got 1\.5\.$",
    ):
        tasks.run_task("report", _cfg(tmp_path, f"runs=[{run}]", "level=1.5"))
    with pytest.raises(ValueError, match=r"seed_keys must be a list of keys.*got \[3\]"):
        tasks.run_task("report", _cfg(tmp_path, f"runs=[{run}]", "seed_keys=[3]"))
    assert not (tmp_path / "job" / "report.html").exists()


def test_report_groups_a_sweep_by_the_seed_keys_it_is_given(tmp_path: Path):
    sweep = tmp_path / "multirun"
    for job, (noise, value) in enumerate([(1, 0.5), (2, 0.75), (1, 0.25), (2, 0.25)]):
        _run_folder(sweep / str(job), value)
        (sweep / str(job) / ".hydra" / "overrides.yaml").write_text(f"- model.lr={job // 2}\n- data.noise={noise}\n")
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    plain = tasks.run_task(
        "report", _cfg(tmp_path, f"runs=[{sweep}]", f"output={tmp_path / 'a.html'}", "metrics=[retrieval/map@r]")
    )
    assert "sweep-groups" not in Path(plain["report"]).read_text(encoding="utf-8")  # no seed override: no groups
    grouped = tasks.run_task(
        "report",
        _cfg(
            tmp_path,
            f"runs=[{sweep}]",
            f"output={tmp_path / 'b.html'}",
            "metrics=[retrieval/map@r]",
            "seed_keys=[data.noise]",
        ),
    )
    text = Path(grouped["report"]).read_text(encoding="utf-8")
    means = re.findall(r'<tr data-group="([^"]+)">.*?data-mean="([^"]+)"', text)
    assert [(name, float(mean)) for name, mean in means] == [("model.lr=0", 0.625), ("model.lr=1", 0.25)]


def test_a_report_that_cannot_be_written_is_a_warning_in_train(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    train = importlib.import_module("train")  # the repository root is on the path (pytest's pythonpath)
    (tmp_path / "a_file").write_text("not a run folder")
    with caplog.at_level(logging.WARNING):
        assert train.write_run_report(tmp_path / "a_file") is None
    assert "the HTML report of" in caplog.text and "was not written" in caplog.text
    run = _run_folder(tmp_path / "run", 0.5)
    assert train.write_run_report(run) == run / "report.html" and (run / "report.html").is_file()


@pytest.mark.slow
def test_train_writes_the_report_and_prints_its_path(tmp_path: Path):
    result = run_script("train.py", "experiment=shapes_smoke", f"paths.log_dir={tmp_path / 'on'}")
    (report,) = (tmp_path / "on").rglob("report.html")
    assert re.search(rf"^HTML report: +{re.escape(str(report))}$", result.stdout, re.MULTILINE), result.stdout[-2000:]
    assert "run summary" in result.stdout
    assert re.search(rf"^run folder: +{re.escape(str(report.parent))}$", result.stdout, re.MULTILINE)
    history = [json.loads(line) for line in (report.parent / "retrieval" / "history.jsonl").read_text().splitlines()]
    text = report.read_text(encoding="utf-8")
    value = re.search(r'data-key="precision@1" data-value="([^"]+)"', text)
    assert value and float(value.group(1)) == history[-1]["precision@1"]
    off = run_script("train.py", "experiment=shapes_smoke", "report=false", f"paths.log_dir={tmp_path / 'off'}")
    assert not list((tmp_path / "off").rglob("report.html")) and "HTML report" not in off.stdout


@pytest.mark.slow
def test_a_run_that_fails_mid_fit_still_writes_the_report_of_its_evaluations(tmp_path: Path):
    """A user's callback raises at the end of the first training epoch, after the first evaluation: train.py exits
    with the error, and report.html holds that evaluation."""
    (tmp_path / "crash_callback.py").write_text(
        textwrap.dedent("""
        import pytorch_lightning as pl

        class CrashAfterFirstEpoch(pl.Callback):
            def on_train_epoch_end(self, trainer, pl_module):
                raise RuntimeError("injected failure after the first epoch")
    """)
    )
    env = script_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "train.py"),
            "experiment=shapes_smoke",
            f"paths.log_dir={tmp_path / 'logs'}",
            "+callbacks.crash._target_=crash_callback.CrashAfterFirstEpoch",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode != 0 and "injected failure after the first epoch" in result.stdout + result.stderr
    (report,) = (tmp_path / "logs").rglob("report.html")
    history = [json.loads(line) for line in (report.parent / "retrieval" / "history.jsonl").read_text().splitlines()]
    assert len(history) == 1  # the one evaluation before the failure
    value = re.search(r'data-key="precision@1" data-value="([^"]+)"', report.read_text(encoding="utf-8"))
    assert value and float(value.group(1)) == history[-1]["precision@1"]
