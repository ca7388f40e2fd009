"""evaluate.py task=mismatch, task=profiles and task=retrieval profiles=PATH: reports against numpy / scipy
references; the Hydra config composed in-process (one subprocess run, marked slow, as users call it)."""

from __future__ import annotations

import csv
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from beyondlabels import tasks  # noqa: E402
from beyondlabels.demo import demo_profiles  # noqa: E402
from beyondlabels.functional import feature_similarity  # noqa: E402
from beyondlabels.functional.mismatch import mismatch_output_schema  # noqa: E402
from tests.entrypoints.helpers import evaluate_config, run_script

PROFILES = Path(str(resources.files("beyondlabels.demo").joinpath("data", "profiles.yaml")))


def _pairs(n: int = 300, seed: int = 0):
    """Queries of the demo classes whose mistakes prefer similar classes (a model that confuses related shapes)."""
    p = demo_profiles()
    m = feature_similarity(p).numpy()
    rng = np.random.default_rng(seed)
    c = len(p)
    q = rng.integers(0, c, size=n)
    r = q.copy()
    for i in np.nonzero(rng.random(n) < 0.5)[0]:
        w = m[q[i]] ** 4
        w[q[i]] = 0
        r[i] = rng.choice(c, p=w / w.sum())
    names = np.array(p.classes)
    return names[q], names[r], m, list(p.classes)


def _write_csv(path: Path, q, r, ranks=None):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["query_label", "retrieved_label"] + (["rank"] if ranks is not None else []))
        for i in range(len(q)):
            w.writerow([q[i], r[i]] + ([ranks[i]] if ranks is not None else []))


def test_mismatch_task_report_matches_references(tmp_path):
    q, r, m, classes = _pairs()
    _write_csv(tmp_path / "pairs.csv", q, r)
    out = tmp_path / "mm.json"
    report = tasks.mismatch.run(
        evaluate_config(
            tmp_path,
            "task=mismatch",
            f"pairs={tmp_path / 'pairs.csv'}",
            f"profiles={PROFILES}",
            f"output={out}",
            "trials=2000",
            "seed=42",
        )
    )
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert out.with_suffix(".png").stat().st_size > 0
    idx = {c: i for i, c in enumerate(classes)}
    qi, ri = np.array([idx[x] for x in q]), np.array([idx[x] for x in r])
    wrong = qi != ri
    sims = m[qi[wrong], ri[wrong]]
    pairs = m[np.triu_indices(len(classes), 1)]
    assert report["num_mismatches"] == wrong.sum()
    assert report["mean_similarity"] == pytest.approx(sims.mean(), abs=1e-12)
    assert report["mean_percentile_rank"] == pytest.approx(
        np.mean([sps.percentileofscore(pairs, s, kind="weak") for s in sims]), abs=1e-9
    )
    # analytic null mean from the query frequencies
    f = np.bincount(qi, minlength=len(classes)).astype(float)
    expected = np.mean([(np.where(np.arange(len(f)) == a, 0, f) * m[a]).sum() / (f.sum() - f[a]) for a in qi[wrong]])
    assert report["null_mean"] == pytest.approx(expected, abs=5 * report["null_std"] / np.sqrt(2000))
    assert report["p_value"] == 1 / 2001  # mistakes that prefer similar classes: no trial reaches them
    assert set(mismatch_output_schema().scalar_keys()) <= set(report)
    assert report["null_ci95"] == [report["null_ci95_low"], report["null_ci95_high"]]
    assert report["pair_distribution"]["p90"] == pytest.approx(np.percentile(pairs, 90), abs=1e-12)
    # the table: the 20 most frequent directed pairs, by count, ties by query then retrieved class index
    pair_counts = np.zeros((len(classes), len(classes)), dtype=int)
    np.add.at(pair_counts, (qi[wrong], ri[wrong]), 1)
    ranked = sorted(zip(*np.nonzero(pair_counts), strict=True), key=lambda ab: (-pair_counts[ab], ab[0], ab[1]))
    assert len(ranked) > 20 and pair_counts[ranked[19]] == pair_counts[ranked[20]]  # the cut and the tie rule matter
    expected_rows = [
        {
            "query": classes[a],
            "retrieved": classes[b],
            "count": int(pair_counts[a, b]),
            "share": pair_counts[a, b] / wrong.sum(),
            "similarity": m[a, b],
        }
        for a, b in ranked[:20]
    ]
    assert [(row["query"], row["retrieved"], row["count"]) for row in report["mismatch_pairs"]] == [
        (row["query"], row["retrieved"], row["count"]) for row in expected_rows
    ]
    for row, ref in zip(report["mismatch_pairs"], expected_rows, strict=True):
        assert row["share"] == pytest.approx(ref["share"], rel=1e-15)
        assert row["similarity"] == pytest.approx(ref["similarity"], abs=1e-12)


