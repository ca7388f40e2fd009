"""Side information shipped with the demo: the class taxonomy and the class feature profiles.

Both live as YAML files in ``beyondlabels/demo/data/`` so that taxonomy-aware and feature-profile
metrics can be tested on the same fixture the demo trains on.

Example:
    >>> taxonomy = load_taxonomy()
    >>> ancestors("square", taxonomy)
    ['square', 'parallelogram_family', 'quadrilateral', 'polygon', 'shape']
    >>> load_profiles()["classes"]["circle"]["edge_kinds"]
    ['curved']
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from beyondlabels.demo.shapes import CLASS_NAMES


@lru_cache(maxsize=None)
def _read(name: str) -> dict[str, Any]:
    text = resources.files("beyondlabels.demo").joinpath("data", name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


def load_taxonomy() -> dict[str, Any]:
    """The demo class tree as ``{"root": str, "parent": {node: parent}}`` (a fresh copy)."""
    data = _read("taxonomy.yaml")
    return {"root": data["root"], "parent": dict(data["parent"])}


def ancestors(node: str, taxonomy: dict[str, Any] | None = None) -> list[str]:
    """Path from ``node`` up to the root, both included.

    Raises:
        ValueError: if ``node`` is not in the taxonomy or the parent links form a cycle.
    """
    taxonomy = taxonomy or load_taxonomy()
    parent, root = taxonomy["parent"], taxonomy["root"]
    if node != root and node not in parent:
        raise ValueError(f"node {node!r} is not in the taxonomy (root {root!r})")
    path = [node]
    while path[-1] != root:
        nxt = parent.get(path[-1])
        if nxt is None or nxt in path:
            raise ValueError(f"taxonomy path from {node!r} does not reach the root {root!r}: {path + [nxt]}")
        path.append(nxt)
    return path


def load_profiles() -> dict[str, Any]:
    """Feature definitions and per-class profiles: ``{"features": {...}, "classes": {name: {...}}}``."""
    data = _read("profiles.yaml")
    return {"features": data["features"], "classes": {k: dict(v) for k, v in data["classes"].items()}}


def leaf_classes() -> tuple[str, ...]:
    """The demo classes, in label order."""
    return CLASS_NAMES
