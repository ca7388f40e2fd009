"""CrossModalRetrieval: equals the kernel on images and captions ordered by id, whatever the updates' split and order;
drops repeated ids; names bad input; two gloo processes give exactly the single-process numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from beyondlabels.functional import crossmodal_retrieval_metrics
from beyondlabels.metrics import CrossModalRetrieval
from tests.ddp import gloo_store, init_gloo

KS = (1, 5, 10)


def make_pairs(seed: int = 0, n_images: int = 30, dim: int = 8):
    """Image ids scattered over a large range, 1-4 captions per image with ids of their own, captions near images."""
    g = np.random.default_rng(seed)
    images = g.normal(size=(n_images, dim)).astype(np.float32)
    image_ids = g.permutation(10**6)[:n_images] * 7 + 11
    counts = g.integers(1, 5, size=n_images)
    owner = np.repeat(np.arange(n_images), counts)
    texts = (images[owner] + 1.2 * g.normal(size=(len(owner), dim))).astype(np.float32)
    text_ids = g.permutation(10**6)[: len(owner)] + 5
    return (
        torch.from_numpy(images),
        torch.from_numpy(image_ids),
        torch.from_numpy(texts),
        torch.from_numpy(image_ids[owner]),
        torch.from_numpy(text_ids),
        owner,
    )


@pytest.fixture(scope="module")
def pairs():
    return make_pairs()


def reference(pairs, **kwargs):
    images, image_ids, texts, text_image_ids, text_ids, owner = pairs
    io, to = torch.argsort(image_ids), torch.argsort(text_ids)
    rank_of = torch.empty_like(io)
    rank_of[io] = torch.arange(len(io))
    return crossmodal_retrieval_metrics(
        images[io],
        texts[to],
        rank_of[torch.from_numpy(owner)][to],
        ks=KS,
        image_ids=image_ids[io],
        text_ids=text_ids[to],
        **kwargs,
    )


def assert_same(a: dict, b: dict) -> None:
    for key, x in a.items():
        if key in ("num_duplicates", "neighbors"):
            continue
        if isinstance(x, dict):
            assert x.keys() == b[key].keys()
            for name in x:
                u, v = x[name], b[key][name]
                assert u.dtype == v.dtype and u.shape == v.shape, name
                if u.is_floating_point():
                    assert torch.equal(u.isnan(), v.isnan()) and torch.equal(u.nan_to_num(0.0), v.nan_to_num(0.0)), name
                else:
                    assert torch.equal(u, v), name
        else:
            y = b[key]
            assert x.dtype == y.dtype and (torch.equal(x, y) or bool(x.isnan() & y.isnan())), key


def test_equals_kernel_in_id_order_and_follows_schema(pairs):
    images, image_ids, texts, text_image_ids, text_ids, _ = pairs
    m = CrossModalRetrieval(ks=KS)
    m.update(images, image_ids, texts, text_image_ids, text_ids)
    out = m.compute()
    assert_same(reference(pairs), out)
    assert int(out["num_duplicates"]) == 0
    schema = m.output_schema()
    assert set(out) - {"per_query"} == set(schema)
    assert set(out["per_query"]) == set(schema.per_query)
    assert CrossModalRetrieval.higher_is_better is None and CrossModalRetrieval.full_state_update is False


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_split_and_order_of_updates_do_not_matter(pairs, batch):
    images, image_ids, texts, text_image_ids, text_ids, _ = pairs
    m = CrossModalRetrieval(ks=KS, chunk_size=9)
    g = torch.Generator().manual_seed(batch)
    pt = torch.randperm(len(texts), generator=g)
    for s in range(0, len(texts), batch):  # captions first, in shuffled batches ...
        p = pt[s : s + batch]
        m.update(text_embeddings=texts[p], text_image_ids=text_image_ids[p], text_ids=text_ids[p])
    pi = torch.randperm(len(images), generator=g)
    for s in range(0, len(images), batch):  # ... then the images
        p = pi[s : s + batch]
        m(image_embeddings=images[p], image_ids=image_ids[p])  # forward accumulates like update
    assert_same(reference(pairs), m.compute())


def test_repeated_ids_are_dropped(pairs):
    images, image_ids, texts, text_image_ids, text_ids, _ = pairs
    m = CrossModalRetrieval(ks=KS)
    m.update(images, image_ids, texts, text_image_ids, text_ids)
    m.update(images[:3], image_ids[:3], texts[:4], text_image_ids[:4], text_ids[:4])
    with pytest.warns(UserWarning, match="7 samples repeated an id"):
        out = m.compute()
    assert int(out["num_duplicates"]) == 7
    assert_same(reference(pairs), out)


def test_one_caption_per_image_needs_no_text_ids():
    images, texts = (
        torch.randn(6, 4, generator=torch.Generator().manual_seed(0)),
        torch.randn(6, 4, generator=torch.Generator().manual_seed(1)),
    )
    ids = torch.tensor([5, 3, 9, 1, 0, 7])
    m = CrossModalRetrieval(ks=(1, 5))
    m.update(images, ids, texts, ids)
    order = torch.argsort(ids)
    ref = crossmodal_retrieval_metrics(
        images[order], texts[order], torch.arange(6), ks=(1, 5), image_ids=ids[order], text_ids=ids[order]
    )
    assert_same(ref, m.compute())


def test_neighbors_are_image_ids(pairs):
    images, image_ids, texts, text_image_ids, text_ids, _ = pairs
    m = CrossModalRetrieval(ks=(1,), return_neighbors=2)
    m.update(images, image_ids, texts, text_image_ids, text_ids)
    out = m.compute()
    nb = out["neighbors"]
    assert nb["image_ids"].shape == (len(texts), 2) and torch.equal(nb["text_ids"], torch.sort(text_ids).values)
    assert set(nb["image_ids"].flatten().tolist()) <= set(image_ids.tolist())
    # a caption is a top-1 hit exactly when its first neighbour is its own image
    texts_rows = out["per_query"]["direction"] == 1
    hit = out["per_query"]["text_to_image_recall@1"][texts_rows] == 1
    assert torch.equal(hit, nb["image_ids"][:, 0] == out["per_query"]["image_id"][texts_rows])


def test_bad_input_is_named():
    m = CrossModalRetrieval(ks=(1,))
    with pytest.raises(ValueError, match="image_ids"):
        m.update(torch.ones(2, 3))
    with pytest.raises(ValueError, match="text_image_ids"):
        m.update(text_embeddings=torch.ones(2, 3))
    with pytest.raises(ValueError, match="image_ids"):
        m.update(torch.ones(2, 3), torch.tensor([-1, 2]))
    with pytest.raises(ValueError, match="text_embeddings"):
        m.update(torch.ones(2, 3), torch.tensor([0, 1]), torch.ones(2, 4), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="image_embeddings"):
        m.update(torch.tensor([[float("nan"), 1.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="ks"):
        CrossModalRetrieval(ks=(0,))
    with pytest.raises(ValueError, match="before any sample"), pytest.warns(UserWarning, match="before the ``update``"):
        CrossModalRetrieval().compute()
    m = CrossModalRetrieval(ks=(1,))
    m.update(torch.eye(2), torch.tensor([0, 1]), torch.eye(2), torch.tensor([0, 4]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"captions \[1\] belong to images \[4\]"):
        m.compute()
    m = CrossModalRetrieval(ks=(1,))
    m.update(torch.eye(2), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="0 captions"):
        m.compute()


# ----------------------------------------------------------------------------------------------------------------------
# two processes (gloo)
# ----------------------------------------------------------------------------------------------------------------------


def _worker(rank: int, world: int, store: str, shards, out_path: str, distributed_search: bool) -> None:
    init_gloo(rank, world, store)
    try:
        m = CrossModalRetrieval(ks=KS, return_neighbors=1, chunk_size=8, distributed_search=distributed_search)
        for images, image_ids, texts, text_image_ids, text_ids in shards[rank]:
            m.update(images, image_ids, texts, text_image_ids, text_ids)
        torch.save(m.compute(), f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("distributed_search", [True, False])
def test_two_process_gloo_equals_single_process(pairs, tmp_path, distributed_search):
    images, image_ids, texts, text_image_ids, text_ids, owner = pairs
    # A DistributedSampler over images: rank 0 gets 16 images, rank 1 the other 14 plus 2 of rank 0's again (with
    # their captions), each in batches of 5 images and their captions.
    perm = torch.randperm(len(images), generator=torch.Generator().manual_seed(2))
    owner_t = torch.from_numpy(owner)
    shards = []
    for part in (perm[:16], torch.cat([perm[16:], perm[:2]])):
        batches = []
        for s in range(0, len(part), 5):
            p = part[s : s + 5]
            t = torch.nonzero(torch.isin(owner_t, p)).flatten()
            batches.append((images[p], image_ids[p], texts[t], text_image_ids[t], text_ids[t]))
        shards.append(batches)
    single = CrossModalRetrieval(ks=KS, return_neighbors=1)
    single.update(images, image_ids, texts, text_image_ids, text_ids)
    ref = single.compute()
    out_path = str(tmp_path / "out")
    mp.spawn(_worker, args=(2, gloo_store(tmp_path), shards, out_path, distributed_search), nprocs=2, join=True)
    repeated = 2 + int(torch.isin(owner_t, perm[:2]).sum())
    for rank in range(2):
        got = torch.load(f"{out_path}.{rank}")
        assert int(got["num_duplicates"]) == repeated
        assert_same(ref, got)
        assert torch.equal(got["neighbors"]["image_ids"], ref["neighbors"]["image_ids"])
