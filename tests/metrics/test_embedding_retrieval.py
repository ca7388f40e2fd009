"""Tests of the EmbeddingRetrieval metric: agreement with the kernel, update splitting, deduplication by id,
validation, and a two-process gloo run that must equal the single-process result exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from beyondlabels.functional import embedding_retrieval_metrics  # noqa: E402
from beyondlabels.metrics import EmbeddingRetrieval  # noqa: E402
from tests.ddp import gloo_store, init_gloo
from tests.oracles.outputs import assert_same_outputs
from tests.oracles.retrieval_data import clustered

KS = (1, 5, 10)


@pytest.fixture(scope="module")
def data():
    emb, labels = clustered(150, 16, 9, seed=5, noise=1.5)
    ids = torch.randperm(150, generator=torch.Generator().manual_seed(0)) + 1000
    return emb, labels, ids


def assert_same(a: dict, b: dict, ignore=("num_duplicates",)) -> None:
    assert_same_outputs(a, b, ignore=(*ignore, "label_names"))  # the kernel has no label names


def test_outputs_follow_the_schema(data):
    emb, labels, ids = data
    m = EmbeddingRetrieval(ks=KS)
    m.update(emb, labels, ids)
    out = m.compute()
    schema = m.output_schema()
    assert set(out) - {"per_query", "label_names"} == set(schema)
    assert set(out["per_query"]) == set(schema.per_query)
    assert schema["mean_first_relevant_rank"].higher_is_better is False
    assert schema["num_queries"].count and schema["num_duplicates"].count
    # the class-level direction is undefined: outputs mix better-when-higher, better-when-lower and counts
    assert EmbeddingRetrieval.higher_is_better is None
    assert EmbeddingRetrieval.is_differentiable is False and EmbeddingRetrieval.full_state_update is False


def test_equals_kernel_in_id_order(data):
    emb, labels, ids = data
    m = EmbeddingRetrieval(ks=KS)
    m.update(emb, labels, ids)
    order = torch.argsort(ids)
    ref = embedding_retrieval_metrics(emb[order], labels[order], ids[order], ks=KS)
    out = m.compute()
    assert int(out["num_duplicates"]) == 0
    assert_same(out, ref)


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_update_splitting_and_order_do_not_matter(data, batch):
    emb, labels, ids = data
    whole = EmbeddingRetrieval(ks=KS, curve_max_k=15)
    whole.update(emb, labels, ids)
    split = EmbeddingRetrieval(ks=KS, curve_max_k=15, chunk_size=33)
    perm = torch.randperm(150, generator=torch.Generator().manual_seed(batch))
    for s in range(0, 150, batch):
        p = perm[s : s + batch]
        split.update(emb[p], labels[p], ids[p])
    assert_same(whole.compute(), split.compute())


def test_repeated_samples_are_deduplicated(data):
    emb, labels, ids = data
    ref = EmbeddingRetrieval(ks=KS)
    ref.update(emb, labels, ids)
    rep = EmbeddingRetrieval(ks=KS)
    rep.update(emb, labels, ids)
    rep.update(emb[:20], labels[:20], ids[:20])  # more copies than a DistributedSampler adds on one process
    with pytest.warns(UserWarning, match="20 samples repeated an id"):
        out = rep.compute()
    assert_same(ref.compute(), out)
    assert int(out["num_duplicates"]) == 20
    assert int(out["num_queries"]) + int(out["num_lone_queries"]) == 150


def test_conflicting_labels_for_one_id_raise(data):
    emb, labels, ids = data
    m = EmbeddingRetrieval(ks=(1,))
    m.update(emb, labels, ids)
    m.update(emb[:1], labels[:1] + 1, ids[:1])
    with pytest.raises(ValueError, match=r"`labels` disagrees .*ids \[\d+\]"):
        m.compute()


def test_without_ids_on_one_process(data):
    emb, labels, _ = data
    m = EmbeddingRetrieval(ks=KS)
    m.update(emb[:100], labels[:100])
    m.update(emb[100:], labels[100:])
    assert_same(m.compute(), embedding_retrieval_metrics(emb, labels, ks=KS))
    m.reset()
    m.update(emb, labels)
    assert_same(m.compute(), embedding_retrieval_metrics(emb, labels, ks=KS))
    m.update(emb[:3], labels[:3], torch.arange(3))
    with pytest.raises(ValueError, match="pass ids in every update or in none"):
        m.compute()


@pytest.mark.parametrize("batch", [1, 4, 37])
def test_forward_accumulates_like_update(data, batch):
    """torchmetrics' forward resets the state around each batch: ids made per update would restart at 0 and
    collide. Ids are resolved at compute, so metric(x, y) per batch equals update(x, y) per batch, with or without
    ids, including batches smaller than max(ks)."""
    emb, labels, ids = data
    for use_ids in (False, True):
        via_update, via_forward = EmbeddingRetrieval(ks=KS), EmbeddingRetrieval(ks=KS)
        for s in range(0, 150, batch):
            args = (emb[s : s + batch], labels[s : s + batch]) + ((ids[s : s + batch],) if use_ids else ())
            via_update.update(*args)
            assert via_forward(*args) is None  # one batch is not a gallery: no per-batch value
        assert_same(via_forward.compute(), via_update.compute())
        assert int(via_forward.compute()["num_queries"]) + int(via_forward.compute()["num_lone_queries"]) == 150


def test_string_numpy_and_list_labels_give_the_integer_result(data):
    emb, labels, ids = data
    names = [f"style_{int(v)}" for v in labels]
    ref = EmbeddingRetrieval(ks=KS)
    ref.update(emb, labels, ids)
    for given in (names, np.array(names), labels.numpy(), labels.tolist()):
        m = EmbeddingRetrieval(ks=KS)
        m.update(emb[:70], given[:70], ids[:70])
        m.update(emb[70:], given[70:], ids[70:])
        # string labels are coded by a hash: every value but the label codes themselves must agree
        out = m.compute()
        assert_same(out, ref.compute(), ignore=("num_duplicates", "per_query/label", "label_names"))
    assert set(out["label_names"].values()) == {str(int(v)) for v in labels}  # the last one given was a list of ints
    m.reset()
    m.update(emb, labels, ids)
    assert m.compute()["label_names"] == {}  # reset forgets the names of earlier updates


def test_fast_mode_equals_fp32(data):
    emb, labels, ids = data
    a, b = EmbeddingRetrieval(ks=KS), EmbeddingRetrieval(ks=KS, precision="bf16")
    a.update(emb, labels, ids)
    b.update(emb, labels, ids)
    assert_same(a.compute(), b.compute())


def test_return_neighbors(data):
    emb, labels, ids = data
    m = EmbeddingRetrieval(ks=(1,), return_neighbors=3)
    m.update(emb, labels, ids)
    out = m.compute()
    query_ids, neighbors = out["per_query"]["query_id"], out["neighbors"]
    assert torch.equal(query_ids, torch.sort(ids).values)
    assert neighbors["ids"].shape == (150, 3) and neighbors["scores"].shape == (150, 3)
    assert not bool((neighbors["ids"] == query_ids[:, None]).any())
    p1 = (neighbors["labels"][:, 0] == out["per_query"]["label"]).double()
    lone = out["per_query"]["num_relevant"] == 0
    assert float(p1[~lone].mean()) == float(out["precision@1"])


def test_state_is_per_sample(data):
    emb, labels, ids = data
    m = EmbeddingRetrieval()
    m.update(emb, labels, ids)
    sizes = [t.numel() for name in ("embeddings", "labels", "ids") for t in getattr(m, name)]
    assert sum(sizes) == 150 * 16 + 150 + 150
    assert m._reductions["embeddings"].__name__ == "dim_zero_cat"


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"ks": (0,)}, "ks"),
        ({"ks": ()}, "ks"),
        ({"ks": "5"}, "ks"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"chunk_size": 2.5}, "chunk_size"),
        ({"precision": "fp64"}, "precision"),
        ({"curve_max_k": -1}, "curve_max_k"),
        ({"return_neighbors": -2}, "return_neighbors"),
    ],
)
def test_init_validation(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        EmbeddingRetrieval(**kwargs)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((torch.randn(4), torch.arange(4), torch.arange(4)), "embeddings"),
        ((torch.ones(4, 3, dtype=torch.long), torch.arange(4), torch.arange(4)), "embeddings"),
        ((torch.full((4, 3), float("nan")), torch.arange(4), torch.arange(4)), "embeddings"),
        ((torch.randn(4, 3), torch.arange(3), torch.arange(4)), "labels"),
        ((torch.randn(4, 3), torch.arange(4).float(), torch.arange(4)), "labels"),
        ((torch.randn(4, 3), [0.5, 1.0, 2.0, 3.0], torch.arange(4)), "labels"),
        ((torch.randn(4, 3), torch.arange(4), torch.arange(5)), "ids"),
        ((torch.randn(4, 3), torch.arange(4), torch.arange(4).float()), "ids"),
    ],
)
def test_update_validation(args, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        EmbeddingRetrieval().update(*args)


def test_update_validation_across_calls():
    m = EmbeddingRetrieval(ks=(1,))
    m.update(torch.randn(4, 3), torch.arange(4), torch.arange(4))
    with pytest.raises(ValueError, match="`embeddings`"):
        m.update(torch.randn(4, 5), torch.arange(4), torch.arange(4, 8))
    m.update(torch.randn(4, 3), torch.arange(4))  # no ids after updates with ids: refused at compute
    with pytest.raises(ValueError, match="pass ids in every update or in none"):
        m.compute()


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_compute_errors():
    with pytest.raises(ValueError, match="before any sample"):
        EmbeddingRetrieval().compute()
    m = EmbeddingRetrieval(ks=(5,))
    m.update(torch.randn(4, 3), torch.tensor([0, 0, 1, 1]), torch.arange(4))
    with pytest.raises(ValueError, match="`ks`"):
        m.compute()


# --------------------------------------------------------------------------------------------------------------------
# two processes (gloo)
# --------------------------------------------------------------------------------------------------------------------


def _ddp_worker(
    rank: int,
    world: int,
    store: str,
    shards,
    out_path: str,
    distributed_search: bool,
    max_queries,
    deep_metrics: bool = True,
    string_labels: bool = False,
) -> None:
    init_gloo(rank, world, store)
    try:
        emb, labels, ids = shards[rank]
        m = EmbeddingRetrieval(
            ks=KS,
            curve_max_k=12,
            return_neighbors=2,
            distributed_search=distributed_search,
            chunk_size=16,
            max_queries=max_queries,
            deep_metrics=deep_metrics,
        )
        if string_labels:
            labels = [f"class {int(v)}" for v in labels]
        for s in range(0, len(ids), 11):  # uneven batches
            m.update(emb[s : s + 11], labels[s : s + 11], ids[s : s + 11])
        out = m.compute()
        torch.save(out, f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize(("distributed_search", "max_queries"), [(True, None), (False, None), (True, 50)])
def test_two_process_gloo_equals_single_process(data, tmp_path, distributed_search, max_queries):
    emb, labels, ids = data
    # Uneven shards, as a DistributedSampler pads them: rank 0 gets 80 samples, rank 1 the other 70 plus 10 repeats
    # of rank 0's samples; the ranks also see their samples in different orders.
    perm = torch.randperm(150, generator=torch.Generator().manual_seed(1))
    r0 = perm[:80]
    r1 = torch.cat([perm[80:], perm[:10]])
    shards = [(emb[r], labels[r], ids[r]) for r in (r0, r1)]
    single = EmbeddingRetrieval(ks=KS, curve_max_k=12, return_neighbors=2, max_queries=max_queries)
    single.update(emb, labels, ids)
    ref = single.compute()
    out_path = str(tmp_path / "out")
    mp.spawn(
        _ddp_worker,
        args=(2, gloo_store(tmp_path), shards, out_path, distributed_search, max_queries),
        nprocs=2,
        join=True,
    )
    for rank in range(2):
        got = torch.load(f"{out_path}.{rank}")
        assert int(got["num_duplicates"]) == 10 and int(ref["num_duplicates"]) == 0
        assert_same(got, ref)


@pytest.mark.slow
@pytest.mark.parametrize("max_queries", [None, 50])
def test_two_process_gloo_shallow_mode_equals_single_process(data, tmp_path, max_queries):
    emb, labels, ids = data
    perm = torch.randperm(150, generator=torch.Generator().manual_seed(1))
    shards = [(emb[r], labels[r], ids[r]) for r in (perm[:80], torch.cat([perm[80:], perm[:10]]))]
    single = EmbeddingRetrieval(ks=KS, curve_max_k=12, return_neighbors=2, max_queries=max_queries, deep_metrics=False)
    single.update(emb, labels, ids)
    ref = single.compute()
    assert "r_precision" not in ref and "first_relevant_rank" not in ref["per_query"]
    out_path = str(tmp_path / "out")
    mp.spawn(
        _ddp_worker, args=(2, gloo_store(tmp_path), shards, out_path, True, max_queries, False), nprocs=2, join=True
    )
    for rank in range(2):
        assert_same(torch.load(f"{out_path}.{rank}"), ref)


def test_shallow_mode_equals_the_kernel_and_follows_its_schema(data):
    emb, labels, ids = data
    m = EmbeddingRetrieval(ks=KS, deep_metrics=False, max_queries=60, return_neighbors=3)
    m.update(emb, labels, ids)
    out = m.compute()
    order = torch.argsort(ids)
    ref = embedding_retrieval_metrics(
        emb[order], labels[order], ids[order], ks=KS, deep_metrics=False, max_queries=60, return_neighbors=3
    )
    ref["neighbors"] = {
        "ids": ids[order][ref["neighbors"]["indices"]],
        "labels": labels[order][ref["neighbors"]["indices"]],
        "scores": ref["neighbors"]["scores"],
    }
    assert_same(out, ref)
    schema = m.output_schema()
    assert set(out) - {"per_query", "neighbors", "label_names"} == set(schema)
    assert set(out["per_query"]) == set(schema.per_query)
    assert not {"r_precision", "map@r", "macro_map@r", "mean_first_relevant_rank", "map@r_se"} & set(schema)
    deep = EmbeddingRetrieval(ks=KS, max_queries=60)
    deep.update(emb, labels, ids)
    full = deep.compute()
    for key in schema.scalar_keys():
        assert torch.equal(out[key].nan_to_num(-1.0), full[key].nan_to_num(-1.0)), key


@pytest.mark.parametrize("value", ["no", 0, None])
def test_deep_metrics_must_be_a_bool(value):
    with pytest.raises(ValueError, match="`deep_metrics`"):
        EmbeddingRetrieval(deep_metrics=value)


def test_query_sample_is_the_same_at_every_world_size_and_order(data):
    """max_queries: the sample is chosen by id after deduplication, so split and repeated updates agree."""
    emb, labels, ids = data
    whole = EmbeddingRetrieval(ks=KS, max_queries=40, query_seed=5)
    whole.update(emb, labels, ids)
    split = EmbeddingRetrieval(ks=KS, max_queries=40, query_seed=5)
    perm = torch.randperm(150, generator=torch.Generator().manual_seed(8))
    split.update(emb[perm[:90]], labels[perm[:90]], ids[perm[:90]])
    split.update(emb[perm[60:]], labels[perm[60:]], ids[perm[60:]])  # 30 repeats, as padding would add
    with pytest.warns(UserWarning, match="30 samples repeated"):
        out = split.compute()
    assert_same(whole.compute(), out)
    assert int(out["num_query_pool"]) == 150 and out["per_query"]["query_id"].numel() == 40
    assert set(whole.output_schema()) == set(out) - {"per_query", "label_names"}


def test_agreeing_states_treat_nan_in_both_copies_as_equal():
    from beyondlabels.metrics import PerSampleMetric

    class Grades(PerSampleMetric):
        def __init__(self):
            super().__init__()
            self.add_sample_state("grades", agree=True)

        def update(self, grades, ids):
            self.append_samples(self.check_ids(ids, len(grades), grades.device), grades=grades)

        def compute(self):
            return {"num_duplicates": self.gathered_samples().num_duplicates}

    m = Grades()
    m.update(torch.tensor([[1.0, float("nan")], [2.0, 0.0]]), torch.tensor([0, 1]))
    m.update(torch.tensor([[1.0, float("nan")]]), torch.tensor([0]))  # a padding copy, NaN where the original has NaN
    assert m.compute()["num_duplicates"] == 1
    m.update(torch.tensor([[2.0, float("nan")]]), torch.tensor([1]))  # disagrees with id 1's 0.0
    with pytest.raises(ValueError, match=r"ids \[1\]"):
        m.compute()


@pytest.mark.slow
def test_two_process_gloo_string_labels_give_every_rank_every_name(data, tmp_path):
    emb, labels, ids = data
    perm = torch.randperm(150, generator=torch.Generator().manual_seed(1))
    # rank 0 sees only the samples of labels 0 and 1, rank 1 the others (plus repeats): no rank sees every name
    low = perm[labels[perm] <= 1]
    high = torch.cat([perm[labels[perm] > 1], low[:4]])
    shards = [(emb[r], labels[r], ids[r]) for r in (low, high)]
    single = EmbeddingRetrieval(ks=KS, curve_max_k=12, return_neighbors=2)
    single.update(emb, [f"class {int(v)}" for v in labels], ids)
    ref = single.compute()
    assert sorted(ref["label_names"].values()) == sorted({f"class {int(v)}" for v in labels})
    out_path = str(tmp_path / "out")
    mp.spawn(_ddp_worker, args=(2, gloo_store(tmp_path), shards, out_path, True, None, True, True), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(f"{out_path}.{rank}")
        assert got["label_names"] == ref["label_names"]
        assert_same(got, ref)


def test_persistent_states_round_trip_with_the_names_of_string_labels(data, tmp_path):
    """``persistent(True)`` + ``state_dict()`` / ``load_state_dict()`` (through a file, as a checkpoint does) gives a
    metric that computes what the original computes, string labels' names included."""
    emb, labels, ids = data
    names = [f"class {int(v)}" for v in labels]
    original = EmbeddingRetrieval(ks=KS)
    original.persistent(True)
    original.update(emb, names, ids)
    torch.save(original.state_dict(), tmp_path / "state.pt")
    restored = EmbeddingRetrieval(ks=KS)
    restored.persistent(True)
    restored.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))  # strict: every key is expected
    expected, got = original.compute(), restored.compute()
    assert got["label_names"] == expected["label_names"] and sorted(got["label_names"].values()) == sorted(set(names))
    assert_same(got, expected)


