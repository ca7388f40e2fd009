"""ClipEvaluator: identity, local checkpoints (weights_only), preprocessing, and the text-feature cache (hit, miss,
invalidation when the evaluator changes). A tiny open_clip config with random weights: nothing downloads."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from open_clip.model import CLIP
from open_clip.tokenizer import SimpleTokenizer

from beyondlabels.io.evaluator import TINY_CONFIG, ClipEvaluator, file_sha256

PROMPTS = ["a red square", "a blue circle", "a green triangle"]


def _reference_text_features(model: CLIP, texts):
    """Features straight from open_clip, independently of the evaluator's batching and cache."""
    tokens = SimpleTokenizer(context_length=TINY_CONFIG["text_cfg"]["context_length"])(list(texts))
    with torch.no_grad():
        return model.eval().encode_text(tokens, normalize=True)


def test_random_init_is_seeded_and_identity_recorded():
    a = ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=1)
    b = ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=1)
    c = ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=2)
    assert torch.equal(a.encode_texts(PROMPTS), b.encode_texts(PROMPTS))
    assert not torch.allclose(a.encode_texts(PROMPTS), c.encode_texts(PROMPTS))
    assert a.identity_hash == b.identity_hash != c.identity_hash
    assert a.identity["model"]["config"]["embed_dim"] == 16
    assert a.identity["preprocess"]["resize"] == [32, 32]
    json.dumps(a.identity)  # JSON-ready for reports and run configs


def test_checkpoint_loads_with_weights_only_and_is_hashed(tmp_path):
    torch.manual_seed(5)
    model = CLIP(**TINY_CONFIG)
    path = tmp_path / "clip.pt"
    torch.save(model.state_dict(), path)
    ev = ClipEvaluator(model_cfg=TINY_CONFIG, checkpoint=path, init_seed=99)
    ref = _reference_text_features(model, PROMPTS)
    torch.testing.assert_close(ev.encode_texts(PROMPTS), ref, rtol=0, atol=1e-6)
    assert ev.identity["weights"] == f"checkpoint sha256:{file_sha256(path)}"
    # images: [0, 1] pictures of another size are resized to 32 px and normalised as recorded
    images = torch.rand(4, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    x = torch.nn.functional.interpolate(images, size=(32, 32), mode="bicubic", antialias=True)
    mean = torch.tensor(ev.identity["preprocess"]["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(ev.identity["preprocess"]["std"]).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = model.encode_image((x - mean) / std, normalize=True)
    torch.testing.assert_close(ev.encode_images(images), expected, rtol=0, atol=1e-6)

    class Payload:  # arbitrary pickled objects are refused by weights_only loading
        def __reduce__(self):
            return (print, ("code ran",))

    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps({"state": Payload()}, protocol=2))
    with pytest.raises(ValueError, match="evil.pt is not a file of tensors") as refused:
        ClipEvaluator(model_cfg=TINY_CONFIG, checkpoint=evil)
    assert "weights_only=False" not in str(refused.value) and "safe_globals" not in str(refused.value)
    assert refused.value.__cause__ is None and refused.value.__context__ is None  # PyTorch's advice is not chained


def test_cache_hit_miss_and_invalidation(tmp_path):
    cache = tmp_path / "cache"
    first = ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=3, cache_dir=cache)
    f1 = first.encode_texts(PROMPTS[:2])
    assert (first.cache.hits, first.cache.misses) == (0, 2)
    again = ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=3, cache_dir=cache)
    f2 = again.encode_texts([PROMPTS[1], PROMPTS[2], PROMPTS[1]])
    assert (again.cache.hits, again.cache.misses) == (2, 1)  # only the new prompt is encoded
    assert torch.equal(f2[0], f1[1]) and torch.equal(f2[2], f1[1])
    model = again.model
    torch.testing.assert_close(
        f2, _reference_text_features(model, [PROMPTS[1], PROMPTS[2], PROMPTS[1]]), rtol=0, atol=1e-6
    )
    # a changed evaluator (other weights) never reads the stale entries
    changed = ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=4, cache_dir=cache)
    f3 = changed.encode_texts(PROMPTS[:2])
    assert (changed.cache.hits, changed.cache.misses) == (0, 2)
    assert not torch.allclose(f3, f1)
    # nor does one with other preprocessing
    other_pre = ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=3, cache_dir=cache, mean=(0.5, 0.5, 0.5))
    other_pre.encode_texts(PROMPTS[:1])
    assert other_pre.cache.misses == 1
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 3


