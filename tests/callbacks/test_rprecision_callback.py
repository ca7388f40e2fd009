"""RPrecisionEvalCallback in a real Trainer: a generator whose pictures carry their prompt's colour, a colour evaluator
(analytic: a faithful generator scores 1, a constant one 0 under the strict tie rule), the tiny open_clip evaluator,
the evaluator identity in the run files, and the media table rows."""

from __future__ import annotations

import hashlib
import json

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from beyondlabels.callbacks import RPrecisionEvalCallback
from beyondlabels.callbacks.rprecision import select_prompts
from beyondlabels.io.evaluator import TINY_CONFIG, ClipEvaluator

POOL = [f"shape number {i}" for i in range(40)]


def _colour(prompt: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(int(hashlib.sha256(prompt.encode()).hexdigest()[:12], 16))
    return torch.rand(3, generator=g) * 0.8 + 0.1


class ColourEvaluator:
    """Images → their mean colour (centred); prompts → their colour (centred): a perfect generator matches exactly."""

    identity = {"model": "colour", "weights": "none"}
    identity_hash = "colour"

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        return images.mean(dim=(2, 3)) - 0.5

    def encode_texts(self, texts) -> torch.Tensor:
        return torch.stack([_colour(t) for t in texts]) - 0.5


class Generator(pl.LightningModule):
    def __init__(self, faithful: bool = True) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.faithful = faithful
        self.prompts = POOL

    def generate(self, prompts):
        if not self.faithful:
            return torch.full((len(prompts), 3, 8, 8), 0.7)
        return torch.stack([_colour(p).view(3, 1, 1).expand(3, 8, 8) for p in prompts])

    def training_step(self, batch, batch_idx):
        return (self.w - batch[0].mean()) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(tmp_path, module, callback, steps=4):
    trainer = pl.Trainer(
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
    )
    trainer.fit(module, DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4))
    return trainer


@pytest.mark.parametrize(
    ("faithful", "key", "expected"),
    [(True, "r_precision", 1.0), (True, "text_to_image_r_precision", 1.0), (False, "text_to_image_r_precision", 0.0)],
)
def test_analytic_generators(tmp_path, faithful, key, expected):
    """A faithful generator ranks every own caption first; identical pictures tie, and ties are misses."""
    cb = RPrecisionEvalCallback(
        ColourEvaluator(),
        num_prompts=24,
        num_candidates=10,
        top_r=(1, 5),
        every_n_steps=2,
        strict=True,
        near_duplicate_threshold=None,
        confidence_intervals=False,
    )
    trainer = _fit(tmp_path, Generator(faithful), cb)
    assert [h["step"] for h in cb.history] == [2, 4]
    assert all(h[key] == expected and h["num_samples"] == 24 and h["chance"] == pytest.approx(0.1) for h in cb.history)
    assert float(trainer.callback_metrics[f"rprecision/{key}"]) == expected
    assert len(cb.history[-1]["r_precision_curve"]) == 10
    saved = json.loads((tmp_path / "rprecision" / "evaluator.json").read_text())
    assert saved["evaluator"] == ColourEvaluator.identity and saved["protocol"]["num_candidates"] == 10


