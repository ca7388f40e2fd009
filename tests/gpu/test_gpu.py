"""CUDA results equal the CPU results of the same inputs: cross-modal, zero-shot and ranking metrics, the statistics,
the retrieval callback under ``Trainer(accelerator="gpu")`` and a two-process NCCL run of a metric.

Marked ``gpu``; skipped without CUDA. With ``BEYONDLABELS_GPU_DRY_RUN=1`` they run on the CPU (``devices.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from beyondlabels.callbacks import RetrievalEvalCallback  # noqa: E402
from beyondlabels.functional import embedding_retrieval_metrics  # noqa: E402
from beyondlabels.functional.abtest import ab_test  # noqa: E402
from beyondlabels.functional.bootstrap import bootstrap_ci, bootstrap_difference_ci  # noqa: E402
from beyondlabels.metrics import (  # noqa: E402
    CrossModalRetrieval,
    EmbeddingRetrieval,
    GradedRanking,
    ZeroShotClassification,
)
from tests.callbacks.toy import (
    LinearEncoder,
    PointDataModule,
    brute_force_precision_at_1_and_r_precision,
)
from tests.gpu.devices import (
    accelerator_device,
    assert_matches_cpu,
    cosine_tolerance,
    lightning_accelerator,
    needs_accelerator,
    needs_devices,
    process_group_backend,
)

pytestmark = [pytest.mark.gpu, needs_accelerator]

DIM = 16


def min_gap(scores: np.ndarray) -> float:
    """Smallest gap between two scores of one row (float64)."""
    s = np.sort(scores, axis=1)
    return float(np.diff(s, axis=1).min())


def tie_free_pairs(n_images: int = 40, captions: int = 2, gap: float = 1e-5):
    """Images and ``captions`` noisy captions each, with no two image-caption cosines of a query (either direction)
    within ``gap``, so the rounding of either device cannot reorder them. Caption ids are scattered."""
    for seed in range(200):
        g = np.random.default_rng(seed)
        images = g.normal(size=(n_images, DIM))
        owner = np.repeat(np.arange(n_images), captions)
        texts = images[owner] + 1.5 * g.normal(size=(len(owner), DIM))
        unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
        cos = unit(images) @ unit(texts).T
        if min(min_gap(cos), min_gap(cos.T)) > gap:
            text_ids = g.permutation(10**5)[: len(owner)]
            image_ids = np.arange(n_images) * 3 + 1
            return (
                torch.tensor(images, dtype=torch.float32),
                torch.from_numpy(image_ids),
                torch.tensor(texts, dtype=torch.float32),
                torch.from_numpy(image_ids[owner]),
                torch.from_numpy(text_ids),
            )
    raise RuntimeError("no tie-free sample found")


def to(device, *tensors):
    return tuple(t.to(device) for t in tensors)


def test_crossmodal_metric_on_cuda_equals_cpu():
    device = accelerator_device()
    images, image_ids, texts, text_image_ids, text_ids = tie_free_pairs()
    outs = {}
    for side, dev in (("cpu", torch.device("cpu")), ("device", device)):
        metric = CrossModalRetrieval(ks=(1, 5, 10), return_neighbors=5).to(dev)
        half = len(text_ids) // 2
        metric.update(*to(dev, images, image_ids))
        metric.update(
            text_embeddings=texts[:half].to(dev),
            text_image_ids=text_image_ids[:half].to(dev),
            text_ids=text_ids[:half].to(dev),
        )
        metric.update(
            text_embeddings=texts[half:].to(dev),
            text_image_ids=text_image_ids[half:].to(dev),
            text_ids=text_ids[half:].to(dev),
        )
        outs[side] = metric.compute()
    assert {"per_query", "neighbors"} <= outs["cpu"].keys()
    assert_matches_cpu(outs["device"], outs["cpu"], device, tolerances={"neighbors/scores": cosine_tolerance(DIM)})


def test_crossmodal_fast_mode_on_cuda_equals_fp32_cpu():
    device = accelerator_device()
    images, image_ids, texts, text_image_ids, text_ids = tie_free_pairs()
    outs = {}
    for side, dev, precision in (("cpu", torch.device("cpu"), "fp32"), ("device", device, "fp16")):
        metric = CrossModalRetrieval(ks=(1, 5), precision=precision).to(dev)
        metric.update(*to(dev, images, image_ids, texts, text_image_ids, text_ids))
        outs[side] = metric.compute()
    assert_matches_cpu(outs["device"], outs["cpu"], device)


def test_zeroshot_metric_on_cuda_equals_cpu():
    device = accelerator_device()
    g = torch.Generator().manual_seed(0)
    num_classes, n = 12, 150
    labels = torch.randint(0, num_classes, (n,), generator=g)
    scores = torch.randn(n, num_classes, generator=g) + 1.5 * torch.nn.functional.one_hot(labels, num_classes)
    scores[::7, 3] = scores[::7, 5]  # exact ties: the smaller class index ranks first on either device
    ids = torch.randperm(n, generator=g) + 100
    outs, batches = {}, {}
    for side, dev in (("cpu", torch.device("cpu")), ("device", device)):
        metric = ZeroShotClassification(num_classes=num_classes, ks=(1, 3, 5)).to(dev)
        batches[side] = metric(*to(dev, scores[:60], labels[:60], ids[:60]))
        metric.update(*to(dev, scores[60:], labels[60:], ids[60:]))
        metric.update(*to(dev, scores[:5], labels[:5], ids[:5]))  # repeats, dropped by id
        outs[side] = metric.compute()
    assert int(outs["cpu"]["num_duplicates"]) == 5
    assert_matches_cpu(batches["device"], batches["cpu"], device)
    assert_matches_cpu(outs["device"], outs["cpu"], device)


def ranking_rows(num_queries: int = 40, width: int = 25, seed: int = 3):
    """Float64 score rows (ties, -inf = not retrieved) and grades (NaN = unjudged)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(num_queries, width, generator=g, dtype=torch.float64).mul(20).floor()  # many exact ties
    scores[torch.rand(num_queries, width, generator=g) < 0.2] = float("-inf")
    grades = torch.randint(0, 4, (num_queries, width), generator=g).to(torch.float64)
    grades[torch.rand(num_queries, width, generator=g) < 0.3] = float("nan")
    return scores, grades, torch.arange(num_queries) * 2 + 1


