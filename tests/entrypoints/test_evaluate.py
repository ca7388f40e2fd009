"""evaluate.py: the offline contract (npz in, JSON + per-query npz + PNG out) checked against an independent numpy
computation, its argument handling, and run comparison from the project's files and from offline W&B runs.

Tests marked slow run the script in a subprocess as users do; the others compose the Hydra config in-process and call
the task functions directly (a second each).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from beyondlabels import tasks  # noqa: E402
from beyondlabels.functional import encode_labels, retrieval_output_schema  # noqa: E402
from beyondlabels.schema import KeySpec, OutputSchema  # noqa: E402
from tests.entrypoints.helpers import EVALUATE_CONF, run_script
from tests.oracles.bootstrap import numpy_percentile_bootstrap

# Keys a report holds besides the schema's scalars and curves.
REPORT_EXTRAS = {"task", "ks", "num_items", "num_labels", "per_query_file", "settings", "schema"}


def _cfg(tmp_path: Path, *overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(EVALUATE_CONF)):
        cfg = compose(config_name="evaluate", overrides=[f"paths.log_dir={tmp_path / 'logs'}", *overrides])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "job")  # ${hydra:runtime.output_dir} exists only inside a run
    return cfg


def _clusters(
    n: int = 60, classes: int = 4, dim: int = 12, noise: float = 1.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    cls = np.arange(n) % classes
    return (centres[cls] + noise * rng.normal(size=(n, dim))).astype(np.float32), cls


def _loo_reference(x: np.ndarray, labels: np.ndarray, k: int) -> dict[str, float]:
    """Leave-one-out precision@k, R-precision and MAP@R with a plain per-query loop (no lone queries)."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    sims = x @ x.T
    p_at_k, r_prec, map_r = [], [], []
    for q in range(len(x)):
        others = np.delete(np.arange(len(x)), q)
        ranked = others[np.argsort(-sims[q, others], kind="stable")]
        rel = (labels[ranked] == labels[q]).astype(float)
        r = int(rel.sum())
        p_at_k.append(rel[:k].mean())
        r_prec.append(rel[:r].mean())
        precisions = np.cumsum(rel[:r]) / np.arange(1, r + 1)
        map_r.append((precisions * rel[:r]).sum() / r)
    return {
        f"precision@{k}": float(np.mean(p_at_k)),
        "r_precision": float(np.mean(r_prec)),
        "map@r": float(np.mean(map_r)),
    }


@pytest.mark.slow
def test_retrieval_report_matches_reference(tmp_path: Path):
    rng = np.random.default_rng(0)
    labels = np.array(["gothic", "baroque", "bauhaus", "tudor"])[np.arange(60) % 4]
    centres = rng.normal(size=(4, 12))
    x = (centres[np.arange(60) % 4] + 1.2 * rng.normal(size=(60, 12))).astype(np.float32)
    np.savez(tmp_path / "emb.npz", embeddings=x, labels=labels)
    out = tmp_path / "out" / "report.json"
    result = run_script(
        "evaluate.py",
        "task=retrieval",
        f"input={tmp_path / 'emb.npz'}",
        f"output={out}",
        "k=[1,3,7]",
        f"paths.log_dir={tmp_path / 'logs'}",
    )
    report = json.loads(out.read_text())
    for key in ("precision@1", "precision@3", "precision@7", "r_precision", "map@r", "num_queries", "num_lone_queries"):
        assert key in report
    _, ints = np.unique(labels, return_inverse=True)
    for k in (1, 3, 7):
        ref = _loo_reference(x, ints, k)
        assert report[f"precision@{k}"] == pytest.approx(ref[f"precision@{k}"], abs=1e-9)
    assert report["r_precision"] == pytest.approx(ref["r_precision"], abs=1e-9)
    assert report["map@r"] == pytest.approx(ref["map@r"], abs=1e-9)
    assert report["num_queries"] == 60 and report["num_lone_queries"] == 0
    assert report["num_labels"] == 4
    assert len(report["precision_curve"]) == 20 and report["precision_curve"][0] == report["precision@1"]
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "precision@1" in result.stdout
    # schema-driven: the schema's scalars at the top level, its curve as a list, the schema itself, nothing else
    schema = OutputSchema.from_json(report["schema"])
    from beyondlabels.metrics.intervals import (
        confidence_interval_keys,
        with_confidence_intervals,
    )

    base = retrieval_output_schema([1, 3, 7])
    assert schema == with_confidence_intervals(base, confidence_interval_keys(base))  # the schema plus its intervals
    assert set(report) == {*schema.scalar_keys(), *schema.curve_keys(), *REPORT_EXTRAS, "label_names"}
    assert isinstance(report["num_queries"], int) and isinstance(report["map@r"], float)
    # string labels are coded by the one rule; their names are kept for the report
    codes, names = encode_labels(labels)
    assert report["label_names"] == {str(c): n for c, n in names.items()}
    # per-query values beside the report, in the per-query file layout
    assert report["per_query_file"] == "report.per_query.npz"
    with np.load(out.parent / "report.per_query.npz") as pq:
        assert pq.files == ["query_id", *(k for k in schema.per_query if k != "query_id")]
        assert pq["query_id"].tolist() == list(range(60)) and pq["label"].tolist() == codes.tolist()
        assert np.mean(pq["map@r"]) == pytest.approx(report["map@r"], abs=1e-12)
        assert np.mean(pq["precision@7"]) == pytest.approx(ref["precision@7"], abs=1e-9)


