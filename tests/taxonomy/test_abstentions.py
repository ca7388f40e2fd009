"""A prediction at the root is an abstention: counted (``abstentions``) and, by default, worth no precision, so a
mapper cannot gain hP by saying less. Checked against per-sample sets written from the definition."""

from __future__ import annotations

import pytest

from beyondlabels.functional import (
    hierarchical_precision_recall,
    hierarchy_output_schema,
)
from beyondlabels.metrics import HierarchicalPrecisionRecall
from beyondlabels.taxonomy import Taxonomy

TREE = Taxonomy(
    {
        "physical_object": "entity",
        "artifact": "physical_object",
        "transport": "artifact",
        "train": "transport",
        "activity": "entity",
        "sport": "activity",
        "pool": "sport",
    },
    root="entity",
)


def _path(node: str, include_root: bool) -> set[str]:
    chain = TREE.ancestors(node)
    return set(chain if include_root else chain[:-1])


def _oracle(preds, gts, include_root, abstention_precision):
    p, r, num, den = [], [], 0.0, 0
    for a, b in zip(preds, gts):
        sa, sb = _path(a, include_root), _path(b, include_root)
        shared = len(sa & sb)
        if a == TREE.root:
            p.append(abstention_precision)
            num += abstention_precision * len(sa)
        else:
            p.append(shared / len(sa))
            num += shared
        den += len(sa)
        r.append(shared / len(sb))
    hp, hr = sum(p) / len(p), sum(r) / len(r)
    micro_p = num / den if den else abstention_precision
    return hp, hr, micro_p


@pytest.mark.parametrize("include_root", [False, True])
@pytest.mark.parametrize("abstention_precision", [None, 0.0, 1.0])
def test_root_predictions_are_abstentions_scored_by_the_stated_convention(include_root, abstention_precision):
    preds = ["entity", "transport", "entity", "pool", "train"]
    gts = ["train", "train", "pool", "pool", "pool"]
    kwargs = {} if abstention_precision is None else {"abstention_precision": abstention_precision}
    pred, gt = TREE.indices(preds), TREE.indices(gts)
    out = hierarchical_precision_recall(pred, gt, TREE, include_root=include_root, **kwargs)
    hp, hr, micro_p = _oracle(preds, gts, include_root, 0.0 if abstention_precision is None else abstention_precision)
    assert float(out["hP"]) == pytest.approx(hp) and float(out["hR"]) == pytest.approx(hr)
    assert float(out["micro_hP"]) == pytest.approx(micro_p)
    assert int(out["abstentions"]) == 2 and float(out["abstention_rate"]) == pytest.approx(2 / 5)


def test_by_default_saying_less_earns_nothing():
    # A mapper that answers the root whenever unsure must not beat one that guesses a wrong sibling.
    gts = TREE.indices(["train", "pool"])
    abstaining = hierarchical_precision_recall(TREE.indices(["entity", "entity"]), gts, TREE)
    guessing = hierarchical_precision_recall(TREE.indices(["transport", "sport"]), gts, TREE)
    assert float(abstaining["hP"]) == 0.0 and float(abstaining["hF"]) == 0.0
    assert float(guessing["hF"]) > float(abstaining["hF"])
    legacy = hierarchical_precision_recall(TREE.indices(["entity", "entity"]), gts, TREE, abstention_precision=1.0)
    assert float(legacy["hP"]) == 1.0 and float(legacy["micro_hP"]) == 1.0


def test_the_schema_and_the_metric_carry_the_convention():
    schema = hierarchy_output_schema()
    assert schema["abstentions"].count and schema["abstention_rate"].higher_is_better is None
    assert "num_root_predictions" not in schema
    metric = HierarchicalPrecisionRecall(TREE)
    metric.update(["entity", "train"], ["train", "train"])
    out = metric.compute()
    assert float(out["hP"]) == 0.5 and int(out["abstentions"]) == 1
    legacy = HierarchicalPrecisionRecall(TREE, abstention_precision=1.0)
    legacy.update(["entity", "train"], ["train", "train"])
    assert float(legacy.compute()["hP"]) == 1.0


@pytest.mark.parametrize("value", [-0.1, 1.5, "0", True, float("nan")])
def test_bad_abstention_precision_is_named(value):
    one = TREE.indices(["train"])
    with pytest.raises(ValueError, match="`abstention_precision` must be a number in \\[0, 1\\]"):
        hierarchical_precision_recall(one, one, TREE, abstention_precision=value)
    with pytest.raises(ValueError, match="`abstention_precision`"):
        HierarchicalPrecisionRecall(TREE, abstention_precision=value)
