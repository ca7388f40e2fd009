"""The text-feature cache read as a file from elsewhere: a cache folder copied from another model, shards that are
not this evaluator's features, and a pickle in place of a shard, each a ValueError that names the file."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import torch

from beyondlabels.io.atomic import save_torch
from beyondlabels.io.evaluator import TINY_CONFIG, ClipEvaluator, TextFeatureCache

TEXTS = ["a red square", "a blue circle"]


def _evaluator(cache: Path, seed: int = 3) -> ClipEvaluator:
    return ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=seed, cache_dir=cache)


def _shard(folder: Path, features: torch.Tensor, keys: list[str] | None = None) -> Path:
    path = folder / "shard_0000.pt"
    save_torch({"keys": keys or [TextFeatureCache.key(t) for t in TEXTS], "features": features}, path)
    return path


def test_a_cache_copied_from_another_model_is_refused(tmp_path: Path):
    first = _evaluator(tmp_path / "a")
    reference = first.encode_texts(TEXTS)  # writes identity.json and a shard under a's identity hash
    other = _evaluator(tmp_path / "b", seed=4)
    (tmp_path / "b").mkdir()
    shutil.copytree(first.cache.folder, other.cache.folder)  # renamed to the other evaluator's hash
    with pytest.raises(ValueError, match="names another evaluator") as refused:
        other.encode_texts(TEXTS)
    assert str(other.cache.folder) in str(refused.value) and "identity.json" in str(refused.value)
    again = _evaluator(tmp_path / "a")  # its own cache reads back
    torch.testing.assert_close(again.encode_texts(TEXTS), reference)
    assert again.cache.hits == 2


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda f: f * 4000, "not L2-normalised"),
        (lambda f: torch.nn.functional.normalize(torch.randn(2, 8), dim=1), "width 8, but this evaluator's have 16"),
        (lambda f: f.double(), "float32"),
        (lambda f: f.clone().fill_(float("nan")), "NaN"),
    ],
)
def test_shards_that_are_not_this_evaluators_features_are_refused(tmp_path: Path, change, expected):
    good = _evaluator(tmp_path)
    features = good.encode_texts(TEXTS).cpu()
    folder = good.cache.folder
    for old in folder.glob("shard_*.pt"):
        old.unlink()
    shard = _shard(folder, change(features))
    with pytest.raises(ValueError, match=expected) as refused:
        _evaluator(tmp_path).encode_texts(TEXTS)
    assert str(shard) in str(refused.value)


def test_a_pickle_shard_is_refused_and_never_run(tmp_path: Path):
    good = _evaluator(tmp_path)
    good.encode_texts(TEXTS)

    class Payload:
        def __reduce__(self):
            return (Path(tmp_path / "ran").write_text, ("code ran",))

    shard = good.cache.folder / "shard_ffff.pt"
    shard.write_bytes(pickle.dumps({"keys": [], "features": Payload()}, protocol=2))
    with pytest.raises(ValueError, match="not a file of tensors") as refused:
        _evaluator(tmp_path).encode_texts(TEXTS)
    assert str(shard) in str(refused.value) and "weights_only=False" not in str(refused.value)
    assert not (tmp_path / "ran").exists()


def test_shards_without_an_identity_are_refused(tmp_path: Path):
    good = _evaluator(tmp_path)
    good.encode_texts(TEXTS)
    (good.cache.folder / "identity.json").unlink()
    with pytest.raises(ValueError, match="no identity.json"):
        _evaluator(tmp_path).encode_texts(TEXTS)