def test_mismatch_task_with_ranks_counts_and_npz(tmp_path):
    q, r, _, classes = _pairs(60, seed=1)
    ranks = np.ones(60, dtype=int)
    # a second row (rank 2) per query is analysed only with rank_max=2 and never counts as a query
    q2, r2, rk2 = np.concatenate([q, q]), np.concatenate([r, r[::-1]]), np.concatenate([ranks, ranks * 2])
    np.savez(tmp_path / "pairs.npz", query_label=q2, retrieved_label=r2, rank=rk2)
    counts = {c: 10 for c in classes}
    (tmp_path / "counts.json").write_text(json.dumps(counts))
    one = tasks.mismatch.run(
        evaluate_config(
            tmp_path,
            "task=mismatch",
            f"pairs={tmp_path / 'pairs.npz'}",
            f"profiles={PROFILES}",
            f"output={tmp_path / 'a.json'}",
            "trials=100",
        )
    )
    two = tasks.mismatch.run(
        evaluate_config(
            tmp_path,
            "task=mismatch",
            f"pairs={tmp_path / 'pairs.npz'}",
            f"profiles={PROFILES}",
            f"output={tmp_path / 'b.json'}",
            "trials=100",
            "rank_max=2",
            f"counts={tmp_path / 'counts.json'}",
        )
    )
    assert one["num_queries"] == 60 and two["num_queries"] == 120
    assert one["num_mismatches"] == int((q != r).sum())
    assert two["settings"]["counts"].endswith("counts.json")


def test_mismatch_task_errors_name_the_problem(tmp_path):
    _write_csv(tmp_path / "bad.csv", ["square", "zebra"], ["circle", "square"])
    with pytest.raises(ValueError, match=r"labels \['zebra'\] that are not classes of the profiles"):
        tasks.mismatch.run(
            evaluate_config(tmp_path, "task=mismatch", f"pairs={tmp_path / 'bad.csv'}", f"profiles={PROFILES}")
        )
    (tmp_path / "cols.csv").write_text("query,retrieved\nsquare,circle\n")
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['query_label', 'retrieved_label'\]"):
        tasks.mismatch.run(
            evaluate_config(tmp_path, "task=mismatch", f"pairs={tmp_path / 'cols.csv'}", f"profiles={PROFILES}")
        )
    with pytest.raises(ValueError, match="task=mismatch needs pairs=PATH"):
        tasks.mismatch.run(evaluate_config(tmp_path, "task=mismatch"))


def test_profiles_task_writes_matrix_distribution_and_heatmap(tmp_path):
    out = tmp_path / "prof.json"
    report = tasks.profiles.run(evaluate_config(tmp_path, "task=profiles", f"profiles={PROFILES}", f"output={out}"))
    m = np.array(report["matrix"])
    assert report["classes"] == list(demo_profiles().classes)
    np.testing.assert_array_equal(m, feature_similarity(demo_profiles()).numpy())
    pairs = m[np.triu_indices(len(m), 1)]
    assert report["pair_distribution"]["median"] == pytest.approx(np.median(pairs), abs=1e-12)
    assert out.with_suffix(".png").stat().st_size > 0


def test_retrieval_with_profiles_adds_graded_keys_and_a_mismatch_section(tmp_path):
    p = demo_profiles()
    c = len(p)
    rng = np.random.default_rng(0)
    labels = np.arange(160) % c
    x = (rng.normal(size=(c, 8))[labels] + 1.3 * rng.normal(size=(160, 8))).astype(np.float32)
    np.savez(tmp_path / "emb.npz", embeddings=x, labels=labels)  # integer labels: class indices in profiles order
    out = tmp_path / "ret.json"
    report = tasks.retrieval.run(
        evaluate_config(
            tmp_path,
            "task=retrieval",
            f"input={tmp_path / 'emb.npz'}",
            f"profiles={PROFILES}",
            f"output={out}",
            "k=[1,5]",
            "trials=300",
        )
    )
    m = feature_similarity(p).numpy()
    u = x.astype(np.float64) / np.linalg.norm(x, axis=1, keepdims=True)
    s = u @ u.T
    np.fill_diagonal(s, -np.inf)
    nn = s.argmax(axis=1)
    assert report["profile_precision@1"] == pytest.approx(np.mean(m[labels, labels[nn]]), abs=1e-9)
    mm = report["mismatch"]
    wrong = labels != labels[nn]
    assert mm["num_mismatches"] == wrong.sum()
    assert mm["mean_similarity"] == pytest.approx(m[labels[wrong], labels[nn][wrong]].mean(), abs=1e-9)
    means = np.stack([u[labels == k].mean(0) for k in range(c)])
    cos = means @ means.T
    iu = np.triu_indices(c, 1)
    assert mm["spearman_rho"] == pytest.approx(sps.spearmanr(m[iu], cos[iu]).statistic, abs=1e-9)
    assert "profile_ndcg@5" in report["schema"]["keys"]


@pytest.mark.slow
def test_mismatch_task_runs_from_the_command_line(tmp_path):
    q, r, _, _ = _pairs(80, seed=2)
    _write_csv(tmp_path / "pairs.csv", q, r)
    out = tmp_path / "cli.json"
    run_script(
        "evaluate.py",
        "task=mismatch",
        f"pairs={tmp_path / 'pairs.csv'}",
        f"profiles={PROFILES}",
        f"output={out}",
        "trials=500",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    report = json.loads(out.read_text())
    assert report["task"] == "mismatch" and report["num_trials"] == 500
