"""The model confidence set against ``arch.bootstrap.MCS`` (the same bootstrap draws: the same p-values; independent
draws: within 0.06), its coverage where the best checkpoint is known, the selection-corrected estimate against the
winner's curse, its tie and chunk rules, and its argument checks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import beyondlabels.functional.selection as selection
from beyondlabels.functional.selection import best_checkpoint_estimate, model_confidence_set, resampled_means
from tests.oracles.selection_sims import correlated_hits

arch = pytest.importorskip("arch.bootstrap")

SIZE = 0.1


def _losses(kind: str, rng: np.random.Generator, queries: int, models: int) -> np.ndarray:
    """Shared losses of three kinds: normal with a common query effect, graded values in [0, 1], and 0/1 misses."""
    if kind == "normal":
        return rng.normal(rng.normal(0, 0.06, models), 1, (queries, models)) + rng.normal(0, 1, (queries, 1))
    if kind == "graded":
        base = rng.uniform(0, 1, (queries, 1))
        return np.clip(base + rng.normal(rng.uniform(0, 0.05, models), 0.2, (queries, models)), 0, 1)
    return 1.0 - correlated_hits(rng, 0.7 + rng.uniform(0, 0.04, models), queries)


def _arch(losses: np.ndarray, method: str, reps: int, seed: int):
    """arch's MCS (iid bootstrap: block_size=1) as ``(p-values by column, its bootstrap indices)``; None where arch 8.0
    fails on a tied elimination: it raises (a zero variance makes its statistic NaN), or its R method stores an array
    of tied models as one model index."""
    mcs = arch.MCS(losses, size=SIZE, reps=reps, block_size=1, method=method, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # arch warns of a zero sd on degenerate draws
        try:
            mcs.compute()
        except (IndexError, ValueError):
            return None
    index = list(mcs.pvalues.index)
    if any(np.ndim(i) != 0 for i in index):
        return None
    pvalues = np.empty(losses.shape[1])
    pvalues[np.asarray(index, dtype=int)] = mcs.pvalues["Pvalue"].to_numpy()
    return pvalues, np.stack(mcs._bootstrap_indices)


DRAWS = [(kind, seed) for kind in ("normal", "graded", "hits") for seed in range(6)]


@pytest.mark.parametrize("method", ["R", "max"])
def test_the_same_draws_give_arch_s_set_and_p_values(method):
    """arch's own bootstrap indices replayed: continuous losses give arch's p-values to rounding and its set; 0/1
    losses differ only where a resampled statistic ties the observed one exactly (counted here as reaching it, left to
    rounding by arch), by at most 0.06, with the same set."""
    compared, skipped = 0, 0
    for kind, seed in DRAWS:
        rng = np.random.default_rng(100 * seed + len(kind))
        queries, models = int(rng.integers(200, 1500)), int(rng.integers(2, 13))
        losses = _losses(kind, rng, queries, models)
        reference = _arch(losses, method, reps=300, seed=seed)
        if reference is None:
            skipped += 1
            continue
        expected, index = reference
        got = model_confidence_set(torch.tensor(losses), size=SIZE, statistic=method, resamples=torch.tensor(index))
        tolerance = 1e-12 if kind != "hits" else 0.06
        np.testing.assert_allclose(got["pvalues"].numpy(), expected, rtol=0, atol=tolerance, err_msg=f"{kind} {seed}")
        assert got["included"].numpy().tolist() == (expected > SIZE).tolist(), (kind, seed)
        compared += 1
    assert compared >= len(DRAWS) - 2 and skipped <= 2, (compared, skipped)


@pytest.mark.parametrize("method", ["R", "max"])
def test_independent_draws_agree_with_arch_within_0_06(method):
    """Our generator against arch's, 4,000 resamples each: every p-value within 0.06 of arch's, the same set except
    for checkpoints whose arch p-value lies within 0.03 of the size (where resampling noise decides; counted)."""
    borderline, compared = 0, 0
    for kind, seed in DRAWS[::2]:
        rng = np.random.default_rng(7 + 100 * seed + len(kind))
        losses = _losses(kind, rng, int(rng.integers(300, 2000)), int(rng.integers(2, 10)))
        reference = _arch(losses, method, reps=4000, seed=seed)
        if reference is None:
            continue
        expected = reference[0]
        got = model_confidence_set(torch.tensor(losses), size=SIZE, statistic=method, rounds=4000, seed=seed)
        np.testing.assert_allclose(got["pvalues"].numpy(), expected, rtol=0, atol=0.06, err_msg=f"{kind} {seed}")
        clear = np.abs(expected - SIZE) > 0.03
        assert (got["included"].numpy() == (expected > SIZE))[clear].all(), (kind, seed)
        borderline += int((~clear).sum())
        compared += 1
    assert compared >= 7 and borderline <= 3


def test_arch_draws_that_tie_are_skipped_and_counted():
    """Two identical checkpoints and a third worse by a constant: arch 8.0 fails (zero variances make its statistic
    NaN) and the helper skips the draw; here the constant shift is eliminated for sure and the identical ones stay
    together (they are equally good)."""
    rng = np.random.default_rng(3)
    column = rng.normal(0, 1, (300, 1))
    losses = np.hstack([column, column, column + 0.5])
    assert _arch(losses, "R", reps=200, seed=0) is None
    out = model_confidence_set(torch.tensor(losses), size=SIZE, statistic="R", rounds=200, seed=0)
    assert out["included"].tolist() == [True, True, False]  # a constant shift has zero variance: eliminated for sure
    assert out["order"].tolist() == [2, 0, 1]  # ties: the lowest index of the rows holding the maximum goes first


def test_tie_rules():
    """T_max removes every checkpoint tied at the maximum at once; T_R the lowest index among tied rows; columns that
    are equal everywhere stay together (MCS p-value 1)."""
    base = torch.tensor([[0.0], [1.0], [0.0], [1.0], [1.0], [0.0]], dtype=torch.float64)
    losses = torch.cat([base, base + 1.0, base + 1.0, base], dim=1)  # 1 and 2 identical and worse, 0 and 3 identical
    for statistic in ("R", "max"):
        out = model_confidence_set(losses, statistic=statistic, rounds=100, seed=0)
        assert out["included"].tolist() == [True, False, False, True], statistic
        assert out["pvalues"][[0, 3]].tolist() == [1.0, 1.0]
    assert model_confidence_set(losses, statistic="R", rounds=100)["order"].tolist() == [1, 2, 0, 3]


def test_the_numbers_do_not_depend_on_the_chunk(monkeypatch):
    g = torch.Generator().manual_seed(0)
    losses = torch.rand(120, 6, generator=g, dtype=torch.float64)
    whole = {s: model_confidence_set(losses, statistic=s, rounds=250, seed=4)["pvalues"] for s in ("R", "max")}
    best = best_checkpoint_estimate(-losses, rounds=250, seed=4)
    monkeypatch.setattr(selection, "CHUNK_VALUES", 500)  # a few resamples per chunk
    for s in ("R", "max"):
        assert torch.equal(model_confidence_set(losses, statistic=s, rounds=250, seed=4)["pvalues"], whole[s])
    assert best_checkpoint_estimate(-losses, rounds=250, seed=4) == best


def test_resampled_means_against_a_loop():
    g = torch.Generator().manual_seed(2)
    values = torch.rand(40, 3, generator=g, dtype=torch.float64)
    index = torch.randint(40, (5, 40), generator=g)
    expected = torch.stack([values[row].mean(0) for row in index])
    assert torch.allclose(resampled_means(values, resamples=index), expected, rtol=0, atol=1e-15)


# ---- simulations where the best is known (the design: tests/oracles/selection_sims.py, docs/selection.md) ---------


@pytest.mark.parametrize("statistic", ["R", "max"])
def test_the_90_percent_set_holds_the_best_checkpoint(statistic):
    """One best checkpoint (P@1 0.88), a close second (0.877) and six at 0.85, 2,000 queries, 100 runs: the 90% set
    holds the best in at least 88% of them while leaving out the clearly worse ones."""
    rng = np.random.default_rng(11)
    mu = np.r_[0.88, 0.877, np.full(6, 0.85)]
    held, sizes = 0, []
    for run in range(100):
        hits = torch.tensor(correlated_hits(rng, mu, 2000))
        out = model_confidence_set(-hits, size=SIZE, statistic=statistic, rounds=300, seed=run)
        held += bool(out["included"][0])
        sizes.append(int(out["included"].sum()))
    assert held >= 88
    assert np.mean(sizes) < 6  # an informative set: the checkpoints at 0.85 are mostly out


def test_the_corrected_estimate_removes_the_winner_s_curse():
    """30 near-equal checkpoints (P@1 0.875..0.885) on 1,000 queries, 60 runs: the naive maximum is biased upward by
    about 0.015; the out-of-bag estimate removes at least 75% of that bias, and its 95% interval covers the chosen
    checkpoint's expected value in at least 88% of the runs."""
    rng = np.random.default_rng(5)
    mu = 0.88 + np.linspace(-0.005, 0.005, 30)
    naive, corrected, covered = [], [], 0
    for run in range(60):
        out = best_checkpoint_estimate(torch.tensor(correlated_hits(rng, mu, 1000)), rounds=300, seed=run)
        truth = mu[out["selected"]]
        naive.append(out["naive"] - truth)
        corrected.append(out["estimate"] - truth)
        covered += out["ci_low"] <= truth <= out["ci_high"]
    bias = np.mean(naive)
    assert bias > 0.008
    assert abs(np.mean(corrected)) <= 0.25 * bias
    assert covered >= 53


