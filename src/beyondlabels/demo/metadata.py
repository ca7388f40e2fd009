"""Side information shipped with the demo: the class taxonomy and the class feature profiles.

Both live as YAML files in ``beyondlabels/demo/data/`` so that taxonomy-aware and feature-profile
metrics can be tested on the same fixture the demo trains on. They load through the library types
:class:`~beyondlabels.taxonomy.Taxonomy` and :class:`~beyondlabels.profiles.FeatureProfiles`
(:func:`demo_taxonomy`, :func:`demo_profiles`: the objects configs and metrics take); :func:`taxonomy_dict` and
:func:`profiles_dict` are plain-dict views of those.

Examples:
    >>> taxonomy = taxonomy_dict()
    >>> ancestors("square", taxonomy)
    ['square', 'parallelogram_family', 'quadrilateral', 'polygon', 'shape']
    >>> profiles_dict()["classes"]["circle"]["edge_kinds"]
    ['curved']
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from beyondlabels.demo.shapes import CLASS_NAMES
from beyondlabels.io.profiles_files import read_profiles
from beyondlabels.io.taxonomy_files import load_taxonomy, read_taxonomy
from beyondlabels.profiles import FeatureProfiles
from beyondlabels.taxonomy import Taxonomy


@cache
def demo_taxonomy() -> Taxonomy:
    """The demo class tree (``data/taxonomy.yaml``); its leaves are exactly the demo classes.

    Examples:
        >>> tax = demo_taxonomy()
        >>> tax.root, set(tax.leaves) == set(CLASS_NAMES)
        ('shape', True)
    """
    with resources.as_file(resources.files("beyondlabels.demo").joinpath("data", "taxonomy.yaml")) as path:
        return read_taxonomy(path)


@cache
def demo_profiles() -> FeatureProfiles:
    """The demo classes' feature profiles (``data/profiles.yaml``), checked to cover every demo class.

    Examples:
        >>> profiles = demo_profiles()
        >>> profiles.ordinal_matrix().shape, profiles.set_groups["edge_kinds"]
        (torch.Size([16, 5]), ('straight', 'curved'))
    """
    with resources.as_file(resources.files("beyondlabels.demo").joinpath("data", "profiles.yaml")) as path:
        profiles = read_profiles(path)
    profiles.require_classes(CLASS_NAMES)
    return profiles


def taxonomy_dict() -> dict[str, Any]:
    """The demo class tree as ``{"root": str, "parent": {node: parent}}`` (a fresh copy).

    Examples:
        >>> taxonomy_dict()["parent"]["square"]
        'parallelogram_family'
    """
    return demo_taxonomy().to_dict()


def ancestors(node: str, taxonomy: Taxonomy | dict[str, Any] | None = None) -> list[str]:
    """Path from ``node`` up to the root, both included (:meth:`Taxonomy.ancestors`).

    Args:
        node: a node name.
        taxonomy: a :class:`~beyondlabels.taxonomy.Taxonomy`, a ``{"root", "parent"}`` dict, or None for the demo's.

    Raises:
        ValueError: if ``node`` is not in the taxonomy or the parent links are not a tree.

    Examples:
        >>> ancestors("circle")
        ['circle', 'curved', 'shape']
    """
    tree = demo_taxonomy() if taxonomy is None else load_taxonomy(taxonomy)
    return tree.ancestors(node)


def profiles_dict() -> dict[str, Any]:
    """Feature definitions and per-class profiles: ``{"features": {"ordinal": ..., "sets": ...}, "classes": {...}}``.

    A fresh copy; set values are listed in each group's allowed order.

    Examples:
        >>> profiles_dict()["features"]["sets"]["edge_kinds"]
        ['straight', 'curved']
    """
    data = demo_profiles().to_dict()
    return {"features": data["features"], "classes": data["classes"]}


def leaf_classes() -> tuple[str, ...]:
    """The demo classes, in label order.

    Examples:
        >>> leaf_classes()[:2]
        ('square', 'rectangle')
    """
    return CLASS_NAMES
