"""Hierarchical precision / recall / F against the paper's worked examples, hiclass (micro and macro) on random trees,
a set-based Python oracle, and taxonomy-derived retrieval gains."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

from beyondlabels.functional import (
    ClassGains,
    aggregate_hierarchy,
    embedding_retrieval_metrics,
    hierarchical_precision_recall,
    hierarchy_output_schema,
    hierarchy_per_query,
    lca_depth,
    mistake_lca_depth,
    node_indices,
    per_class_means,
    taxonomy_class_gains,
)
from beyondlabels.taxonomy import Taxonomy
from tests.oracles.outputs import assert_same_outputs


def random_tree(seed: int, size: int, window: int) -> tuple[dict[str, str], str]:
    """A random tree with names that sort unlike their creation order; a small ``window`` gives deep trees."""
    rng = random.Random(seed)
    names = [f"n{x}" for x in rng.sample(range(10 * size), size)]
    return {names[i]: names[rng.randrange(max(0, i - window), i)] for i in range(1, size)}, names[0]


def path_to(parent: dict[str, str], root: str, node: str, include_root: bool) -> list[str]:
    """Ancestor list, root first (the way hiclass wants a label: one level per column)."""
    path = [node]
    while path[-1] != root:
        path.append(parent[path[-1]])
    path.reverse()
    return path if include_root else path[1:]


def oracle(parent, root, preds, gts, include_root):
    """Per-sample sets, written from the definition (no LCA, no depth)."""
    p, r, inter, npred, ngt = [], [], [], [], []
    for a, b in zip(preds, gts):
        sa, sb = set(path_to(parent, root, a, include_root)), set(path_to(parent, root, b, include_root))
        i = len(sa & sb)
        p.append(1.0 if not sa else i / len(sa))
        r.append(i / len(sb))
        inter.append(i)
        npred.append(len(sa))
        ngt.append(len(sb))
    return np.array(p), np.array(r), sum(inter), sum(npred), sum(ngt)


def hiclass_table(parent, root, nodes, include_root):
    paths = [path_to(parent, root, n, include_root) for n in nodes]
    width = max(len(x) for x in paths)
    return np.array([x + [""] * (width - len(x)) for x in paths], dtype=object)


# ---- the paper's worked examples ------------------------------------------------------------------------------------


def paper_tree() -> Taxonomy:
    # Train predicted as "a mode of transport": anc(train) = {train, mode_of_transport, artifact, physical_object}.
    # Pool predicted as "high jump": both have {sport, activity} and themselves; one of three is shared... twice.
    return Taxonomy(
        {
            "physical_object": "entity",
            "artifact": "physical_object",
            "mode_of_transport": "artifact",
            "train": "mode_of_transport",
            "activity": "entity",
            "sport": "activity",
            "pool": "sport",
            "high_jump": "sport",
        },
        root="entity",
    )


def test_paper_worked_examples():
    tax = paper_tree()
    train = hierarchical_precision_recall(tax.indices(["mode_of_transport"]), tax.indices(["train"]), tax)
    assert float(train["hP"]) == 1.0 and float(train["hR"]) == 0.75
    pool = hierarchical_precision_recall(tax.indices(["high_jump"]), tax.indices(["pool"]), tax)
    assert round(float(pool["hP"]), 2) == 0.67 and round(float(pool["hR"]), 2) == 0.67
    both = hierarchical_precision_recall(
        tax.indices(["mode_of_transport", "high_jump"]), tax.indices(["train", "pool"]), tax
    )
    assert float(both["hP"]) == pytest.approx((1 + 2 / 3) / 2)
    assert float(both["hR"]) == pytest.approx((0.75 + 2 / 3) / 2)
    # pooled: (3 + 2) / (3 + 3) and (3 + 2) / (4 + 3)
    assert float(both["micro_hP"]) == pytest.approx(5 / 6) and float(both["micro_hR"]) == pytest.approx(5 / 7)


# ---- hiclass and the set oracle on random trees ---------------------------------------------------------------------


@pytest.mark.parametrize("include_root", [False, True])
@pytest.mark.parametrize(("seed", "size", "window"), [(0, 30, 3), (1, 80, 80), (2, 120, 2), (3, 60, 8)])
def test_matches_hiclass_and_set_oracle_on_random_trees(seed, size, window, include_root):
    hiclass_metrics = pytest.importorskip(
        "hiclass.metrics", reason="hiclass (a test extra: pip install -e '.[test]') is this test's oracle"
    )
    parent, root = random_tree(seed, size, window)
    tax = Taxonomy(parent, root)
    rng = random.Random(seed + 100)
    non_root = sorted(parent)
    n = 300
    gts = [rng.choice(non_root) for _ in range(n)]
    # predictions: a mix of exact hits, ancestors, descendants' relatives and random nodes (never the root: hiclass
    # divides by zero on an empty predicted set)
    preds = []
    for g in gts:
        roll = rng.random()
        if roll < 0.2:
            preds.append(g)
        elif roll < 0.5 and parent[g] != root:
            preds.append(parent[g])
        else:
            preds.append(rng.choice(non_root))
    out = hierarchical_precision_recall(tax.indices(preds), tax.indices(gts), tax, include_root=include_root)

    y_true = hiclass_table(parent, root, gts, include_root)
    y_pred = hiclass_table(parent, root, preds, include_root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = {
            "micro_hP": hiclass_metrics.precision(y_true, y_pred, average="micro"),
            "micro_hR": hiclass_metrics.recall(y_true, y_pred, average="micro"),
            "micro_hF": hiclass_metrics.f1(y_true, y_pred, average="micro"),
            "hP": hiclass_metrics.precision(y_true, y_pred, average="macro"),
            "hR": hiclass_metrics.recall(y_true, y_pred, average="macro"),
            "hF_sample_mean": hiclass_metrics.f1(y_true, y_pred, average="macro"),
        }
    for key, value in ref.items():
        assert float(out[key]) == pytest.approx(value, abs=1e-12), key
    # the paper's hF is the harmonic mean of the instance means, not hiclass' macro f1
    assert float(out["hF"]) == pytest.approx(2 * ref["hP"] * ref["hR"] / (ref["hP"] + ref["hR"]), abs=1e-12)

    p, r, inter, npred, ngt = oracle(parent, root, preds, gts, include_root)
    np.testing.assert_allclose(out["per_query"]["hP"].numpy(), p, atol=1e-12)
    np.testing.assert_allclose(out["per_query"]["hR"].numpy(), r, atol=1e-12)
    assert float(out["micro_hP"]) == pytest.approx(inter / npred) and float(out["micro_hR"]) == pytest.approx(
        inter / ngt
    )
    exact = np.mean([a == b for a, b in zip(preds, gts)])
    assert float(out["exact_match"]) == pytest.approx(exact)

    # LCA depths of the errors: histogram and mean from the set oracle (depth of the LCA = |common path| - 1)
    depths = [
        len(set(path_to(parent, root, a, True)) & set(path_to(parent, root, b, True))) - 1
        for a, b in zip(preds, gts)
        if a != b
    ]
    hist = np.bincount(depths, minlength=tax.max_depth + 1) / len(depths)
    np.testing.assert_allclose(out["error_lca_depth_fraction"].numpy(), hist, atol=1e-12)
    assert float(out["mean_error_lca_depth"]) == pytest.approx(np.mean(depths))
    assert int(out["num_errors"]) == len(depths) and int(out["num_samples"]) == n


def test_lca_depth_matches_the_climbing_lca_on_random_pairs():
    """Against a loop over the parent dict: the LCA is the first node on b's way up that is an ancestor of a; its
    depth the number of links from it to the root."""
    parent, root = random_tree(7, 400, 4)
    tax = Taxonomy(parent, root)
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, len(tax), (5000,), generator=g)
    b = torch.randint(0, len(tax), (5000,), generator=g)
    depth, index = lca_depth(a, b, tax, chunk_size=777)
    names = tax.nodes
    expected_names, expected_depths = [], []
    for x, y in zip(a.tolist(), b.tolist()):
        up = set(path_to(parent, root, names[x], True))
        node = names[y]
        while node not in up:
            node = parent[node]
        expected_names.append(node)
        expected_depths.append(len(path_to(parent, root, node, False)))
    assert [names[i] for i in index.tolist()] == expected_names
    assert depth.tolist() == expected_depths
    assert max(expected_depths) >= 5 and 0 in expected_depths  # deep pairs and pairs meeting at the root


def test_results_do_not_depend_on_chunk_size():
    parent, root = random_tree(3, 200, 5)
    tax = Taxonomy(parent, root)
    g = torch.Generator().manual_seed(1)
    pred = torch.randint(0, len(tax), (1000,), generator=g)
    gt = torch.randint(1, len(tax), (1000,), generator=g)
    ref = hierarchical_precision_recall(pred, gt, tax)
    for chunk in (1, 7, 999, 1 << 20):
        got = hierarchical_precision_recall(pred, gt, tax, chunk_size=chunk)
        for key in hierarchy_output_schema():
            assert torch.equal(got[key], ref[key]) or (got[key].isnan().all() and ref[key].isnan().all()), key


def test_shares_of_the_samples_concatenate_to_one_call_bit_for_bit():
    parent, root = random_tree(4, 60, 4)
    tax = Taxonomy(parent, root)
    g = torch.Generator().manual_seed(2)
    pred = torch.randint(0, len(tax), (101,), generator=g)
    gt = torch.randint(1, len(tax), (101,), generator=g)
    settings = dict(include_root=True, abstention_precision=0.5)
    ref = hierarchical_precision_recall(pred, gt, tax, **settings)
    assert 0 < int(ref["abstentions"]) and 0 < float(ref["hP"]) < 1
    for count in (2, 3, 4, 200):  # 200 shares: most are empty
        parts = [hierarchy_per_query(pred, gt, tax, share=(i, count), chunk_size=5, **settings) for i in range(count)]
        assert sum(part["hP"].numel() for part in parts) == 101 and max(part["hP"].numel() for part in parts) <= 51
        rows = {key: torch.cat([part[key] for part in parts]) for key in parts[0]}
        got = aggregate_hierarchy(rows, tax, **settings)
        assert_same_outputs(got, ref, count)


# ---- edge cases ------------------------------------------------------------------------------------------------------


def test_prediction_at_the_root_is_an_abstention_worth_no_precision():
    tax = paper_tree()
    out = hierarchical_precision_recall(tax.indices(["entity", "train"]), tax.indices(["train", "train"]), tax)
    assert out["per_query"]["hP"].tolist() == [0.0, 1.0] and out["per_query"]["hR"].tolist() == [0.0, 1.0]
    assert out["per_query"]["hF_sample_mean"].tolist() == [0.0, 1.0] and int(out["abstentions"]) == 1
    only_root = hierarchical_precision_recall(tax.indices(["entity"]), tax.indices(["train"]), tax)
    assert float(only_root["micro_hP"]) == 0.0 and float(only_root["micro_hR"]) == 0.0
    assert float(only_root["hF"]) == 0.0 and float(only_root["micro_hF"]) == 0.0
    # the other convention: an empty prediction is not wrong
    legacy = hierarchical_precision_recall(
        tax.indices(["entity"]), tax.indices(["train"]), tax, abstention_precision=1.0
    )
    assert float(legacy["hP"]) == 1.0 and float(legacy["micro_hP"]) == 1.0 and float(legacy["hR"]) == 0.0
    # with the root included, the root prediction shares one node of five
    incl = hierarchical_precision_recall(tax.indices(["entity"]), tax.indices(["train"]), tax, include_root=True)
    assert float(incl["hP"]) == 0.0 and float(incl["hR"]) == pytest.approx(1 / 5)


def test_all_correct_has_no_error_statistics():
    tax = paper_tree()
    out = hierarchical_precision_recall(tax.indices(["train", "pool"]), tax.indices(["train", "pool"]), tax)
    assert float(out["hF"]) == 1.0 and float(out["exact_match"]) == 1.0 and int(out["num_errors"]) == 0
    assert torch.isnan(out["mean_error_lca_depth"]) and out["error_lca_depth_fraction"].sum() == 0


def test_ground_truth_at_the_root_is_an_error_unless_the_root_counts():
    tax = paper_tree()
    with pytest.raises(ValueError, match=r"`gt` holds the root 'entity' \(positions \[1\]\).*include_root=True"):
        hierarchical_precision_recall(tax.indices(["train", "pool"]), tax.indices(["train", "entity"]), tax)
    out = hierarchical_precision_recall(tax.indices(["pool"]), tax.indices(["entity"]), tax, include_root=True)
    assert float(out["hP"]) == pytest.approx(1 / 4) and float(out["hR"]) == 1.0


@pytest.mark.parametrize(
    ("pred", "gt", "match"),
    [
        (torch.tensor([1.0]), torch.tensor([1]), "`pred` must hold integer node indices"),
        (torch.tensor([[1]]), torch.tensor([1]), r"`pred` must be a 1-D tensor"),
        (torch.tensor([1]), torch.tensor([99]), r"`gt` holds indices outside \[0, 9\)"),
        (torch.tensor([1, 2]), torch.tensor([1]), "give one prediction per ground truth"),
        (torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long), "need at least one sample"),
        ([1], torch.tensor([1]), "map names with Taxonomy.indices"),
    ],
)
def test_bad_inputs_name_the_argument(pred, gt, match):
    with pytest.raises(ValueError, match=match):
        hierarchical_precision_recall(pred, gt, paper_tree())


def test_bad_options():
    tax = paper_tree()
    one = tax.indices(["train"])
    with pytest.raises(ValueError, match="`chunk_size` must be a positive int"):
        hierarchical_precision_recall(one, one, tax, chunk_size=0)
    with pytest.raises(ValueError, match="`include_root` must be True or False"):
        hierarchical_precision_recall(one, one, tax, include_root="no")


def test_node_indices_accepts_names_or_indices_and_names_the_argument():
    tax = paper_tree()
    assert node_indices(tax, ["train", "pool"], "pred").tolist() == tax.indices(["train", "pool"]).tolist()
    assert node_indices(tax, [1, 2], "pred").tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"`pred`: unknown taxonomy node\(s\) 'trian'"):
        node_indices(tax, ["trian"], "pred")
    with pytest.raises(ValueError, match="`gt` must be a list of node names"):
        node_indices(tax, "train", "gt")


def test_per_class_means_and_mistake_lca_depth():
    tax = paper_tree()
    gt = tax.indices(["train", "train", "pool"])
    pred = tax.indices(["mode_of_transport", "train", "high_jump"])
    out = hierarchical_precision_recall(pred, gt, tax)
    means = per_class_means(out["per_query"], ("hP", "hR"))
    train, pool = tax.index("train"), tax.index("pool")
    rows = {
        int(n): (float(p), float(r), int(c))
        for n, p, r, c in zip(means["node"], means["hP"], means["hR"], means["count"])
    }
    assert rows[train] == (1.0, pytest.approx(0.875), 2) and rows[pool] == (
        pytest.approx(2 / 3),
        pytest.approx(2 / 3),
        1,
    )
    m = mistake_lca_depth(gt, pred, tax)
    # mistakes: train vs mode_of_transport (LCA mode_of_transport, depth 3) and pool vs high_jump (LCA sport, depth 2)
    assert float(m["mean_mistake_lca_depth"]) == 2.5 and int(m["num_mistakes"]) == 2


# ---- taxonomy gains for graded retrieval -----------------------------------------------------------------------------


def test_class_gains_match_the_set_definition():
    parent, root = random_tree(5, 40, 4)
    tax = Taxonomy(parent, root)
    classes = sorted(parent)[:12]
    gains = taxonomy_class_gains(tax, classes)
    for i, a in enumerate(classes):
        for j, b in enumerate(classes):
            sa, sb = set(path_to(parent, root, a, False)), set(path_to(parent, root, b, False))
            assert float(gains.gains[i, j]) == pytest.approx(len(sa & sb) / max(len(sa), len(sb))), (a, b)
    assert isinstance(gains, ClassGains) and gains.name == "hierarchical" and gains.classes == classes
    assert torch.equal(gains.gains, gains.gains.T)
    by_index = taxonomy_class_gains(tax, classes, labels="index", name="tree")
    assert by_index.classes == list(range(12)) and torch.equal(by_index.gains, gains.gains)


def test_class_gains_bad_arguments():
    tax = paper_tree()
    with pytest.raises(ValueError, match="`classes` lists \\['pool'\\] more than once"):
        taxonomy_class_gains(tax, ["pool", "pool"])
    with pytest.raises(ValueError, match="holds the root 'entity'"):
        taxonomy_class_gains(tax, ["entity", "pool"])
    with pytest.raises(ValueError, match="`labels` has 1 entries for 2 classes"):
        taxonomy_class_gains(tax, ["train", "pool"], labels=[0])
    with pytest.raises(ValueError, match="`labels` must be None, 'index'"):
        taxonomy_class_gains(tax, ["train", "pool"], labels="position")
    with pytest.raises(ValueError, match="unknown taxonomy node"):
        taxonomy_class_gains(tax, ["train", "bus"])


def test_sibling_confusions_earn_more_hierarchical_credit_than_stranger_confusions():
    # leaves a1, a2 (siblings under A) and b1, b2 (under B), two items each. Each of four orthogonal directions holds
    # two items of different classes, so every item's nearest neighbour has another class: binary precision@1 is 0.
    # Model "siblings" pairs a1 with a2 and b1 with b2; model "strangers" pairs a1 with b1 and a2 with b2.
    tax = Taxonomy({"A": "root", "B": "root", "a1": "A", "a2": "A", "b1": "B", "b2": "B"}, root="root")
    gains = taxonomy_class_gains(tax, ["a1", "a2", "b1", "b2"], labels="index")
    directions = torch.eye(4).repeat_interleave(2, dim=0)  # items 2i and 2i+1 share direction i
    pairs = {"siblings": [0, 1, 0, 1, 2, 3, 2, 3], "strangers": [0, 2, 0, 2, 1, 3, 1, 3]}
    results = {
        m: embedding_retrieval_metrics(directions, torch.tensor(lab), ks=(1,), graded=[gains])
        for m, lab in pairs.items()
    }
    for model in results:
        assert float(results[model]["precision@1"]) == 0.0
    # a sibling shares {A} of two-node ancestor sets: gain 1/2; a stranger shares nothing below the root
    assert float(results["siblings"]["hierarchical_precision@1"]) == 0.5
    assert float(results["strangers"]["hierarchical_precision@1"]) == 0.0
    assert float(results["siblings"]["hierarchical_ndcg@1"]) > float(results["strangers"]["hierarchical_ndcg@1"])