@pytest.mark.slow
def test_missing_input_is_a_clear_error(tmp_path: Path):
    with pytest.raises(AssertionError, match="input=PATH.npz"):
        run_script("evaluate.py", "task=retrieval", f"paths.log_dir={tmp_path}")
    np.savez(tmp_path / "bad.npz", vectors=np.ones((3, 2)))
    with pytest.raises(AssertionError, match="lacks the array"):
        run_script("evaluate.py", "task=retrieval", f"input={tmp_path / 'bad.npz'}", f"paths.log_dir={tmp_path}")


@pytest.mark.slow
def test_wandb_logging_and_run_comparison(tmp_path: Path, capsys: pytest.CaptureFixture):
    """evaluate.py wandb=true writes an offline run; task=compare reads runs back and tabulates their finals."""
    rng = np.random.default_rng(1)
    for name, noise in (("sharp", 0.3), ("blurry", 3.0)):
        labels = np.arange(40) % 4
        x = (rng.normal(size=(4, 8))[labels] + noise * rng.normal(size=(40, 8))).astype(np.float32)
        np.savez(tmp_path / f"{name}.npz", embeddings=x, labels=labels)
        # default output: report.json in the job folder, beside the W&B run
        run_script(
            "evaluate.py",
            f"input={tmp_path / f'{name}.npz'}",
            "wandb=true",
            f"hydra.run.dir={tmp_path / 'runs' / name}",
        )
    reports = {name: json.loads((tmp_path / "runs" / name / "report.json").read_text()) for name in ("blurry", "sharp")}
    assert reports["sharp"]["map@r"] > reports["blurry"]["map@r"]
    table_path = tmp_path / "compare.json"
    result = run_script(
        "evaluate.py",
        "task=compare",
        "source=wandb",
        f"runs=[{tmp_path / 'runs'}]",
        f"output={table_path}",
        "metrics=[retrieval/precision@1,retrieval/map@r]",
        f"hydra.run.dir={tmp_path / 'cmp'}",
    )
    table = json.loads(table_path.read_text())
    # columns are named by the Hydra job folders holding the W&B runs, with the command-line overrides they do not share
    labels = list(table["runs"])
    assert labels == [f"{name} (input={tmp_path / f'{name}.npz'})" for name in ("blurry", "sharp")]
    assert table["common_overrides"] == ["wandb=true"]
    assert all(info["complete"] and info["source"] == "wandb" for info in table["runs"].values())
    assert list(table["metrics"]) == ["retrieval/precision@1", "retrieval/map@r"]
    assert table["metrics"]["retrieval/map@r"]["direction"] == "max"  # from the schema of the report in the job folder
    got = table["metrics"]["retrieval/map@r"]["values"]
    assert [got[label] for label in labels] == pytest.approx([reports[name]["map@r"] for name in ("blurry", "sharp")])
    assert "final metrics per run" in result.stdout and "retrieval/map@r" in result.stdout
    # without metrics=: the table of the headline keys the schemas declare; the returned table holds every key
    headline = tasks.compare.run(_cfg(tmp_path, "task=compare", "source=wandb", f"runs=[{tmp_path / 'runs'}]"))
    printed = capsys.readouterr().out
    assert "headline metrics per run" in printed and "retrieval/r_precision" in printed
    assert (
        "retrieval/mean_first_relevant_rank" not in printed
        and "retrieval/mean_first_relevant_rank" in headline["metrics"]
    )
    # the same evaluations compared from the project's files (source=files, the default): same columns and numbers
    files = tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs=[{tmp_path / 'runs'}]"))
    assert list(files["runs"]) == labels and all(info["source"] == "files" for info in files["runs"].values())
    assert files["metrics"]["retrieval/map@r"]["values"] == pytest.approx(got)
    assert files["metrics"]["retrieval/mean_first_relevant_rank"]["direction"] == "min"
    # and an explicitly named report
    one = tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs=[{tmp_path / 'runs' / 'sharp' / 'report.json'}]"))
    assert list(one["runs"]) == [f"sharp (input={tmp_path / 'sharp.npz'}, wandb=true)"]  # alone: every override shown