def test_ranking_audit_on_cuda_equals_cpu():
    device = accelerator_device()
    scores, grades, ids = ranking_rows()
    outs = {}
    for side, dev in (("cpu", torch.device("cpu")), ("device", device)):
        metric = GradedRanking(ks=(1, 5, 10)).to(dev)
        metric.update(*to(dev, scores[:17], grades[:17], ids[:17]))
        metric.update(*to(dev, scores[17:], grades[17:], ids[17:]))
        outs[side] = metric.compute()
    assert_matches_cpu(outs["device"], outs["cpu"], device)


def test_bootstrap_and_ab_test_of_cuda_tensors_equal_cpu():
    """The resampling generator lives on the CPU: CUDA inputs give the CPU intervals and decisions exactly."""
    device = accelerator_device()
    g = torch.Generator().manual_seed(5)
    a = torch.rand(300, generator=g, dtype=torch.float64)
    b = (a + 0.03 + 0.1 * torch.randn(300, generator=g, dtype=torch.float64)).clamp(0, 1)
    a[::17] = float("nan")
    ids_a, ids_b = torch.arange(300), torch.randperm(300, generator=g)
    b_shuffled = b[ids_b]  # run B lists the queries in another order: matched by id
    lat_a, lat_b = torch.rand(300, generator=g, dtype=torch.float64), torch.rand(300, generator=g, dtype=torch.float64)
    for method in ("percentile", "bca"):
        cpu = bootstrap_ci(a, rounds=800, method=method, seed=3)
        assert bootstrap_ci(a.to(device), rounds=800, method=method, seed=3) == cpu
        assert cpu.n == 300 - len(range(0, 300, 17)) and cpu.method == method
    cpu = bootstrap_difference_ci(a, b, rounds=700, seed=2)
    assert bootstrap_difference_ci(a.to(device), b.to(device), rounds=700, seed=2) == cpu
    kwargs = {"rounds": 900, "seed": 4, "guardrails": {"latency": (lat_a, lat_b, False)}}
    cpu = ab_test(a, b_shuffled, ids_a, ids_b, **kwargs)
    dev_kwargs = {**kwargs, "guardrails": {"latency": (lat_a.to(device), lat_b.to(device), False)}}
    got = ab_test(a.to(device), b_shuffled.to(device), ids_a.to(device), ids_b.to(device), **dev_kwargs)
    assert got == cpu
    assert cpu.n == 300 - len(range(0, 300, 17)) and cpu.unmatched == 0 and "latency" in cpu.guardrails


