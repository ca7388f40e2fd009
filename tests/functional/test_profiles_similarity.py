"""M_feature: the paper's worked examples, a plain-Python oracle on random profiles, the pair distribution against
numpy, validation, and the profile-derived gains wired into graded retrieval."""

from __future__ import annotations

import random
from itertools import combinations

import numpy as np
import pytest
import torch

from beyondlabels.demo import demo_profiles  # noqa: E402
from beyondlabels.functional import (  # noqa: E402
    embedding_retrieval_metrics,
    feature_similarity,
    pair_distribution,
    profile_class_gains,
)
from beyondlabels.functional.profiles import ordinal_group_score, pair_values  # noqa: E402
from beyondlabels.io.profiles_files import load_profiles  # noqa: E402
from beyondlabels.profiles import FeatureProfiles  # noqa: E402
from tests.oracles.retrieval_data import clustered_without_ties

ORDINAL = ["symmetry", "verticality", "geometric_regularity", "massing_complexity", "ornamentation"]
SETS = {
    "roof_types": ["flat", "pitched", "dome", "spire"],
    "architectural_elements": ["buttress", "arch", "column", "pilotis"],
    "windows": ["ribbon", "lancet", "rose", "sash"],
    "materials": ["glass/steel", "concrete", "stucco", "stone", "brick"],
}


def architecture() -> FeatureProfiles:
    """Gothic, Bauhaus and International Style as in the paper's worked examples."""

    def cls(levels, roof, elements, windows, materials):
        return {
            **dict(zip(ORDINAL, levels, strict=True)),
            "roof_types": roof,
            "architectural_elements": elements,
            "windows": windows,
            "materials": materials,
        }

    return FeatureProfiles(
        {
            "Gothic": cls((1, 2, 1, 2, 2), ["spire"], ["buttress", "arch"], ["lancet", "rose"], ["stone"]),
            "Bauhaus": cls((1, 1, 2, 0, 0), ["flat"], [], ["ribbon"], ["glass/steel", "concrete", "stucco"]),
            "International": cls((1, 1, 2, 0, 0), ["flat"], [], ["ribbon"], ["glass/steel", "concrete"]),
        },
        ordinal=ORDINAL,
        sets=SETS,
    )


def test_worked_example_gothic_vs_bauhaus_ordinal_score():
    assert ordinal_group_score([1, 2, 1, 2, 2], [1, 1, 2, 0, 0]) == pytest.approx(0.40, abs=1e-12)
    # the same through the matrix, ordinal group alone
    only_ordinal = feature_similarity(architecture(), weights={g: 0.0 for g in SETS})
    assert float(only_ordinal[0, 1]) == pytest.approx(0.40, abs=1e-12)


def test_worked_example_bauhaus_vs_international_style():
    m = feature_similarity(architecture())
    # ordinal 1, roof 1, windows 1, elements unavailable (both empty), materials 2/3: mean over 4 groups
    assert float(m[1, 2]) == pytest.approx((1 + 1 + 1 + 2 / 3) / 4, abs=1e-12)
    assert round(float(m[1, 2]), 3) == 0.917


def oracle(data: dict) -> np.ndarray:
    """Plain-Python M_feature from the file-format dict, pair by pair (independent of the tensor kernel)."""
    lmax = data.get("ordinal_max", 2)
    ordinal = list(data["features"].get("ordinal") or {})
    sets = list(data["features"].get("sets") or {})
    names = list(data["classes"])
    out = np.zeros((len(names), len(names)))
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            pa, pb = data["classes"][a], data["classes"][b]
            scores = []
            if ordinal:
                scores.append(sum(1 - abs(pa[f] - pb[f]) / lmax for f in ordinal) / len(ordinal))
            for g in sets:
                sa, sb = set(pa[g]), set(pb[g])
                if sa or sb:
                    scores.append(len(sa & sb) / len(sa | sb))
            out[i, j] = 1.0 if i == j else (sum(scores) / len(scores) if scores else 0.0)
    return out