def test_state_dicts_without_label_names_still_load():
    """A non-persistent metric saves no states (and no names); a state dict of an older version (states without
    ``label_names``) loads strictly and leaves the labels unnamed."""
    assert EmbeddingRetrieval(ks=(1,)).state_dict() == {}
    older = EmbeddingRetrieval(ks=(1,))
    older.persistent(True)
    older.update(torch.eye(3)[[0, 0, 1, 1]], ["a", "a", "b", "b"])
    state = older.state_dict()
    del state["label_names"]
    metric = EmbeddingRetrieval(ks=(1,))
    metric.persistent(True)
    metric.update(torch.eye(3)[[0, 2]], ["x", "y"])
    metric.load_state_dict(state)
    assert metric.compute()["label_names"] == {}
    with pytest.raises(ValueError, match="label_names"):
        metric.load_state_dict({**state, "label_names": ["a"]})


def test_scalars_are_the_schemas_scalar_keys_as_floats(data):
    emb, labels, ids = data
    metric = EmbeddingRetrieval(ks=KS)
    metric.update(emb, labels, ids)
    results = metric.compute()
    logged = metric.scalars(results, prefix="val/")
    expected = [k for k in metric.output_schema().scalar_keys() if k in results]
    assert list(logged) == [f"val/{k}" for k in expected] and "num_queries" in expected
    for key in expected:
        value = logged[f"val/{key}"]
        assert value.dim() == 0 and value.is_floating_point() and float(value) == float(results[key])
    assert not {"per_query", "precision_curve", "label_names"} & {k.split("/", 1)[1] for k in logged}
    with pytest.raises(ValueError, match="prefix"):
        metric.scalars(results, prefix=None)


