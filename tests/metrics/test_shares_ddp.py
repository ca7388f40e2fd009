"""Retrieval, cross-modal retrieval, R-precision, hierarchy and zero-shot under DDP: each rank computes only its share
of the queries (the kernel is spied on in every rank: it is called once, with the rank's share, and returns that
share's rows; retrieval's leave-one-out search multiplies 1/W of the single search's scores, none twice), and every
output of every rank equals the single-process result bit for bit, at W=4 (the default group) and W=2 (a subgroup of
ranks 0 and 1: the metrics' ``process_group``), from DistributedSampler shards (uneven, padded with repeated samples,
in batches). A query short of distractors in one rank's share only is raised, with W=1's message, on every rank.
``compute()`` holds the deduplicated samples in place of the gathered copies and gives each process its own states
back (a second ``compute()`` equals the first; two deduplications within one sync count the same copies). One spawn
of 4 processes serves every assertion."""

from __future__ import annotations

import contextlib
import math
import warnings
import weakref

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import beyondlabels.functional._leave_one_out as search
import beyondlabels.metrics.base as metrics_base
from beyondlabels.functional.search import normalize_rows
from beyondlabels.metrics import (
    CrossModalRetrieval,
    EmbeddingRetrieval,
    HierarchicalPrecisionRecall,
    TextImageRPrecision,
    ZeroShotClassification,
)
from beyondlabels.metrics.base import ProcessExchange
from beyondlabels.taxonomy import Taxonomy
from tests.ddp import gloo_store, init_gloo
from tests.oracles.outputs import assert_same_outputs

N = 45  # samples (images for cross-modal): uneven over 2 and 4 ranks
KERNELS = {  # the per-query kernel each metric module calls, by family
    "crossmodal": ("beyondlabels.metrics.crossmodal", "crossmodal_per_query"),
    "rprecision": ("beyondlabels.metrics.rprecision", "rprecision_per_query"),
    "hierarchy": ("beyondlabels.metrics.hierarchy", "hierarchy_per_query"),
    "zeroshot": ("beyondlabels.metrics.zeroshot", "classification_per_query"),
    "retrieval": ("beyondlabels.metrics.retrieval", "audit_label_shares"),  # the label audit's per-item part
}
TREE = Taxonomy({f"n{i}": ("root" if i < 3 else f"n{(i - 3) // 2}") for i in range(20)}, root="root")
RETRIEVAL = {  # leave-one-out: the candidate search (deep R), running top lists (shallow), with the label audit
    "retrieval": dict(ks=(1, 5), return_neighbors=3, chunk_size=64, audit={"k": 5, "exclude_suspects": True}),
    "retrieval_shallow": dict(ks=(1, 4), deep_metrics=False, chunk_size=16, distance="euclidean"),
}
N_RETRIEVAL = 1100  # 11 classes: R about 100, deep enough for the candidate search
RP_SETTINGS = dict(num_candidates=8, top_r=(1, 3), repeats=4, seed=7, hard_negatives=True, near_duplicate_threshold=0.9)


def make_data() -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randperm(1000, generator=g)[:N] * 3 + 5  # scattered ids
    images = torch.randn(N, 8, generator=g)
    owner = torch.repeat_interleave(torch.arange(N), torch.randint(1, 4, (N,), generator=g))
    texts = images[owner] + 1.1 * torch.randn(owner.numel(), 8, generator=g)
    prompts = torch.randn(N, 8, generator=g)
    short = prompts.clone()
    short[-9:] = short[-9] + 1e-3 * torch.randn(9, 8, generator=g)  # 9 near-duplicates: the largest ids go short
    labels = torch.randint(0, 6, (N,), generator=g)
    return {
        "ids": ids,
        "crossmodal": (images, texts, owner, torch.randperm(5000, generator=g)[: owner.numel()]),
        "rprecision": (prompts + 1.2 * torch.randn(N, 8, generator=g), prompts, torch.randint(0, 3, (N,), generator=g)),
        "short": (torch.randn(N, 8, generator=g), short),
        "hierarchy": (torch.randint(0, len(TREE), (N,), generator=g), torch.randint(1, len(TREE), (N,), generator=g)),
        "zeroshot": (torch.randn(N, 6, generator=g) + 1.5 * torch.nn.functional.one_hot(labels, 6), labels),
        "retrieval": (
            torch.randn(11, 12, generator=g)[torch.arange(N_RETRIEVAL) % 11]
            + 1.3 * torch.randn(N_RETRIEVAL, 12, generator=g),
            torch.arange(N_RETRIEVAL) % 11,
        ),
    }


