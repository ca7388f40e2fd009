"""Class taxonomies: an immutable rooted tree of named nodes with vectorised lookups.

The definitions (node order, depth, ancestors, lowest common ancestor) are stated once in
:mod:`beyondlabels.taxonomy.tree`; loaders for edge lists, DAGs and WordNet 3.0 nouns in
:mod:`beyondlabels.taxonomy.loaders`; free text mapped to nodes in :mod:`beyondlabels.taxonomy.text`.
Torch, YAML and JSON only: no Lightning, no torchmetrics, no metric kernels (those that read a taxonomy, such as
:func:`~beyondlabels.functional.hierarchy.taxonomy_class_gains` and
:func:`~beyondlabels.functional.hierarchy.mapping_quality`, live in :mod:`beyondlabels.functional`).

Example:
    >>> from beyondlabels.taxonomy import load_taxonomy
    >>> tax = load_taxonomy({"root": "shape", "parent": {"polygon": "shape", "square": "polygon"}})
    >>> tax.ancestors("square")
    ['square', 'polygon', 'shape']
"""

from beyondlabels.taxonomy.loaders import (
    WORDNET_ROOT,
    dag_to_tree,
    find_wordnet_dir,
    load_taxonomy,
    load_wordnet,
    read_tsv,
    taxonomy_from_edges,
    wordnet_lemmas,
)
from beyondlabels.taxonomy.predictions import HierarchyPredictions, read_hierarchy_predictions
from beyondlabels.taxonomy.text import (
    HashingTextEncoder,
    NodeMatch,
    TextToNode,
    normalize_text,
    text_encoder,
)
from beyondlabels.taxonomy.tree import Taxonomy

__all__ = [
    "WORDNET_ROOT",
    "HashingTextEncoder",
    "HierarchyPredictions",
    "NodeMatch",
    "Taxonomy",
    "TextToNode",
    "dag_to_tree",
    "find_wordnet_dir",
    "load_taxonomy",
    "load_wordnet",
    "normalize_text",
    "read_hierarchy_predictions",
    "read_tsv",
    "taxonomy_from_edges",
    "text_encoder",
    "wordnet_lemmas",
]
