"""TextImageRPrecision: equal to the kernel, independent of batch size, order and world size (gloo), deduplicated."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from beyondlabels.functional.rprecision import draw_candidate_sets  # noqa: E402
from beyondlabels.metrics.rprecision import TextImageRPrecision  # noqa: E402
from tests.ddp import gloo_store, init_gloo
from tests.oracles.outputs import assert_same_outputs

SETTINGS = dict(num_candidates=12, top_r=(1, 3), repeats=5, seed=4, hard_negatives=True)


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    txt = torch.randn(90, 16, generator=g)
    img = txt + 1.5 * torch.randn(90, 16, generator=g)
    ids = torch.randperm(90, generator=g) * 7 + 100
    classes = ids % 6
    return img, txt, ids, classes


def _oracle_hits(img, txt, ids, distractor_ids):
    """Image -> text hits from the definition (float64), in ascending id order."""
    order = np.argsort(ids.numpy())
    a = img.double().numpy()[order]
    b = txt.double().numpy()[order]
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    row = {int(i): k for k, i in enumerate(ids.numpy()[order])}
    hits = []
    for q, ds in enumerate(distractor_ids.tolist()):
        gt = a[q] @ b[q]
        hits.append(float(all(a[q] @ b[row[d]] < gt for d in ds)))
    return np.array(hits)


def test_equals_the_definition_and_follows_the_schema(data):
    img, txt, ids, classes = data
    m = TextImageRPrecision(**SETTINGS)
    for s in range(0, 90, 13):
        m.update(img[s : s + 13], txt[s : s + 13], ids[s : s + 13], class_ids=classes[s : s + 13])
    out = m.compute()
    sets = draw_candidate_sets(txt, ids, num_candidates=12, seed=4, class_ids=classes)
    hits = _oracle_hits(img, txt, ids, sets.distractor_ids)
    assert out["per_query"]["r_precision"].tolist() == hits.tolist()
    assert 0.1 < hits.mean() < 0.9
    schema = m.output_schema()
    assert set(out) - {"per_query"} == set(schema)
    assert set(out["per_query"]) == set(schema.per_query)


def test_batch_size_order_and_forward_agree(data):
    img, txt, ids, classes = data
    whole = TextImageRPrecision(**SETTINGS)
    whole.update(img, txt, ids, class_ids=classes)
    ref = whole.compute()
    perm = torch.randperm(90, generator=torch.Generator().manual_seed(3))
    split = TextImageRPrecision(**SETTINGS)
    for s in range(0, 90, 4):
        rows = perm[s : s + 4]
        assert split(img[rows], txt[rows], ids[rows], class_ids=classes[rows]) is None  # forward: no per-batch value
    assert_same_outputs(split.compute(), ref)


def test_duplicates_are_dropped_and_captions_exclude(data):
    img, txt, ids, _ = data
    m = TextImageRPrecision(num_candidates=5, top_r=(1,))
    m.update(img, txt, ids)
    m.update(img[:1], txt[:1], ids[:1])
    with pytest.warns(UserWarning, match="repeated an id"):
        out = m.compute()
    assert int(out["num_duplicates"]) == 1 and int(out["num_samples"]) == 90
    # equal caption strings are never distractors of each other: 3 samples, R = 3 needs 2 distinct others
    m = TextImageRPrecision(num_candidates=3, top_r=(1,), near_duplicate_threshold=None)
    m.update(img[:3], txt[:3], torch.arange(3), captions=["a red square", "a red square", "a blue circle"])
    with pytest.raises(ValueError, match="eligible distractors"):
        m.compute()


def test_validation():
    with pytest.raises(ValueError, match="`num_candidates`"):
        TextImageRPrecision(num_candidates=0)
    with pytest.raises(ValueError, match="`top_r`"):
        TextImageRPrecision(num_candidates=5, top_r=(10,))
    with pytest.raises(ValueError, match="`protocol`"):
        TextImageRPrecision(protocol="x")
    m = TextImageRPrecision(num_candidates=3, top_r=(1,))
    with pytest.raises(ValueError, match="`text_embeddings` has 3 rows"):
        m.update(torch.randn(4, 2), torch.randn(3, 2), torch.arange(4))
    with pytest.raises(ValueError, match="`image_embeddings` contains NaN"):
        m.update(torch.full((2, 2), float("nan")), torch.randn(2, 2), torch.arange(2))
    with pytest.raises(ValueError, match="`image_embeddings` must be a 2-D"):
        m.update(torch.randn(4), torch.randn(4, 2), torch.arange(4))
    m.update(torch.randn(4, 2), torch.randn(4, 2), torch.arange(4), class_ids=torch.arange(4))
    m.update(torch.randn(4, 2), torch.randn(4, 2), torch.arange(4, 8))
    with pytest.raises(ValueError, match="pass `class_ids` in every update or in none"):
        m.compute()


# ---- two processes (gloo) --------------------------------------------------------------------------------------------


def _ddp_worker(rank: int, world: int, store: str, shards, out_path: str) -> None:
    init_gloo(rank, world, store)
    try:
        img, txt, ids, classes = shards[rank]
        m = TextImageRPrecision(**SETTINGS)
        for s in range(0, len(ids), 11):  # uneven batches
            m.update(img[s : s + 11], txt[s : s + 11], ids[s : s + 11], class_ids=classes[s : s + 11])
        torch.save(m.compute(), f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_process_gloo_equals_single_process(data, tmp_path):
    img, txt, ids, classes = data
    perm = torch.randperm(90, generator=torch.Generator().manual_seed(1))
    r0, r1 = perm[:50], torch.cat([perm[50:], perm[:10]])  # DistributedSampler-like padding: 10 repeats
    shards = [(img[r], txt[r], ids[r], classes[r]) for r in (r0, r1)]
    single = TextImageRPrecision(**SETTINGS)
    single.update(img, txt, ids, class_ids=classes)
    ref = single.compute()
    out_path = str(tmp_path / "out")
    mp.spawn(_ddp_worker, args=(2, gloo_store(tmp_path), shards, out_path), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(f"{out_path}.{rank}")
        assert int(got["num_duplicates"]) == 10
        assert_same_outputs(got, ref, ignore=("num_duplicates",))
