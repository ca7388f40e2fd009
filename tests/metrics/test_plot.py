"""``metric.plot()`` on every metric family, as torchmetrics users call it: the drawn bars and lines carry the
values ``compute()`` returned."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

from beyondlabels.functional.relevance import ClassGains
from beyondlabels.metrics import (
    CrossModalRetrieval,
    EmbeddingRetrieval,
    HierarchicalPrecisionRecall,
    LabelMismatchAnalysis,
    RankingAudit,
    RetrievalWithMismatch,
    TextImageRPrecision,
    ZeroShotClassification,
)
from beyondlabels.taxonomy import Taxonomy

matplotlib.use("Agg")

TAXONOMY = Taxonomy({"object": "entity", "vehicle": "object", "train": "vehicle", "bus": "vehicle", "animal": "object", "dog": "animal"}, root="entity")
GAINS = ClassGains([[1.0, 0.6, 0.1], [0.6, 1.0, 0.3], [0.1, 0.3, 1.0]], [0, 1, 2], name="profile")


def _embeddings(n: int = 24, d: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 3
    centres = torch.randn(3, d, generator=g)
    return centres[labels] + 0.7 * torch.randn(n, d, generator=g), labels


def _fed(name: str):
    emb, labels = _embeddings()
    if name == "retrieval":
        metric = EmbeddingRetrieval(ks=(1, 3))
        metric.update(emb, labels)
    elif name == "retrieval_with_mismatch":
        metric = RetrievalWithMismatch(GAINS, ks=(1,), num_trials=50, projection_points=0)
        metric.update(emb, labels)
    elif name == "mismatch":
        metric = LabelMismatchAnalysis(GAINS, num_trials=50)
        metric.update(labels, (labels + 1) % 3)
    elif name == "crossmodal":
        metric = CrossModalRetrieval(ks=(1, 2))
        ids = torch.arange(emb.shape[0])
        metric.update(emb, ids, emb + 0.3 * torch.randn_like(emb), ids)
    elif name == "zeroshot":
        metric = ZeroShotClassification(num_classes=3, ks=(1, 2))
        metric.update(torch.randn(emb.shape[0], 3, generator=torch.Generator().manual_seed(1)), labels)
    elif name == "hierarchy":
        metric = HierarchicalPrecisionRecall(TAXONOMY)
        metric.update(["train", "bus", "dog", "vehicle"], ["train", "train", "dog", "bus"])
    elif name == "rprecision":
        metric = TextImageRPrecision(num_candidates=4, top_r=(1, 2), repeats=2)
        metric.update(emb, emb + 0.5 * torch.randn_like(emb), torch.arange(emb.shape[0]))
    else:
        metric = RankingAudit(ks=(2,))
        metric.update(torch.tensor([[0.9, 0.8, 0.1], [0.2, 0.7, 0.3]]), torch.tensor([[2.0, 0.0, 1.0], [1.0, 0.0, 1.0]]), torch.tensor([5, 6]))
    return metric


FAMILIES = ["retrieval", "retrieval_with_mismatch", "mismatch", "crossmodal", "zeroshot", "hierarchy", "rprecision", "ranking"]


@pytest.mark.parametrize("family", FAMILIES)
def test_plot_draws_the_headline_values_of_compute(family):
    metric = _fed(family)
    out = metric.compute()
    schema = metric.output_schema()
    fig, ax = metric.plot()
    names = [t.get_text() for t in ax.get_yticklabels()]
    expected = [k for k in schema.scalar_keys() if schema.mode(k) == "max" and k in out]
    assert names == expected and names, family
    widths = [bar.get_width() for bar in ax.patches]
    for name, width in zip(names, widths):
        value = float(out[name])
        assert (math.isnan(width) and math.isnan(value)) or width == pytest.approx(value, abs=1e-12), (family, name)
    assert ax.get_title() == type(metric).__name__
    matplotlib.pyplot.close(fig)


def test_plot_of_several_results_draws_a_line_per_key_over_the_evaluations():
    first, second = _fed("retrieval"), EmbeddingRetrieval(ks=(1, 3))
    emb, labels = _embeddings(seed=3)
    second.update(emb, labels)
    results = [first.compute(), second.compute()]
    fig, ax = first.plot(results, keys=["precision@1", "r_precision"])
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.lines}
    assert lines == {key: [float(r[key]) for r in results] for key in ("precision@1", "r_precision")}
    matplotlib.pyplot.close(fig)


def test_plot_of_a_curve_key_draws_the_curve_against_k():
    metric = _fed("retrieval")
    out = metric.compute()
    fig, ax = metric.plot(keys=["precision_curve"])
    (line,) = ax.lines
    assert list(line.get_xdata()) == list(range(1, out["precision_curve"].numel() + 1))
    assert list(line.get_ydata()) == pytest.approx(out["precision_curve"].tolist())
    matplotlib.pyplot.close(fig)


def test_plot_into_given_axes_and_bad_keys_are_named():
    import matplotlib.pyplot as plt

    metric = _fed("zeroshot")
    fig, ax = plt.subplots()
    assert metric.plot(ax=ax) == (fig, ax)
    with pytest.raises(ValueError, match="`keys` names \\['top9'\\]"):
        metric.plot(keys=["top9"])
    with pytest.raises(ValueError, match="`val`"):
        metric.plot([])
    plt.close(fig)