# --- task=retrieval argument handling (in-process) --------------------------------------------------------------------


def _save(tmp_path: Path, name: str = "emb.npz", **arrays) -> Path:
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_k_may_be_a_single_int(tmp_path: Path):
    x, cls = _clusters(n=24)
    report = tasks.retrieval.run(
        _cfg(tmp_path, f"input={_save(tmp_path, embeddings=x, labels=cls)}", f"output={tmp_path / 'r.json'}", "k=5")
    )
    assert report["ks"] == [5] and "precision@5" in report and "precision@1" not in report


@pytest.mark.parametrize("k", ["1.5", "[1,2.5]", "[]", "0", "true", "five"])
def test_k_that_is_not_a_positive_int_is_a_clear_error(tmp_path: Path, k: str):
    x, cls = _clusters(n=24)
    cfg = _cfg(
        tmp_path, f"input={_save(tmp_path, embeddings=x, labels=cls)}", f"output={tmp_path / 'r.json'}", f"k={k}"
    )
    with pytest.raises(ValueError, match=r"^`k` must (be a non-empty sequence of|contain only) positive ints"):
        tasks.retrieval.run(cfg)
    assert not (tmp_path / "r.json").exists()


def test_curve_max_k_null_means_max_k(tmp_path: Path):
    x, cls = _clusters(n=24)
    cfg = _cfg(
        tmp_path,
        f"input={_save(tmp_path, embeddings=x, labels=cls)}",
        f"output={tmp_path / 'r.json'}",
        "k=[1,3]",
        "eval.curve_max_k=null",
    )
    report = tasks.retrieval.run(cfg)
    assert len(report["precision_curve"]) == 3 and report["precision_curve"][2] == report["precision@3"]
    bad = _cfg(tmp_path, f"input={tmp_path / 'emb.npz'}", f"output={tmp_path / 'r.json'}", "eval.curve_max_k=2.5")
    with pytest.raises(ValueError, match="eval.curve_max_k"):
        tasks.retrieval.run(bad)


def test_retrieval_task_takes_a_distance(tmp_path: Path):
    """``eval.distance=euclidean`` ranks by L2 distance of the raw embeddings: the report equals
    pytorch-metric-learning's AccuracyCalculator with its default (faiss IndexFlatL2) on the saved embeddings."""
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    x, cls = _clusters(n=48, classes=4)
    x = x * np.linspace(0.2, 3.0, 48, dtype=np.float32)[:, None]  # rows of different lengths
    path = _save(tmp_path, embeddings=x, labels=cls)
    report = tasks.retrieval.run(
        _cfg(tmp_path, f"input={path}", f"output={tmp_path / 'l2.json'}", "eval.distance=euclidean")
    )
    calc = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"), device=torch.device("cpu")
    )
    pml = calc.get_accuracy(torch.from_numpy(x), torch.from_numpy(cls))
    assert report["precision@1"] == pytest.approx(pml["precision_at_1"], abs=1e-12)
    assert report["r_precision"] == pytest.approx(pml["r_precision"], abs=1e-12)
    assert report["map@r"] == pytest.approx(pml["mean_average_precision_at_r"], abs=1e-12)
    assert report["settings"]["distance"] == "euclidean"
    cosine = tasks.retrieval.run(_cfg(tmp_path, f"input={path}", f"output={tmp_path / 'cos.json'}"))
    assert cosine["settings"]["distance"] == "cosine" and cosine["map@r"] != pytest.approx(report["map@r"], abs=1e-3)
    with pytest.raises(ValueError, match="`distance` must be one of"):
        tasks.retrieval.run(_cfg(tmp_path, f"input={path}", f"output={tmp_path / 'x.json'}", "eval.distance=l1"))