_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    """splitmix64's finaliser, modulo 2**64."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _distractors(query_id: int, pool_ids: list[int], count: int, seed: int = 0, repeat: int = 0) -> list[int]:
    """The documented seeded draw (no classes, distinct captions, no near-duplicate rule): positions
    ``(h_j mod 2**63) mod N`` of the ascending pool, ``h_j`` the splitmix64 stream seeded with ``mix(base ^ q)``,
    skipping the query itself and samples already kept, until ``count`` are kept."""
    space = sorted(pool_ids)
    base = _mix(_mix(seed) ^ _mix((repeat * _GAMMA + 1) & _MASK))
    state = _mix(base ^ query_id)
    kept: list[int] = []
    j = 0
    while len(kept) < count:
        h = _mix((state + (j + 1) * _GAMMA) & _MASK)
        candidate = space[(h % (1 << 63)) % len(space)]
        if candidate != query_id and candidate not in kept:
            kept.append(candidate)
        j += 1
    return kept


def test_tiny_open_clip_evaluator_and_table_rows(tmp_path):
    """The tiny open_clip evaluator: the ranks, the R-precision and the media table rows equal a computation here from
    the evaluator's embeddings of the generated pictures and prompts, with the candidate sets drawn by hand."""
    import numpy as np

    evaluator = ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=0, cache_dir=tmp_path / "cache")
    cb = RPrecisionEvalCallback(
        evaluator,
        num_prompts=20,
        num_candidates=8,
        top_r=(1,),
        every_n_steps=4,
        strict=True,
        num_table_rows=5,
        confidence_intervals=False,
        near_duplicate_threshold=None,
    )
    captured = []

    describe = cb.describe_media

    def spy(trainer_, results, media):  # the family's hook, run by the base on rank 0, into a recording stand-in
        fake = _Media()
        describe(trainer_, results, fake)
        captured.append((results, fake.tables))

    cb.describe_media = spy
    module = Generator(True)
    trainer = _fit(tmp_path, module, cb)
    record = cb.history[-1]
    assert len(cb.history) == 1 and len(captured) == 1 and record["num_candidates"] == 8
    assert (evaluator.cache.misses, evaluator.cache.hits) == (20, 0)
    again = cb.evaluate(trainer, module)  # the prompts' features now come from the cache
    assert (evaluator.cache.misses, evaluator.cache.hits) == (20, 20)
    assert float(again["r_precision"]) == record["r_precision"]

    results, tables = captured[0]
    ids = results["per_query"]["query_id"].tolist()
    assert len(ids) == 20 and len(set(ids)) == 20 and all(0 <= i < len(POOL) for i in ids)
    prompts = [POOL[i] for i in ids]
    with torch.no_grad():
        images = module.generate(prompts)
        u = evaluator.encode_images(images).double().numpy()
        t = evaluator.encode_texts(prompts).double().numpy()
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    s = u @ t.T  # s[a, b]: picture of prompt a against prompt b
    where = {i: n for n, i in enumerate(ids)}
    i2t, t2i = {}, {}
    for n, q in enumerate(ids):
        others = [where[d] for d in _distractors(q, ids, 7)]
        for d in others:  # a gap this small could flip under fp32 rounding: the test data must avoid it
            assert abs(s[n, d] - s[n, n]) > 1e-5 and abs(s[d, n] - s[n, n]) > 1e-5
        i2t[q] = 1 + int((s[n, others] >= s[n, n]).sum())
        t2i[q] = 1 + int((s[others, n] >= s[n, n]).sum())
    assert dict(zip(ids, results["per_query"]["rank"].long().tolist())) == i2t
    assert record["r_precision"] == pytest.approx(np.mean([r == 1 for r in i2t.values()]), abs=1e-12)
    assert record["text_to_image_r_precision"] == pytest.approx(np.mean([r == 1 for r in t2i.values()]), abs=1e-12)
    assert 0 < record["r_precision"] < 1, "the untrained tiny evaluator should rank some own captions first, not all"
    # the table: the five smallest ids, each with its prompt, the picture generated from it and its own-caption rank
    columns, rows = tables["samples"]
    assert columns == ["prompt", "generated_image", "rank_of_own_caption", "id"]
    assert [r["id"] for r in rows] == sorted(ids)[:5]
    for row in rows:
        assert row["prompt"] == POOL[row["id"]] and row["rank_of_own_caption"] == i2t[row["id"]]
        assert torch.equal(row["generated_image"], _colour(POOL[row["id"]]).view(3, 1, 1).expand(3, 8, 8))


