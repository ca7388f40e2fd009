"""Sweeps end to end: a real train.py multirun of two settings × three seeds compared by evaluate.py task=compare
against a baseline group (means checked against the jobs' history files, read with json) and shown by task=report,
the W&B group of each job, and paired tests of cross-modal keys on the per-query files the crossmodal task writes (both
directions in one file)."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict
from PIL import Image

from beyondlabels import tasks  # noqa: E402
from beyondlabels.io import find_offline_runs, read_offline_run  # noqa: E402
from beyondlabels.utils.run import apply_sweep_group  # noqa: E402
from tests.entrypoints.helpers import config_dir, run_script


def _cfg(tmp_path: Path, *overrides: str, config: str = "evaluate"):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir(config))):
        cfg = compose(config_name=config, overrides=[f"paths.log_dir={tmp_path / 'logs'}", *overrides])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "job")
    return cfg


# --- cross-modal keys: one per-query file holds the image and the caption queries ------------------------------------


def _crossmodal_sweep(tmp_path: Path) -> Path:
    """Job folders 0-3 (noise=0.5 / noise=2.0 × seed=1,2), each holding the report of evaluate.py task=crossmodal:
    30 images, 2 captions each; image i and caption i share the id i."""
    root = tmp_path / "multirun"
    images = np.random.default_rng(0).normal(size=(30, 8))
    owner = np.repeat(np.arange(30), 2)
    job = 0
    for noise in ("0.5", "2.0"):
        for seed in (1, 2):
            texts = images[owner] + float(noise) * np.random.default_rng(seed).normal(size=(60, 8))
            folder = root / str(job)
            (folder / ".hydra").mkdir(parents=True)
            (folder / ".hydra" / "overrides.yaml").write_text(f"- noise={noise}\n- seed={seed}\n")
            np.savez(
                folder / "pairs.npz",
                image_embeddings=images.astype(np.float32),
                text_embeddings=texts.astype(np.float32),
                text_image_index=owner,
            )
            tasks.crossmodal.run(
                _cfg(
                    tmp_path,
                    "task=crossmodal",
                    f"input={folder / 'pairs.npz'}",
                    f"output={folder / 'report.json'}",
                    "k=[1,5]",
                )
            )
            job += 1
    return root


def _direction_rows(folder: Path, key: str, direction: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, values) of ``key`` on the rows of one direction, read from the report's per-query file with numpy."""
    report = json.loads((folder / "report.json").read_text())
    with np.load(folder / report["per_query_file"]) as pq:
        rows = pq["direction"] == direction
        order = np.argsort(pq["query_id"][rows])
        return pq["query_id"][rows][order], pq[key][rows][order]


def test_crossmodal_keys_pair_within_their_direction(tmp_path: Path):
    root = _crossmodal_sweep(tmp_path)
    ab = tasks.abtest.run(
        _cfg(
            tmp_path,
            "task=abtest",
            f"runs=[{root}]",
            f"baseline={root / '0'}",
            "metric=crossmodal/image_to_text_recall@5",
            "guardrails=[crossmodal/text_to_image_recall@5]",
        )
    )
    blurry = next(e for label, e in ab["runs"].items() if label.startswith("2 "))["vs_baseline"]
    ids_a, a = _direction_rows(root / "0", "image_to_text_recall@5", 0)
    ids_b, b = _direction_rows(root / "2", "image_to_text_recall@5", 0)
    assert ids_a.tolist() == ids_b.tolist() == list(range(30))
    assert blurry["n"] == 30 and blurry["difference"] == pytest.approx(np.mean(b - a), abs=1e-12)
    _, ga = _direction_rows(root / "0", "text_to_image_recall@5", 1)
    _, gb = _direction_rows(root / "2", "text_to_image_recall@5", 1)
    guard = blurry["guardrails"]["crossmodal/text_to_image_recall@5"]
    assert guard["n"] == 60 and guard["difference"] == pytest.approx(np.mean(gb - ga), abs=1e-12)
    # the grouped comparison pairs the same rows within each seed
    table = tasks.compare.run(
        _cfg(
            tmp_path,
            "task=compare",
            f"runs=[{root}]",
            "baseline='noise=0.5'",
            "metric=crossmodal/text_to_image_recall@1",
            "guardrails=[crossmodal/image_to_text_recall@1]",
        )
    )
    got = {c["metric"]: c for c in table["baseline"]["comparisons"]}
    for key, direction, n in (("text_to_image_recall@1", 1, 60), ("image_to_text_recall@1", 0, 30)):
        d = [
            _direction_rows(root / str(j + 2), key, direction)[1] - _direction_rows(root / str(j), key, direction)[1]
            for j in (0, 1)
        ]
        assert got[f"crossmodal/{key}"]["n_queries"] == n
        assert got[f"crossmodal/{key}"]["difference"] == pytest.approx(np.mean(d), abs=1e-12)
        assert got[f"crossmodal/{key}"]["decision"] == "worse"


