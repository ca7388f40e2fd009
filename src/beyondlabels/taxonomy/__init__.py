"""Class taxonomies: an immutable rooted tree of named nodes with vectorised lookups.

The definitions (node order, depth, ancestors, lowest common ancestor) are stated once in
:mod:`beyondlabels.taxonomy.tree`. Torch, YAML and JSON only: no Lightning, no torchmetrics.

Example:
    >>> from beyondlabels.taxonomy import load_taxonomy
    >>> tax = load_taxonomy({"root": "shape", "parent": {"polygon": "shape", "square": "polygon"}})
    >>> tax.ancestors("square")
    ['square', 'polygon', 'shape']
"""

from beyondlabels.taxonomy.tree import Taxonomy, load_taxonomy

__all__ = ["Taxonomy", "load_taxonomy"]
