"""The checkpoint state key of every evaluation family of the registry (:mod:`beyondlabels.families`): two instances
that differ in one of the family's state-key parts (or the prefix) get different keys, equal arguments give equal
keys, and the key is the same whichever Lightning package the callback class is imported for (so a checkpoint of one
package resumes under the other). The instances are the ones each family's core lists (``examples()``), so a family
is checked here the moment it is registered."""

from __future__ import annotations

import importlib

import pytest

from beyondlabels.families import callback_families

PACKAGES = {"pytorch_lightning": "beyondlabels.callbacks", "lightning.pytorch": "beyondlabels.callbacks.lightning"}
FAMILIES = {family.name: family for family in callback_families()}


def _examples(family: str) -> list[dict]:
    """The core's instances plus one with another prefix; the first is the plain one."""
    examples = FAMILIES[family].load("core").examples()
    assert examples and all(isinstance(e, dict) for e in examples), "examples() lists keyword arguments"
    return [*examples, {**examples[0], "prefix": f"{family}_b"}]


def _make(package: str, family: str, **changes):
    kwargs = {**_examples(family)[0], **changes}
    return getattr(importlib.import_module(PACKAGES[package]), FAMILIES[family].callback)(**kwargs)


def _make_from(package: str, family: str, kwargs: dict):
    return getattr(importlib.import_module(PACKAGES[package]), FAMILIES[family].callback)(**kwargs)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_state_keys_separate_instances_and_agree_across_packages(family):
    pytest.importorskip("lightning.pytorch")
    plain, *variants = _examples(family)
    keys = {package: _make_from(package, family, plain).state_key for package in PACKAGES}
    assert keys["pytorch_lightning"] == keys["lightning.pytorch"], "the key must not depend on the Lightning package"
    assert _make_from("pytorch_lightning", family, plain).state_key == keys["pytorch_lightning"], "equal arguments"
    assert keys["pytorch_lightning"].startswith(FAMILIES[family].state_name + "{")
    assert len(variants) >= 2, "examples() gives at least one variant besides the plain instance"
    for kwargs in variants:
        variant = {package: _make_from(package, family, kwargs).state_key for package in PACKAGES}
        assert variant["pytorch_lightning"] == variant["lightning.pytorch"], kwargs
        assert variant["pytorch_lightning"] != keys["pytorch_lightning"], kwargs
        assert _make_from("pytorch_lightning", family, kwargs).state_key == variant["pytorch_lightning"], kwargs
    all_keys = [keys["pytorch_lightning"]] + [_make_from("pytorch_lightning", family, v).state_key for v in variants]
    assert len(set(all_keys)) == len(all_keys), "each part changes the key on its own"


def test_the_state_keys_of_the_families_are_as_before():
    """The class names the state keys start with are those checkpoints were written under (a renamed callback keeps
    its earlier one)."""
    before = {
        "retrieval": "RetrievalEvalCallback",
        "crossmodal": "CrossModalEvalCallback",
        "hierarchy": "HierarchyEvalCallback",
        "rprecision": "RPrecisionCallback",
        "zeroshot": "ZeroShotEvalCallback",
    }
    assert {family: FAMILIES[family].state_name for family in before} == before
    key = _make("pytorch_lightning", "rprecision").state_key
    assert key == "RPrecisionCallback{'prefix': 'rprecision', 'generate_method': 'generate', 'evaluator': 'example-a'}"


def test_text_source_keys_follow_the_text_method():
    """A free-text hierarchy callback is told apart by its text method, not the (unused) predict method."""
    base = _make("pytorch_lightning", "hierarchy", source="text")
    assert _make("pytorch_lightning", "hierarchy", source="text", text_method="caption").state_key != base.state_key
    assert _make("pytorch_lightning", "hierarchy", source="text", predict_method="classify").state_key == base.state_key
