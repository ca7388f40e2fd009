"""The checkpoint state key of every evaluation family: two instances that differ in one of the family's state-key
parts (or the prefix) get different keys, equal arguments give equal keys, and the key is the same whichever
Lightning package the callback class is imported for (so a checkpoint of one package resumes under the other)."""

from __future__ import annotations

import importlib

import pytest
import torch

from beyondlabels.taxonomy import Taxonomy

TREE = Taxonomy({"A": "root", "a0": "A", "a1": "A"}, root="root")
PACKAGES = {"pytorch_lightning": "beyondlabels.callbacks", "lightning.pytorch": "beyondlabels.callbacks.lightning"}


class Evaluator:
    """The least an R-precision evaluator needs; its ``identity_hash`` is part of the state key."""

    def __init__(self, identity_hash: str) -> None:
        self.identity_hash = identity_hash

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1)

    def encode_texts(self, texts) -> torch.Tensor:
        return torch.zeros(len(texts), 3)


# family -> (class name, arguments every instance shares, [the arguments of a variant that differs in one part])
FAMILIES = {
    "retrieval": ("RetrievalEvalCallback", {}, [{"encode_method": "encode_text"}, {"prefix": "retrieval_b"}]),
    "crossmodal": ("CrossModalEvalCallback", {}, [{"image_method": "embed_image"}, {"text_method": "embed_text"}, {"prefix": "crossmodal_b"}]),
    "zeroshot": ("ZeroShotEvalCallback", {"templates": ["a {}"]}, [{"image_method": "embed_image"}, {"templates": ["a {}", "the {}"]},
                                                                   {"prefix": "zeroshot_b"}]),
    "hierarchy": ("HierarchyEvalCallback", {"taxonomy": TREE}, [{"predict_method": "classify"}, {"source": "text"},
                                                                {"prefix": "hierarchy_b"}]),
    "rprecision": ("RPrecisionCallback", {"evaluator": "clip-a", "num_prompts": 8, "num_candidates": 4, "top_r": (1,), "r": 1},
                   [{"generate_method": "sample"}, {"evaluator": "clip-b"}, {"prefix": "rprecision_b"}]),
}  # fmt: skip


def _make(package: str, family: str, **changes):
    name, shared, _ = FAMILIES[family]
    kwargs = {**shared, **changes}
    if "evaluator" in kwargs:
        kwargs["evaluator"] = Evaluator(kwargs["evaluator"])
    return getattr(importlib.import_module(PACKAGES[package]), name)(**kwargs)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_state_keys_separate_instances_and_agree_across_packages(family):
    pytest.importorskip("lightning.pytorch")
    keys = {package: _make(package, family).state_key for package in PACKAGES}
    assert keys["pytorch_lightning"] == keys["lightning.pytorch"], "the key must not depend on the Lightning package"
    assert _make("pytorch_lightning", family).state_key == keys["pytorch_lightning"], "equal arguments, equal keys"
    name = FAMILIES[family][0]
    assert keys["pytorch_lightning"].startswith(name + "{")
    variants = FAMILIES[family][2]
    for changes in variants:
        variant = {package: _make(package, family, **changes).state_key for package in PACKAGES}
        assert variant["pytorch_lightning"] == variant["lightning.pytorch"], changes
        assert variant["pytorch_lightning"] != keys["pytorch_lightning"], changes
        assert _make("pytorch_lightning", family, **changes).state_key == variant["pytorch_lightning"], changes
    all_keys = [keys["pytorch_lightning"]] + [_make("pytorch_lightning", family, **c).state_key for c in variants]
    assert len(set(all_keys)) == len(all_keys), "each part changes the key on its own"


def test_text_source_keys_follow_the_text_method():
    """A free-text hierarchy callback is told apart by its text method, not the (unused) predict method."""
    base = _make("pytorch_lightning", "hierarchy", source="text")
    assert _make("pytorch_lightning", "hierarchy", source="text", text_method="caption").state_key != base.state_key
    assert _make("pytorch_lightning", "hierarchy", source="text", predict_method="classify").state_key == base.state_key
