"""RetrievalEvalCallback(metric=...): the callback evaluates a copy of the given metric, with the same numbers as
the same options given to the callback (checked against each other and against the metric fed directly), and a
metric option given twice is an error naming it."""

from __future__ import annotations

import pytest
import torch

from beyondlabels.callbacks import RetrievalEvalCallback
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.metrics import EmbeddingRetrieval, RetrievalWithMismatch
from beyondlabels.metrics.retrieval import example_embeddings

GAINS = ClassGains([[1.0, 0.6, 0.1], [0.6, 1.0, 0.3], [0.1, 0.3, 1.0]], [0, 1, 2], name="profile")


def _computed(callback) -> dict:
    metric = callback.metric
    metric.reset()
    embeddings, labels = example_embeddings()
    metric.update(embeddings, labels, torch.arange(labels.numel()))
    return metric.compute()


def _scalars(out: dict) -> dict:
    return {k: float(v) for k, v in out.items() if isinstance(v, torch.Tensor) and v.numel() == 1}


@pytest.mark.parametrize(
    "metric, options",
    [
        (
            EmbeddingRetrieval(ks=(1, 3), chunk_size=8, deep_metrics=False),
            {"ks": (1, 3), "chunk_size": 8, "deep_metrics": False},
        ),
        (
            RetrievalWithMismatch(GAINS, ks=(1,), num_trials=50, seed=3, projection_points=0),
            {"ks": (1,), "profiles": GAINS, "mismatch_trials": 50, "mismatch_seed": 3, "projection_points": 0},
        ),
    ],
)
def test_a_given_metric_evaluates_as_its_options_do(metric, options):
    given = RetrievalEvalCallback(metric=metric)
    built = RetrievalEvalCallback(**options)
    assert type(given.metric) is type(built.metric) is type(metric) and given.metric is not metric
    assert given.ks == built.ks and given.schema.scalar_keys() == built.schema.scalar_keys()
    ours, theirs = _scalars(_computed(given)), _scalars(_computed(built))
    direct = metric.clone()
    embeddings, labels = example_embeddings()
    direct.update(embeddings, labels, torch.arange(labels.numel()))
    reference = _scalars(direct.compute())
    for key in reference:
        assert ours[key] == pytest.approx(theirs[key], nan_ok=True) == pytest.approx(reference[key], nan_ok=True), key
    assert metric.update_count == 0, "the given metric is left as it was (the callback feeds its own copy)"


def test_the_mismatch_table_gets_its_neighbours_from_a_given_metric():
    callback = RetrievalEvalCallback(metric=EmbeddingRetrieval(ks=(1,)), num_mismatches=4)
    assert "neighbors" in _computed(callback)
    assert "neighbors" not in _computed(RetrievalEvalCallback(metric=EmbeddingRetrieval(ks=(1,)), num_mismatches=0))


def test_options_given_twice_and_wrong_metrics_are_clear_errors():
    with pytest.raises(ValueError, match=r"`metric` brings its own options; \['ks', 'chunk_size'\] were given"):
        RetrievalEvalCallback(metric=EmbeddingRetrieval(), ks=(1,), chunk_size=8)
    with pytest.raises(ValueError, match="`metric` must be an EmbeddingRetrieval"):
        RetrievalEvalCallback(metric=torch.nn.Linear(2, 2))
    assert RetrievalEvalCallback(metric=EmbeddingRetrieval(), ks=[1, 5, 10]).ks == (1, 5, 10)  # the defaults are fine
