"""LabelMismatchAnalysis: numbers against numpy, string labels through FeatureProfiles, forward/split updates,
deduplication, validation, and a two-process gloo run equal to the single-process one."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from scipy import stats as sps

from beyondlabels.demo import demo_profiles  # noqa: E402
from beyondlabels.functional import ClassGains, encode_labels, feature_similarity  # noqa: E402
from beyondlabels.metrics import (
    LabelMismatchAnalysis,  # noqa: E402
    RetrievalWithMismatch,  # noqa: E402
)
from tests.ddp import gloo_store, init_gloo
from tests.gpu.devices import accelerator_device, needs_accelerator
from tests.oracles.outputs import assert_same_outputs

C = 7


def similarity() -> np.ndarray:
    rng = np.random.default_rng(0)
    m = rng.random((C, C))
    m = (m + m.T) / 2
    np.fill_diagonal(m, 1.0)
    return m


def data(n: int = 120, seed: int = 1):
    rng = np.random.default_rng(seed)
    q = rng.integers(0, C, size=n)
    r = np.where(rng.random(n) < 0.5, rng.integers(0, C, size=n), q)
    emb = rng.normal(size=(C, 5))[q] + rng.normal(size=(n, 5))
    return torch.tensor(q), torch.tensor(r), torch.tensor(emb, dtype=torch.float32), torch.arange(n) * 3 + 100


def metric(**kw) -> LabelMismatchAnalysis:
    return LabelMismatchAnalysis(ClassGains(similarity(), list(range(C)), name="s"), num_trials=400, seed=7, **kw)


def test_numbers_match_numpy():
    q, r, _, ids = data()
    m = metric()
    m.update(q, r, ids)
    out = m.compute()
    sim = similarity()
    qn, rn = q.numpy(), r.numpy()
    wrong = qn != rn
    sims = sim[qn[wrong], rn[wrong]]
    pairs = sim[np.triu_indices(C, 1)]
    assert out["num_mismatches"] == wrong.sum()
    assert out["mean_similarity"] == pytest.approx(sims.mean(), abs=1e-12)
    assert out["mean_percentile_rank"] == pytest.approx(
        np.mean([sps.percentileofscore(pairs, s, kind="weak") for s in sims]), abs=1e-10
    )
    assert torch.equal(out["per_query"]["query_id"], ids)
    # the null from its documented rule: per query class (ascending) a [B, mismatches of that class] float64 uniform
    # block from one CPU generator seeded with `seed`, each draw the first class whose cumulative frequency share
    # (own class left out, zero-frequency classes never drawn) exceeds it
    freq = np.bincount(qn, minlength=C).astype(np.float64)
    generator = torch.Generator().manual_seed(7)
    sums = np.zeros(400)
    for cls in np.unique(qn[wrong]):
        weights = freq.copy()
        weights[cls] = 0.0
        support = np.flatnonzero(weights > 0)
        cdf = np.cumsum(weights[support] / weights.sum())
        cdf[-1] = 2.0
        u = torch.rand((400, int((qn[wrong] == cls).sum())), generator=generator, dtype=torch.float64).numpy()
        sums += sim[cls, support[np.searchsorted(cdf, u, side="right")]].sum(axis=1)
    null = sums / wrong.sum()
    np.testing.assert_allclose(out["null_distribution"].numpy(), null, rtol=0, atol=1e-13)
    reached = int((null >= sims.mean() - 1e-12).sum())  # a trial equal to the observation up to rounding reaches it
    assert np.min(np.abs(null - sims.mean())) > 1e-9  # no trial on the edge: the count does not hang on rounding
    assert 0 < reached < 400  # the observation lies inside the null: the count is informative
    assert float(out["p_value"]) == (reached + 1) / 401
    assert out["num_mismatches"].dtype == torch.long and out["mean_similarity"].dtype == torch.float64
    assert set(m.output_schema().scalar_keys()) == {k for k in out if k not in ("per_query", "null_distribution")}
    assert set(m.output_schema().per_query) == set(out["per_query"])


def test_string_labels_through_feature_profiles():
    p = demo_profiles()
    names = list(p.classes)
    q_names = [names[i % len(names)] for i in range(40)]
    r_names = [names[(i * 7) % len(names)] for i in range(40)]
    qc, _ = encode_labels(q_names)
    rc, _ = encode_labels(r_names)
    m = LabelMismatchAnalysis(p, num_trials=200)
    m.update(qc, rc)
    out = m.compute()
    sim = feature_similarity(p).numpy()
    expected = [sim[names.index(a), names.index(b)] for a, b in zip(q_names, r_names, strict=True) if a != b]
    assert out["mean_similarity"] == pytest.approx(np.mean(expected), abs=1e-12)
    bad, _ = encode_labels(["zebra"])
    m.update(bad, bad)
    with pytest.raises(ValueError, match="does not list"):
        m.compute()


def test_forward_split_updates_and_duplicates_agree_with_one_update():
    q, r, emb, ids = data()
    one = metric(with_embeddings=True)
    one.update(q, r, ids, embeddings=emb)
    ref = one.compute()
    split = metric(with_embeddings=True)
    perm = torch.randperm(len(q), generator=torch.Generator().manual_seed(0))
    for s in range(0, len(q), 17):
        b = perm[s : s + 17]
        assert split(q[b], r[b], ids[b], embeddings=emb[b]) is None  # forward only accumulates
    split.update(q[:5], r[:5], ids[:5], embeddings=emb[:5])  # repeats, as a DistributedSampler pads
    got = split.compute()
    assert got.pop("num_duplicates") == 5 and ref.pop("num_duplicates") == 0
    assert_same_outputs(got, ref)
    assert not math.isnan(float(ref["spearman_rho"]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"similarity": "nope"}, "`similarity` must be"),
        ({"similarity": [[1.0, 0.5], [0.5, 1.0]]}, "`labels` is required"),
        ({"num_trials": 0}, "`num_trials`"),
        ({"seed": "x"}, "`seed`"),
        ({"percentile_kind": "x"}, "`percentile_kind`"),
        ({"counts": [1, 2, 3]}, "`counts` must hold 2"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    args = {"similarity": ClassGains([[1.0, 0.5], [0.5, 1.0]], [0, 1])}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        LabelMismatchAnalysis(**args)


def test_bad_updates_are_named():
    m = metric()
    with pytest.raises(ValueError, match="`query_labels` must be a 1-D integer"):
        m.update(torch.tensor([0.5]), torch.tensor([1]))
    with pytest.raises(ValueError, match="one entry per query"):
        m.update(torch.tensor([0, 1]), torch.tensor([1]))
    with pytest.raises(ValueError, match="with_embeddings=False"):
        m.update(torch.tensor([0]), torch.tensor([1]), embeddings=torch.zeros(1, 2))
    with pytest.raises(ValueError, match="`embeddings` must be a"):
        metric(with_embeddings=True).update(torch.tensor([0]), torch.tensor([1]))


def _ddp_worker(rank: int, world: int, store: str, shards, out_path: str) -> None:
    init_gloo(rank, world, store)
    try:
        q, r, emb, ids = shards[rank]
        m = metric(with_embeddings=True)
        for s in range(0, len(ids), 13):
            m.update(q[s : s + 13], r[s : s + 13], ids[s : s + 13], embeddings=emb[s : s + 13])
        out = m.compute()
        torch.save(out, f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gloo_equals_single_process(tmp_path):
    q, r, emb, ids = data()
    perm = torch.randperm(len(q), generator=torch.Generator().manual_seed(1))
    r0, r1 = perm[:64], torch.cat([perm[64:], perm[:8]])  # uneven shards with padding repeats
    shards = [(q[i], r[i], emb[i], ids[i]) for i in (r0, r1)]
    single = metric(with_embeddings=True)
    single.update(q, r, ids, embeddings=emb)
    ref = single.compute()
    out_path = str(tmp_path / "out")
    mp.spawn(_ddp_worker, args=(2, gloo_store(tmp_path), shards, out_path), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(f"{out_path}.{rank}")
        assert got.pop("num_duplicates") == 8 and ref["num_duplicates"] == 0
        assert_same_outputs(got, {k: v for k, v in ref.items() if k != "num_duplicates"})


def _retrieval_metric():
    from beyondlabels.metrics import RetrievalWithMismatch

    return RetrievalWithMismatch(
        ClassGains(similarity(), list(range(C)), name="s"), num_trials=300, seed=2, ks=(1, 5), chunk_size=16
    )


def test_retrieval_with_mismatch_matches_numpy():
    q, _, emb, ids = data()
    m = _retrieval_metric()
    m.update(emb, q, ids)
    out = m.compute()
    u = emb.double().numpy()
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    s = u @ u.T
    np.fill_diagonal(s, -np.inf)
    lab = q.numpy()
    nn = lab[s.argmax(axis=1)]
    sim = similarity()
    wrong = lab != nn
    assert float(out["s_precision@1"]) == pytest.approx(sim[lab, nn].mean(), abs=1e-9)
    assert int(out["mismatch_num_mismatches"]) == wrong.sum()
    assert float(out["mismatch_mean_similarity"]) == pytest.approx(sim[lab[wrong], nn[wrong]].mean(), abs=1e-12)
    assert {k for k in m.output_schema().scalar_keys() if k.startswith("mismatch_")} <= set(out)


def _ddp_retrieval_worker(rank: int, world: int, store: str, shards, out_path: str) -> None:
    init_gloo(rank, world, store)
    try:
        q, emb, ids = shards[rank]
        m = _retrieval_metric()
        for s in range(0, len(ids), 13):
            m.update(emb[s : s + 13], q[s : s + 13], ids[s : s + 13])
        out = m.compute()
        torch.save({k: v for k, v in out.items() if k.startswith(("mismatch_", "s_"))}, f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_retrieval_with_mismatch_two_processes_equal_one(tmp_path):
    q, _, emb, ids = data()
    perm = torch.randperm(len(q), generator=torch.Generator().manual_seed(2))
    r0, r1 = perm[:64], torch.cat([perm[64:], perm[:8]])
    shards = [(q[i], emb[i], ids[i]) for i in (r0, r1)]
    single = _retrieval_metric()
    single.update(emb, q, ids)
    ref = {k: v for k, v in single.compute().items() if k.startswith(("mismatch_", "s_"))}
    out_path = str(tmp_path / "ret")
    mp.spawn(_ddp_retrieval_worker, args=(2, gloo_store(tmp_path), shards, out_path), nprocs=2, join=True)
    for rank in range(2):
        assert_same_outputs(torch.load(f"{out_path}.{rank}"), ref)


def _class_pair_spearman_oracle(emb: np.ndarray, labels: np.ndarray, sim: np.ndarray) -> tuple[float, float, int]:
    """scipy.stats.spearmanr between ``sim`` and each class pair's mean cosine, averaged over the N x N pairwise
    cosines of the pair's members (not through class mean vectors, as the kernel does)."""
    u = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    cos = u @ u.T
    classes = np.unique(labels)
    xs, ys = [], []
    for i, a in enumerate(classes):
        for b in classes[i + 1 :]:
            xs.append(sim[a, b])
            ys.append(cos[np.ix_(labels == a, labels == b)].mean())
    result = sps.spearmanr(xs, ys)
    return float(result.statistic), float(result.pvalue), len(xs)