# --- the W&B group of a job -------------------------------------------------------------------------------------------


def test_wandb_group_is_the_setting_and_a_given_group_wins(tmp_path: Path):
    cfg = _cfg(tmp_path, "logger=wandb", config="train")
    assert cfg.logger.wandb.group is None
    assert (
        apply_sweep_group(cfg, ["seed=3", "model.lr=0.003", "experiment=shapes_smoke"])
        == "experiment=shapes_smoke,model.lr=0.003"
    )
    assert cfg.logger.wandb.group == cfg.sweep_group == "experiment=shapes_smoke,model.lr=0.003"
    assert (
        OmegaConf.to_container(cfg, resolve=True)["sweep_group"] == cfg.sweep_group
    )  # logged with the hyperparameters
    given = _cfg(tmp_path, "logger=wandb", "logger.wandb.group=ablation-7", config="train")
    assert (
        apply_sweep_group(given, ["seed=1", "model.lr=0.003"]) == "model.lr=0.003"
        and given.logger.wandb.group == "ablation-7"
    )
    # seeds only (or no override, outside a Hydra job): the task's name, as before
    assert apply_sweep_group(_cfg(tmp_path, "logger=wandb", config="train"), ["seed=1"]) == "train"
    assert apply_sweep_group(_cfg(tmp_path, "logger=wandb", config="train")) == "train"


# --- a real multirun --------------------------------------------------------------------------------------------------

LRS = ("0.001", "0.003")


