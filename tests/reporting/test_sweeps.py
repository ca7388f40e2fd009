"""task=compare on job folders grouped by setting: values across seeds against numpy and scipy, the baseline test's
Holm adjustment against statsmodels, the decisions, the warnings, and the Markdown / LaTeX / PNG files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from statsmodels.stats.multitest import multipletests

from beyondlabels import tasks
from beyondlabels.io import save_per_query
from beyondlabels.schema import KeySpec, OutputSchema
from tests.entrypoints.helpers import evaluate_config
from tests.oracles.bootstrap import numpy_percentile_bootstrap

REPO_ROOT = Path(__file__).resolve().parents[2]

SCHEMA = OutputSchema(
    {
        "precision@1": KeySpec("scalar", True),
        "mean_rank": KeySpec("scalar", False),
        "num_queries": KeySpec("scalar", None, count=True),
    },
    {
        "query_id": KeySpec("per_query", None),
        "precision@1": KeySpec("per_query", True),
        "mean_rank": KeySpec("per_query", False),
    },
)
N = 40


def _job(
    folder: Path, overrides: list[str], p1: np.ndarray, rank: np.ndarray, order_seed: int, shifts=((5, -0.3), (10, 0.0))
) -> None:
    """A Hydra job folder with one retrieval callback folder: history.jsonl (an earlier and a final evaluation),
    schema.json and per-query files listing the queries in a shuffled order."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    callback = folder / "retrieval"
    order = np.random.default_rng(order_seed).permutation(N)
    ids = np.arange(1000, 1000 + N)
    lines = []
    for step, shift in shifts:
        rel = f"per_query/step_{step:09d}.npz"
        save_per_query(
            callback / rel,
            {"query_id": ids[order], "precision@1": (p1 + shift)[order], "mean_rank": rank[order]},
            SCHEMA,
        )
        lines.append(
            json.dumps(
                {
                    "step": step,
                    "epoch": 0,
                    "precision@1": float(np.mean(p1 + shift)),
                    "mean_rank": float(rank.mean()),
                    "num_queries": N,
                    "per_query_file": rel,
                }
            )
        )
    (callback / "history.jsonl").write_text("\n".join(lines) + "\n")
    (callback / "schema.json").write_text(json.dumps(SCHEMA.to_json()))


@pytest.fixture
def sweep(tmp_path: Path) -> dict:
    """model.lr=0.001 (the baseline), 0.003 (better by 0.15 on every query), 0.01 (the same distribution), each with
    seeds 1-3 (0.01 with 1-2), and a fixed setting every job shares; the per-query values of each job."""
    rng = np.random.default_rng(0)
    root = tmp_path / "multirun"
    values: dict = {}
    job = 0
    difficulty = rng.uniform(0.1, 0.7, N)
    for lr, shift, seeds in (("0.001", 0.0, (1, 2, 3)), ("0.003", 0.15, (1, 2, 3)), ("0.01", 0.0, (1, 2))):
        for seed in seeds:
            p1 = difficulty + shift + rng.normal(0, 0.05, N)
            rank = rng.uniform(1, 5, N) - 2 * shift
            _job(root / str(job), ["experiment=shapes_smoke", f"model.lr={lr}", f"seed={seed}"], p1, rank, job)
            values[(lr, seed)] = (p1, rank)
            job += 1
    return {"root": root, "values": values}