def test_sample_pictures_are_written_beside_the_history(tmp_path):
    """Without W&B the generated samples still land on disk: one grid per evaluation, titled with prompt and rank."""
    from PIL import Image

    cb = RPrecisionEvalCallback(
        ColourEvaluator(),
        num_prompts=12,
        num_candidates=6,
        top_r=(1,),
        every_n_steps=2,
        strict=True,
        num_table_rows=5,
        confidence_intervals=False,
        near_duplicate_threshold=None,
    )
    _fit(tmp_path, Generator(True), cb)
    grids = sorted((tmp_path / "rprecision" / "samples").glob("step_*.png"))
    assert [g.name for g in grids] == ["step_000000002.png", "step_000000004.png"]
    width, height = Image.open(grids[0]).size
    assert width > 4 * 100 and height > 2 * 100  # 5 pictures: a 4-column grid of 2 rows
    cb_off = RPrecisionEvalCallback(
        ColourEvaluator(),
        num_prompts=12,
        num_candidates=6,
        top_r=(1,),
        every_n_steps=4,
        strict=True,
        num_table_rows=0,
        confidence_intervals=False,
        near_duplicate_threshold=None,
        save_dir=tmp_path / "off",
    )
    _fit(tmp_path, Generator(True), cb_off)
    assert (tmp_path / "off" / "history.jsonl").is_file() and not (tmp_path / "off" / "samples").exists()


class _Media:
    def __init__(self):
        self.tables = {}

    def table(self, name, columns, rows):
        self.tables[name] = (columns, rows)


def test_table_rows_hold_prompt_image_and_rank(tmp_path):
    cb = RPrecisionEvalCallback(
        ColourEvaluator(),
        num_prompts=12,
        num_candidates=6,
        top_r=(1,),
        every_n_steps=100,
        strict=True,
        num_table_rows=4,
        confidence_intervals=False,
        near_duplicate_threshold=None,
        save_dir=False,
    )
    module = Generator(True)
    trainer = _fit(tmp_path, module, cb, steps=1)  # fit end evaluates once
    assert len(cb.history) == 1
    captured = {}
    original = cb.describe_media

    def spy(trainer_, results, media):
        fake = _Media()
        original(trainer_, results, fake)
        captured.update(fake.tables)

    cb.describe_media = spy
    cb.evaluate(trainer, module)
    columns, rows = captured["samples"]
    assert columns == ["prompt", "generated_image", "rank_of_own_caption", "id"]
    ids, prompts = select_prompts(POOL, 12, 0)
    assert [r["id"] for r in rows] == ids[:4] and [r["prompt"] for r in rows] == prompts[:4]
    assert all(r["rank_of_own_caption"] == 1 and r["generated_image"].shape == (3, 8, 8) for r in rows)


def test_bad_settings():
    with pytest.raises(ValueError, match="`evaluator` must have an `encode_images`"):
        RPrecisionEvalCallback(object())
    with pytest.raises(ValueError, match="`num_prompts` 16 is below `num_candidates` 100"):
        RPrecisionEvalCallback(ColourEvaluator(), num_prompts=16)
    with pytest.raises(ValueError, match="`num_prompts` 50 exceeds the 40 prompts"):
        select_prompts(POOL, 50, 0)


def test_hydra_config_instantiates_with_a_local_evaluator(tmp_path):
    import hydra
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from beyondlabels.callbacks import RPrecisionEvalCallback as Exported

    GlobalHydra.instance().clear()
    with initialize_config_module(version_base="1.3", config_module="beyondlabels.conf"):  # the shipped config
        node = compose(config_name="beyondlabels/callbacks/pytorch_lightning/rprecision").callbacks
    GlobalHydra.instance().clear()
    root = OmegaConf.create({"paths": {"log_dir": str(tmp_path)}, "callbacks": node})
    root.callbacks.rprecision.evaluator = {
        "_target_": "beyondlabels.io.evaluator.ClipEvaluator",
        "model_cfg": TINY_CONFIG,
        "cache_dir": "${paths.log_dir}/cache",
    }
    cb = hydra.utils.instantiate(root.callbacks.rprecision)
    assert isinstance(cb, Exported) and cb.metric.num_candidates == 100 and cb.every_n_steps == 200
    assert cb.evaluator.cache.folder.parent == tmp_path / "cache"
