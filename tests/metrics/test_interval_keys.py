"""The confidence interval of a key is the bootstrap of its per-query vector, so that vector must average (NaN left
out) exactly to the key's scalar, in every family."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from beyondlabels.families import FAMILIES
from beyondlabels.metrics import (
    CrossModalRetrieval,
    EmbeddingRetrieval,
    HierarchicalPrecisionRecall,
    ZeroShotClassification,
)
from beyondlabels.metrics.intervals import confidence_interval_keys
from beyondlabels.taxonomy import Taxonomy


def _retrieval():
    g = torch.Generator().manual_seed(0)
    m = EmbeddingRetrieval(ks=(1, 3), max_queries=30)
    m.update(torch.randn(40, 6, generator=g), torch.randint(0, 4, (40,), generator=g), torch.arange(40))
    return m


def _hierarchy():
    tax = Taxonomy({"b": "a", "c": "a", "d": "b", "e": "b", "f": "c"}, root="a")
    g = torch.Generator().manual_seed(1)
    m = HierarchicalPrecisionRecall(tax)
    m.update(torch.randint(0, 6, (30,), generator=g), torch.randint(1, 6, (30,), generator=g), torch.arange(30))
    return m


def _zeroshot():
    g = torch.Generator().manual_seed(2)
    m = ZeroShotClassification(num_classes=5, ks=(1, 3))
    m.update(torch.randn(30, 5, generator=g), torch.randint(0, 5, (30,), generator=g), torch.arange(30))
    return m


def _crossmodal():
    g = torch.Generator().manual_seed(3)
    m = CrossModalRetrieval(ks=(1, 3))
    m.update(
        torch.randn(12, 6, generator=g),
        torch.arange(12),
        torch.randn(24, 6, generator=g),
        torch.arange(24) // 2,
        torch.arange(24),
    )
    return m


def _registered(name: str):
    """The family's own example (``example()`` of its metric): every family of the registry is checked here."""
    return lambda: next(f for f in FAMILIES if f.name == name).load("metric").example()


@pytest.mark.parametrize("family", [f.name for f in FAMILIES])
def test_every_registered_family_s_interval_keys_are_means_of_their_per_query_vectors(family):
    metric = _registered(family)()
    if not confidence_interval_keys(metric.output_schema()):
        pytest.skip(f"{family}: no headline key has per-query values (no bootstrap interval to check)")
    test_every_interval_key_is_the_mean_of_its_per_query_vector(lambda: metric)


@pytest.mark.parametrize("build", [_retrieval, _hierarchy, _zeroshot, _crossmodal])
def test_every_interval_key_is_the_mean_of_its_per_query_vector(build):
    metric = build()
    out = metric.compute()
    keys = confidence_interval_keys(metric.output_schema())
    assert keys, "the family has headline keys with per-query values"
    for key in keys:
        values = out["per_query"][key].double().numpy()
        assert float(out[key]) == pytest.approx(float(np.nanmean(values)), rel=1e-12, abs=1e-12), key
