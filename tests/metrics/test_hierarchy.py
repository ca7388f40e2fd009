"""HierarchicalPrecisionRecall: names or indices, split updates, forward, deduplication by id, bad inputs, and two
gloo processes against one."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from beyondlabels.functional import hierarchical_precision_recall
from beyondlabels.metrics import HierarchicalPrecisionRecall
from beyondlabels.taxonomy import Taxonomy
from tests.ddp import gloo_store, init_gloo


def make_tree(seed: int = 0, size: int = 60) -> Taxonomy:
    rng = random.Random(seed)
    names = [f"n{x}" for x in rng.sample(range(1000), size)]
    return Taxonomy({names[i]: names[rng.randrange(max(0, i - 5), i)] for i in range(1, size)}, names[0])


TREE = make_tree()


def data(n: int = 150, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    gt = torch.randint(1, len(TREE), (n,), generator=g)
    pred = torch.where(torch.rand(n, generator=g) < 0.3, gt, torch.randint(0, len(TREE), (n,), generator=g))
    ids = torch.randperm(n, generator=g) * 3 + 5
    return pred, gt, ids


def assert_same(a: dict, b: dict) -> None:
    for key in a:
        if key == "per_query":
            for k in a[key]:
                assert torch.equal(a[key][k], b[key][k]), k
        else:
            assert torch.equal(a[key], b[key]) or (a[key].isnan().all() and b[key].isnan().all()), key


def test_equals_the_kernel_in_id_order_and_accepts_names():
    pred, gt, ids = data()
    metric = HierarchicalPrecisionRecall(TREE)
    for s in range(0, 150, 40):
        metric.update(pred[s : s + 40], gt[s : s + 40], ids[s : s + 40])
    out = metric.compute()
    order = torch.argsort(ids)
    ref = hierarchical_precision_recall(pred[order], gt[order], TREE)
    ref["num_duplicates"] = torch.tensor(0)
    ref["per_query"]["query_id"] = ids[order]
    assert_same(out, ref)
    assert set(out) - {"per_query"} == set(metric.output_schema())

    named = HierarchicalPrecisionRecall(TREE)
    named.update([TREE.nodes[i] for i in pred.tolist()], [TREE.nodes[i] for i in gt.tolist()], ids)
    assert_same(named.compute(), out)


def test_forward_and_reset_agree_with_update():
    pred, gt, _ = data()
    a, b = HierarchicalPrecisionRecall(TREE), HierarchicalPrecisionRecall(TREE)
    for s in range(0, 150, 32):
        assert a(pred[s : s + 32], gt[s : s + 32]) is None  # no per-batch value; forward only accumulates
        b.update(pred[s : s + 32], gt[s : s + 32])
    assert_same(a.compute(), b.compute())
    a.reset()
    a.update(pred, gt)
    assert_same(a.compute(), b.compute())


def test_duplicated_ids_are_dropped_and_disagreeing_truths_raise():
    pred, gt, ids = data(20)
    metric = HierarchicalPrecisionRecall(TREE)
    metric.update(pred, gt, ids)
    metric.update(pred[:3], gt[:3], ids[:3])
    with pytest.warns(UserWarning, match="repeated an id"):
        out = metric.compute()
    assert int(out["num_duplicates"]) == 3 and int(out["num_samples"]) == 20
    bad = HierarchicalPrecisionRecall(TREE)
    bad.update(pred[:2], gt[:2], torch.tensor([1, 2]))
    bad.update(pred[:1], torch.where(gt[:1] == 1, 2, 1), torch.tensor([1]))
    with pytest.raises(ValueError, match="`gt` disagrees between copies"):
        bad.compute()


def test_bad_inputs_name_the_argument():
    metric = HierarchicalPrecisionRecall(TREE)
    with pytest.raises(ValueError, match=r"`pred_nodes`: unknown taxonomy node\(s\) 'nope'"):
        metric.update(["nope"], [TREE.nodes[1]])
    with pytest.raises(ValueError, match="`gt_nodes` holds indices outside"):
        metric.update(torch.tensor([1]), torch.tensor([999]))
    with pytest.raises(ValueError, match="`pred_nodes` has 2 entries and `gt_nodes` 1"):
        metric.update(torch.tensor([1, 2]), torch.tensor([1]))
    with pytest.raises(ValueError, match="`gt_nodes` holds the root"):
        metric.update(torch.tensor([1]), torch.tensor([0]))
    with pytest.raises(ValueError, match="`taxonomy`:"):
        HierarchicalPrecisionRecall(42)
    with pytest.raises(ValueError, match="`include_root` must be True or False"):
        HierarchicalPrecisionRecall(TREE, include_root=1)
    with pytest.raises(ValueError, match="compute\\(\\) was called before any sample"):
        HierarchicalPrecisionRecall(TREE).compute()


def test_taxonomy_from_a_file_and_include_root(tmp_path):
    file = tmp_path / "tree.tsv"
    file.write_text("b\ta\nc\tb\n")
    metric = HierarchicalPrecisionRecall(str(file), include_root=True)
    metric.update(["a"], ["c"])
    assert float(metric.compute()["hR"]) == pytest.approx(1 / 3)


# ---- two processes (gloo) --------------------------------------------------------------------------------------------


def _ddp_worker(rank: int, world: int, store: str, shards, out_path: str) -> None:
    init_gloo(rank, world, store)
    try:
        pred, gt, ids = shards[rank]
        metric = HierarchicalPrecisionRecall(TREE)
        for s in range(0, len(ids), 13):
            metric.update(pred[s : s + 13], gt[s : s + 13], ids[s : s + 13])
        torch.save(metric.compute(), f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gloo_equals_single_process(tmp_path):
    pred, gt, ids = data()
    # uneven shards with sampler-like padding: rank 1 repeats 10 of rank 0's samples; each rank sees its own order
    perm = torch.randperm(150, generator=torch.Generator().manual_seed(1))
    r0, r1 = perm[:80], torch.cat([perm[80:], perm[:10]])
    shards = [(pred[r], gt[r], ids[r]) for r in (r0, r1)]
    single = HierarchicalPrecisionRecall(TREE)
    single.update(pred, gt, ids)
    ref = single.compute()
    out_path = str(tmp_path / "out")
    mp.spawn(_ddp_worker, args=(2, gloo_store(tmp_path), shards, out_path), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(f"{out_path}.{rank}", weights_only=False)
        assert int(got["num_duplicates"]) == 10 and int(ref["num_duplicates"]) == 0
        got["num_duplicates"] = ref["num_duplicates"]
        assert_same(got, ref)
