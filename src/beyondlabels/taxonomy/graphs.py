"""Taxonomies from edge lists and directed acyclic graphs.

DAG to tree
    Some hierarchies give a node several parents (WordNet: ``@`` hypernyms and ``@i`` instance hypernyms). A node's
    *level* is the length of the **longest** parent chain from it up to the root (the root has level 0). The tree keeps,
    for each node, the parent of highest level, so every node's tree depth equals its level. Ties (several parents of
    the same level) are broken by the parent's name: the smallest name in Python's string order wins. The rule depends
    only on the graph, never on the order in which edges were read. Cycles (a self-loop included), several roots, or a
    requested root that is not the only node without parents are errors naming the nodes.

Examples:
    >>> tax = taxonomy_from_edges([("dog", "canine"), ("dog", "pet"), ("canine", "mammal"), ("pet", "animal"),
    ...                            ("mammal", "animal")])
    >>> tax.ancestors("dog")   # 'canine' is on the longer chain dog -> canine -> mammal -> animal
    ['dog', 'canine', 'mammal', 'animal']
"""

from __future__ import annotations

from collections.abc import Iterable

from beyondlabels.taxonomy._dag import dag_to_tree, edges_to_tree
from beyondlabels.taxonomy.tree import Taxonomy

__all__ = ["dag_to_tree", "taxonomy_from_edges"]


def taxonomy_from_edges(edges: Iterable[tuple[str, str]], root: str | None = None) -> Taxonomy:
    """A :class:`Taxonomy` from ``(child, parent)`` pairs; a child with several parents follows the DAG rule.

    Examples:
        >>> taxonomy_from_edges([("b", "a"), ("c", "b")]).nodes
        ('a', 'b', 'c')
    """
    tree, found_root = edges_to_tree(edges, root)
    return Taxonomy(tree, root=found_root)