def test_groups_summarise_their_seeds(tmp_path: Path, sweep: dict, capsys: pytest.CaptureFixture):
    table = tasks.compare.run(
        evaluate_config(tmp_path, "task=compare", f"runs=[{sweep['root']}]")
    )  # auto: several seeds per setting
    assert table["kind"] == "sweep" and list(table["groups"]) == ["model.lr=0.001", "model.lr=0.003", "model.lr=0.01"]
    assert table["common_overrides"] == ["experiment=shapes_smoke"] and table["baseline"] is None
    assert list(table["metrics"]) == [
        "retrieval/precision@1",
        "retrieval/mean_rank",
    ]  # headline keys: direction + per query
    for lr, seeds in (("0.001", (1, 2, 3)), ("0.003", (1, 2, 3)), ("0.01", (1, 2))):
        group = table["groups"][f"model.lr={lr}"]
        assert group["seeds"] == [f"seed={s}" for s in seeds]
        finals = np.array([sweep["values"][(lr, s)][0].mean() for s in seeds])
        m = group["metrics"]["retrieval/precision@1"]
        assert m["seeds"]["mean"] == pytest.approx(finals.mean(), abs=1e-12) and m["seeds"]["n"] == len(seeds)
        assert m["seeds"]["sd"] == pytest.approx(np.std(finals, ddof=1), rel=1e-9)
        low, high = scipy.stats.t.interval(0.95, len(seeds) - 1, loc=finals.mean(), scale=scipy.stats.sem(finals))
        assert (m["seeds"]["t"]["low"], m["seeds"]["t"]["high"]) == pytest.approx((low, high), rel=1e-9)
        assert m["seeds"]["bootstrap"] is None  # fewer than 5 seeds
        pooled = np.concatenate([_file_order(sweep, lr, s, job) for s, job in _jobs(lr, seeds)])
        assert (m["pooled"]["low"], m["pooled"]["high"]) == pytest.approx(
            numpy_percentile_bootstrap(pooled, 2000, 11), abs=1e-12
        )
    assert any("model.lr=0.01: 2 seed(s)" in w for w in table["warnings"])
    out = capsys.readouterr().out
    assert "model.lr=0.003" in out and "warning: group model.lr=0.01" in out
    assert max(len(line) for line in out.splitlines() if line.startswith(("┃", "│", "┏"))) <= 100


def _jobs(lr: str, seeds: tuple[int, ...]) -> list[tuple[int, int]]:
    first = {"0.001": 0, "0.003": 3, "0.01": 6}[lr]
    return [(s, first + i) for i, s in enumerate(seeds)]


def _file_order(sweep: dict, lr: str, seed: int, job: int) -> np.ndarray:
    """A job's per-query precision@1 in the order its file lists them (the order the bootstrap resamples)."""
    return sweep["values"][(lr, seed)][0][np.random.default_rng(job).permutation(N)]


def test_against_the_baseline_with_holm(tmp_path: Path, sweep: dict, capsys: pytest.CaptureFixture):
    output = tmp_path / "out" / "sweep.json"
    table = tasks.compare.run(
        evaluate_config(
            tmp_path,
            "task=compare",
            f"runs=[{sweep['root']}]",
            "baseline='model.lr=0.001'",
            "metric=retrieval/precision@1",
            "guardrails=[retrieval/mean_rank]",
            f"output={output}",
            "permutations=999",
        )
    )
    assert json.loads(output.read_text())["groups"].keys() == table["groups"].keys()
    base = table["baseline"]
    assert base["correction"] == "Holm–Bonferroni" and base["family_size"] == 4  # 2 groups × 2 keys
    got = {(c["group"], c["metric"]): c for c in base["comparisons"]}
    raw = [c["pvalue"] for c in base["comparisons"]]
    np.testing.assert_allclose(
        [c["p_adjusted"] for c in base["comparisons"]], multipletests(raw, method="holm")[1], rtol=0, atol=1e-15
    )
    better = got[("model.lr=0.003", "retrieval/precision@1")]
    assert better["decision"] == "better" and better["seeds"] == ["seed=1", "seed=2", "seed=3"]
    # the difference: per query, the paired difference averaged over the seeds, from the values written
    d_q = np.mean([sweep["values"][("0.003", s)][0] - sweep["values"][("0.001", s)][0] for s in (1, 2, 3)], axis=0)
    assert better["difference"] == pytest.approx(d_q.mean(), abs=1e-12) and better["n_queries"] == N
    assert better["effect_size"] == pytest.approx(d_q.mean() / np.std(d_q, ddof=1), rel=1e-9)
    assert better["query_pvalue"] == 1 / 1000  # no random sign assignment reaches a shift on every query
    per_seed = [np.mean(sweep["values"][("0.003", s)][0] - sweep["values"][("0.001", s)][0]) for s in (1, 2, 3)]
    assert better["seed_pvalue"] == pytest.approx(scipy.stats.ttest_1samp(per_seed, 0.0).pvalue, rel=1e-9)
    assert better["pvalue"] == max(better["query_pvalue"], better["seed_pvalue"])
    # mean_rank: lower is better, but each seed draws its ranks afresh (sd 1.15 over 40 queries), so whether the
    # 0.3 lower rank holds across 3 seeds is for the seed-level t test to say
    rank = got[("model.lr=0.003", "retrieval/mean_rank")]
    rank_seeds = [np.mean(sweep["values"][("0.003", s)][1] - sweep["values"][("0.001", s)][1]) for s in (1, 2, 3)]
    assert rank["seed_pvalue"] == pytest.approx(scipy.stats.ttest_1samp(rank_seeds, 0.0).pvalue, rel=1e-9)
    assert rank["difference"] < 0 and rank["decision"] == (
        "better" if rank["p_adjusted"] < 0.05 else "cannot distinguish"
    )
    same = got[("model.lr=0.01", "retrieval/precision@1")]
    assert same["decision"] == "cannot distinguish" and same["seeds"] == ["seed=1", "seed=2"]
    assert any("seeds ['seed=1', 'seed=2'] differ from the baseline's" in w for w in table["warnings"])
    printed = capsys.readouterr().out
    assert "Holm–Bonferroni over 4 comparisons" in printed and "better" in printed
    # the files beside the JSON: Markdown, LaTeX, a PNG per key
    names = sorted(p.name for p in output.parent.iterdir())
    assert names == [
        "sweep.json",
        "sweep.md",
        "sweep.retrieval_mean_rank.png",
        "sweep.retrieval_precision@1.png",
        "sweep.tex",
    ]
    md = (output.parent / "sweep.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| model.lr=0.003"))
    held = 1 + (rank["decision"] == "better")  # precision@1 holds; mean_rank as the seed-level test said
    assert (
        row.count("**") == 4 and row.count("†") == held
    )  # best in both columns (↑ max, ↓ min), † where a difference holds
    assert "| model.lr=0.001 (baseline) |" in md and "Holm–Bonferroni adjustment over 4 comparisons" in md
    tex = (output.parent / "sweep.tex").read_text()
    assert [line for line in tex.splitlines() if line.endswith("rule")] == ["\\toprule", "\\midrule", "\\bottomrule"]
    assert (
        "retrieval/mean\\_rank $\\downarrow$" in tex
        and "\\textbf{" in tex
        and "$^\\dagger$" in tex
        and "Holm--Bonferroni" in tex
    )
    from matplotlib.image import imread

    image = imread(output.parent / "sweep.retrieval_precision@1.png")
    assert image.ndim == 3 and image.shape[0] > 100