@pytest.mark.parametrize("offset", [3, -1])
def test_large_and_negative_integer_labels(tmp_path: Path, offset: int):
    """6 classes labelled c * 1_000_000_007 + 3 once got the process killed (names built as range(max + 1))."""
    x, cls = _clusters(n=60, classes=6)
    big = cls.astype(np.int64) * (1_000_000_007 if offset > 0 else -1_000_000_007) + offset
    ids = np.arange(60, dtype=np.int64) * 7 + 1000
    report = tasks.retrieval.run(
        _cfg(
            tmp_path,
            f"input={_save(tmp_path, 'big.npz', embeddings=x, labels=big, ids=ids)}",
            f"output={tmp_path / 'big.json'}",
        )
    )
    small = tasks.retrieval.run(
        _cfg(
            tmp_path,
            f"input={_save(tmp_path, 'small.npz', embeddings=x, labels=cls, ids=ids)}",
            f"output={tmp_path / 'small.json'}",
        )
    )
    assert report["num_labels"] == 6 and report["num_items"] == 60 and "label_names" not in report
    schema = retrieval_output_schema([1, 5, 10])
    for key in schema.scalar_keys():  # the same partition into classes gives the same numbers
        assert report[key] == pytest.approx(small[key], nan_ok=True), key
    with np.load(tmp_path / "big.per_query.npz") as pq:
        assert pq["query_id"].tolist() == ids.tolist() and pq["label"].tolist() == big.tolist()


def test_report_and_per_query_read_back_as_an_evaluation_run(tmp_path: Path):
    from beyondlabels.io import read_evaluation_run

    x, cls = _clusters(n=30, classes=3)
    tasks.retrieval.run(
        _cfg(
            tmp_path,
            f"input={_save(tmp_path, embeddings=x, labels=cls)}",
            f"output={tmp_path / 'out' / 'a.json'}",
            "k=[1,2]",
        )
    )
    run = read_evaluation_run(tmp_path / "out" / "a.json")
    report = json.loads((tmp_path / "out" / "a.json").read_text())
    assert run.prefix == "retrieval" and run.final()["map@r"] == report["map@r"]
    assert run.per_query()["precision@2"].mean() == pytest.approx(report["precision@2"])


# --- task=compare (in-process) ----------------------------------------------------------------------------------------


