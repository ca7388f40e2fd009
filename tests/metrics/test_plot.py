"""``metric.plot()`` on every metric family, as torchmetrics users call it: the drawn bars and lines carry the
values ``compute()`` returned."""

from __future__ import annotations

import math

import matplotlib
import pytest

from beyondlabels.families import FAMILIES as REGISTRY
from beyondlabels.metrics import EmbeddingRetrieval, RetrievalWithMismatch
from beyondlabels.metrics.retrieval import example_embeddings

matplotlib.use("Agg")

# Every family's metric of the registry (its own example()), and the retrieval family's variant with the mismatch
# analysis: a family registered in beyondlabels.families is drawn here from then on.
METRICS = {family.name: family.load("metric") for family in REGISTRY} | {
    "retrieval_with_mismatch": RetrievalWithMismatch
}


def _fed(name: str):
    metric = METRICS[name].example()
    assert isinstance(metric, METRICS[name]), "example() returns an updated instance of the metric"
    return metric


FAMILIES = sorted(METRICS)


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
    emb, labels = example_embeddings(seed=3)
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
