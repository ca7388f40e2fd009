"""Taxonomies from edge lists, directed acyclic graphs and WordNet 3.0 nouns.

DAG to tree
    Some hierarchies give a node several parents (WordNet: ``@`` hypernyms and ``@i`` instance hypernyms). A node's
    *level* is the length of the **longest** parent chain from it up to the root (the root has level 0). The tree keeps,
    for each node, the parent of highest level, so every node's tree depth equals its level. Ties (several parents of
    the same level) are broken by the parent's name: the smallest name in Python's string order wins. The rule depends
    only on the graph, never on the order in which edges were read. Cycles (a self-loop included), several roots, or a
    requested root that is not the only node without parents are errors naming the nodes.

TSV edge list
    One ``child<TAB>parent`` pair per line; empty lines and lines starting with ``#`` are skipped; a child may appear
    on several lines (several parents: the DAG rule applies); a repeated identical line counts once. The root is the
    one node that is never a child.

WordNet 3.0 nouns
    Read from the dictionary files of Debian's ``wordnet-base`` package (``data.noun`` and ``index.noun``, by default
    in ``/usr/share/wordnet``; ``$WNHOME/dict`` or ``$WNSEARCHDIR`` also work). Nodes are the 82,115 noun synsets,
    edges their hypernym pointers ``@`` and instance-hypernym pointers ``@i``; the root is ``entity.n.01``. A node is
    named as NLTK names synsets: ``<first lemma, lower case>.n.<sense number, two digits>``, the sense number being the
    synset's position in that lemma's list of synset offsets in ``index.noun`` (e.g. ``train.n.01``,
    ``conveyance.n.03``). No file is downloaded.

Example:
    >>> tax = taxonomy_from_edges([("dog", "canine"), ("dog", "pet"), ("canine", "mammal"), ("pet", "animal"),
    ...                            ("mammal", "animal")])
    >>> tax.ancestors("dog")   # 'canine' is on the longer chain dog -> canine -> mammal -> animal
    ['dog', 'canine', 'mammal', 'animal']
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from beyondlabels.taxonomy.tree import Taxonomy, _listing

__all__ = [
    "WORDNET_ROOT",
    "dag_to_tree",
    "find_wordnet_dir",
    "load_wordnet",
    "read_tsv",
    "taxonomy_from_edges",
    "wordnet_lemmas",
]

WORDNET_ROOT = "entity.n.01"
_WORDNET_DIRS = ("/usr/share/wordnet", "/usr/local/share/wordnet", "/usr/share/WordNet-3.0/dict")


def dag_to_tree(parents: Mapping[str, Iterable[str]], root: str | None = None) -> tuple[dict[str, str], str]:
    """Keep, for every node, its parent on the longest chain to the root (rule and ties: the module docstring).

    Args:
        parents: ``{child: [parent, ...]}``; names are non-empty strings; a child with an empty list is a root.
        root: the expected root; None means the single node without parents.

    Returns:
        ``(parent, root)``: ``{child: parent}`` for every node but the root, and the root's name.

    Raises:
        ValueError: for a cycle (its nodes are named), several roots (named), a ``root`` that has parents or is not
            a node, or a name that is not a non-empty string.

    Example:
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
            raise ValueError(f"the root {root!r} is not a node of the graph; nodes without parents: {_listing(tops)}")
        if links.get(root):
            raise ValueError(f"the root {root!r} has parents {_listing(sorted(links[root]))}; the root has none")
    if not tops:
        raise ValueError("every node has a parent, so the parent links form a cycle and there is no root")
    if len(tops) > 1:
        raise ValueError(
            f"the graph has several roots (nodes without parents): {_listing(tops)}; give all but one a parent"
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
        raise ValueError(f"the parent links form a cycle through (or above) nodes {_listing(_cycle(links, stuck))}; "
                         "a taxonomy's parent chains must all end at the root")
    tree = {}
    for child, pars in links.items():
        if pars:
            best = max(level[p] for p in pars)
            tree[child] = min(p for p in pars if level[p] == best)
    return tree, root


def _cycle(links: dict[str, set[str]], stuck: list[str]) -> list[str]:
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


def taxonomy_from_edges(edges: Iterable[tuple[str, str]], root: str | None = None) -> Taxonomy:
    """A :class:`Taxonomy` from ``(child, parent)`` pairs; a child with several parents follows the DAG rule.

    Example:
        >>> taxonomy_from_edges([("b", "a"), ("c", "b")]).nodes
        ('a', 'b', 'c')
    """
    parents: dict[str, list[str]] = {}
    for edge in edges:
        child, par = edge
        parents.setdefault(child, []).append(par)
    if not parents:
        raise ValueError("no edges were given; a taxonomy needs at least one (child, parent) pair")
    tree, found_root = dag_to_tree(parents, root)
    return Taxonomy(tree, root=found_root)


def read_tsv(path: str | os.PathLike[str], root: str | None = None) -> Taxonomy:
    """A :class:`Taxonomy` from a ``child<TAB>parent`` edge list (format: the module docstring).

    Raises:
        ValueError: naming the file and line for a line without exactly two tab-separated non-empty names; naming
            the file for an empty list or an invalid graph.

    Example:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     file = pathlib.Path(tmp, "tree.tsv")
        ...     _ = file.write_text("# child\\tparent\\nb\\ta\\nc\\tb\\n")
        ...     read_tsv(file).ancestors("c")
        ['c', 'b', 'a']
    """
    path = Path(path)
    edges = []
    with open(path, encoding="utf-8") as fp:
        for number, line in enumerate(fp, start=1):
            text = line.rstrip("\r\n")
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            fields = [f.strip() for f in text.split("\t")]
            if len(fields) != 2 or not all(fields):
                raise ValueError(
                    f"taxonomy file '{path}', line {number}: expected 'child<TAB>parent' (two non-empty names "
                    f"separated by one tab), got {text!r}"
                )
            edges.append((fields[0], fields[1]))
    if not edges:
        raise ValueError(f"taxonomy file '{path}' holds no 'child<TAB>parent' lines")
    try:
        return taxonomy_from_edges(edges, root)
    except ValueError as err:
        raise ValueError(f"taxonomy file '{path}': {err}") from err


# ---------------------------------------------------------------------------------------------------------------------
# WordNet
# ---------------------------------------------------------------------------------------------------------------------


def find_wordnet_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding WordNet's ``data.noun`` and ``index.noun``.

    Looks in ``directory`` when given, else ``$WNSEARCHDIR``, ``$WNHOME/dict`` and the usual install folders
    (``/usr/share/wordnet`` is where Debian's ``wordnet-base`` puts them).

    Raises:
        FileNotFoundError: saying where it looked and how to install the files.
    """
    if directory is not None:
        candidates = [Path(directory)]
    else:
        candidates = []
        if os.environ.get("WNSEARCHDIR"):
            candidates.append(Path(os.environ["WNSEARCHDIR"]))
        if os.environ.get("WNHOME"):
            candidates.append(Path(os.environ["WNHOME"]) / "dict")
        candidates += [Path(d) for d in _WORDNET_DIRS]
    for folder in candidates:
        if (folder / "data.noun").is_file() and (folder / "index.noun").is_file():
            return folder
    raise FileNotFoundError(
        f"WordNet 3.0 dictionary files (data.noun, index.noun) not found in {', '.join(map(str, candidates))}; "
        "install them with `apt-get install wordnet-base` (Debian/Ubuntu) or pass the folder that holds them"
    )


@lru_cache(maxsize=4)
def _parse_wordnet(folder: str, mtime: float) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """``({name: [hypernym names]}, {name: [lemmas]})`` of every noun synset. Cached per folder and file time."""
    del mtime  # part of the cache key only
    folder_path = Path(folder)
    senses: dict[str, list[str]] = {}
    with open(folder_path / "index.noun", encoding="utf-8", errors="replace") as fp:
        for line in fp:
            if line.startswith(" "):
                continue
            fields = line.split()
            lemma, synset_cnt = fields[0], int(fields[2])
            senses[lemma] = fields[len(fields) - synset_cnt :]
    hypernyms: dict[str, list[str]] = {}
    lemmas: dict[str, list[str]] = {}
    with open(folder_path / "data.noun", encoding="utf-8", errors="replace") as fp:
        for line in fp:
            if line.startswith(" "):
                continue
            fields = line.split(" | ", 1)[0].split()
            offset, w_cnt = fields[0], int(fields[3], 16)
            words = fields[4 : 4 + 2 * w_cnt : 2]
            pos = 4 + 2 * w_cnt
            p_cnt = int(fields[pos])
            ups = []
            for i in range(pos + 1, pos + 1 + 4 * p_cnt, 4):
                symbol, target, target_pos = fields[i], fields[i + 1], fields[i + 2]
                if symbol in ("@", "@i") and target_pos == "n":
                    ups.append(target)
            hypernyms[offset] = ups
            lemmas[offset] = words
    names: dict[str, str] = {}
    for offset, words in lemmas.items():
        first = words[0].lower()
        try:
            number = senses[first].index(offset) + 1
        except (KeyError, ValueError):
            raise ValueError(
                f"WordNet files in '{folder}' disagree: synset {offset} ({first!r}) is not listed under {first!r} in "
                "index.noun; use data.noun and index.noun from one WordNet 3.0 release"
            ) from None
        names[offset] = f"{first}.n.{number:02d}"
    graph = {names[o]: [names[t] for t in ups] for o, ups in hypernyms.items()}
    words_by_name = {names[o]: [w.replace("_", " ") for w in ws] for o, ws in lemmas.items()}
    return graph, words_by_name


def _wordnet_files(directory: str | os.PathLike[str] | None) -> tuple[str, float]:
    folder = find_wordnet_dir(directory)
    return str(folder.resolve()), (folder / "data.noun").stat().st_mtime


@lru_cache(maxsize=4)
def _wordnet_taxonomy(folder: str, mtime: float) -> Taxonomy:
    graph, _ = _parse_wordnet(folder, mtime)
    tree, root = dag_to_tree(graph, WORDNET_ROOT)
    return Taxonomy(tree, root=root)


def load_wordnet(directory: str | os.PathLike[str] | None = None) -> Taxonomy:
    """The WordNet 3.0 noun hierarchy as a tree (files, names and the DAG rule: the module docstring).

    Parsing takes a few seconds; the result is cached per folder.

    Raises:
        FileNotFoundError: when the dictionary files are not installed (the message says how to get them).
    """
    return _wordnet_taxonomy(*_wordnet_files(directory))


def wordnet_lemmas(directory: str | os.PathLike[str] | None = None) -> dict[str, list[str]]:
    """``{synset name: [lemma, ...]}`` for every noun synset, lemmas with spaces instead of underscores (a copy).

    Use it as the node texts of :class:`~beyondlabels.taxonomy.text.TextToNode` (synonyms match too).
    """
    _, lemmas = _parse_wordnet(*_wordnet_files(directory))
    return {name: list(words) for name, words in lemmas.items()}


def parents_from_mapping(parent: Mapping[str, Any]) -> dict[str, list[str]] | None:
    """``{child: [parents]}`` when some value of a ``{child: parent}`` mapping is a list (a DAG), else None."""
    if not any(isinstance(v, (list, tuple)) for v in parent.values()):
        return None
    return {child: list(v) if isinstance(v, (list, tuple)) else [v] for child, v in parent.items()}