def random_data(seed: int) -> dict:
    rng = random.Random(seed)
    lmax = rng.randint(1, 4)
    ordinal = {f"o{k}": "" for k in range(rng.randint(0, 4))}
    sets = {
        f"s{k}": [f"v{k}_{j}" for j in range(rng.randint(1, 4))] for k in range(rng.randint(1 if not ordinal else 0, 3))
    }
    classes = {}
    for c in range(rng.randint(2, 9)):
        profile = {f: rng.randint(0, lmax) for f in ordinal}
        for g, allowed in sets.items():
            profile[g] = rng.sample(allowed, rng.randint(0, len(allowed)))  # empty sets included
        classes[f"class_{c}"] = profile
    return {"ordinal_max": lmax, "features": {"ordinal": ordinal, "sets": sets}, "classes": classes}


@pytest.mark.parametrize("seed", range(12))
def test_matrix_matches_a_plain_python_oracle_and_its_properties(seed):
    data = random_data(seed)
    m = feature_similarity(load_profiles(data)).numpy()
    np.testing.assert_allclose(m, oracle(data), rtol=0, atol=1e-12)
    assert np.array_equal(m, m.T)
    assert (m >= 0).all() and (m <= 1).all()
    assert (np.diag(m) == 1).all()


def test_unavailable_groups_are_left_out_and_one_empty_set_scores_zero():
    p = FeatureProfiles(
        {"a": {"x": 1, "g": [], "h": ["u"]}, "b": {"x": 1, "g": [], "h": []}, "c": {"x": 1, "g": ["p"], "h": ["u"]}},
        ordinal=["x"],
        sets={"g": ["p"], "h": ["u"]},
    )
    m = feature_similarity(p)
    assert float(m[0, 1]) == pytest.approx(0.5)  # ordinal 1, g unavailable, h one-empty 0
    assert float(m[0, 2]) == pytest.approx(2 / 3)  # ordinal 1, g one-empty 0, h 1
    # a pair whose every group is unavailable scores 0; a class still has 1 on its own diagonal
    only_sets = FeatureProfiles({"a": {"g": []}, "b": {"g": []}}, ordinal=[], sets={"g": ["p"]})
    assert feature_similarity(only_sets).tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_weights_change_the_mean_and_are_validated():
    p = architecture()
    w = {"ordinal": 2.0, "materials": 0.0}
    m = feature_similarity(p, weights=w)
    # Gothic vs Bauhaus: ordinal 0.4 (x2), roof 0, elements one-empty 0, windows 0 -> 0.8 / 5
    assert float(m[0, 1]) == pytest.approx(0.8 / 5)
    with pytest.raises(ValueError, match="unknown group 'roof'"):
        feature_similarity(p, weights={"roof": 1.0})
    with pytest.raises(ValueError, match=r"weights\['materials'\]"):
        feature_similarity(p, weights={"materials": -1.0})
    with pytest.raises(ValueError, match="all 0"):
        feature_similarity(p, weights={g: 0.0 for g in ["ordinal", *SETS]})


def test_profiles_method_delegates_and_reads_the_demo_file():
    p = demo_profiles()
    assert torch.equal(feature_similarity(p), feature_similarity(p))
    m = feature_similarity(p).numpy()
    np.testing.assert_allclose(m, oracle(p.to_dict()), rtol=0, atol=1e-12)


def test_pair_distribution_matches_numpy():
    p = demo_profiles()
    m = feature_similarity(p).numpy()
    c = len(p)
    values = np.array([m[i, j] for i, j in combinations(range(c), 2)])
    d = pair_distribution(m, p.classes, top=5)
    assert d["num_pairs"] == c * (c - 1) // 2 == len(pair_values(m))
    assert d["mean"] == pytest.approx(values.mean(), abs=1e-12)
    for key, q in (("median", 50), ("p75", 75), ("p90", 90), ("p95", 95)):
        assert d[key] == pytest.approx(np.percentile(values, q), abs=1e-12), key
    assert [row[2] for row in d["top_pairs"]] == sorted(values, reverse=True)[:5]
    best = d["top_pairs"][0]
    assert m[p.classes.index(best[0]), p.classes.index(best[1])] == values.max()