class DeviceRecordingEncoder(LinearEncoder):
    """The toy encoder, recording the device of every batch the callback encodes."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded_on: set[str] = set()

    def encode_image(self, x: torch.Tensor) -> torch.Tensor:
        self.encoded_on.add(str(x.device))
        return super().encode_image(x)


def test_retrieval_callback_under_a_gpu_trainer_equals_cpu_metrics(tmp_path: Path):
    device = accelerator_device()
    dm, model = PointDataModule(), DeviceRecordingEncoder()
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1, 5), num_mismatches=0, projection_points=0)
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=2,
        accelerator=lightning_accelerator(),
        devices=1,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, dm)
    assert model.encoded_on == {str(device)}
    assert [h["epoch"] for h in callback.history] == [0, 1]
    with torch.no_grad():
        emb = model.proj.cpu()(torch.from_numpy(dm.eval_set.points))
    labels = torch.from_numpy(dm.eval_set.labels)
    unit = emb.double() / emb.double().norm(dim=1, keepdim=True)
    cos = (unit @ unit.T).numpy()
    np.fill_diagonal(cos, -2.0)
    assert min_gap(cos) > 1e-5, "near-tied scores: the devices' rounding could reorder them"
    cpu = embedding_retrieval_metrics(emb, labels, torch.arange(len(labels)), ks=(1, 5))
    last = callback.history[-1]
    scalars = [key for key, value in cpu.items() if isinstance(value, torch.Tensor) and value.dim() == 0]
    assert {"precision@1", "r_precision", "map@r", "ndcg@5"} <= set(scalars)
    for key in scalars:
        assert last[key] == pytest.approx(float(cpu[key]), rel=1e-12, abs=1e-12), key
    p1, rp = brute_force_precision_at_1_and_r_precision(emb.numpy(), dm.eval_set.labels)
    assert last["precision@1"] == pytest.approx(p1, abs=1e-12) and last["r_precision"] == pytest.approx(rp, abs=1e-12)


def _ddp_worker(rank: int, world: int, init_file: str, shards: list, reference: dict) -> None:
    device = accelerator_device(rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    dist.init_process_group(process_group_backend(), init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        metric = EmbeddingRetrieval(ks=(1, 5, 10), return_neighbors=4).to(device)
        emb, labels, ids = shards[rank]
        for s in range(0, len(ids), 16):
            metric.update(*to(device, emb[s : s + 16], labels[s : s + 16], ids[s : s + 16]))
        out = metric.compute()
        assert int(out.pop("num_duplicates")) == 1
        assert_matches_cpu(out, reference, device, tolerances={"neighbors/scores": cosine_tolerance(DIM)})
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@needs_devices(2)
def test_two_process_nccl_retrieval_equals_single_process_cpu(tmp_path: Path):
    """Two ranks, each on its own GPU, split the search and gather: both return the single-process CPU values."""
    n, classes = 60, 6
    labels = torch.arange(n) % classes
    for seed in range(200):  # a sample without near ties, so that the devices' rounding cannot reorder scores
        g = torch.Generator().manual_seed(seed)
        centres = torch.randn(classes, DIM, generator=g, dtype=torch.float64)
        emb64 = centres[labels] + 0.8 * torch.randn(n, DIM, generator=g, dtype=torch.float64)
        unit = emb64 / emb64.norm(dim=1, keepdim=True)
        cos = (unit @ unit.T).numpy()
        np.fill_diagonal(cos, -2.0)
        if min_gap(cos) > 1e-5:
            break
    else:
        raise RuntimeError("no tie-free sample found")
    emb, ids = emb64.float(), torch.randperm(n, generator=g) * 5 + 2
    single = EmbeddingRetrieval(ks=(1, 5, 10), return_neighbors=4)
    single.update(emb, labels, ids)
    reference = single.compute()
    assert int(reference.pop("num_duplicates")) == 0
    perm = torch.randperm(n, generator=g)
    r0, r1 = perm[:35], torch.cat([perm[35:], perm[:1]])  # uneven shares and a sampler's repeat
    shards = [(emb[r], labels[r], ids[r]) for r in (r0, r1)]
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), shards, reference), nprocs=2, join=True)