def _callback_folder(folder: Path, values: list[float], overrides: list[str]) -> None:
    folder.mkdir(parents=True)
    schema = OutputSchema({"map@r": KeySpec("scalar", True), "num_queries": KeySpec("scalar", None, count=True)})
    records = [{"step": 10 * (i + 1), "epoch": i, "map@r": v, "num_queries": 40} for i, v in enumerate(values)]
    (folder / "history.json").write_text(json.dumps(records))
    (folder / "schema.json").write_text(json.dumps(schema.to_json()))
    (folder.parent / ".hydra").mkdir()
    (folder.parent / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def test_compare_reads_the_project_files_of_a_multirun(tmp_path: Path, capsys: pytest.CaptureFixture):
    sweep = tmp_path / "multiruns" / "2026-11-30_05-00-00"
    _callback_folder(sweep / "0" / "retrieval", [0.2, 0.5, 0.4], ["seed=1"])
    _callback_folder(sweep / "1" / "retrieval", [0.3, 0.35], ["seed=2"])
    out = tmp_path / "cmp" / "table.json"
    table = tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs=[{sweep}]", f"output={out}"))
    assert json.loads(out.read_text()) == table
    assert table["metrics"]["retrieval/map@r"]["values"] == {"0 (seed=1)": 0.4, "1 (seed=2)": 0.35}
    assert "↑" in capsys.readouterr().out
    best = tasks.compare.run(
        _cfg(tmp_path, "task=compare", f"runs=[{sweep}]", "which=best", "metrics=[retrieval/map@r]")
    )
    assert best["metrics"]["retrieval/map@r"]["values"] == {"0 (seed=1)": 0.5, "1 (seed=2)": 0.35}
    assert best["metrics"]["retrieval/map@r"]["steps"] == {"0 (seed=1)": 20, "1 (seed=2)": 20}
    single = tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs={sweep / '1'}"))  # one path, not a list
    assert list(single["runs"]) == ["1 (seed=2)"]


def test_compare_errors_say_what_is_expected(tmp_path: Path):
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(FileNotFoundError, match="history.json"):
        tasks.compare.run(_cfg(tmp_path, "task=compare", f"runs=[{tmp_path / 'empty_run'}]"))
    with pytest.raises(ValueError, match="no offline W&B runs"):
        tasks.compare.run(_cfg(tmp_path, "task=compare", "source=wandb", f"runs=[{tmp_path / 'empty_run'}]"))
    with pytest.raises(ValueError, match="source must be one of"):
        tasks.compare.run(_cfg(tmp_path, "task=compare", "source=csv", f"runs=[{tmp_path}]"))
    with pytest.raises(ValueError, match="which must be one of"):
        tasks.compare.run(_cfg(tmp_path, "task=compare", "which=mean", f"runs=[{tmp_path}]"))
    with pytest.raises(ValueError, match="task=compare needs runs"):
        tasks.compare.run(_cfg(tmp_path, "task=compare"))


def test_query_sampling_reports_the_pool_and_standard_errors(tmp_path: Path):
    x, cls = _clusters(n=80)
    path = _save(tmp_path, "s.npz", embeddings=x, labels=cls)
    full = tasks.retrieval.run(_cfg(tmp_path, f"input={path}", f"output={tmp_path / 'full.json'}", "k=[1,5]"))
    report = tasks.retrieval.run(
        _cfg(
            tmp_path,
            f"input={path}",
            f"output={tmp_path / 's.json'}",
            "k=[1,5]",
            "eval.max_queries=30",
            "eval.query_seed=2",
        )
    )
    assert report["num_query_pool"] == 80 and report["num_queries"] + report["num_lone_queries"] == 30
    assert (
        report["precision@1_se"] > 0 and abs(report["precision@1"] - full["precision@1"]) < 4 * report["precision@1_se"]
    )
    assert "precision@1_se" in report["schema"]["keys"]
    with np.load(tmp_path / "s.per_query.npz") as pq:
        assert len(pq["query_id"]) == 30


def test_reports_carry_bootstrap_intervals_of_the_headline_metrics(tmp_path: Path):
    x, cls = _clusters(n=60)
    report = tasks.retrieval.run(
        _cfg(tmp_path, f"input={_save(tmp_path, embeddings=x, labels=cls)}", f"output={tmp_path / 'r.json'}", "k=[1,5]")
    )
    assert report["precision@1_ci_low"] <= report["precision@1"] <= report["precision@1_ci_high"]
    assert report["precision@1_ci_low"] < report["precision@1_ci_high"]
    assert "map@r_ci_high" in report["schema"]["keys"] and "num_queries_ci_low" not in report
    with np.load(tmp_path / "r.per_query.npz") as pq:  # the interval is the bootstrap of the saved per-query values
        ci = numpy_percentile_bootstrap(pq["precision@1"], rounds=2000, seed=11)
    assert (report["precision@1_ci_low"], report["precision@1_ci_high"]) == pytest.approx(ci, abs=1e-12)


def test_shallow_mode_leaves_out_the_depth_r_keys(tmp_path: Path):
    x, cls = _clusters(n=60)
    path = _save(tmp_path, "sh.npz", embeddings=x, labels=cls)
    deep = tasks.retrieval.run(_cfg(tmp_path, f"input={path}", f"output={tmp_path / 'deep.json'}", "k=[1,5]"))
    report = tasks.retrieval.run(
        _cfg(tmp_path, f"input={path}", f"output={tmp_path / 'sh.json'}", "k=[1,5]", "eval.deep_metrics=false")
    )
    deep_words = ("r_precision", "map@r", "first_relevant_rank")
    assert not [k for k in [*report, *report["schema"]["keys"]] if any(w in k for w in deep_words)]
    assert (
        report["precision@1"]
        == deep["precision@1"]
        == pytest.approx(_loo_reference(x, cls, 1)["precision@1"], abs=1e-12)
    )
    assert report["precision_curve"] == deep["precision_curve"] and report["settings"]["deep_metrics"] is False
    with np.load(tmp_path / "sh.per_query.npz") as pq:
        assert "map@r" not in pq and "precision@5" in pq
    bad = _cfg(tmp_path, f"input={path}", f"output={tmp_path / 'bad.json'}", "eval.deep_metrics=maybe")
    with pytest.raises(ValueError, match="eval.deep_metrics"):
        tasks.retrieval.run(bad)