@pytest.mark.parametrize(
    "change, match",
    [
        (
            lambda d: d["classes"]["square"].update(corners=3),
            r"class 'square', ordinal feature 'corners': level 3 is outside 0..2",
        ),
        (
            lambda d: d["classes"]["circle"].update(edge_kinds=["wavy"]),
            r"class 'circle', set group 'edge_kinds': value\(s\) 'wavy' not in",
        ),
        (lambda d: d["classes"]["star"].update(colour=1), r"class 'star': unknown feature\(s\) 'colour'"),
    ],
)
def test_invalid_profiles_are_named(change, match):
    data = demo_profiles().to_dict()
    change(data)
    with pytest.raises(ValueError, match=match):
        feature_similarity(load_profiles(data))


def test_a_class_missing_from_the_profiles_is_named():
    gains = profile_class_gains(demo_profiles())
    from beyondlabels.functional import encode_labels

    codes, _ = encode_labels(["square", "zebra"])
    with pytest.raises(ValueError, match="does not list"):
        gains.class_index(codes)
    with pytest.raises(ValueError, match="no class 'zebra'"):
        demo_profiles().require_classes(["square", "zebra"])


def test_profile_gains_give_graded_credit_in_retrieval():
    """Wiring: profile_precision@1 is the mean M_feature between each query's class and its nearest neighbour's."""
    p = demo_profiles()
    c = len(p)
    emb, labels = clustered_without_ties(120, 16, c, seed=3, noise=1.6)
    out = embedding_retrieval_metrics(emb, labels, ks=(1, 5), graded=[profile_class_gains(p, labels="index")])
    x = emb.double().numpy()
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    lab = labels.numpy()
    m = feature_similarity(p).numpy()
    lone = np.bincount(lab, minlength=c)[lab] == 1
    nn = sims.argmax(axis=1)
    expected = np.mean(m[lab, lab[nn]][~lone])
    assert float(out["profile_precision@1"]) == pytest.approx(expected, abs=1e-12)
    # graded credit is at least the binary one (gains are 1 for the same class, >= 0 otherwise)
    assert float(out["profile_precision@5"]) >= float(out["precision@5"])
    # the gains are scalable to integer grades (multiples of 1/180 for the demo profiles) for trec_eval
    assert np.allclose(np.round(m * 180), m * 180, atol=1e-9)


def test_profile_graded_ndcg_matches_trec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    p = demo_profiles()
    c = len(p)
    emb, labels = clustered_without_ties(80, 16, c, seed=4, noise=1.4)
    out = embedding_retrieval_metrics(emb, labels, ks=(5, 10), graded=[profile_class_gains(p, labels="index")])
    m = feature_similarity(p).numpy()
    x = emb.double() / emb.double().norm(dim=1, keepdim=True)
    sims = (x @ x.T).numpy()
    lab = labels.numpy()
    lone = np.bincount(lab, minlength=c)[lab] == 1
    qrels, run = {}, {}
    for q in range(len(lab)):
        if lone[q]:
            continue
        # integer grades = gain x 180 (linear gain: nDCG does not change with the scale)
        qrels[f"q{q}"] = {f"d{j:04d}": int(round(m[lab[q], lab[j]] * 180)) for j in range(len(lab)) if j != q}
        run[f"q{q}"] = {f"d{j:04d}": float(sims[q, j]) for j in range(len(lab)) if j != q}
    res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.5,10"}).evaluate(run)
    for k in (5, 10):
        ref = np.mean([res[q][f"ndcg_cut_{k}"] for q in sorted(res)])
        assert float(out[f"profile_ndcg@{k}"]) == pytest.approx(ref, abs=1e-14), (
            k
        )  # pytrec_eval returns full doubles: measured 1.1e-16
