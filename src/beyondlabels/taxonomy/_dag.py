"""Parent links of a taxonomy from graph data: the DAG-to-tree rule on parent lists and edge lists.

The rule is defined in :mod:`beyondlabels.taxonomy.graphs`; this module holds the parts
:class:`~beyondlabels.taxonomy.Taxonomy` itself builds with (``from_dict`` with several parents), so that the tree does
not import :mod:`~beyondlabels.taxonomy.graphs`, which imports the tree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from beyondlabels._internal.names import listing


def dag_to_tree(parents: Mapping[str, Iterable[str]], root: str | None = None) -> tuple[dict[str, str], str]:
    """Keep, for every node, its parent on the longest chain to the root (rule and ties:
    :mod:`beyondlabels.taxonomy.graphs`).

    Args:
        parents: ``{child: [parent, ...]}``; names are non-empty strings; a child with an empty list is a root.
        root: the expected root; None means the single node without parents.

    Returns:
        ``(parent, root)``: ``{child: parent}`` for every node but the root, and the root's name.

    Raises:
        ValueError: for a cycle (its nodes are named), several roots (named), a ``root`` that has parents or is not
            a node, or a name that is not a non-empty string.

    Examples:
        >>> dag_to_tree({"b": ["a"], "c": ["a", "b"]})
        ({'b': 'a', 'c': 'b'}, 'a')
    """
    links: dict[str, set[str]] = {}
    for child, pars in parents.items():
        if not isinstance(child, str) or not child:
            raise ValueError(f"node names must be non-empty strings, got the child {child!r}")
        if isinstance(pars, str):
            pars = [pars]
        bucket = links.setdefault(child, set())
        for par in pars:
            if not isinstance(par, str) or not par:
                raise ValueError(f"node names must be non-empty strings, got the parent {par!r} of {child!r}")
            bucket.add(par)
    nodes = set(links) | {p for ps in links.values() for p in ps}
    tops = sorted(n for n in nodes if not links.get(n))
    if root is not None:
        if root not in nodes:
            raise ValueError(f"the root {root!r} is not a node of the graph; nodes without parents: {listing(tops)}")
        if links.get(root):
            raise ValueError(f"the root {root!r} has parents {listing(sorted(links[root]))}; the root has none")
    if not tops:
        raise ValueError("every node has a parent, so the parent links form a cycle and there is no root")
    if len(tops) > 1:
        raise ValueError(
            f"the graph has several roots (nodes without parents): {listing(tops)}; give all but one a parent"
            + (f", or add a common root above them (expected root {root!r})" if root is not None else "")
        )
    root = tops[0]
    # Kahn's algorithm from the root downwards: a node's level is known once all its parents' levels are.
    children: dict[str, list[str]] = {}
    waiting: dict[str, int] = {}
    for child, pars in links.items():
        waiting[child] = len(pars)
        for par in pars:
            children.setdefault(par, []).append(child)
    level: dict[str, int] = {root: 0}
    ready = [root]
    while ready:
        node = ready.pop()
        for child in children.get(node, ()):
            waiting[child] -= 1
            if waiting[child] == 0:
                level[child] = 1 + max(level[p] for p in links[child])
                ready.append(child)
    stuck = sorted(n for n in nodes if n not in level)
    if stuck:
        raise ValueError(
            f"the parent links form a cycle through (or above) nodes {listing(cycle(links, stuck))}; "
            "a taxonomy's parent chains must all end at the root"
        )
    tree = {}
    for child, pars in links.items():
        if pars:
            best = max(level[p] for p in pars)
            tree[child] = min(p for p in pars if level[p] == best)
    return tree, root


def cycle(links: dict[str, set[str]], stuck: list[str]) -> list[str]:
    """The nodes of one cycle among ``stuck`` (nodes never reached from the root), in chain order."""
    stuck_set = set(stuck)
    node = stuck[0]
    seen: dict[str, int] = {}
    path: list[str] = []
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = min(p for p in links[node] if p in stuck_set)
    return path[seen[node] :]


def parents_from_mapping(parent: Mapping[str, Any]) -> dict[str, list[str]] | None:
    """``{child: [parents]}`` when some value of a ``{child: parent}`` mapping is a list (a DAG), else None."""
    if not any(isinstance(v, (list, tuple)) for v in parent.values()):
        return None
    return {child: list(v) if isinstance(v, (list, tuple)) else [v] for child, v in parent.items()}


def edges_to_tree(edges: Iterable[tuple[str, str]], root: str | None = None) -> tuple[dict[str, str], str]:
    """``(parent, root)`` of ``(child, parent)`` pairs; a child with several parents follows the DAG rule.

    Examples:
        >>> edges_to_tree([("b", "a"), ("c", "b")])
        ({'b': 'a', 'c': 'b'}, 'a')
    """
    parents: dict[str, list[str]] = {}
    for edge in edges:
        child, par = edge
        parents.setdefault(child, []).append(par)
    if not parents:
        raise ValueError("no edges were given; a taxonomy needs at least one (child, parent) pair")
    return dag_to_tree(parents, root)
