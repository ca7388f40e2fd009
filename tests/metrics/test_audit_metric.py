"""The audit option of EmbeddingRetrieval: against the numpy loop oracle (tests/oracles/audit_oracle.py) and the
numpy retrieval oracle, unchanged retrieval values, one search, and a two-process gloo run equal to one process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import beyondlabels.functional.retrieval as retrieval_module  # noqa: E402
from beyondlabels.functional.audit import AuditSettings  # noqa: E402
from beyondlabels.metrics import EmbeddingRetrieval  # noqa: E402
from tests.ddp import gloo_store, init_gloo
from tests.oracles.audit_oracle import audit_oracle, brute_neighbors
from tests.oracles.numpy_retrieval import retrieval_metrics
from tests.oracles.outputs import assert_same_outputs

KS = (1, 5)


def _data(seed: int = 4) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(6, 12))
    labels = np.repeat(np.arange(6), 20)
    x = centres[labels] + 0.7 * rng.normal(size=(120, 12))
    flip = rng.choice(120, size=6, replace=False)
    labels[flip] = (labels[flip] + 1) % 6
    x[10] = x[50]  # cross-label duplicates (labels 0 and 2)
    x[70] = x[71]  # same-label duplicates
    ids = rng.permutation(120) * 3 + 7  # not in input order, not contiguous
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(labels), torch.from_numpy(ids)


def _computed(audit, **kwargs) -> dict:
    emb, labels, ids = _data()
    m = EmbeddingRetrieval(ks=KS, audit=audit, **kwargs)
    for s in range(0, 120, 25):
        m.update(emb[s : s + 25], labels[s : s + 25], ids[s : s + 25])
    return m.compute()


def test_audit_matches_the_oracle_in_id_order() -> None:
    emb, labels, ids = _data()
    out = _computed({"k": 6})
    order = np.argsort(ids.numpy())  # the metric orders samples by id
    x, y, sid = emb.numpy()[order], labels.numpy()[order], ids.numpy()[order]
    idx, sc = brute_neighbors(x, 6)
    want = audit_oracle(idx, sc, y)
    pq = out["per_query"]
    assert pq["query_id"].tolist() == sid.tolist()
    np.testing.assert_allclose(pq["audit_label_quality"].numpy(), want["label_quality"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(pq["audit_outlier_score"].numpy(), want["outlier_score"], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(pq["audit_suggested_label"].numpy(), want["suggested_label"])
    np.testing.assert_array_equal(pq["audit_is_suspect"].numpy(), want["is_suspect"].astype(np.int64))
    assert out["audit"]["suspects"]["ids"].tolist() == sid[want["suspects"]].tolist()
    assert int(out["audit_num_suspects"]) == len(want["suspects"])
    assert int(out["audit_num_outliers"]) == int(want["is_outlier"].sum())
    pairs = [tuple(sid[list(p)].tolist()) for p in want["pairs"]]
    assert [tuple(p) for p in out["audit"]["duplicates"]["ids"].tolist()] == pairs
    cross = [c for c in want["cross_label"]]
    assert int(out["audit_num_cross_label_duplicates"]) == sum(cross) == 1
    assert int(out["audit_num_same_label_duplicates"]) == len(cross) - sum(cross) == 1
    assert int(out["audit_k"]) == 6
    assert out["audit"]["per_class"]["suspects"].tolist() == [int(want["is_suspect"][y == c].sum()) for c in range(6)]


def test_retrieval_values_do_not_change_and_one_search_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = retrieval_module.retrieval_per_query

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr("beyondlabels.metrics.retrieval.retrieval_per_query", counted)
    plain = _computed(None, return_neighbors=2)
    assert len(calls) == 1
    audited = _computed(AuditSettings(k=8), return_neighbors=2)
    assert len(calls) == 2  # the audit reads the same search
    assert audited["neighbors"]["ids"].shape == (120, 2)
    added = tuple(k for k in audited if k.startswith("audit_")) + tuple(
        f"per_query/{k}" for k in audited["per_query"] if k.startswith("audit_")
    )
    assert_same_outputs(audited, plain, ignore=("label_names", "audit", *added))
    assert set(audited["per_query"]) - set(plain["per_query"]) == {
        k for k in audited["per_query"] if k.startswith("audit_")
    }
    assert "neighbors" not in _computed({"k": 3})


def test_outputs_follow_the_schema() -> None:
    m = EmbeddingRetrieval(ks=KS, audit={"k": 4, "exclude_suspects": True})
    emb, labels, ids = _data()
    m.update(emb, labels, ids)
    out = m.compute()
    schema = m.output_schema()
    assert set(out) - {"per_query", "label_names", "audit"} == set(schema)
    assert set(out["per_query"]) == set(schema.per_query)
    assert schema["audit_num_suspects"].higher_is_better is False and schema["audit_num_suspects"].count
    assert schema["clean/precision@1"].higher_is_better is True


def test_exclude_suspects_equals_the_retrieval_oracle_without_the_cross_label_pairs() -> None:
    emb, labels, ids = _data()
    out = _computed({"k": 5, "exclude_suspects": True})
    dropped = set(out["audit"]["duplicates"]["ids"][out["audit"]["duplicates"]["cross_label"]].flatten().tolist())
    assert len(dropped) == 2 and int(out["audit_num_excluded"]) == 2
    keep = np.array([int(i) not in dropped for i in ids])
    order = np.argsort(ids.numpy()[keep])
    want = retrieval_metrics(emb.numpy()[keep][order], labels.numpy()[keep][order], ks=KS)
    for key in ("precision@1", "precision@5", "r_precision", "map@r", "macro_precision@1"):
        assert float(out[f"clean/{key}"]) == pytest.approx(want[key], abs=1e-12), key
    assert float(out["clean/precision@1"]) != float(out["precision@1"])


def test_small_sets_cap_k_and_bad_settings_fail_clearly() -> None:
    m = EmbeddingRetrieval(ks=(1,), audit={"k": 50})
    m.update(torch.eye(4)[[0, 0, 1, 1]] + 0.01 * torch.arange(4.0)[:, None], torch.tensor([0, 0, 1, 1]))
    assert int(m.compute()["audit_k"]) == 3
    with pytest.raises(ValueError, match="`audit` needs every sample as a query"):
        EmbeddingRetrieval(audit=True, max_queries=10)
    with pytest.raises(ValueError, match="unknown settings \\['kk'\\]"):
        EmbeddingRetrieval(audit={"kk": 3})
    with pytest.raises(ValueError, match="audit `k` must be a positive int"):
        EmbeddingRetrieval(audit={"k": 0})


def _ddp_worker(rank: int, world: int, store: str, shards, out_path: str) -> None:
    init_gloo(rank, world, store)
    try:
        emb, labels, ids = shards[rank]
        m = EmbeddingRetrieval(ks=KS, chunk_size=16, audit={"k": 6, "exclude_suspects": True})
        for s in range(0, len(ids), 11):
            m.update(emb[s : s + 11], labels[s : s + 11], ids[s : s + 11])
        torch.save(m.compute(), f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gloo_equals_single_process(tmp_path: Path) -> None:
    emb, labels, ids = _data()
    perm = torch.randperm(120, generator=torch.Generator().manual_seed(1))
    shards = [(emb[r], labels[r], ids[r]) for r in (perm[:64], torch.cat([perm[64:], perm[:8]]))]
    single = EmbeddingRetrieval(ks=KS, audit={"k": 6, "exclude_suspects": True})
    single.update(emb, labels, ids)
    ref = single.compute()
    out_path = str(tmp_path / "out")
    mp.spawn(_ddp_worker, args=(2, gloo_store(tmp_path), shards, out_path), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(f"{out_path}.{rank}")
        assert int(got["num_duplicates"]) == 8
        assert_same_outputs(got, ref, ignore=("num_duplicates", "label_names"))


def test_compute_is_a_function_of_the_states_and_the_overlap_is_left_to_the_caller() -> None:
    """No list survives compute(): the same states give the same results, and the overlap with an earlier
    evaluation (which the metric does not see) is NaN; the callback fills it in
    (tests/callbacks/test_retrieval_audit_callback.py)."""
    emb, labels, ids = _data()
    m = EmbeddingRetrieval(ks=KS, audit={"k": 6, "top": 4})
    m.update(emb, labels, ids)
    first = m.compute()
    m.reset()
    m.update(emb, labels, ids)
    second = m.compute()
    assert np.isnan(float(first["audit_suspect_overlap"])) and np.isnan(float(second["audit_suspect_overlap"]))
    assert first["audit"]["suspects"]["ids"].tolist() == second["audit"]["suspects"]["ids"].tolist()
    assert not hasattr(m, "previous_suspects")