def sampler_shard(rank: int, world: int, n: int = N) -> torch.Tensor:
    """The sample positions DistributedSampler(shuffle=True, seed=3) gives `rank` (padded with repeated samples)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(3)).tolist()
    total = -(-n // world) * world
    order += order[: total - N]
    return torch.tensor(order[rank:total:world])


def build(family: str, data: dict, rows: torch.Tensor, **kwargs):
    """The family's metric updated with the samples at `rows`, in batches of 4."""
    ids = data["ids"]
    if family in RETRIEVAL:
        emb, labels = data["retrieval"]
        m = EmbeddingRetrieval(**RETRIEVAL[family], **kwargs)
        for part in rows.split(100):
            m.update(emb[part], labels[part], part * 7 + 2)
    elif family == "crossmodal":
        images, texts, owner, text_ids = data["crossmodal"]
        m = CrossModalRetrieval(ks=(1, 3), return_neighbors=2, chunk_size=4, **kwargs)
        for part in rows.split(4):
            t = torch.nonzero(torch.isin(owner, part)).flatten()
            m.update(images[part], ids[part], texts[t], ids[owner[t]], text_ids[t])
    elif family in ("rprecision", "short"):
        settings = {**RP_SETTINGS, "num_candidates": 40} if family == "short" else RP_SETTINGS
        m = TextImageRPrecision(**settings, chunk_size=5, **kwargs)
        img, txt = data[family][:2]
        for part in rows.split(4):
            m.update(img[part], txt[part], ids[part], class_ids=None if family == "short" else data[family][2][part])
    elif family == "hierarchy":
        pred, gt = data["hierarchy"]
        m = HierarchicalPrecisionRecall(TREE, chunk_size=3, **kwargs)
        for part in rows.split(4):
            m.update(pred[part], gt[part], ids[part])
    else:
        scores, labels = data["zeroshot"]
        m = ZeroShotClassification(num_classes=6, ks=(1, 2), **kwargs)
        for part in rows.split(4):
            m.update(scores[part], labels[part], ids[part])
    return m


def _spy(calls: list) -> None:
    """Record, for every call of a family's kernel, its share and the number of query rows it returned."""
    import importlib

    for family, (module_name, name) in KERNELS.items():
        module = importlib.import_module(module_name)
        kernel = getattr(module, name)

        def spied(*args, _kernel=kernel, _family=family, **kwargs):
            out = _kernel(*args, **kwargs)
            if _family == "crossmodal":
                counts = (out["image_to_text/query_index"].numel(), out["text_to_image/query_index"].numel())
            else:
                counts = (next(iter(out.values())).shape[0],)
            calls.append((_family, kwargs.get("share"), counts))
            return out

        setattr(module, name, spied)

    blocks = search._symmetric_blocks

    def counted(*args, **kwargs):  # the scores of the symmetric blocks this process multiplies
        for item in blocks(*args, **kwargs):
            calls.append(("scores", item[-1].numel()))
            yield item

    search._symmetric_blocks = counted