def test_best_checkpoint_estimate_against_a_loop():
    """The out-of-bag estimate and the shifted percentile interval from their definitions, resample by resample."""
    g = torch.Generator().manual_seed(9)
    values = (torch.rand(50, 4, generator=g) < 0.6).double()
    index = torch.randint(50, (200, 50), generator=g)
    out = best_checkpoint_estimate(values, resamples=index, confidence=0.9)
    oob, chosen = [], []
    selected = int(values.mean(0).argmax())
    for row in index:
        means = values[row].mean(0)
        left = torch.ones(50, dtype=torch.bool)
        left[row] = False
        chosen.append(float(means[selected]))
        if left.any():
            oob.append(float(values[left, int(means.argmax())].mean()))
    shift = np.mean(oob) - float(values[:, selected].mean())
    low, high = np.quantile(chosen, [0.05, 0.95])
    assert out["selected"] == selected and out["rounds"] == len(oob)
    assert out["estimate"] == pytest.approx(np.mean(oob), abs=1e-12)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((low + shift, high + shift), abs=1e-12)


# ---- argument checks ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"losses": torch.zeros(5)}, "`losses` must be a \\[queries, checkpoints\\] table"),
        ({"losses": torch.zeros(5, 1)}, "at least 2 queries and 2 checkpoint"),
        ({"losses": torch.tensor([[0.0, float("nan")], [1.0, 0.0]])}, "`losses` must be finite"),
        ({"size": 1.0}, "`size` must be a number in \\(0, 1\\)"),
        ({"statistic": "T"}, "`statistic` must be one of \\['R', 'max'\\]"),
        ({"rounds": 0}, "`rounds` must be a positive int"),
        (
            {"resamples": torch.zeros(3, 2, dtype=torch.long)},
            "`resamples` must be integer indices \\[rounds, queries=4",
        ),
        ({"resamples": torch.full((3, 4), 9)}, "`resamples` must index the queries"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    arguments = {"losses": torch.rand(4, 3, dtype=torch.float64), **kwargs}
    with pytest.raises(ValueError, match=match):
        model_confidence_set(**arguments)


def test_best_checkpoint_estimate_refuses_bad_tables():
    with pytest.raises(ValueError, match="`values` must be finite"):
        best_checkpoint_estimate(torch.tensor([[1.0], [float("inf")]]))
    with pytest.raises(ValueError, match="`confidence` must be"):
        best_checkpoint_estimate(torch.rand(4, 2), confidence=1.5)
