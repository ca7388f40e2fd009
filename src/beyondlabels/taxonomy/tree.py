"""An immutable rooted tree of named nodes (a class taxonomy), with vectorised lookups.

Definitions used throughout this module (stated once here; the methods refer to them):

Node, root, parent
    A taxonomy is given as a mapping ``parent[child] = parent_name`` and the name of its ``root``. The nodes are the
    root and every child; every non-root node has exactly one parent, the root has none. Every parent must itself be a
    node, and following parents from any node must end at the root (no cycles, no second root).

Node order and index
    :attr:`Taxonomy.nodes` lists the nodes sorted by ``(depth, name)``: the root first (index 0), then the nodes of
    depth 1 by name, and so on. A node's *index* is its position in that order; every tensor of this module is
    indexed that way. The order depends only on the tree, never on the order in which the mapping was written.

Depth
    The number of parent links from a node up to the root: the root has depth 0, its children depth 1.

Ancestors
    The ancestors of ``v`` are ``v`` itself, its parent, its parent's parent, ... up to and including the root
    (inclusive on both ends, as in hierarchical precision / recall).

Lowest common ancestor (LCA)
    The deepest node that is an ancestor of both ``a`` and ``b``. ``LCA(v, v) = v``; if ``a`` is an ancestor of ``b``,
    ``LCA(a, b) = a``; two nodes in different subtrees of the root have the root as LCA.

Leaves
    Nodes that are nobody's parent.

Examples:
    >>> tax = Taxonomy({"dog": "mammal", "cat": "mammal", "mammal": "animal", "bird": "animal"}, root="animal")
    >>> tax.nodes
    ('animal', 'bird', 'mammal', 'cat', 'dog')
    >>> tax.ancestors("dog")
    ['dog', 'mammal', 'animal']
    >>> tax.nodes[int(tax.lowest_common_ancestor(tax.indices(["dog"]), tax.indices(["cat"]))[0])]
    'mammal'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.names import SHOW as _SHOW
from beyondlabels._internal.names import check_name as _check_name
from beyondlabels._internal.names import listing as _listing
from beyondlabels.taxonomy._dag import dag_to_tree, parents_from_mapping


class Taxonomy:
    """An immutable rooted tree of named nodes (see the module docstring for every definition).

    Args:
        parent: ``{child: parent}`` for every node except the root. Names are non-empty strings.
        root: the name of the root; it must not appear as a child in ``parent``.

    Raises:
        ValueError: naming the offending nodes, when ``parent`` is empty, the root is given a parent, a parent is
            neither a child nor the root (a second root; its descendants do not reach ``root``), the parent links
            form a cycle, or a name is not a non-empty string.

    Examples:
        >>> tax = Taxonomy({"b": "a", "c": "a", "d": "b"}, root="a")
        >>> len(tax), "d" in tax, tax.leaves
        (4, True, ('c', 'd'))
        >>> tax.parent_index.tolist(), tax.depth.tolist()
        ([-1, 0, 0, 1], [0, 1, 1, 2])
    """

    def __init__(self, parent: Mapping[str, str], root: str) -> None:
        if not isinstance(parent, Mapping):
            raise ValueError(f"`parent` must be a mapping {{child: parent}}, got {type(parent).__name__}")
        root = _check_name(root, "`root`")
        links: dict[str, str] = {}
        for child, par in parent.items():
            _check_name(child, "a node name (key of `parent`)")
            links[child] = _check_name(par, f"the parent of {child!r}")
        if not links:
            raise ValueError(
                f"the taxonomy is empty: `parent` has no entries, so root {root!r} has no children; "
                "give at least one {child: parent} link"
            )
        if root in links:
            raise ValueError(
                f"the root {root!r} is given a parent ({links[root]!r}); the root has none: remove "
                f"{root!r} from `parent`, or pass the true root as `root`"
            )
        depth = self._depths(links, root)

        self._root = root
        self._nodes: tuple[str, ...] = tuple(sorted(depth, key=lambda n: (depth[n], n)))
        self._index: dict[str, int] = {name: i for i, name in enumerate(self._nodes)}
        self._parent_name: dict[str, str] = {n: links[n] for n in self._nodes[1:]}
        self._parent = torch.tensor([-1] + [self._index[links[n]] for n in self._nodes[1:]], dtype=torch.long)
        self._depth = torch.tensor([depth[n] for n in self._nodes], dtype=torch.long)
        self._max_depth = int(self._depth.max())
        has_child = set(links.values())
        self._leaves: tuple[str, ...] = tuple(n for n in self._nodes if n not in has_child)

    @staticmethod
    def _depths(links: dict[str, str], root: str) -> dict[str, int]:
        """Depth of every node, or a ValueError for a cycle or a node whose chain does not reach ``root``."""
        other_tops = sorted({p for p in links.values() if p not in links and p != root})
        depth: dict[str, int] = {root: 0}
        stranded: list[str] = []
        dead: set[str] = set()
        for start in links:
            path: list[str] = []
            on_path: set[str] = set()
            node = start
            while node not in depth and node not in dead:
                if node in on_path:
                    cycle = path[path.index(node) :] + [node]
                    raise ValueError(
                        "the taxonomy's parent links form a cycle: "
                        + " -> ".join(repr(n) for n in cycle)
                        + f"; every node's parent chain must end at the root {root!r}"
                    )
                if node not in links:  # a top other than the root
                    break
                on_path.add(node)
                path.append(node)
                node = links[node]
            if node in depth:
                for offset, n in enumerate(reversed(path), start=1):
                    depth[n] = depth[node] + offset
            else:
                dead.update(path)
                stranded.extend(path)
        if stranded:
            raise ValueError(
                f"the taxonomy has several roots: besides the root {root!r}, {_listing(other_tops)} "
                f"{'is a parent that is' if len(other_tops) == 1 else 'are parents that are'} never a child, so "
                f"nodes {_listing(sorted(stranded))} do not reach the root {root!r} through their parent chains; "
                f"give {_listing(other_tops)} a parent, or pass the true root as `root`"
            )
        return depth

    # ------------------------------------------------------------------------------------------------------------
    # construction from data
    # ------------------------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Taxonomy:
        """Build from ``{"root": NAME, "parent": {child: parent, ...}}`` (the file format).

        A node may list several parents (``child: [p1, p2]``); the parent on the longest chain to the root is kept
        (rule and ties: :mod:`beyondlabels.taxonomy.graphs`).

        Raises:
            ValueError: if ``data`` is not such a mapping (missing or unknown keys), or the tree is invalid.

        Examples:
            >>> Taxonomy.from_dict({"root": "a", "parent": {"b": "a"}}).nodes
            ('a', 'b')
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"taxonomy data must be a mapping {{root: ..., parent: ...}}, got {type(data).__name__}")
        missing = [k for k in ("root", "parent") if k not in data]
        unknown = [k for k in data if k not in ("root", "parent")]
        if missing or unknown:
            raise ValueError(
                "taxonomy data must have exactly the keys 'root' and 'parent'"
                + (f"; missing {_listing(missing)}" if missing else "")
                + (f"; unknown {_listing(unknown)}" if unknown else "")
            )
        parent = data["parent"]
        if isinstance(parent, Mapping):
            several = parents_from_mapping(parent)
            if several is not None:  # some node lists several parents: keep the one on the longest chain
                tree, root = dag_to_tree(several, _check_name(data["root"], "`root`"))
                return cls(tree, root=root)
        return cls({} if parent is None else parent, root=data["root"])

    def to_dict(self) -> dict[str, Any]:
        """The :meth:`from_dict` format, children listed in node order (a fresh copy).

        Examples:
            >>> Taxonomy({"c": "a", "b": "a"}, root="a").to_dict()
            {'root': 'a', 'parent': {'b': 'a', 'c': 'a'}}
        """
        return {"root": self._root, "parent": dict(self._parent_name)}

    # ------------------------------------------------------------------------------------------------------------
    # names and indices
    # ------------------------------------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        """The root's name (index 0)."""
        return self._root

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node name, in node order: root first, then by ``(depth, name)``."""
        return self._nodes

    @property
    def leaves(self) -> tuple[str, ...]:
        """The leaves, in node order."""
        return self._leaves

    @property
    def max_depth(self) -> int:
        """The largest depth of any node (0 would be a root alone, which is not allowed, so at least 1)."""
        return self._max_depth

    @property
    def parent_index(self) -> Tensor:
        """LongTensor ``[V]``: the index of each node's parent, ``-1`` for the root (a fresh CPU tensor)."""
        return self._parent.clone()

    @property
    def depth(self) -> Tensor:
        """LongTensor ``[V]``: the depth of each node (a fresh CPU tensor)."""
        return self._depth.clone()

    def index(self, name: str) -> int:
        """The index of node ``name``.

        Raises:
            ValueError: if ``name`` is not a node.

        Examples:
            >>> Taxonomy({"b": "a"}, root="a").index("b")
            1
        """
        try:
            return self._index[name]
        except (KeyError, TypeError):
            raise ValueError(self._unknown_message([name], 1)) from None

    def indices(self, names: Iterable[str]) -> Tensor:
        """LongTensor ``[len(names)]`` of the indices of ``names``.

        Raises:
            ValueError: listing the first few unknown names, if any name is not a node.

        Examples:
            >>> Taxonomy({"b": "a", "c": "a"}, root="a").indices(["c", "a", "c"])
            tensor([2, 0, 2])
        """
        if isinstance(names, str):
            raise ValueError(f"`names` must be a sequence of node names, got the string {names!r}; use index(name)")
        names = list(names)
        out = [self._index.get(n, -1) if isinstance(n, str) else -1 for n in names]
        if -1 in out:
            unknown = list(dict.fromkeys(n for n, i in zip(names, out, strict=True) if i == -1))
            raise ValueError(self._unknown_message(unknown, len(names)))
        return torch.tensor(out, dtype=torch.long)

    def _unknown_message(self, unknown: list[Any], total: int) -> str:
        return (
            f"unknown taxonomy node(s) {_listing(unknown)} ({len(unknown)} of {total} name(s) given); "
            f"the taxonomy has {len(self)} nodes, e.g. {_listing(self._nodes[:3], 3)}; "
            "check the spelling or add the node(s) to the taxonomy"
        )

    def ancestors(self, name: str) -> list[str]:
        """The ancestors of ``name``: the path from it up to the root, both included.

        Raises:
            ValueError: if ``name`` is not a node.

        Examples:
            >>> Taxonomy({"b": "a", "c": "b"}, root="a").ancestors("c")
            ['c', 'b', 'a']
        """
        self.index(name)
        path = [name]
        while path[-1] != self._root:
            path.append(self._parent_name[path[-1]])
        return path

    # ------------------------------------------------------------------------------------------------------------
    # vectorised lookups
    # ------------------------------------------------------------------------------------------------------------

    def ancestor_matrix(self, include_root: bool = False, device: torch.device | str | None = None) -> Tensor:
        """Bool tensor ``[V, V]`` with ``M[v, a]`` true when ``a`` is an ancestor of ``v`` (``v`` itself included).

        Args:
            include_root: keep the root's column. Every node has the root as ancestor, so the default (False) clears
                column 0, as hierarchical precision / recall usually do; the shape stays ``[V, V]``.
            device: where to build the matrix (default CPU). It takes ``V * V`` bytes.

        Examples:
            >>> Taxonomy({"b": "a", "c": "b"}, root="a").ancestor_matrix(include_root=True).int()
            tensor([[1, 0, 0],
                    [1, 1, 0],
                    [1, 1, 1]], dtype=torch.int32)
        """
        climb = self._climb_table(torch.device(device) if device is not None else torch.device("cpu"))
        size = len(self)
        rows = torch.arange(size, device=climb.device)
        out = torch.zeros(size, size, dtype=torch.bool, device=climb.device)
        current = rows
        for _ in range(self._max_depth + 1):
            out[rows, current] = True
            current = climb[current]
        if not include_root:
            out[:, 0] = False
        return out

    def ancestor_table(self, device: torch.device | str | None = None) -> Tensor:
        """Int32 tensor ``[V, max_depth + 1]``: ``T[v, d]`` is the index of ``v``'s ancestor at depth ``d`` for
        ``d <= depth(v)`` (so ``T[v, 0]`` is the root and ``T[v, depth(v)] = v``), and ``-1`` beyond.

        Two nodes' rows agree exactly on the depths ``0 .. depth(LCA)``: the table turns ancestor-set intersections
        and LCAs of many pairs into one gather and compare (:mod:`beyondlabels.functional.hierarchy`). It takes
        ``4 * V * (max_depth + 1)`` bytes (6.6 MB for WordNet's nouns); the CPU copy is built once and kept.

        Examples:
            >>> Taxonomy({"b": "a", "c": "b", "d": "a"}, root="a").ancestor_table()
            tensor([[ 0, -1, -1],
                    [ 0,  1, -1],
                    [ 0,  2, -1],
                    [ 0,  1,  3]], dtype=torch.int32)
        """
        table = getattr(self, "_ancestor_table", None)
        if table is None:
            size = len(self)
            climb = self._climb_table(torch.device("cpu"))
            table = torch.full((size, self._max_depth + 1), -1, dtype=torch.int32)
            rows = torch.arange(size)
            current = rows.clone()
            for step in range(self._max_depth + 1):
                level = self._depth - step
                valid = level >= 0
                table[rows[valid], level[valid]] = current[valid].to(torch.int32)
                current = climb[current]
            self._ancestor_table = table
        return table.clone() if device is None else table.to(device, copy=True)

    def lca_structure(
        self, device: torch.device | str | None = None, copy: bool = True
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(first, sparse, log2)``: an Euler tour range-minimum index answering LCA queries in O(1) per pair.

        The Euler tour visits the nodes depth first (children in node order) and lists a node each time the walk is at
        it: ``2V - 1`` entries. ``first[v]`` (int64 ``[V]``) is ``v``'s first position; the LCA of ``a`` and ``b`` is
        the shallowest node listed between ``first[a]`` and ``first[b]``. ``sparse[j, i]`` (int64 ``[L, 2V - 1]``) is
        the minimum of ``key = depth * V + node`` over the ``2**j`` entries from ``i`` on, and ``log2[n]`` (int64
        ``[2V]``) is ``floor(log2(n))``; so ``key // V`` is the LCA's depth and ``key % V`` its index. About
        ``8 * 2V * log2(2V)`` bytes (24 MB for WordNet's nouns); the CPU copy is built once and kept. ``copy=False``
        returns it (or, on another device, the moved tensors) without a defensive copy: read it, never write it.

        Examples:
            >>> tax = Taxonomy({"b": "a", "c": "a", "d": "b"}, root="a")
            >>> first, sparse, log2 = tax.lca_structure()
            >>> first.tolist(), (sparse[0] % len(tax)).tolist()
            ([0, 1, 5, 2], [0, 1, 3, 1, 0, 2, 0])
        """
        cached = getattr(self, "_lca_structure", None)
        if cached is None:
            size = len(self)
            children: list[list[int]] = [[] for _ in range(size)]
            for child, par in enumerate(self._parent.tolist()):
                if par >= 0:
                    children[par].append(child)
            tour: list[int] = []
            stack = [(0, 0)]
            while stack:
                node, next_child = stack.pop()
                tour.append(node)
                if next_child < len(children[node]):
                    stack.append((node, next_child + 1))
                    stack.append((children[node][next_child], 0))
            walk = torch.tensor(tour, dtype=torch.long)
            first = torch.full((size,), len(tour), dtype=torch.long)
            first.scatter_reduce_(0, walk, torch.arange(len(tour)), reduce="amin")
            keys = self._depth[walk] * size + walk
            levels = [keys]
            width = 1
            while 2 * width <= len(tour):
                prev = levels[-1]
                nxt = prev.clone()
                nxt[: len(tour) - width] = torch.minimum(prev[: len(tour) - width], prev[width:])
                levels.append(nxt)
                width *= 2
            log2 = torch.zeros(len(tour) + 1, dtype=torch.long)
            log2[1:] = torch.floor(torch.log2(torch.arange(1, len(tour) + 1, dtype=torch.float64))).long()
            cached = (first, torch.stack(levels), log2)
            self._lca_structure = cached
        device = torch.device("cpu") if device is None else torch.device(device)
        return tuple(t.to(device, copy=copy) for t in cached)  # type: ignore[return-value]

    def lowest_common_ancestor(self, a_idx: Tensor, b_idx: Tensor) -> Tensor:
        """The index of the LCA of each pair ``(a_idx[i], b_idx[i])``, vectorised.

        One range-minimum query per pair on the Euler tour (:meth:`lca_structure`): the shallowest node the walk passes
        between the first visits of the two nodes. A few gathers over all pairs at once, on the device of the inputs,
        whatever the tree's depth.

        Args:
            a_idx: integer tensor of node indices.
            b_idx: integer tensor of node indices, broadcastable with ``a_idx``.

        Returns:
            LongTensor of the broadcast shape, on the device of the inputs.

        Raises:
            ValueError: if an input is not an integer tensor, holds an index outside ``[0, V)``, or the two do not
                broadcast.

        Examples:
            >>> tax = Taxonomy({"b": "a", "c": "a", "d": "b", "e": "b"}, root="a")
            >>> tax.lowest_common_ancestor(tax.indices(["d", "d", "d"]), tax.indices(["e", "c", "b"]))
            tensor([1, 0, 1])
        """
        a = self._check_indices(a_idx, "a_idx")
        b = self._check_indices(b_idx, "b_idx")
        if a.device != b.device:
            raise ValueError(f"`a_idx` is on {a.device} and `b_idx` on {b.device}; put both on one device")
        try:
            a, b = torch.broadcast_tensors(a, b)
        except RuntimeError as err:
            raise ValueError(f"`a_idx` {tuple(a.shape)} and `b_idx` {tuple(b.shape)} do not broadcast: {err}") from None
        first, sparse, log2 = self.lca_structure(a.device, copy=False)
        fa, fb = first[a], first[b]
        left = torch.minimum(fa, fb)
        right = torch.maximum(fa, fb) + 1
        level = log2[right - left]
        span = torch.bitwise_left_shift(torch.ones_like(level), level)
        key = torch.minimum(sparse[level, left], sparse[level, right - span])
        return key % len(self)

    def common_ancestor(self, indices: Iterable[int]) -> int:
        """The index of the lowest common ancestor of a set of nodes (one node: itself).

        The shallowest node the Euler tour passes between the first visits of the set's nodes
        (:meth:`lca_structure`): one range-minimum query, whatever the tree's depth.

        Raises:
            ValueError: for an empty set or an index outside ``[0, V)``.

        Examples:
            >>> tax = Taxonomy({"b": "a", "c": "a", "d": "b", "e": "b"}, root="a")
            >>> [tax.nodes[tax.common_ancestor(tax.indices(s).tolist())] for s in (["d", "e"], ["d", "e", "c"], ["e"])]
            ['b', 'a', 'e']
        """
        idx = self._check_indices(torch.as_tensor(list(indices), dtype=torch.long), "indices")
        if idx.numel() == 0:
            raise ValueError("`indices` is empty; the common ancestor needs at least one node")
        first, sparse, log2 = self.lca_structure(copy=False)
        positions = first[idx]
        left, right = int(positions.min()), int(positions.max()) + 1
        level = int(log2[right - left])
        key = min(int(sparse[level, left]), int(sparse[level, right - (1 << level)]))
        return key % len(self)

    def subtree(self, root: str) -> Taxonomy:
        """The subtree under ``root``: ``root`` and its descendants, with their parents in this tree.

        Raises:
            ValueError: if ``root`` is not a node, or is a leaf (a tree needs at least one link).

        Examples:
            >>> Taxonomy({"b": "a", "c": "a", "d": "b", "e": "b"}, root="a").subtree("b").nodes
            ('b', 'd', 'e')
        """
        top = self.index(root)
        children: dict[int, list[int]] = {}
        for child, par in enumerate(self._parent.tolist()):
            if par >= 0:
                children.setdefault(par, []).append(child)
        if top not in children:
            raise ValueError(f"{root!r} is a leaf of the taxonomy: its subtree would have no links; pick an inner node")
        links: dict[str, str] = {}
        stack = [top]
        while stack:
            node = stack.pop()
            for child in children.get(node, ()):
                links[self._nodes[child]] = self._nodes[node]
                stack.append(child)
        return Taxonomy(links, root=root)

    def _climb_table(self, device: torch.device) -> Tensor:
        """The parent index with the root pointing at itself, so climbing past the root stays at the root."""
        climb = self._parent.clone()
        climb[0] = 0
        return climb.to(device)

    def _check_indices(self, idx: Tensor, name: str) -> Tensor:
        if not isinstance(idx, Tensor):
            raise ValueError(f"`{name}` must be a tensor of node indices, got {type(idx).__name__}; see indices()")
        if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
            raise ValueError(f"`{name}` must hold integer node indices, got dtype {idx.dtype}")
        idx = idx.long()
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= len(self)):
            bad = idx[(idx < 0) | (idx >= len(self))].unique()[:_SHOW].tolist()
            raise ValueError(f"`{name}` holds indices outside [0, {len(self)}): {bad}")
        return idx

    # ------------------------------------------------------------------------------------------------------------
    # container protocol
    # ------------------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Taxonomy):
            return NotImplemented
        return self._root == other._root and self._parent_name == other._parent_name

    def __hash__(self) -> int:
        return hash((self._root, tuple(self._parent_name.items())))

    def __repr__(self) -> str:
        return (
            f"Taxonomy(root={self._root!r}, nodes={len(self)}, leaves={len(self._leaves)}, max_depth={self._max_depth})"
        )
