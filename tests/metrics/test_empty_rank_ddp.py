"""Two gloo processes where one has no samples at all, and two that saw labels of different kinds.

A process without samples is a normal case (a shard that a filter emptied, fewer samples than processes): its states
are empty lists, for which torchmetrics stands in an empty 1-D float32 tensor, which no collective can gather with
the other process's ``[n, D]`` float rows and int64 ids (gloo aborts the job). The per-sample base tells every process
the others' layouts first, so the empty process contributes nothing and every process computes exactly what one
process computes on the other's samples. Integer class ids on one process and names on the other are coded
differently, so comparing them would give wrong numbers silently: every process raises the same error, before
anything is gathered, and none is left waiting.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from beyondlabels.metrics import EmbeddingRetrieval, HierarchicalPrecisionRecall
from beyondlabels.taxonomy import Taxonomy
from tests.ddp import gloo_store, init_gloo
from tests.oracles.outputs import assert_same_outputs
from tests.oracles.retrieval_data import clustered

KS = (1, 5)
TAXONOMY = {"root": "r", "parent": {"a": "r", "b": "r", "a1": "a", "a2": "a", "b1": "b"}}


def _retrieval_data():
    emb, labels = clustered(40, 8, 4, seed=3, noise=1.0)
    return emb, labels, torch.arange(40) + 100


def _retrieval(distributed_search: bool) -> EmbeddingRetrieval:
    return EmbeddingRetrieval(ks=KS, curve_max_k=6, return_neighbors=2, distributed_search=distributed_search)


def _hierarchy() -> HierarchicalPrecisionRecall:
    return HierarchicalPrecisionRecall(Taxonomy.from_dict(TAXONOMY))


def _hierarchy_data():
    nodes = ["a1", "a2", "b1", "a", "b"]
    pred = [nodes[i % 5] for i in range(12)]
    gt = [nodes[(i * 3) % 5] for i in range(12)]
    return pred, gt, torch.arange(12)


CASES = [("retrieval", True), ("retrieval", False), ("hierarchy", False)]


def _empty_rank_result(rank: int, family: str, search: bool) -> dict:
    if family == "retrieval":
        metric = _retrieval(search)
        emb, labels, ids = _retrieval_data()
        if rank == 0:  # rank 1 never updates: no sample reaches it
            for s in range(0, 40, 9):
                metric.update(emb[s : s + 9], labels[s : s + 9], ids[s : s + 9])
    else:
        metric = _hierarchy()
        pred, gt, ids = _hierarchy_data()
        if rank == 0:
            metric.update(pred, gt, ids)
    return metric.compute()


def _mixed_kinds_message(rank: int) -> str:
    emb, labels, ids = _retrieval_data()
    metric = _retrieval(True)
    mine = slice(0, 20) if rank == 0 else slice(20, 40)
    given = labels[mine] if rank == 0 else [str(int(v)) for v in labels[mine]]  # ids on 0, names on 1
    metric.update(emb[mine], given, ids[mine])
    try:
        metric.compute()
    except ValueError as exc:
        return str(exc)
    return "no error"


def _worker(rank: int, world: int, store: str, out: str) -> None:
    init_gloo(rank, world, store)
    try:
        results = {f"{family}-{search}": _empty_rank_result(rank, family, search) for family, search in CASES}
        results["mixed"] = _mixed_kinds_message(rank)
        dist.barrier()  # both reach here: no rank was left in a collective call
        torch.save(results, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_an_empty_process_contributes_nothing_and_mixed_label_kinds_fail_on_every_process(tmp_path: Path):
    """One two-process run (a spawn costs seconds): the cases one after the other."""
    references = {}
    for family, search in CASES:
        single = _retrieval(search) if family == "retrieval" else _hierarchy()
        single.update(*(_retrieval_data() if family == "retrieval" else _hierarchy_data()))
        references[f"{family}-{search}"] = single.compute()
    out = str(tmp_path / "out")
    mp.spawn(_worker, args=(2, gloo_store(tmp_path), out), nprocs=2, join=True)
    ranks = [torch.load(f"{out}.{rank}", weights_only=False) for rank in range(2)]
    for got in ranks:
        for name, reference in references.items():
            assert_same_outputs(got[name], reference, ignore=("label_names",))
        assert int(got["retrieval-True"]["num_queries"]) == 40 and int(got["retrieval-True"]["num_duplicates"]) == 0
    messages = [got["mixed"] for got in ranks]
    assert messages[0] == messages[1]
    assert "labels of different kinds on different processes" in messages[0]
    assert "rank(s) [0]" in messages[0] and "rank(s) [1]" in messages[0]


def test_label_kinds_are_told_apart():
    from beyondlabels.metrics.base import label_kinds

    assert label_kinds(torch.tensor([3, 1])) == {"int"}
    assert label_kinds([3, 1]) == {"int"} and label_kinds(["3", "1"]) == {"text"}
    assert label_kinds(__import__("numpy").array([3, 1])) == {"int"}
    assert label_kinds([3, "cat"]) == {"int", "text"}
