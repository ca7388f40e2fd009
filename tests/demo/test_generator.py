"""The text-to-image demo: ShapeGenerator (pictures in [0, 1], deterministic, errors, a short fit lowers the loss),
demo_evaluator (trained once, reused, seeded without touching the caller's RNG, refusing mismatched files), the
datamodule's prompt pool, and ``train.py experiment=t2i_demo`` end to end (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from beyondlabels.demo import (
    ShapeGenerator,
    ShapesDataModule,
    TinyCLIP,
    demo_evaluator,
    export_demo_evaluator,
)
from beyondlabels.demo.evaluator import _FORMAT
from beyondlabels.io.evaluator import file_sha256
from beyondlabels.io.run_files import read_history

PROMPTS = [
    "a small red square in the center",
    "a large blue circle in the upper left",
    "a medium white star at the bottom",
]
TINY_CLIP = dict(
    embed_dim=8, vision_width=16, vision_layers=1, vision_head_width=8, text_width=16, text_heads=2, text_layers=1
)
TINY_DATA = dict(train_per_class=2, val_per_class=1, test_per_class=1, batch_size=16)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one thread is fastest, and two threads spin for seconds per step on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _trainer(tmp_path: Path, **kwargs) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        **kwargs,
    )


# ---- ShapeGenerator --------------------------------------------------------------------------------------------------
def test_generate_shape_range_and_determinism():
    torch.manual_seed(0)
    model = ShapeGenerator()
    images = model.generate(PROMPTS)
    assert images.shape == (3, 3, 32, 32) and images.dtype == torch.float32
    assert float(images.min()) >= 0.0 and float(images.max()) <= 1.0
    assert not images.requires_grad
    assert torch.equal(images, model.generate(PROMPTS))
    assert torch.allclose(images[1:2], model.generate(PROMPTS[1:2]), atol=1e-6), (
        "a picture does not depend on its batch"
    )
    assert not torch.equal(images[0], images[1]), "other captions, other pictures"
    assert model.training, "generate leaves the training mode as it was"


def test_channels_set_the_picture_size():
    assert ShapeGenerator(channels=(16, 8)).generate(["a red square"]).shape == (1, 3, 8, 8)
    assert ShapeGenerator(channels=(12, 12, 6)).generate(["a red square"]).shape == (1, 3, 16, 16)


@pytest.mark.parametrize("prompts", ["a red square", [], ["a red square", 3], None])
def test_bad_prompts_are_refused(prompts):
    with pytest.raises(ValueError, match="`prompts`"):
        ShapeGenerator(channels=(8, 4)).generate(prompts)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"loss": "l2"}, "loss"),
        ({"num_buckets": 0}, "num_buckets"),
        ({"text_dim": 1.5}, "text_dim"),
        ({"channels": []}, "channels"),
        ({"channels": ["wide"]}, "channels"),
        ({"lr": 0.0}, "lr"),
    ],
)
def test_bad_arguments_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        ShapeGenerator(**kwargs)


def test_a_batch_of_another_size_is_refused():
    batch = {"image": torch.rand(2, 3, 32, 32), "caption": PROMPTS[:2]}
    with pytest.raises(ValueError, match="channels"):
        ShapeGenerator(channels=(8, 4)).training_step(batch, 0)


def test_a_short_fit_on_the_datamodule_lowers_the_loss(tmp_path):
    datamodule = ShapesDataModule(train_per_class=4, val_per_class=1, test_per_class=1, batch_size=8)
    train = datamodule.dataset("train")
    batch = {"image": train.images.float() / 255, "caption": train.sample.captions}
    torch.manual_seed(0)
    model = ShapeGenerator(channels=(32, 16, 8, 4), lr=1e-2, warmup_steps=0)
    with torch.no_grad():
        before = float(model._loss(batch)[0])
    trainer = _trainer(tmp_path, max_epochs=4, check_val_every_n_epoch=4)
    trainer.fit(model, datamodule=datamodule)
    with torch.no_grad():
        after = float(model._loss(batch)[0])
    assert after < 0.8 * before, (before, after)
    assert {"train/loss", "val/loss"} <= set(trainer.callback_metrics)


def test_the_datamodule_prompt_pool_is_the_validation_captions_in_id_order():
    datamodule = ShapesDataModule(train_per_class=1, val_per_class=2, test_per_class=1)
    val = datamodule.dataset("val")
    assert datamodule.prompts == [val[i]["caption"] for i in range(len(val))] and len(datamodule.prompts) == 32


# ---- demo_evaluator --------------------------------------------------------------------------------------------------
def _no_training(*args, **kwargs):
    raise AssertionError("the evaluator was trained again")


def test_demo_evaluator_trains_once_then_reuses_the_file(tmp_path, monkeypatch):
    path = tmp_path / "ev" / "clip.pt"
    first = demo_evaluator(path, epochs=1, seed=3, model=TINY_CLIP, data=TINY_DATA, cache_dir=tmp_path / "cache")
    assert path.is_file() and path.with_suffix(".json").is_file()
    assert first.identity["weights"] == f"checkpoint sha256:{file_sha256(path)}"
    assert first.identity["model"]["config"]["embed_dim"] == 8
    record = json.loads(path.with_suffix(".json").read_text())
    assert record["training"] == {"epochs": 1, "seed": 3, "model": TINY_CLIP, "data": TINY_DATA, "defaults": _FORMAT}
    assert not list(path.parent.glob("*.part")), "no temporary file is left behind"

    monkeypatch.setattr("beyondlabels.demo.evaluator._train", _no_training)
    second = demo_evaluator(path, epochs=1, seed=3, model=TINY_CLIP, data=TINY_DATA)
    assert second.identity == first.identity and second.identity_hash == first.identity_hash
    assert torch.equal(second.encode_texts(PROMPTS), first.encode_texts(PROMPTS))
    with pytest.raises(ValueError, match="made with"):
        demo_evaluator(path, epochs=2, seed=3, model=TINY_CLIP, data=TINY_DATA)


def test_demo_evaluator_is_seeded_and_leaves_the_callers_rng_alone(tmp_path):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = demo_evaluator(tmp_path / "a.pt", epochs=1, seed=0, model=TINY_CLIP, data=TINY_DATA)
    assert torch.equal(torch.get_rng_state(), state)
    b = demo_evaluator(tmp_path / "b.pt", epochs=1, seed=0, model=TINY_CLIP, data=TINY_DATA)
    state_a, state_b = torch.load(tmp_path / "a.pt"), torch.load(tmp_path / "b.pt")
    assert state_a.keys() == state_b.keys() and all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert file_sha256(tmp_path / "a.pt") == file_sha256(tmp_path / "b.pt") and a.identity_hash == b.identity_hash


def test_an_exported_tinyclip_is_taken_as_it_is(tmp_path, monkeypatch):
    torch.manual_seed(0)
    clip = TinyCLIP(**TINY_CLIP)
    export_demo_evaluator(clip, tmp_path / "mine.pt")
    monkeypatch.setattr("beyondlabels.demo.evaluator._train", _no_training)
    evaluator = demo_evaluator(tmp_path / "mine.pt", epochs=5)
    expected = clip.eval().encode_text(PROMPTS).detach()
    assert torch.allclose(evaluator.encode_texts(PROMPTS), expected, atol=1e-5)
    assert evaluator.identity["weights"] == f"checkpoint sha256:{file_sha256(tmp_path / 'mine.pt')}"


def test_a_lightning_checkpoint_is_exported_on_first_use(tmp_path, monkeypatch):
    torch.manual_seed(0)
    clip = TinyCLIP(**TINY_CLIP)
    trainer = _trainer(tmp_path, max_steps=1, limit_val_batches=0)
    trainer.fit(clip, datamodule=ShapesDataModule(**TINY_DATA))
    trainer.save_checkpoint(tmp_path / "clip.ckpt")
    monkeypatch.setattr("beyondlabels.demo.evaluator._train", _no_training)
    evaluator = demo_evaluator(tmp_path / "ev.pt", source_checkpoint=tmp_path / "clip.ckpt")
    assert torch.allclose(evaluator.encode_texts(PROMPTS), clip.eval().encode_text(PROMPTS).detach(), atol=1e-5)
    assert demo_evaluator(tmp_path / "ev.pt").identity == evaluator.identity, "later runs reuse it without the source"
    (tmp_path / "other.ckpt").write_bytes((tmp_path / "clip.ckpt").read_bytes())
    with pytest.raises(ValueError, match="made with"):
        demo_evaluator(tmp_path / "ev.pt", source_checkpoint=tmp_path / "other.ckpt")


def test_demo_evaluator_refuses_bad_input(tmp_path):
    torch.save({}, tmp_path / "bare.pt")
    with pytest.raises(ValueError, match="without bare.json"):
        demo_evaluator(tmp_path / "bare.pt")
    with pytest.raises(ValueError, match="`epochs`"):
        demo_evaluator(tmp_path / "x.pt", epochs=0)
    with pytest.raises(ValueError, match="`seed`"):
        demo_evaluator(tmp_path / "x.pt", seed="0")
    with pytest.raises(ValueError, match="`model`"):
        demo_evaluator(tmp_path / "x.pt", model=[1])
    with pytest.raises(ValueError, match="`source_checkpoint`"):
        demo_evaluator(tmp_path / "x.pt", source_checkpoint=tmp_path / "missing.ckpt")
    torch.save({"state_dict": {}}, tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match="not a Lightning checkpoint of a TinyCLIP"):
        demo_evaluator(tmp_path / "x.pt", source_checkpoint=tmp_path / "other.ckpt")
    with pytest.raises(ValueError, match="`path`"):
        demo_evaluator(tmp_path / "x.json")
    with pytest.raises(ValueError, match="TinyCLIP"):
        export_demo_evaluator(ShapeGenerator(channels=(8, 4)), tmp_path / "gen.pt")
    assert not (tmp_path / "gen.pt").exists() and not list(tmp_path.glob("*.part"))


# ---- train.py experiment=t2i_demo ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_t2i_demo_experiment_logs_r_precision(tmp_path):
    from beyondlabels.io import find_offline_runs, read_offline_run
    from tests.entrypoints.helpers import run_script

    tiny_clip = "{" + ",".join(f"{k}:{v}" for k, v in TINY_CLIP.items()) + "}"
    run_script(
        "train.py",
        "experiment=t2i_demo",
        f"paths.log_dir={tmp_path}",
        "data.train_per_class=2",
        "data.val_per_class=8",
        "data.batch_size=32",
        "trainer.max_epochs=2",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        "model.channels=[16,8,4,4]",
        "callbacks.rprecision.num_prompts=128",
        "callbacks.rprecision.every_n_steps=1",
        "strict=true",
        "callbacks.rprecision.near_duplicate_threshold=null",  # a 2-step evaluator embeds many captions alike
        f"t2i_evaluator.model={tiny_clip}",
        "t2i_evaluator.data={train_per_class:2,batch_size:32}",
    )
    assert (tmp_path / "t2i_evaluator" / "tiny_clip.pt").is_file() and (
        tmp_path / "t2i_evaluator" / "tiny_clip.json"
    ).is_file()
    (wandb_file,) = find_offline_runs(tmp_path)
    output_dir = wandb_file.parents[2]
    history = read_history(output_dir / "rprecision" / "history.jsonl")
    assert [h["step"] for h in history] == [1, 2]
    assert all(h["num_samples"] == 128 and h["chance"] == pytest.approx(0.01) for h in history)
    # each evaluation's numbers are numpy's reduction of its per-sample file (one draw, folds protocol): a hit at r is
    # rank <= r, the R-precision the mean of the hits, the CLIP score the mean of the per-sample scores
    for h in history:
        with np.load(output_dir / "rprecision" / h["per_query_file"]) as pq:
            assert pq["rank"].shape == (128,)
            np.testing.assert_array_equal(pq["r_precision"], (pq["rank"] <= 1).astype(float))
            for key, value in (
                ("r_precision", np.mean(pq["rank"] <= 1)),
                ("r_precision@5", np.mean(pq["rank"] <= 5)),
                ("r_precision@10", np.mean(pq["rank"] <= 10)),
                ("clip_score", np.mean(pq["clip_score"])),
            ):
                assert h[key] == pytest.approx(value, rel=1e-12, abs=1e-15), (h["step"], key)
            assert h["text_to_image_r_precision"] == pytest.approx(
                np.mean(pq["text_to_image_r_precision"]), rel=1e-12, abs=1e-15
            )
    saved = json.loads((output_dir / "rprecision" / "evaluator.json").read_text())
    assert (
        saved["evaluator"]["weights"] == f"checkpoint sha256:{file_sha256(tmp_path / 't2i_evaluator' / 'tiny_clip.pt')}"
    )
    run = read_offline_run(wandb_file)
    expected = {"rprecision/r_precision", "rprecision/r_precision@5", "rprecision/clip_score", "rprecision/chance"}
    expected |= {"train/loss", "val/loss"}
    assert expected <= set(run.keys()), sorted(expected - set(run.keys()))
    assert run.config["optimized_metric"] == "rprecision/r_precision"
    assert run.summary["rprecision/r_precision"] == pytest.approx(history[-1]["r_precision"], rel=1e-12, abs=1e-15)
    assert (output_dir / "checkpoints" / "last.ckpt").is_file()
