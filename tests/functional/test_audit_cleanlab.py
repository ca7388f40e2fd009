"""The audit's suspect ranking against cleanlab's label-quality ranking on one small seeded setting: class-clustered
embeddings with 8% of the labels flipped to a random other class; both rank from the same k neighbours (cleanlab
gets the audit's similarity-weighted class shares as pred_probs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from beyondlabels.functional.audit import audit_neighbors, join_neighbors
from beyondlabels.functional.search import search_neighbors

cleanlab = pytest.importorskip("cleanlab")
sklearn_metrics = pytest.importorskip("sklearn.metrics")


def test_average_precision_at_least_cleanlabs() -> None:
    from cleanlab.rank import get_label_quality_scores

    rng = np.random.default_rng(21)
    n_classes, per_class, k = 8, 40, 10
    centres = rng.normal(size=(n_classes, 16))
    truth_labels = np.repeat(np.arange(n_classes), per_class)
    x = (centres[truth_labels] + 0.8 * rng.normal(size=(len(truth_labels), 16))).astype(np.float32)
    flipped = rng.choice(len(x), size=int(0.08 * len(x)), replace=False)
    labels = truth_labels.copy()
    labels[flipped] = (labels[flipped] + rng.integers(1, n_classes, size=len(flipped))) % n_classes
    truth = labels != truth_labels

    nb = join_neighbors(search_neighbors(torch.from_numpy(x), k), len(x))
    audit = audit_neighbors(nb, torch.from_numpy(labels))
    ours = sklearn_metrics.average_precision_score(truth, -audit.label_quality.numpy())

    w = nb.scores.double().clamp(min=0).numpy()
    probs = np.zeros((len(x), n_classes))
    np.add.at(probs, (np.repeat(np.arange(len(x)), k), labels[nb.indices.numpy()].ravel()), w.ravel())
    probs = probs / probs.sum(1, keepdims=True) + 1e-3
    probs /= probs.sum(1, keepdims=True)
    theirs = sklearn_metrics.average_precision_score(truth, -get_label_quality_scores(labels, probs))
    assert ours >= theirs, (ours, theirs)
    assert ours > 0.5  # far above the 0.08 of a random ranking
