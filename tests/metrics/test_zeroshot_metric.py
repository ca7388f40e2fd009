"""ZeroShotClassification: equals the kernel in id order, forward gives the batch's values while accumulating, repeated
ids are dropped, bad input is named, and two gloo processes give exactly the single-process numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from beyondlabels.functional import classification_metrics, topk_classes
from beyondlabels.metrics import ZeroShotClassification
from tests.ddp import gloo_store, init_gloo

C, KS = 7, (1, 3)


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, C, (90,), generator=g)
    scores = torch.randn(90, C, generator=g) + 1.5 * torch.nn.functional.one_hot(labels, C)
    scores[::9, :2] = 0.25  # exact ties between classes 0 and 1 in some rows
    ids = torch.randperm(90, generator=g) * 3 + 100
    return scores, labels, ids


def reference(scores, labels, ids):
    order = torch.argsort(ids)
    return classification_metrics(
        topk_classes(scores[order], max(KS)), labels[order], num_classes=C, ks=KS, ids=ids[order]
    )


def assert_same(a: dict, b: dict) -> None:
    for key, x in a.items():
        if key == "num_duplicates":
            continue
        if isinstance(x, dict):
            for name in x:
                assert torch.equal(x[name], b[key][name]), name
        else:
            assert x.dtype == b[key].dtype and torch.equal(x, b[key]), key


def test_equals_kernel_in_id_order_and_follows_schema(data):
    m = ZeroShotClassification(num_classes=C, ks=KS)
    m.update(*data)
    out = m.compute()
    assert_same(reference(*data), out)
    schema = m.output_schema()
    assert set(out) - {"per_query", "confusion_matrix"} == set(schema)
    assert set(out["per_query"]) == set(schema.per_query)


def test_forward_returns_the_batch_and_accumulates(data):
    scores, labels, ids = data
    m = ZeroShotClassification(num_classes=C, ks=KS)
    for s in range(0, 90, 20):
        batch = m(scores[s : s + 20], labels[s : s + 20], ids[s : s + 20])
        expected = reference(scores[s : s + 20], labels[s : s + 20], ids[s : s + 20])
        assert float(batch["top1"]) == float(expected["top1"]) and float(batch["top3"]) == float(expected["top3"])
    assert_same(reference(*data), m.compute())


def test_without_ids_the_arrival_order_is_the_id(data):
    scores, labels, _ = data
    m = ZeroShotClassification(num_classes=C, ks=KS)
    m.update(scores[:50], labels[:50])
    m.update(scores[50:], labels[50:].tolist())
    assert_same(reference(scores, labels, torch.arange(90)), m.compute())


def test_repeated_ids_are_dropped(data):
    scores, labels, ids = data
    m = ZeroShotClassification(num_classes=C, ks=KS)
    m.update(scores, labels, ids)
    m.update(scores[:1], labels[:1], ids[:1])
    with pytest.warns(UserWarning, match="1 samples repeated an id"):
        out = m.compute()
    assert int(out["num_duplicates"]) == 1
    assert_same(reference(*data), out)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="ks"):
        ZeroShotClassification(num_classes=3, ks=(1, 5))
    with pytest.raises(ValueError, match="num_classes"):
        ZeroShotClassification(num_classes=0)
    m = ZeroShotClassification(num_classes=3, ks=(1,))
    with pytest.raises(ValueError, match="scores"):
        m.update(torch.ones(2, 4), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="labels"):
        m.update(torch.ones(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="labels"):
        m.update(torch.ones(2, 3), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="scores"):
        m.update(torch.tensor([[float("nan"), 0.0, 0.0]]), torch.tensor([0]))


def _worker(rank: int, world: int, store: str, shards, out_path: str) -> None:
    init_gloo(rank, world, store)
    try:
        scores, labels, ids = shards[rank]
        m = ZeroShotClassification(num_classes=C, ks=KS)
        for s in range(0, len(ids), 13):
            m.update(scores[s : s + 13], labels[s : s + 13], ids[s : s + 13])
        torch.save(m.compute(), f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gloo_equals_single_process(data, tmp_path):
    scores, labels, ids = data
    perm = torch.randperm(90, generator=torch.Generator().manual_seed(1))
    parts = (perm[:46], torch.cat([perm[46:], perm[:2]]))  # rank 1 repeats 2 of rank 0's samples
    shards = [(scores[p], labels[p], ids[p]) for p in parts]
    m = ZeroShotClassification(num_classes=C, ks=KS)
    m.update(scores, labels, ids)
    ref = m.compute()
    out_path = str(tmp_path / "out")
    mp.spawn(_worker, args=(2, gloo_store(tmp_path), shards, out_path), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(f"{out_path}.{rank}")
        assert int(got["num_duplicates"]) == 2
        assert_same(ref, got)
    assert not np.isnan(float(ref["balanced_accuracy"]))