def test_prepare_returns_the_prepared_rows_and_names_bad_states(data):
    from beyondlabels.functional.search import normalize_rows

    emb, labels, ids = data
    m = EmbeddingRetrieval(ks=KS)
    m.update(emb, labels, ids)
    order = torch.argsort(ids)
    samples = m.gathered_samples(prepare={"embeddings": normalize_rows})
    assert torch.equal(samples.values["embeddings"], normalize_rows(emb[order]))
    assert torch.equal(samples.values["labels"], labels[order])
    # without a sync the states are the process's own and stay raw: a plain call gives the raw rows again
    assert torch.equal(m.gathered_samples().values["embeddings"], emb[order])
    with pytest.raises(ValueError, match=r"`prepare` names \['emb'\], which are not per-sample states"):
        m.gathered_samples(prepare={"emb": normalize_rows})


def test_cosine_compute_frees_the_raw_rows_before_the_search(data, monkeypatch):
    """The search holds the unit rows alone: the deduplicated raw copy is gone before it starts (cosine only)."""
    import weakref

    import beyondlabels.metrics.retrieval as module

    emb, labels, ids = data
    emb, labels = emb.clone(), labels.clone()
    emb[1], labels[1] = emb[0], (labels[0] + 1) % 9  # a cross-label duplicate: the audit's clean re-run drops both
    seen: dict = {"alive": [], "normalized": []}
    normalize, search = module.normalize_rows, module.retrieval_per_query

    def spied_normalize(x, *args, **kwargs):
        seen["raw"] = weakref.ref(x)
        return normalize(x, *args, **kwargs)

    def spied_search(embeddings, *args, **kwargs):
        seen["alive"].append(seen["raw"]() is not None if "raw" in seen else None)
        seen["normalized"].append(kwargs["normalized"])
        return search(embeddings, *args, **kwargs)

    monkeypatch.setattr(module, "normalize_rows", spied_normalize)
    monkeypatch.setattr(module, "retrieval_per_query", spied_search)
    order = torch.argsort(ids)
    audit = {"k": 5, "exclude_suspects": True}

    def same_as_kernel(out: dict, rows: torch.Tensor, distance: str, prefix: str = "") -> None:
        """``out``'s values (under ``prefix``) are the kernel's on the raw rows ``rows`` (positions), bit for bit."""
        ref = embedding_retrieval_metrics(emb[rows], labels[rows], ids[rows], ks=KS, distance=distance)
        mine = {key: out[prefix + key] for key in ref if prefix + key in out}
        if not prefix:
            mine["per_query"] = {key: value for key, value in out["per_query"].items() if key in ref["per_query"]}
        assert_same(mine, {key: value for key, value in ref.items() if key in mine})
        assert len(mine) > 10

    for distance in ("cosine", "euclidean"):
        seen.update(alive=[], normalized=[])
        seen.pop("raw", None)
        m = EmbeddingRetrieval(ks=KS, distance=distance, audit=audit if distance == "cosine" else None)
        m.update(emb, labels, ids)
        out = m.compute()
        same_as_kernel(out, order, distance)
        if distance == "euclidean":
            assert "raw" not in seen and seen["normalized"] == [False]
            continue
        # the search and the audit's clean re-run both take the unit rows, the raw copy already gone
        assert seen["alive"] == [False, False] and seen["normalized"] == [True, True]
        dup = out["audit"]["duplicates"]
        dropped = dup["ids"][dup["cross_label"]].flatten()
        assert sorted(dropped.tolist()) == sorted(ids[:2].tolist()) and int(out["audit_num_excluded"]) == 2
        same_as_kernel(out, order[~torch.isin(ids[order], ids[:2])], distance, prefix="clean/")