def test_baseline_named_by_a_job_folder_and_errors(tmp_path: Path, sweep: dict):
    table = tasks.compare.run(
        evaluate_config(
            tmp_path,
            "task=compare",
            f"runs=[{sweep['root']}]",
            f"baseline={sweep['root'] / '4'}",
            "metric=retrieval/precision@1",
        )
    )
    assert table["baseline"]["group"] == "model.lr=0.003" and table["baseline"]["family_size"] == 2
    decisions = {c["group"]: c["decision"] for c in table["baseline"]["comparisons"]}
    # 0.001 (3 seeds) is worse across seeds and queries; 0.01 shares 2 seeds, too few for the seed-level test to reject
    assert decisions == {"model.lr=0.001": "worse", "model.lr=0.01": "cannot distinguish"}
    with pytest.raises(ValueError, match=r"baseline='lr=1' is neither a group.*model.lr=0.001"):
        tasks.compare.run(
            evaluate_config(
                tmp_path, "task=compare", f"runs=[{sweep['root']}]", "baseline='lr=1'", "metric=retrieval/precision@1"
            )
        )
    with pytest.raises(ValueError, match="baseline=GROUP .* and metric=KEY"):
        tasks.compare.run(
            evaluate_config(tmp_path, "task=compare", f"runs=[{sweep['root']}]", "metric=retrieval/precision@1")
        )
    with pytest.raises(ValueError, match="no direction"):
        tasks.compare.run(
            evaluate_config(
                tmp_path,
                "task=compare",
                f"runs=[{sweep['root']}]",
                f"baseline={sweep['root'] / '0'}",
                "metric=retrieval/num_queries",
            )
        )
    with pytest.raises(ValueError, match="drop group=false"):
        tasks.compare.run(
            evaluate_config(
                tmp_path,
                "task=compare",
                f"runs=[{sweep['root']}]",
                f"baseline={sweep['root'] / '0'}",
                "metric=retrieval/precision@1",
                "group=false",
            )
        )


