"""Class taxonomies: an immutable rooted tree of named nodes with vectorised lookups.

The definitions (node order, depth, ancestors, lowest common ancestor) are stated once in
:mod:`beyondlabels.taxonomy.tree`; trees from edge lists and DAGs in :mod:`beyondlabels.taxonomy.graphs`; free text
mapped to nodes in :mod:`beyondlabels.taxonomy.text`. The files (YAML, JSON, TSV, WordNet 3.0) are read by
:mod:`beyondlabels.io.taxonomy_files`, text encoders named by a string built by :mod:`beyondlabels.io.text_encoders`.
Torch only: no file formats, no Lightning, no torchmetrics, no metric kernels (those that read a taxonomy, such as
:func:`~beyondlabels.functional.hierarchy.taxonomy_class_gains` and
:func:`~beyondlabels.functional.hierarchy.mapping_quality`, live in :mod:`beyondlabels.functional`).

Examples:
    >>> from beyondlabels.taxonomy import Taxonomy
    >>> tax = Taxonomy.from_dict({"root": "shape", "parent": {"polygon": "shape", "square": "polygon"}})
    >>> tax.ancestors("square")
    ['square', 'polygon', 'shape']
"""

from beyondlabels.taxonomy.graphs import dag_to_tree, taxonomy_from_edges
from beyondlabels.taxonomy.text import HashingTextEncoder, NodeMatch, TextToNode, as_encoder, normalize_text
from beyondlabels.taxonomy.tree import Taxonomy

__all__ = [
    "HashingTextEncoder",
    "NodeMatch",
    "Taxonomy",
    "TextToNode",
    "as_encoder",
    "dag_to_tree",
    "normalize_text",
    "taxonomy_from_edges",
]