def test_cache_is_invalidated_when_the_checkpoint_file_changes(tmp_path):
    path = tmp_path / "clip.pt"
    torch.manual_seed(0)
    torch.save(CLIP(**TINY_CONFIG).state_dict(), path)
    a = ClipEvaluator(model_cfg=TINY_CONFIG, checkpoint=path, cache_dir=tmp_path / "c")
    fa = a.encode_texts(PROMPTS)
    torch.manual_seed(1)
    torch.save(CLIP(**TINY_CONFIG).state_dict(), path)  # same path, new weights
    b = ClipEvaluator(model_cfg=TINY_CONFIG, checkpoint=path, cache_dir=tmp_path / "c")
    fb = b.encode_texts(PROMPTS)
    assert b.cache.misses == 3 and b.cache.hits == 0
    assert not torch.allclose(fa, fb)


def test_bad_inputs():
    with pytest.raises(ValueError, match="exactly one of `model_name`"):
        ClipEvaluator()
    with pytest.raises(ValueError, match="`checkpoint`.*does not exist"):
        ClipEvaluator(model_cfg=TINY_CONFIG, checkpoint="/nonexistent/clip.pt")
    with pytest.raises(ValueError, match="could not create"):
        ClipEvaluator(model_cfg={"embed_dim": 16, "vision_cfg": {"bogus": 1}})
    ev = ClipEvaluator(model_cfg=TINY_CONFIG)
    with pytest.raises(ValueError, match=r"`images` must lie in \[0, 1\]"):
        ev.encode_images(torch.full((1, 3, 32, 32), 2.0))
    with pytest.raises(ValueError, match=r"`images` must be a float tensor \[N, 3, H, W\]"):
        ev.encode_images(torch.rand(3, 32, 32))
    with pytest.raises(ValueError, match="NaN"):
        ev.encode_images(torch.full((1, 3, 32, 32), float("nan")))
    with pytest.raises(ValueError, match="`texts` must be a list of strings"):
        ev.encode_texts("one prompt")


@pytest.mark.parametrize("vision", ["conv", "vit"])
def test_the_demo_dual_encoder_becomes_an_evaluator(tmp_path, vision):
    from beyondlabels.demo.evaluator import save_tiny_clip_evaluator
    from beyondlabels.demo.model import TinyCLIP

    torch.manual_seed(0)
    module = TinyCLIP(
        embed_dim=16,
        vision=vision,
        conv_width=8,
        vision_width=32,
        vision_layers=1,
        vision_head_width=16,
        text_width=32,
        text_heads=2,
        text_layers=1,
    ).eval()
    kwargs = save_tiny_clip_evaluator(module, tmp_path / "tiny.pt")
    assert (
        kwargs["model_cfg"]["vision"] == vision and kwargs["model_factory"] == "beyondlabels.demo.model.tiny_clip_model"
    )
    ev = ClipEvaluator(**kwargs)
    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ev.encode_texts(PROMPTS), module.encode_text(PROMPTS), rtol=0, atol=1e-6)
        torch.testing.assert_close(ev.encode_images(images), module.encode_image(images), rtol=0, atol=1e-6)
    assert ev.identity["weights"].startswith("checkpoint sha256:")
    assert ev.identity["model_factory"] == "beyondlabels.demo.model.tiny_clip_model"
    with pytest.raises(ValueError, match="must be a TinyCLIP"):
        save_tiny_clip_evaluator(torch.nn.Linear(2, 2), tmp_path / "x.pt")


def test_model_factory_must_be_an_importable_function():
    with pytest.raises(ValueError, match="dotted function path"):
        ClipEvaluator(model_factory="nodots", model_cfg={})
    with pytest.raises(ValueError, match="cannot be imported"):
        ClipEvaluator(model_factory="beyondlabels.demo.model.no_such_function", model_cfg={})
    with pytest.raises(ValueError, match="unknown"):
        ClipEvaluator(model_factory="beyondlabels.demo.model.tiny_clip_model", model_cfg={"wings": 2})