@pytest.mark.parametrize("max_queries", [None, 30])
def test_retrieval_with_mismatch_spearman_matches_scipy_on_pairwise_cosines(max_queries):
    q, _, emb, ids = data()
    m = RetrievalWithMismatch(
        ClassGains(similarity(), list(range(C)), name="s"),
        num_trials=50,
        seed=2,
        ks=(1,),
        chunk_size=16,
        max_queries=max_queries,
    )
    for s in range(0, len(q), 25):
        m.update(emb[s : s + 25], q[s : s + 25], ids[s : s + 25])
    out = m.compute()
    rho, p, pairs = _class_pair_spearman_oracle(emb.double().numpy(), q.numpy(), similarity())
    assert pairs == C * (C - 1) // 2 and int(out["mismatch_spearman_pairs"]) == pairs
    assert out["mismatch_spearman_pairs"].dtype == torch.long
    assert float(out["mismatch_spearman_rho"]) == pytest.approx(
        rho, abs=1e-10
    )  # the whole gallery, also with max_queries
    assert float(out["mismatch_spearman_p"]) == pytest.approx(p, rel=1e-6)
    schema = m.output_schema()
    assert (
        schema["mismatch_spearman_rho"].higher_is_better is True
        and schema["mismatch_spearman_p"].higher_is_better is False
    )
    assert schema["mismatch_spearman_pairs"].count
    assert set(schema.scalar_keys()) <= set(out)


