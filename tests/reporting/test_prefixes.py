"""The declared logged-key prefixes are the evaluation callbacks' default prefixes, for every family with a callback
(the callbacks found by their exported names, so a registered family is checked unasked)."""

from __future__ import annotations

import inspect

from beyondlabels import callbacks
from beyondlabels.families import callback_families
from beyondlabels.reporting.prefixes import FAMILY_PREFIXES, LOGGED_PREFIXES


def test_family_prefixes_are_the_callbacks_defaults():
    names = [name for name in callbacks.__all__ if name.endswith("EvalCallback")]
    assert sorted(names) == sorted(family.callback for family in callback_families())
    defaults = [inspect.signature(getattr(callbacks, name).__init__).parameters["prefix"].default for name in names]
    assert sorted(defaults) == sorted(FAMILY_PREFIXES) and len(set(defaults)) == len(defaults)
    assert LOGGED_PREFIXES == ("val/", *(f"{p}/" for p in FAMILY_PREFIXES))


def test_the_prefixes_of_the_families_are_as_before():
    assert FAMILY_PREFIXES[:5] == ("retrieval", "crossmodal", "hierarchy", "rprecision", "zeroshot")