def test_group_false_keeps_the_table_per_job(tmp_path: Path, sweep: dict):
    table = tasks.compare.run(
        evaluate_config(
            tmp_path, "task=compare", f"runs=[{sweep['root']}]", "group=false", "metrics=[retrieval/precision@1]"
        )
    )
    assert "kind" not in table and len(table["runs"]) == 8
    assert re.match(r"0 \(model.lr=0.001, seed=1\)", next(iter(table["runs"])))


def test_categorical_setting_and_runs_without_seeds(tmp_path: Path):
    rng = np.random.default_rng(5)
    root = tmp_path / "multirun"
    for job, (model, seed) in enumerate([("a", 1), ("a", 2), ("b", 1), ("b", 2)]):
        _job(root / str(job), [f"model={model}", f"seed={seed}"], rng.uniform(0, 1, N), rng.uniform(1, 3, N), job)
    _job(tmp_path / "single", ["model=c"], rng.uniform(0, 1, N), rng.uniform(1, 3, N), 9)  # no seed: a group of its own
    output = tmp_path / "out.json"
    table = tasks.compare.run(
        evaluate_config(tmp_path, "task=compare", f"runs=[{root},{tmp_path / 'single'}]", f"output={output}")
    )
    assert list(table["groups"]) == ["model=a", "model=b", "model=c"]
    assert table["groups"]["model=c"]["seeds"] == [""] and np.isnan(
        table["groups"]["model=c"]["metrics"]["retrieval/precision@1"]["seeds"]["t"]["low"]
    )
    assert (tmp_path / "out.retrieval_precision@1.png").is_file()


def test_which_best_reads_every_job_at_its_best_evaluation(tmp_path: Path):
    rng = np.random.default_rng(6)
    root = tmp_path / "multirun"
    p1 = {}
    for job, (lr, seed) in enumerate([(lr, seed) for lr in ("1", "2") for seed in (1, 2, 3)]):
        p1[job] = rng.uniform(0.3, 0.7, N) + (0.2 if lr == "2" else 0.0)
        # the best precision@1 is the first evaluation (step 5); the last one is 0.3 (lr=1) or 0.5 (lr=2) lower
        last = -0.3 if lr == "1" else -0.5
        _job(
            root / str(job),
            [f"lr={lr}", f"seed={seed}"],
            p1[job],
            rng.uniform(1, 3, N),
            job,
            shifts=((5, 0.0), (10, last)),
        )
    table = tasks.compare.run(
        evaluate_config(
            tmp_path, "task=compare", f"runs=[{root}]", "which=best", "baseline='lr=1'", "metric=retrieval/precision@1"
        )
    )
    assert table["groups"]["lr=2"]["metrics"]["retrieval/precision@1"]["seeds"]["mean"] == pytest.approx(
        np.mean([p1[j].mean() for j in (3, 4, 5)]), abs=1e-12
    )
    (c,) = table["baseline"]["comparisons"]
    d_q = np.mean([p1[j + 3] - p1[j] for j in (0, 1, 2)], axis=0)  # at step 5 on both sides
    assert c["difference"] == pytest.approx(d_q.mean(), abs=1e-12) and c["decision"] == "better"


def test_the_sweep_picture_ticks_each_swept_value_as_written(
    tmp_path: Path, sweep: dict, monkeypatch: pytest.MonkeyPatch
):
    """One tick per learning rate, labelled 0.001 / 0.003 / 0.01 (not 0.00100 ... running together), on a log axis
    since the rates span a factor of 10; the points sit at those values."""
    import matplotlib.pyplot as plt

    from beyondlabels.reporting.sweeps import plot_sweep

    table = tasks.compare.run(evaluate_config(tmp_path, "task=compare", f"runs=[{sweep['root']}]", "group=true"))
    axes = []
    subplots = plt.subplots

    def recording_subplots(*args, **kwargs):
        fig, ax = subplots(*args, **kwargs)
        axes.append(ax)
        return fig, ax

    monkeypatch.setattr(plt, "subplots", recording_subplots)
    plot_sweep(table, tmp_path / "pictures" / "sweep")
    assert len(axes) == len(table["metrics"])
    for ax in axes:
        assert [label.get_text() for label in ax.get_xticklabels()] == ["0.001", "0.003", "0.01"]
        assert list(ax.get_xticks()) == [0.001, 0.003, 0.01] and ax.get_xscale() == "log"
        assert sorted(ax.get_lines()[0].get_xdata()) == [0.001, 0.003, 0.01]
