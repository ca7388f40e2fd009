"""Taxonomy files: YAML / JSON trees, ``child<TAB>parent`` edge lists and WordNet 3.0 nouns.

YAML / JSON
    ``{"root": NAME, "parent": {child: parent, ...}}`` (the format of
    :meth:`~beyondlabels.taxonomy.Taxonomy.from_dict`; a node may list several parents). The suffix (``.yaml``,
    ``.yml``, ``.json``) selects the parser; a key repeated in the file (a node listed twice) is an error.

TSV edge list
    One ``child<TAB>parent`` pair per line (UTF-8; a byte-order mark at the start is dropped); empty lines and lines
    starting with ``#`` are skipped; a child may appear on several lines (several parents: the DAG rule of
    :mod:`beyondlabels.taxonomy.graphs` applies); a repeated identical line counts once. The root is the one node
    that is never a child.

WordNet 3.0 nouns
    Read from the dictionary files of Debian's ``wordnet-base`` package (``data.noun`` and ``index.noun``, by default
    in ``/usr/share/wordnet``; ``$WNHOME/dict`` or ``$WNSEARCHDIR`` also work). Nodes are the 82,115 noun synsets,
    edges their hypernym pointers ``@`` and instance-hypernym pointers ``@i`` (the DAG rule applies); the root is
    ``entity.n.01``. A node is named as NLTK names synsets: ``<first lemma, lower case>.n.<sense number, two digits>``,
    the sense number being the synset's position in that lemma's list of synset offsets in ``index.noun`` (e.g.
    ``train.n.01``, ``conveyance.n.03``). No file is downloaded.

Examples:
    >>> load_taxonomy({"root": "shape", "parent": {"polygon": "shape", "square": "polygon"}}).ancestors("square")
    ['square', 'polygon', 'shape']
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from beyondlabels._internal.checks import check_non_negative_int
from beyondlabels._internal.files import open_file
from beyondlabels._internal.names import listing
from beyondlabels._internal.parse import read_text, text_lines
from beyondlabels.io._mappings import read_mapping
from beyondlabels.taxonomy import Taxonomy, dag_to_tree, taxonomy_from_edges

__all__ = [
    "WORDNET_ROOT",
    "find_wordnet_dir",
    "load_node_texts",
    "load_taxonomy",
    "load_wordnet",
    "read_taxonomy",
    "read_tsv",
    "WORDNET_CASE_KINDS",
    "wordnet_glosses",
    "wordnet_lemmas",
    "wordnet_mapping_cases",
]

WORDNET_ROOT = "entity.n.01"
_WORDNET_DIRS = ("/usr/share/wordnet", "/usr/local/share/wordnet", "/usr/share/WordNet-3.0/dict")


def read_tsv(path: str | os.PathLike[str], root: str | None = None) -> Taxonomy:
    """A :class:`Taxonomy` from a ``child<TAB>parent`` edge list (format: the module docstring).

    Raises:
        ValueError: naming the file and line for a line without exactly two tab-separated non-empty names; naming
            the file for an empty list or an invalid graph.

    Examples:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     file = pathlib.Path(tmp, "tree.tsv")
        ...     _ = file.write_text("# child\\tparent\\nb\\ta\\nc\\tb\\n")
        ...     read_tsv(file).ancestors("c")
        ['c', 'b', 'a']
    """
    path = Path(path)
    edges = []
    lines = text_lines(read_text(path, f"taxonomy file '{path}'"))
    for number, text in enumerate(lines, start=1):
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in text.split("\t")]
        if len(fields) != 2 or not all(fields):
            raise ValueError(
                f"taxonomy file '{path}', line {number}: expected 'child<TAB>parent' (two non-empty names "
                f"separated by one tab), got {text[:200]!r}"
            )
        edges.append((fields[0], fields[1]))
    if not edges:
        raise ValueError(f"taxonomy file '{path}' holds no 'child<TAB>parent' lines")
    try:
        return taxonomy_from_edges(edges, root)
    except ValueError as err:
        raise ValueError(f"taxonomy file '{path}': {err}") from err


def read_taxonomy(path: str | os.PathLike[str]) -> Taxonomy:
    """A :class:`Taxonomy` from a YAML (``.yaml``/``.yml``) or JSON (``.json``) file, or a ``child<TAB>parent``
    edge list (``.tsv``, :func:`read_tsv`); formats: the module docstring.

    Raises:
        ValueError: naming the file, for an unsupported suffix, a parse error, a key repeated in the file or an
            invalid tree.
        FileNotFoundError: if the file does not exist.

    Examples:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     file = pathlib.Path(tmp, "tree.yaml")
        ...     _ = file.write_text("root: a\\nparent:\\n  b: a\\n  c: b\\n")
        ...     read_taxonomy(file).ancestors("c")
        ['c', 'b', 'a']
    """
    if str(path).lower().endswith(".tsv"):
        return read_tsv(path)
    data = read_mapping(path, "taxonomy")
    try:
        return Taxonomy.from_dict(data)
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


@contextlib.contextmanager
def _text(path: Path) -> Iterator[Any]:
    """A WordNet file as text lines (a regular file: a pipe in its place is a ``ValueError``)."""
    with open_file(path, "WordNet file", max_bytes=1 << 30) as raw:
        yield io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


@lru_cache(maxsize=4)
def _parse_wordnet(folder: str, mtime: float) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, str]]:
    """``({name: [hypernym names]}, {name: [lemmas]}, {name: gloss})`` of every noun synset. Cached per folder and
    file time."""
    del mtime  # part of the cache key only
    folder_path = Path(folder)
    senses: dict[str, list[str]] = {}
    with _text(folder_path / "index.noun") as fp:
        for line in fp:
            if line.startswith(" "):
                continue
            fields = line.split()
            lemma, synset_cnt = fields[0], int(fields[2])
            senses[lemma] = fields[len(fields) - synset_cnt :]
    hypernyms: dict[str, list[str]] = {}
    lemmas: dict[str, list[str]] = {}
    glosses: dict[str, str] = {}
    with _text(folder_path / "data.noun") as fp:
        for line in fp:
            if line.startswith(" "):
                continue
            head, _, gloss = line.partition(" | ")
            fields = head.split()
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
            glosses[offset] = gloss.strip()
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
    gloss_by_name = {names[o]: g for o, g in glosses.items()}
    return graph, words_by_name, gloss_by_name


def _wordnet_files(directory: str | os.PathLike[str] | None) -> tuple[str, float]:
    folder = find_wordnet_dir(directory)
    return str(folder.resolve()), (folder / "data.noun").stat().st_mtime


@lru_cache(maxsize=4)
def _wordnet_taxonomy(folder: str, mtime: float) -> Taxonomy:
    graph, _, _ = _parse_wordnet(folder, mtime)
    tree, root = dag_to_tree(graph, WORDNET_ROOT)
    return Taxonomy(tree, root=root)


def _wordnet_hyponyms(graph: dict[str, list[str]], root: str) -> set[str]:
    """Every synset below ``root`` through hyponym links (the inverse of ``@`` and ``@i``), ``root`` excluded."""
    below: dict[str, list[str]] = {}
    for child, parents in graph.items():
        for par in parents:
            below.setdefault(par, []).append(child)
    seen: set[str] = set()
    stack = [root]
    while stack:
        for child in below.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


@lru_cache(maxsize=16)
def _wordnet_subtree(folder: str, mtime: float, root: str, hyponyms: str) -> tuple[Taxonomy, int, list[str]]:
    """``(tree, hyponym count, hyponyms left out)`` of the subtree under ``root`` (rules: :func:`load_wordnet`)."""
    graph, _, _ = _parse_wordnet(folder, mtime)
    below = _wordnet_hyponyms(graph, root)
    if not below:
        raise ValueError(
            f"WordNet synset {root!r} has no hyponyms: its subtree would have no links; pick a more general synset"
        )
    if hyponyms == "all":
        sub = {n: [p for p in graph[n] if p in below or p == root] for n in below}
        tree, _ = dag_to_tree(sub, root)
        return Taxonomy(tree, root=root), len(below), []
    taxonomy = _wordnet_taxonomy(folder, mtime).subtree(root)
    return taxonomy, len(below), sorted(below.difference(taxonomy.nodes))


def load_wordnet(
    directory: str | os.PathLike[str] | None = None, root: str | None = None, hyponyms: str = "tree"
) -> Taxonomy:
    """The WordNet 3.0 noun hierarchy as a tree (files and names: the module docstring; the DAG rule:
    :mod:`beyondlabels.taxonomy.graphs`), whole or the subtree under the synset ``root``.

    A subtree can be cut in two ways (``hyponyms``):

    - ``"tree"`` (default): the subtree of the whole WordNet tree, every node with the parent it has there (its depth
      below ``root`` is its depth in WordNet minus ``root``'s). A hyponym of ``root`` whose longest chain to
      ``entity.n.01`` runs through a hypernym outside the subtree has its parent elsewhere and is left out, with a
      warning that counts them (``food.n.02``: 366 of its 1,120 hyponyms).
    - ``"all"``: every hyponym of ``root`` (transitively, through ``@`` and ``@i``), the DAG rule applied to the links
      among them, so each keeps its longest chain *within* the subtree.

    Parsing takes a few seconds; the result is cached per folder (and root).

    Raises:
        FileNotFoundError: when the dictionary files are not installed (the message says how to get them).
        ValueError: for a ``root`` that is not a noun synset or has no hyponyms, or an unknown ``hyponyms``.
    """
    if hyponyms not in ("tree", "all"):
        raise ValueError(
            f"`hyponyms` must be 'tree' (the whole tree's subtree) or 'all' (every hyponym), got {hyponyms!r}"
        )
    files = _wordnet_files(directory)
    if root is None or root == WORDNET_ROOT:
        return _wordnet_taxonomy(*files)
    graph, _, _ = _parse_wordnet(*files)
    if root not in graph:
        raise ValueError(
            f"`root` {root!r} is not a WordNet noun synset; name it as NLTK does (e.g. 'vehicle.n.01', 'food.n.02')"
        )
    taxonomy, total, left_out = _wordnet_subtree(*files, root, hyponyms)
    if left_out:
        warnings.warn(
            f"WordNet subtree {root!r}: {len(left_out)} of its {total} hyponyms are left out (e.g. "
            f"{listing(left_out, 3)}): their longest chain to {WORDNET_ROOT!r} runs through a hypernym outside the "
            f"subtree, so their parent in the tree is elsewhere; load_wordnet(root={root!r}, hyponyms='all') keeps "
            "every hyponym",
            UserWarning,
            stacklevel=2,
        )
    return taxonomy


def _synsets(nodes: Any, known: Mapping[str, Any], what: str) -> list[str]:
    names = list(known) if nodes is None else list(nodes.nodes if isinstance(nodes, Taxonomy) else nodes)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"{what}: {listing(unknown)} "
            f"{'is not a WordNet noun synset' if len(unknown) == 1 else 'are not WordNet noun synsets'}"
            "; WordNet texts exist only for a WordNet taxonomy (load_taxonomy('wordnet'))"
        )
    return names


def wordnet_lemmas(directory: str | os.PathLike[str] | None = None, nodes: Any = None) -> dict[str, list[str]]:
    """``{synset name: [lemma, ...]}`` for every noun synset (or the ``nodes`` given: names or a Taxonomy), lemmas
    with spaces instead of underscores (a copy).

    Use it as the node texts of :class:`~beyondlabels.taxonomy.text.TextToNode` (synonyms match too); from a config,
    ``node_texts: wordnet_lemmas``.

    Raises:
        ValueError: naming the nodes that are not noun synsets.

    Examples:
        >>> wordnet_lemmas(nodes=["car.n.01"])  # doctest: +SKIP
        {'car.n.01': ['car', 'auto', 'automobile', 'machine', 'motorcar']}
    """
    _, lemmas, _ = _parse_wordnet(*_wordnet_files(directory))
    return {name: list(lemmas[name]) for name in _synsets(nodes, lemmas, "`nodes`")}


def wordnet_glosses(directory: str | os.PathLike[str] | None = None, nodes: Any = None) -> dict[str, str]:
    """``{synset name: gloss}`` for every noun synset (or the ``nodes`` given): the definition and examples as the
    dictionary file writes them (``"a motor vehicle with four wheels; usually propelled by ..."``).

    Raises:
        ValueError: naming the nodes that are not noun synsets.
    """
    _, _, glosses = _parse_wordnet(*_wordnet_files(directory))
    return {name: glosses[name] for name in _synsets(nodes, glosses, "`nodes`")}


def load_node_texts(spec: Any, taxonomy: Taxonomy) -> dict[str, list[str]] | None:
    """The ``node_texts`` of :class:`~beyondlabels.taxonomy.text.TextToNode` from what a config gives: None (node names
    only), ``"wordnet_lemmas"`` (every lemma of each synset of a WordNet taxonomy, :func:`wordnet_lemmas`), a
    ``{node: [text, ...]}`` mapping, or the path of a YAML/JSON file holding one.

    Raises:
        ValueError: naming the file or the nodes, for nodes that are not WordNet synsets (``"wordnet_lemmas"``), a file
            that is not such a mapping, or anything else.

    Examples:
        >>> load_node_texts({"b": ["bee"]}, Taxonomy({"b": "a"}, root="a"))
        {'b': ['bee']}
    """
    if spec is None:
        return None
    if isinstance(spec, str) and spec == "wordnet_lemmas":
        try:
            return wordnet_lemmas(nodes=taxonomy)
        except ValueError as err:
            raise ValueError(f"node_texts='wordnet_lemmas': {err}") from None
    source = spec
    if isinstance(spec, (str, os.PathLike)):
        spec = read_mapping(spec, "node texts")
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"`node_texts` must be None, 'wordnet_lemmas', a {{node: [text, ...]}} mapping or a YAML/JSON file of one, "
            f"got {type(spec).__name__}"
        )
    where = f"node texts file '{source}'" if source is not spec else "`node_texts`"
    out: dict[str, list[str]] = {}
    for node, texts in spec.items():
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"{where}: the texts of {node!r} must be a list of strings, got {texts!r}")
        out[str(node)] = list(texts)
    return out


WORDNET_CASE_KINDS = ("synonym", "gloss", "kind_of")


def wordnet_mapping_cases(
    taxonomy: Taxonomy,
    kinds: Any = WORDNET_CASE_KINDS,
    max_synonyms: int = 2,
    directory: str | os.PathLike[str] | None = None,
) -> list[tuple[str, str, str]]:
    """Labelled free-text answers for a WordNet taxonomy (whole or a subtree), written by WordNet's lexicographers
    rather than by whoever tunes a mapper: ``[(answer, gold node, kind), ...]`` in node order, for every node but the
    root.

    - ``synonym``: another lemma of the synset (``"automobile"`` for ``car.n.01``), at most ``max_synonyms`` per node;
    - ``gloss``: the first clause of its gloss, up to the first ``;`` (``"a motor vehicle with four wheels"``);
    - ``kind_of``: ``"a kind of <first lemma of its parent in the tree>"`` (the best answer is then the parent).

    A text that normalises (:func:`~beyondlabels.taxonomy.text.normalize_text`) to a node's name, or a gloss of fewer
    than two words, is left out: it would name that node, not describe the gold one.

    Raises:
        ValueError: for a node that is not a noun synset, an unknown kind or a bad ``max_synonyms``.

    Examples:
        >>> wordnet_mapping_cases(load_wordnet(root="car.n.01"), kinds=["gloss"])[:1]  # doctest: +SKIP
        [('a vehicle that takes people to and from hospitals', 'ambulance.n.01', 'gloss')]
    """
    from beyondlabels.taxonomy.text import node_text, normalize_text

    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    unknown = [k for k in kinds if k not in WORDNET_CASE_KINDS]
    if unknown or not kinds:
        raise ValueError(f"`kinds` must be a non-empty list of {WORDNET_CASE_KINDS}, got {kinds!r}")
    max_synonyms = check_non_negative_int(max_synonyms, "max_synonyms")
    lemmas = wordnet_lemmas(directory, nodes=taxonomy)
    glosses = wordnet_glosses(directory, nodes=taxonomy)
    names = {node_text(n) for n in taxonomy.nodes}
    parent = taxonomy.parent_index.tolist()
    cases: list[tuple[str, str, str]] = []
    for index, node in enumerate(taxonomy.nodes[1:], start=1):
        if "synonym" in kinds:
            own = node_text(node)
            others = [w for w in lemmas[node][1:] if normalize_text(w) not in names and normalize_text(w) != own]
            cases.extend((w, node, "synonym") for w in others[:max_synonyms])
        if "gloss" in kinds:
            clause = glosses[node].split(";")[0].strip().strip('"').strip()
            if len(normalize_text(clause).split()) >= 2 and normalize_text(clause) not in names:
                cases.append((clause, node, "gloss"))
        if "kind_of" in kinds:
            cases.append((f"a kind of {lemmas[taxonomy.nodes[parent[index]]][0]}", node, "kind_of"))
    return cases


def load_taxonomy(source: Taxonomy | Mapping[str, Any] | str | os.PathLike[str], root: str | None = None) -> Taxonomy:
    """A :class:`Taxonomy` from a file path (YAML, JSON or TSV), a ``{root, parent}`` mapping, a Taxonomy or
    ``"wordnet"`` (WordNet 3.0 nouns, :func:`load_wordnet`); with ``root``, only the subtree under that node
    (:meth:`~beyondlabels.taxonomy.Taxonomy.subtree`; for WordNet, :func:`load_wordnet`'s ``root``, which warns when
    hyponyms of ``root`` have their parent outside the subtree).

    Raises:
        ValueError: if ``source`` is none of these, the data is invalid, or ``root`` is not an inner node.

    Examples:
        >>> load_taxonomy({"root": "a", "parent": {"b": "a", "c": "b", "d": "c"}}, root="b")
        Taxonomy(root='b', nodes=3, leaves=1, max_depth=2)
    """
    if root is not None:
        return _subtree(source, root)
    if isinstance(source, Taxonomy):
        return source
    if isinstance(source, Mapping):
        return Taxonomy.from_dict(source)
    if isinstance(source, str) and source.lower() == "wordnet":
        return load_wordnet()
    if isinstance(source, (str, os.PathLike)):
        return read_taxonomy(source)
    raise ValueError(
        f"`source` must be a Taxonomy, a {{root, parent}} mapping, a file path (.yaml, .yml, .json, .tsv) "
        f"or 'wordnet', got {type(source).__name__}"
    )


def _subtree(source: Any, root: Any) -> Taxonomy:
    """The subtree under ``root`` of :func:`load_taxonomy`'s ``source``."""
    if not isinstance(root, str) or not root:
        raise ValueError(f"`root` must be a node name (or None for the whole taxonomy), got {root!r}")
    if isinstance(source, str) and source.lower() == "wordnet":
        return load_wordnet(root=root)
    taxonomy = load_taxonomy(source)
    if root == taxonomy.root:
        return taxonomy
    try:
        return taxonomy.subtree(root)
    except ValueError as err:
        raise ValueError(f"`root`: {err}") from None