@pytest.fixture(scope="module")
def multirun(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train.py -m: two learning rates × seeds 1-3, one epoch each whose only evaluation is the one at the end of
    fit."""
    logs = tmp_path_factory.mktemp("sweep")
    run_script(
        "train.py",
        "-m",
        "experiment=shapes_smoke",
        "seed=1,2,3",
        f"model.lr={','.join(LRS)}",
        "trainer.max_epochs=1",
        "trainer.check_val_every_n_epoch=2",
        f"paths.log_dir={logs}",
    )
    (sweep,) = (logs / "train" / "multiruns").iterdir()
    return sweep


@pytest.mark.slow
def test_multirun_compares_into_two_groups_of_three(multirun: Path, tmp_path: Path):
    output = tmp_path / "cmp" / "sweep.json"
    result = run_script(
        "evaluate.py",
        "task=compare",
        f"runs=[{multirun}]",
        "baseline='model.lr=0.001'",
        "metric=retrieval/precision@1",
        "guardrails=[retrieval/map@r]",
        f"output={output}",
        f"hydra.run.dir={tmp_path / 'h'}",
    )
    table = json.loads(output.read_text())
    assert list(table["groups"]) == [f"model.lr={lr}" for lr in LRS]
    finals: dict[str, dict[str, list[float]]] = {lr: {"precision@1": [], "map@r": []} for lr in LRS}
    for job in sorted(p for p in multirun.iterdir() if p.is_dir() and p.name.isdigit()):
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        lr = next(lr for lr in LRS if f"model.lr={lr}\n" in overrides)
        last = [
            json.loads(line) for line in (job / "retrieval" / "history.jsonl").read_text().splitlines() if line.strip()
        ][-1]
        for key in finals[lr]:
            finals[lr][key].append(last[key])
    for lr in LRS:
        group = table["groups"][f"model.lr={lr}"]
        assert sorted(group["seeds"]) == ["seed=1", "seed=2", "seed=3"]
        for key, values in finals[lr].items():
            summary = group["metrics"][f"retrieval/{key}"]["seeds"]
            assert summary["n"] == 3 and summary["mean"] == pytest.approx(np.mean(values), rel=1e-12, abs=1e-15)
            assert summary["t"]["low"] <= summary["mean"] <= summary["t"]["high"]
    base = table["baseline"]
    assert base["correction"] == "Holm–Bonferroni" and base["family_size"] == 2 and base["group"] == "model.lr=0.001"
    assert {c["metric"] for c in base["comparisons"]} == {"retrieval/precision@1", "retrieval/map@r"}
    assert all(c["seeds"] == ["seed=1", "seed=2", "seed=3"] and c["n_queries"] > 0 for c in base["comparisons"])
    assert "Holm–Bonferroni over 2 comparisons" in result.stdout
    assert (output.parent / "sweep.md").is_file() and (output.parent / "sweep.retrieval_precision@1.png").is_file()
    # W&B groups the same jobs: one group per learning rate, its key also in each run's config
    runs = [read_offline_run(p) for p in find_offline_runs(multirun)]
    assert len(runs) == 6
    groups = {}
    for run in runs:
        assert run.group == run.config["sweep_group"]
        groups.setdefault(run.group, set()).add(run.config["seed"])
    assert len(groups) == 2 and all(seeds == {1, 2, 3} for seeds in groups.values())
    # the setting without the seed and without where the job logs (paths.log_dir)
    assert sorted(g.split(",") for g in groups)[0] == [
        "experiment=shapes_smoke",
        "model.lr=0.001",
        "trainer.check_val_every_n_epoch=2",
        "trainer.max_epochs=1",
    ]


@pytest.mark.slow
def test_multirun_crossmodal_keys_pair_within_their_direction(multirun: Path, tmp_path: Path):
    """The per-query files the crossmodal callback writes during training: both directions in one file."""
    table = tasks.compare.run(
        _cfg(
            tmp_path,
            "task=compare",
            f"runs=[{multirun}]",
            "baseline='model.lr=0.001'",
            "metric=crossmodal/image_to_text_recall@1",
            "guardrails=[crossmodal/text_to_image_recall@1]",
        )
    )
    job = multirun / "0" / "crossmodal"
    last = [json.loads(line) for line in (job / "history.jsonl").read_text().splitlines() if line.strip()][-1]
    with np.load(job / last["per_query_file"]) as pq:
        images, texts = int((pq["direction"] == 0).sum()), int((pq["direction"] == 1).sum())
        assert len(np.unique(pq["query_id"])) < len(pq["query_id"])  # an image and a caption share an id
    got = {c["metric"]: c for c in table["baseline"]["comparisons"]}
    assert got["crossmodal/image_to_text_recall@1"]["n_queries"] == images
    assert got["crossmodal/text_to_image_recall@1"]["n_queries"] == texts


def _final_values(multirun: Path, keys: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    """``{lr: {key: [final value of each job]}}`` read from the jobs' retrieval/history.jsonl with json."""
    finals: dict[str, dict[str, list[float]]] = {lr: {key: [] for key in keys} for lr in LRS}
    for job in sorted(p for p in multirun.iterdir() if p.is_dir() and p.name.isdigit()):
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        lr = next(lr for lr in LRS if f"model.lr={lr}\n" in overrides)
        last = [
            json.loads(line) for line in (job / "retrieval" / "history.jsonl").read_text().splitlines() if line.strip()
        ][-1]
        for key in keys:
            finals[lr][key].append(last[key])
    return finals


@pytest.mark.slow
def test_the_report_of_a_multirun_opens_with_its_groups_and_pictures(multirun: Path, tmp_path: Path):
    output = tmp_path / "report.html"
    tasks.run_task(
        "report",
        _cfg(
            tmp_path,
            "task=report",
            f"runs=[{multirun}]",
            "baseline='model.lr=0.001'",
            "metric=retrieval/precision@1",
            "guardrails=[retrieval/map@r]",
            "bootstrap_rounds=500",
            "ci_seed=3",
            f"output={output}",
        ),
    )
    text = output.read_text(encoding="utf-8")
    start = text.index('<table class="sweep-groups">')
    groups = text[start : text.index("</table>", start)]
    rows = re.findall(r'<tr data-group="([^"]+)">(.*?)</tr>', groups)
    assert [name for name, _ in rows] == [f"model.lr={lr}" for lr in LRS]  # one row per setting
    finals = _final_values(multirun, ("precision@1", "map@r"))
    for (_name, row), lr in zip(rows, LRS):
        cells = {
            key: dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', attributes))
            for key, attributes in re.findall(r'<td class="num" data-key="([^"]+)"([^>]*)>', row)
        }
        assert {"retrieval/precision@1", "retrieval/map@r"} <= set(cells)
        for key, values in finals[lr].items():
            cell = cells[f"retrieval/{key}"]
            assert cell["data-n"] == "3" and float(cell["data-mean"]) == pytest.approx(
                np.mean(values), rel=1e-12, abs=1e-15
            )
            assert float(cell["data-low"]) <= float(cell["data-mean"]) <= float(cell["data-high"])
            assert float(cell["data-pooled-low"]) <= float(cell["data-pooled-high"])  # the per-query interval is there
    # the tests against the baseline, as task=compare decides them, with the surviving differences marked
    table = tasks.compare.run(
        _cfg(
            tmp_path,
            "task=compare",
            f"runs=[{multirun}]",
            "baseline='model.lr=0.001'",
            "metric=retrieval/precision@1",
            "guardrails=[retrieval/map@r]",
            "bootstrap_rounds=500",
            "ci_seed=3",
        )
    )
    for name, row in rows:  # the pooled interval drawn with the bootstrap settings given
        pooled = table["groups"][name]["metrics"]["retrieval/precision@1"]["pooled"]
        assert f'data-pooled-low="{pooled["low"]!r}" data-pooled-high="{pooled["high"]!r}"' in row
    decided = {(c["group"], c["metric"]): c for c in table["baseline"]["comparisons"]}
    shown = re.findall(
        r'<tr class="(survives|test)" data-group="([^"]+)" data-metric="([^"]+)" data-decision="([^"]+)">(.*?)</tr>',
        text,
    )
    assert {(g, m) for _, g, m, _, _ in shown} == set(decided) and len(shown) == 2
    for css, group, metric, decision, row in shown:
        assert decision == decided[(group, metric)]["decision"]
        assert (css == "survives") == (decision in ("better", "worse")) == ("†" in row)
        assert f"{decided[(group, metric)]['p_adjusted']:.4f}" in row
    assert "Holm–Bonferroni over 2 comparisons" in text
    # the sweep's pictures, one per column, inlined and decoding
    pictures = re.findall(
        r'<figure class="sweep-picture" data-key="([^"]+)"><img alt="[^"]*" src="data:image/png;base64,([^"]+)"', text
    )
    assert sorted(key for key, _ in pictures) == sorted(cells)
    for _, data in pictures:
        with Image.open(io.BytesIO(base64.b64decode(data, validate=True))) as image:
            assert image.format == "PNG" and image.size[0] > 100
            image.load()
    # below, the jobs, each linking to its section
    start = text.index('<table class="sweep">')
    links = re.findall(r'<a href="#([^"]+)">', text[start : text.index("</table>", start)])
    assert len(links) == 6 and all(f'id="{link}"' in text for link in links)
