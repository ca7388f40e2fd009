"""The statistics of a sweep's groups against scipy (t intervals, the exact permutation test) and numpy written from
the definitions (pairing by query id, averaging over seeds, the percentile bootstrap oracle)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from beyondlabels.functional.sweeps import (
    MIN_BOOTSTRAP_SEEDS,
    paired_group_difference,
    pooled_query_interval,
    seed_summary,
)
from tests.oracles.bootstrap import numpy_percentile_bootstrap


@pytest.mark.parametrize("values", [[0.61, 0.64, 0.58], [0.2, 0.25, 0.31, 0.22, 0.27, 0.3], [0.5, np.nan, 0.7, 0.65]])
def test_seed_summary_matches_scipy(values):
    v = np.asarray(values)
    v = v[~np.isnan(v)]
    s = seed_summary(values, rounds=1000, seed=3)
    low, high = scipy.stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=scipy.stats.sem(v))
    assert (s.mean, s.sd, s.n) == (
        pytest.approx(v.mean(), abs=1e-15),
        pytest.approx(np.std(v, ddof=1), rel=1e-12),
        len(v),
    )
    assert (s.t.low, s.t.high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))
    if len(v) >= MIN_BOOTSTRAP_SEEDS:
        assert (s.bootstrap.low, s.bootstrap.high) == pytest.approx(numpy_percentile_bootstrap(v, 1000, 3), abs=1e-12)
    else:
        assert s.bootstrap is None


def test_one_seed_has_no_interval():
    s = seed_summary([0.4])
    assert s.mean == 0.4 and s.n == 1 and np.isnan(s.sd) and np.isnan(s.t.low) and np.isnan(s.t.high)


def test_pooled_interval_is_the_bootstrap_over_every_jobs_queries():
    rng = np.random.default_rng(1)
    jobs = [rng.uniform(0, 1, 30), np.r_[rng.uniform(0, 1, 25), np.nan], rng.uniform(0, 1, 28)]
    ci = pooled_query_interval(jobs, rounds=800, seed=5)
    pooled = np.concatenate(jobs)
    assert ci.estimate == pytest.approx(np.nanmean(pooled), abs=1e-15) and ci.n == 83
    assert (ci.low, ci.high) == pytest.approx(numpy_percentile_bootstrap(pooled, 800, 5), abs=1e-12)


def _group(rng, seeds, n, shift, order_seed):
    out = {}
    for s in seeds:
        ids = np.arange(500, 500 + n)
        values = rng.uniform(0, 1, n) + shift
        order = np.random.default_rng(order_seed + s).permutation(n)  # files list queries in any order
        out[f"seed={s}"] = (ids[order], values[order])
    return out


def test_group_difference_pairs_by_query_within_each_seed():
    rng = np.random.default_rng(2)
    base = _group(rng, [1, 2, 3], 10, 0.0, 10)
    other = _group(rng, [2, 3, 4], 10, 0.1, 20)  # seed 4 has no partner, seed 1 neither
    other["seed=2"][1][np.argsort(other["seed=2"][0])[3]] = np.nan  # query 503 has no value in seed 2
    r = paired_group_difference(base, other, permutations=9999, rounds=700, seed=4)
    # the oracle: sort each side by id, subtract within the seed, average each query over the seeds that have it
    by_id = {}
    per_seed = []
    for s in ("seed=2", "seed=3"):
        (ia, va), (ib, vb) = base[s], other[s]
        d = vb[np.argsort(ib)] - va[np.argsort(ia)]
        per_seed.append(np.nanmean(d))
        for q, value in zip(np.sort(ia), d):
            by_id.setdefault(q, []).append(value)
    d_q = np.array([np.nanmean(v) for v in by_id.values()])
    assert r.seeds == ["seed=2", "seed=3"] and r.per_seed == pytest.approx(per_seed, abs=1e-15)
    assert r.n_queries == 10 and r.difference == pytest.approx(d_q.mean(), abs=1e-15)
    assert r.effect_size == pytest.approx(d_q.mean() / np.std(d_q, ddof=1), rel=1e-12)
    low, high = scipy.stats.t.interval(0.95, 1, loc=np.mean(per_seed), scale=scipy.stats.sem(per_seed))
    assert (r.seed_t.low, r.seed_t.high) == pytest.approx((low, high), rel=1e-9)
    assert (r.per_query.low, r.per_query.high) == pytest.approx(numpy_percentile_bootstrap(d_q, 700, 4), abs=1e-12)
    exact = scipy.stats.permutation_test((d_q,), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert r.query_pvalue == pytest.approx(exact, rel=1e-12)  # 10 queries: all 1,024 sign assignments
    seed_p = scipy.stats.ttest_1samp(per_seed, 0.0).pvalue
    assert r.seed_pvalue == pytest.approx(seed_p, rel=1e-9)
    assert r.pvalue == max(r.query_pvalue, r.seed_pvalue)  # the decision needs both tests to reject


def test_group_difference_with_one_shared_seed_tests_over_queries_only():
    rng = np.random.default_rng(7)
    base, other = _group(rng, [1], 10, 0.0, 20), _group(rng, [1], 10, 0.1, 20)
    r = paired_group_difference(base, other, permutations=9999, rounds=200, seed=4)
    assert math.isnan(r.seed_pvalue) and r.pvalue == r.query_pvalue and "one shared seed" in r.method


def test_a_setting_against_itself_is_rarely_called_different_whatever_the_seed_effect():
    """The same setting twice: 3 seeds, each seed's model a little better or worse on every query (sd 0.01), 1000
    queries with per-query noise. A query-level test alone rejects in most sweeps (the seeds' models do differ on
    these queries); the decision, which also needs the seed-level test, rejects at about its level."""
    rng = np.random.default_rng(5)
    ids = np.arange(1000)
    rejected_by_queries = rejected = 0
    sweeps = 60
    for _ in range(sweeps):
        difficulty = rng.uniform(0.2, 0.8, ids.size)
        groups = [
            {f"seed={s}": (ids, difficulty + rng.normal(0, 0.01) + rng.normal(0, 0.05, ids.size)) for s in (1, 2, 3)}
            for _ in range(2)
        ]
        r = paired_group_difference(*groups, permutations=999, rounds=50, seed=1)
        rejected_by_queries += r.query_pvalue < 0.05
        rejected += r.pvalue < 0.05
    assert rejected_by_queries / sweeps > 0.5
    assert rejected <= scipy.stats.binom.ppf(0.999, sweeps, 0.05)


def test_group_difference_refuses_groups_without_a_shared_seed_or_query():
    rng = np.random.default_rng(3)
    with pytest.raises(ValueError, match="share no seed"):
        paired_group_difference(_group(rng, [1], 5, 0, 1), _group(rng, [2], 5, 0, 2))
    base = _group(rng, [1], 5, 0, 1)
    other = {"seed=1": (base["seed=1"][0] + 100, base["seed=1"][1])}
    with pytest.raises(ValueError, match="intersect=True"):
        paired_group_difference(base, other)
