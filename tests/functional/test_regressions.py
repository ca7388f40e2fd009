"""Negative flips, per-class regressions and forgetting events against plain-Python readings of their definitions,
scipy's exact binomial test and statsmodels' Benjamini–Hochberg; the false discovery rate and power of the per-class
regressions in simulations where the regressed classes are known."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import binomtest
from statsmodels.stats.multitest import multipletests

from beyondlabels.functional.regressions import class_regressions, forgetting_events, negative_flips
from tests.oracles.selection_sims import paired_class_hits


def test_negative_flips_against_a_loop():
    rng = np.random.default_rng(0)
    reference, current = rng.uniform(0, 1, 300), rng.uniform(0, 1, 300)
    reference[::17] = np.nan
    out = negative_flips(torch.tensor(reference), torch.tensor(current), threshold=0.6)
    pairs = [(r >= 0.6, c >= 0.6) for r, c in zip(reference, current) if not math.isnan(r)]
    negative = sum(1 for r, c in pairs if r and not c)
    positive = sum(1 for r, c in pairs if c and not r)
    assert out["n"] == len(pairs)
    assert out["negative_flip_rate"] == pytest.approx(negative / len(pairs), abs=1e-15)
    assert out["positive_flip_rate"] == pytest.approx(positive / len(pairs), abs=1e-15)
    assert out["reference_accuracy"] - out["current_accuracy"] == pytest.approx(
        out["negative_flip_rate"] - out["positive_flip_rate"], abs=1e-12
    )  # accuracy changes by positive minus negative flips
    assert not out["negative"][::17].any()  # a query missing at the reference is no flip


def test_negative_flips_of_bools_and_bad_input():
    out = negative_flips(torch.tensor([True, True, False]), torch.tensor([False, True, True]))
    assert out["negative"].tolist() == [True, False, False] and out["positive"].tolist() == [False, False, True]
    with pytest.raises(ValueError, match="the same queries in the same order"):
        negative_flips(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="`threshold` must be a finite number"):
        negative_flips(torch.ones(3), torch.ones(3), threshold=float("nan"))


def test_class_regressions_against_scipy_and_statsmodels():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 9, 600) * 7 + 3  # sparse labels
    reference = rng.uniform(0, 1, 600).round(1)
    current = np.clip(reference - rng.normal(0.02 * (labels % 3), 0.1), 0, 1).round(1)
    current[::50] = np.nan
    out = class_regressions(torch.tensor(reference), torch.tensor(current), torch.tensor(labels), fdr=0.1)
    classes = np.unique(labels)
    assert out["label"].tolist() == classes.tolist()
    expected = []
    for c in classes:
        keep = (labels == c) & ~np.isnan(current)
        d = current[keep] - reference[keep]
        down, up = int((d < 0).sum()), int((d > 0).sum())
        assert (int(out["down"][len(expected)]), int(out["up"][len(expected)])) == (down, up)
        expected.append(binomtest(down, down + up, 0.5, alternative="greater").pvalue if down + up else 1.0)
    np.testing.assert_allclose(out["pvalue"].numpy(), expected, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(out["adjusted"].numpy(), multipletests(expected, method="fdr_bh")[1], atol=1e-12)
    assert out["regressed"].tolist() == (multipletests(expected, alpha=0.1, method="fdr_bh")[0]).tolist()


def test_per_class_regressions_keep_the_fdr_with_power():
    """40 classes of 200 queries (accuracy 0.7..0.95), 8 of them 10 points worse at the current checkpoint (about 12%
    of the queries change between the two otherwise), 100 runs: false discovery rate at most 0.1, power at least 80%."""
    rng = np.random.default_rng(2)
    classes, regressed, fdp, power = 40, 8, [], []
    for _ in range(100):
        drop = np.where(np.arange(classes) < regressed, 0.10, 0.0)
        reference, current, labels = paired_class_hits(rng, rng.uniform(0.7, 0.95, classes), drop, 200)
        out = class_regressions(torch.tensor(reference), torch.tensor(current), torch.tensor(labels), fdr=0.1)
        called, truth = out["regressed"].numpy(), out["label"].numpy() < regressed
        fdp.append((called & ~truth).sum() / max(called.sum(), 1))
        power.append((called & truth).sum() / regressed)
    assert np.mean(fdp) <= 0.1
    assert np.mean(power) >= 0.8


def test_class_regressions_refuse_bad_input():
    with pytest.raises(ValueError, match="`labels` must be integer class labels"):
        class_regressions(torch.ones(3), torch.ones(3), torch.ones(3))
    with pytest.raises(ValueError, match="one entry per query"):
        class_regressions(torch.ones(3), torch.ones(3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="`fdr` must be a number in \\(0, 1\\)"):
        class_regressions(torch.ones(3), torch.ones(3), torch.zeros(3, dtype=torch.long), fdr=0)


def test_forgetting_events_against_a_loop():
    rng = np.random.default_rng(3)
    values = rng.choice([0.0, 1.0, np.nan], p=[0.3, 0.6, 0.1], size=(12, 50))
    out = forgetting_events(torch.tensor(values))
    for q in range(50):
        seen = [v for v in values[:, q] if not math.isnan(v)]
        events = sum(1 for a, b in zip(seen, seen[1:]) if a == 1.0 and b == 0.0)  # consecutive values of the query
        right = [t for t in range(12) if values[t, q] == 1.0]
        assert int(out["events"][q]) == events
        assert bool(out["learned"][q]) == bool(right)
        assert int(out["first_learned"][q]) == (right[0] if right else -1)
        assert bool(out["unforgettable"][q]) == (bool(right) and events == 0)
    with pytest.raises(ValueError, match="\\[evaluations, queries\\]"):
        forgetting_events(torch.ones(3))
