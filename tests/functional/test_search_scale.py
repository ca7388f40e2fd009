"""Cosine similarity is scale free, and so is the search's normalisation: rows of huge (1e20 and more in fp32, 1e300
in fp64) or tiny (1e-30, subnormal) magnitude are normalised as their direction says, retrieval gives the numbers
of the same embeddings at unit scale, only rows that are exactly zero are refused, and rows whose fp32 norm neither
overflows nor underflows are normalised bit for bit as before (x / ||x||)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from beyondlabels.functional import embedding_retrieval_metrics, normalize_rows


def _unit_rows_float64(x: np.ndarray) -> np.ndarray:
    """Independent reference: numpy in float64 after dividing each row by its largest magnitude."""
    x = x.astype(np.float64)
    x = x / np.abs(x).max(axis=1, keepdims=True)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("scale", [1e20, 1e30, 1e38, 1e-20, 1e-30, 1e-38, 1e-42])
def test_rows_of_extreme_magnitude_are_normalised_by_direction(scale):
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(64, 16, generator=gen).clamp(-3.0, 3.0)
    x = (base.double() * scale).float()
    assert torch.isfinite(x).all() and (x.abs().amax(dim=1) > 0).all()
    got = normalize_rows(x)
    reference = torch.from_numpy(_unit_rows_float64(x.numpy())).float()
    rtol = 1e-5 if scale > 1e-37 else 2e-2  # subnormal inputs carry only a few bits themselves
    assert torch.allclose(got, reference, rtol=rtol, atol=rtol * 1e-2)
    assert torch.allclose(torch.linalg.vector_norm(got, dim=1), torch.ones(64), atol=1e-5)


def test_float64_rows_beyond_the_float32_range_are_normalised():
    x = torch.tensor([[3e300, 4e300], [3e-310, -4e-310]], dtype=torch.float64)
    assert torch.allclose(normalize_rows(x), torch.tensor([[0.6, 0.8], [0.6, -0.8]]), atol=1e-6)


def test_only_rows_that_are_exactly_zero_are_refused():
    with pytest.raises(ValueError, match=r"all-zero rows \(rows \[1\]"):
        normalize_rows(torch.tensor([[1e-30, 0.0], [0.0, 0.0], [1e20, 1e20]]))
    with pytest.raises(ValueError, match=r"NaN or Inf"):
        normalize_rows(torch.tensor([[1.0, float("inf")]]))


def test_ordinary_rows_are_normalised_bit_for_bit_as_before():
    gen = torch.Generator().manual_seed(1)
    for scale in (1e-10, 1e-3, 1.0, 7.5, 1e4, 1e15):
        x = torch.randn(500, 33, generator=gen) * scale
        assert torch.equal(normalize_rows(x), x / torch.linalg.vector_norm(x, dim=1, keepdim=True))
    half = torch.randn(100, 8, generator=gen).half()
    x32 = half.float()
    assert torch.equal(normalize_rows(half), x32 / torch.linalg.vector_norm(x32, dim=1, keepdim=True))


@pytest.mark.parametrize("scale", [1e20, 1e-30])
def test_retrieval_at_extreme_scale_gives_the_unit_scale_numbers(scale):
    gen = torch.Generator().manual_seed(2)
    labels = torch.arange(300) % 6
    centres = torch.randn(6, 12, generator=gen)
    x = centres[labels] + 1.2 * torch.randn(300, 12, generator=gen)
    unit = embedding_retrieval_metrics(x, labels, ks=(1, 5))
    scaled = embedding_retrieval_metrics((x.double() * scale).float(), labels, ks=(1, 5))
    for key in ("precision@1", "precision@5", "map@r", "r_precision"):
        assert float(scaled[key]) == pytest.approx(float(unit[key]), abs=2 / 300), key