def _worker(rank: int, world: int, store: str, data: dict, out_path: str) -> None:
    init_gloo(rank, world, store)
    piece = metrics_base._GATHER_PIECE_BYTES
    try:
        calls: list = []
        _spy(calls)
        pair = dist.new_group([0, 1])  # every rank takes part in creating it
        results: dict = {}
        solo = [dist.new_group([r]) for r in range(world)]  # a group of one process has nothing to gather
        alone = torch.arange(6).view(3, 2)
        with _counted_gathers() as gathers:
            got = ProcessExchange(solo[rank]).rows_by_rank({"x": alone})
        results["solo"] = len(got["x"]) == 1 and got["x"][0] is alone, len(gathers)
        for size, group in ((world, None), (2, pair)):
            if rank >= size:
                continue
            for family in ("crossmodal", "rprecision", "hierarchy", "zeroshot", "short", *RETRIEVAL):
                rows = sampler_shard(rank, size, N_RETRIEVAL if family in RETRIEVAL else N)
                kwargs = {} if group is None else {"process_group": group}
                before = len(calls)
                try:
                    metric = build(family, data, rows, **kwargs)
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        results[family, size] = metric.compute()
                    results[family, size, "warned"] = [
                        str(w.message) for w in caught if "repeated an id" in str(w.message)
                    ]
                except ValueError as exc:
                    results[family, size] = str(exc)
                results[family, size, "calls"] = calls[before:]
                if family == "retrieval":  # within a sync the prepared rows stand in for the gathered state
                    with _counted_gathers() as gathers:
                        metric.sync()  # the per-sample states (ids, embeddings, labels) in two gathers
                    results["sync gathers", size] = len(gathers)
                    prepare = {"embeddings": normalize_rows}
                    first = metric.gathered_samples(prepare=prepare).values["embeddings"]
                    second = metric.gathered_samples(prepare=prepare).values["embeddings"]
                    held = metric.embeddings
                    try:
                        metric.gathered_samples()
                        refused = ""
                    except ValueError as exc:
                        refused = str(exc)
                    metric.unsync()
                    results["prepared", size] = (first, torch.equal(first, second), held is second, refused)
                if family == "zeroshot":  # the batches are joined before the gather, in the states and the cache
                    fresh = build(family, data, rows, **kwargs)
                    names = ["ids", *fresh._sample_states]
                    batches = {name: len(getattr(fresh, name)) for name in names}
                    first = weakref.ref(getattr(fresh, names[1])[0])
                    fresh.compute()
                    results["joined", size] = batches, {name: len(getattr(fresh, name)) for name in names}, first()
                if family == "zeroshot":  # compute() again: the process's own states came back
                    metric.compute_with_cache = False
                    results["again", size] = metric.compute()
                    results["local", size] = sorted(torch.cat(metric.ids).tolist()), rows.tolist()
                    metric.sync()  # twice within one sync: the second call counts the copies the first dropped
                    first, second = metric.gathered_samples(), metric.gathered_samples()
                    metric.unsync()
                    results["twice", size] = (
                        first.num_duplicates,
                        second.num_duplicates,
                        torch.equal(first.ids, second.ids),
                    )
                    metric.sync()  # a compute() that raises after the gather leaves the metric synced ...
                    metric.gathered_samples()
                    metric.reset()  # ... and the runner resets it: the process's states come back, then clear
                    scores, labels = data["zeroshot"]
                    metric.update(scores[rows], labels[rows], data["ids"][rows])
                    results["after failure", size] = metric.compute()
            # per-query rows of many dtypes and shapes, uneven (one rank has none), in two gathers
            exchange = ProcessExchange(group)
            with _counted_gathers() as gathers:
                results["concat", size] = exchange.concat_rows(_rows_of(rank)), len(gathers)
            metrics_base._GATHER_PIECE_BYTES = 40  # the buffer in pieces of 40 bytes, a gather each
            try:
                with _counted_gathers() as gathers:
                    results["concat in pieces", size] = exchange.concat_rows(_rows_of(rank)), len(gathers)
            finally:
                metrics_base._GATHER_PIECE_BYTES = piece
            try:
                exchange.concat_rows({"x": torch.zeros(2, 3 + (rank == 1))})
                results["concat mismatch", size] = ""
            except ValueError as exc:
                results["concat mismatch", size] = str(exc)
        torch.save(results, f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def _counted_gathers():
    """The calls of ``torch.distributed.all_gather`` made inside the block (a list, one entry a call)."""
    calls: list = []
    real = dist.all_gather

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    dist.all_gather = counting
    try:
        yield calls
    finally:
        dist.all_gather = real


def _rows_of(rank: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s per-query rows for `ProcessExchange.concat_rows`: uneven counts (rank 1 none), dtypes of 1,
    2, 4 and 8 bytes (rows whose bytes are not a multiple of 8 among them), 1-D to 3-D."""
    n = [2, 0, 3, 1][rank]
    g = torch.Generator().manual_seed(rank)
    return {
        "score": torch.randn(n, generator=g),
        "curve": torch.randn(n, 5, generator=g, dtype=torch.float64),
        "index": torch.randint(-(2**40), 2**40, (n, 2, 3), generator=g),
        "hit": torch.rand(n, 3, generator=g) > 0.5,
        "half": torch.randn(n, 3, generator=g).half(),
        "byte": torch.randint(0, 256, (n, 7), generator=g, dtype=torch.uint8),
    }


def _expected_duplicates(family: str, data: dict, world: int) -> int:
    """The samples a sampler repeats to even out the ranks (for cross-modal: the repeated images and their captions)."""
    n = N_RETRIEVAL if family in RETRIEVAL else N
    repeated = -(-n // world) * world - n
    if family != "crossmodal":
        return repeated
    again = torch.randperm(N, generator=torch.Generator().manual_seed(3))[:repeated]
    return repeated + int(torch.isin(data["crossmodal"][2], again).sum())


def _expected_counts(family: str, data: dict, rank: int, world: int) -> tuple[int, ...]:
    if family == "crossmodal":  # the core's search interleaves each direction's queries between the shares
        n_txt = data["crossmodal"][2].numel()
        return len(range(rank, N, world)), len(range(rank, n_txt, world))
    return ((rank + 1) * N // world - rank * N // world,)  # a contiguous run of the id-ordered samples


@pytest.mark.slow
def test_every_rank_computes_its_share_and_every_output_equals_one_process(tmp_path, monkeypatch):
    data = make_data()
    single, scores = {}, {}
    for family in ("crossmodal", "rprecision", "hierarchy", "zeroshot"):
        single[family] = build(family, data, torch.arange(N)).compute()
    blocks = search._symmetric_blocks
    for family in RETRIEVAL:  # and the scores its search multiplies
        counts: list = []

        def counted(*args, _counts=counts, **kwargs):
            for item in blocks(*args, **kwargs):
                _counts.append(item[-1].numel())
                yield item

        monkeypatch.setattr(search, "_symmetric_blocks", counted)
        single[family] = build(family, data, torch.arange(N_RETRIEVAL)).compute()
        scores[family] = sum(counts)
    monkeypatch.undo()
    assert int(single["retrieval"]["audit_num_suspects"]) > 0  # the audit has something to report
    with pytest.raises(ValueError, match=r"has only \d+ eligible distractors") as short:
        build("short", data, torch.arange(N)).compute()
    assert 0.1 < float(single["rprecision"]["r_precision"]) < 0.9  # a value that a wrong split would change
    out_path = str(tmp_path / "out")
    mp.spawn(_worker, args=(4, gloo_store(tmp_path), data, out_path), nprocs=4, join=True)
    got = [torch.load(f"{out_path}.{rank}", weights_only=False) for rank in range(4)]
    assert all(got[rank]["solo"] == (True, 0) for rank in range(4))
    for world in (4, 2):
        for rank in range(world):
            result = got[rank]
            for family, ref in single.items():
                context = (family, world, rank)
                out = result[family, world]
                assert int(out["num_duplicates"]) == _expected_duplicates(family, data, world), context
                # the sampler's padding copies at most W - 1 items (for cross-modal: images with their captions)
                assert result[family, world, "warned"] == [], context
                assert_same_outputs(out, ref, context, ignore=("num_duplicates",))
                if family == "crossmodal":
                    assert torch.equal(out["neighbors"]["image_ids"], ref["neighbors"]["image_ids"])
                if family in RETRIEVAL:  # 1/W of the single search's scores, and the audit's tables
                    every = [
                        sum(call[1] for call in got[r][family, world, "calls"] if call[0] == "scores")
                        for r in range(world)
                    ]
                    assert sum(every) == scores[family] and max(every) <= scores[family] / world * 1.02, context
                    if "audit" in ref:
                        assert_same_outputs(out["audit"], ref["audit"], context)
                        audit_calls = [c for c in result[family, world, "calls"] if c[0] == family]
                        span = (rank + 1) * N_RETRIEVAL // world - rank * N_RETRIEVAL // world
                        assert audit_calls == [(family, (rank, world), (span,))], context
                    continue
                # the kernel ran once, on this rank's share only
                assert result[family, world, "calls"] == [
                    (family, (rank, world), _expected_counts(family, data, rank, world))
                ], context
            batches, joined, first = result["joined", world]
            assert min(batches.values()) > 1 and set(joined.values()) == {1} and first is None, (world, rank)
            assert result["sync gathers", world] == 2, (world, rank)
            unit, again_equal, held, refused = result["prepared", world]
            assert torch.equal(unit, normalize_rows(data["retrieval"][0])), (world, rank)
            assert again_equal and held and "already replaced by prepared rows" in refused, (world, rank)
            # compute() holds the deduplicated samples in place of the gathered ones, then gives the states back
            again = result["again", world]
            assert int(again["num_duplicates"]) == _expected_duplicates("zeroshot", data, world)
            assert_same_outputs(again, single["zeroshot"], ("again", world, rank), ignore=("num_duplicates",))
            after = result["after failure", world]
            assert int(after["num_duplicates"]) == _expected_duplicates("zeroshot", data, world)
            assert_same_outputs(after, single["zeroshot"], ("after failure", world, rank), ignore=("num_duplicates",))
            every = [_rows_of(r) for r in range(world)]
            # each process's bytes, every tensor padded to 16 bytes; the fullest process's is the buffer gathered
            buffer = max(sum(-(-t.numel() * t.element_size() // 16) * 16 for t in part.values()) for part in every)
            for how, expected_gathers in (("concat", 2), ("concat in pieces", 1 + math.ceil(buffer / 40))):
                rows, gathers = result[how, world]
                assert gathers == expected_gathers, (how, world, rank)
                assert list(rows) == list(every[0]), (how, world, rank)
                for key, value in rows.items():
                    expected = torch.cat([part[key] for part in every])
                    assert value.dtype == expected.dtype and torch.equal(value, expected), (how, key, world, rank)
            mismatch = result["concat mismatch", world]
            assert "rows `x`" in mismatch and "one dtype and trailing shape" in mismatch, (world, rank, mismatch)
            local, shard = result["local", world]
            repeated = _expected_duplicates("zeroshot", data, world)
            assert result["twice", world] == (repeated, repeated, True), (world, rank)
            assert local == sorted(data["ids"][shard].tolist()), (world, rank)
            # the short queries (the 9 largest ids) lie in the last rank's share alone; every rank raises W=1's error
            assert result["short", world] == str(short.value), (world, rank)
