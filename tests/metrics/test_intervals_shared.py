"""Bootstrap rounds shared between processes (metrics/intervals.py, _internal/stats.py): the shares of W processes
give the one-process intervals bit for bit; the intervals equal a numpy percentile bootstrap written apart from the
library with the documented draws (tests/oracles/bootstrap.py); a failure on one rank raises on every rank; ranks
holding different values each bootstrap their own."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import beyondlabels._internal.stats as st
from beyondlabels._internal.stats import resampled_means
from beyondlabels.metrics.intervals import confidence_intervals
from tests.ddp import gloo_store, init_gloo
from tests.oracles.bootstrap import numpy_percentile_bootstrap

ROUNDS = 730  # 15 blocks of 50 rounds, the last one of 30: shares of unequal length at W = 2 and 4
KEYS = ["a", "b", "c", "flat", "absent"]


def _per_query(seed: int = 5) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    a = torch.tensor(rng.exponential(0.3, size=90))
    c = torch.tensor(rng.binomial(1, 0.4, size=90).astype(float))
    c[::7] = float("nan")  # another set of queries: its own group of resamples
    return {"a": a, "b": torch.tensor(rng.uniform(size=90)), "c": c, "flat": torch.full((90,), 0.25)}


def test_shares_concatenated_in_rank_order_are_the_whole_rounds():
    values = torch.tensor(np.random.default_rng(1).uniform(size=(40, 3)))
    whole = resampled_means(values, ROUNDS, seed=3)
    assert whole.shape == (ROUNDS, 3)
    for world in (2, 3, 4, 16, 20):  # 20 ranks for 15 blocks: some shares are empty
        parts = [resampled_means(values, ROUNDS, seed=3, share=(rank, world)) for rank in range(world)]
        assert torch.equal(torch.cat(parts), whole), world
    assert not torch.equal(resampled_means(values, ROUNDS, seed=4), whole)


def test_intervals_equal_a_numpy_bootstrap_of_the_documented_draws(monkeypatch):
    per_query = _per_query()
    whole = confidence_intervals(per_query, KEYS, rounds=ROUNDS, seed=-2)
    monkeypatch.setattr(st, "CHUNK_VALUES", 7 * 90)  # blocks drawn in chunks of 7 rounds: the same numbers
    assert confidence_intervals(per_query, KEYS, rounds=ROUNDS, seed=-2) == whole
    for key in ("a", "b", "c"):
        ref = numpy_percentile_bootstrap(per_query[key].numpy(), rounds=ROUNDS, seed=-2)
        assert (whole[f"{key}_ci_low"], whole[f"{key}_ci_high"]) == pytest.approx(ref, abs=1e-12), key
        assert whole[f"{key}_ci_low"] < whole[f"{key}_ci_high"], key
    assert whole["flat_ci_low"] == whole["flat_ci_high"] == 0.25 and "absent_ci_low" not in whole


def _worker(rank: int, world: int, store: str, out_path: str) -> None:
    init_gloo(rank, world, store)
    try:
        out: dict[str, object] = {}
        out["shared"] = confidence_intervals(_per_query(), KEYS, rounds=ROUNDS, seed=-2, distributed=True)
        own = _per_query(seed=10 + rank)  # different values on every rank (a metric that was not synced)
        out["own"] = confidence_intervals(own, KEYS, rounds=ROUNDS, seed=-2, distributed=True)
        bad = _per_query()
        if rank == world - 1:
            bad["b"] = torch.zeros(3, 2)  # fails on the last rank only
        try:
            confidence_intervals(bad, KEYS, rounds=ROUNDS, seed=-2, distributed=True)
        except (ValueError, RuntimeError) as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
        torch.save(out, f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_sharing_the_rounds_give_the_one_process_intervals_bit_for_bit(tmp_path, world):
    reference = confidence_intervals(_per_query(), KEYS, rounds=ROUNDS, seed=-2)
    out_path = str(tmp_path / "out")
    # forked, not spawned: the workers need nothing the test process has not imported (four fresh interpreters cost
    # about 30 s of imports on 2 loaded cores); each runs one thread (init_gloo)
    mp.start_processes(
        _worker, args=(world, gloo_store(tmp_path), out_path), nprocs=world, join=True, start_method="fork"
    )
    for rank in range(world):
        got = torch.load(f"{out_path}.{rank}")
        assert got["shared"] == reference, rank  # floats compared with ==: bit for bit
        assert got["own"] == confidence_intervals(_per_query(seed=10 + rank), KEYS, rounds=ROUNDS, seed=-2), rank
        if rank == world - 1:
            assert got["error"].startswith("ValueError: `b` must be a 1-D vector"), got["error"]
        else:
            assert got["error"].startswith(f"RuntimeError: confidence intervals failed on rank {world - 1}"), got