def test_retrieval_with_mismatch_spearman_follows_the_embeddings():
    """Classes embedded at unit vectors u_c, under the similarity (1 + u_a . u_b) / 2: the pair cosines rank as it
    does."""
    u = np.random.default_rng(5).normal(size=(C, 5))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    sim = (1.0 + u @ u.T) / 2.0
    np.fill_diagonal(sim, 1.0)  # exactly 1 (it is 1 up to rounding)
    m = RetrievalWithMismatch(ClassGains(sim, list(range(C)), name="s"), num_trials=20, ks=(1,))
    m.update(torch.tensor(np.tile(u, (3, 1)), dtype=torch.float32), torch.arange(C).repeat(3))
    out = m.compute()
    assert float(out["mismatch_spearman_rho"]) == pytest.approx(1.0) and float(out["mismatch_spearman_p"]) == 0.0


def test_retrieval_with_mismatch_projection_sample_is_fixed_by_id():
    q, _, emb, ids = data()
    gains = ClassGains(similarity(), list(range(C)), name="s")
    one = RetrievalWithMismatch(gains, num_trials=10, ks=(1,), projection_points=50, projection_seed=4)
    one.update(emb, q, ids)
    first = one.compute()["projection_sample"]
    shuffled = RetrievalWithMismatch(gains, num_trials=10, ks=(1,), projection_points=50, projection_seed=4)
    perm = torch.randperm(len(q), generator=torch.Generator().manual_seed(3))
    for s in range(0, len(q), 11):
        b = perm[s : s + 11]
        shuffled.update(emb[b], q[b], ids[b])
    second = shuffled.compute()["projection_sample"]
    sample_emb, sample_labels = first["embeddings"], first["labels"]
    assert sample_emb.shape == (50, emb.shape[1]) and sample_labels.shape == (50,)
    assert torch.equal(second["embeddings"], sample_emb) and torch.equal(second["labels"], sample_labels)
    rows = [int(torch.nonzero((emb == e).all(dim=1)).flatten()[0]) for e in sample_emb]  # each sampled row is a sample
    assert len(set(rows)) == 50 and torch.equal(q[rows], sample_labels)
    assert rows == sorted(rows)  # in id order (ids grow with the row here)
    whole = RetrievalWithMismatch(gains, num_trials=10, ks=(1,), projection_points=10_000)
    whole.update(emb, q, ids)
    assert torch.equal(whole.compute()["projection_sample"]["embeddings"], emb)
    off = RetrievalWithMismatch(gains, num_trials=10, ks=(1,), projection_points=0)
    off.update(emb, q, ids)
    assert off.compute()["projection_sample"] is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"projection_points": -1}, "`projection_points`"),
        ({"projection_points": 2.5}, "`projection_points`"),
        ({"projection_seed": "a"}, "`projection_seed`"),
    ],
)
def test_retrieval_with_mismatch_projection_options_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RetrievalWithMismatch(ClassGains([[1.0, 0.5], [0.5, 1.0]], [0, 1]), **kwargs)


@pytest.mark.gpu
@needs_accelerator
def test_retrieval_with_mismatch_spearman_and_projection_sample_on_cuda():
    device = accelerator_device()
    q, _, emb, ids = data()
    cpu, gpu = _retrieval_metric(), _retrieval_metric().to(device)
    cpu.update(emb, q, ids)
    gpu.update(emb.to(device), q.to(device), ids.to(device))
    a, b = cpu.compute(), gpu.compute()
    for key in ("mismatch_spearman_rho", "mismatch_spearman_p", "mismatch_spearman_pairs"):
        torch.testing.assert_close(b[key].cpu(), a[key], rtol=1e-9, atol=1e-12)
    assert b["projection_sample"]["embeddings"].device.type == "cpu"
    assert torch.equal(b["projection_sample"]["embeddings"], a["projection_sample"]["embeddings"])
    assert torch.equal(b["projection_sample"]["labels"], a["projection_sample"]["labels"])
