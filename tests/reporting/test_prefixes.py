"""The declared logged-key prefixes are the evaluation callbacks' default prefixes."""

from __future__ import annotations

import inspect

from beyondlabels import callbacks
from beyondlabels.reporting.prefixes import FAMILY_PREFIXES, LOGGED_PREFIXES


def test_family_prefixes_are_the_callbacks_defaults():
    defaults = {
        inspect.signature(getattr(callbacks, name).__init__).parameters["prefix"].default
        for name in ("RetrievalEvalCallback", "CrossModalEvalCallback", "HierarchyEvalCallback", "RPrecisionCallback", "ZeroShotEvalCallback")
    }
    assert defaults == set(FAMILY_PREFIXES)
    assert LOGGED_PREFIXES == ("val/", *(f"{p}/" for p in FAMILY_PREFIXES))
