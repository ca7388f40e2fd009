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

Example:
    >>> load_taxonomy({"root": "shape", "parent": {"polygon": "shape", "square": "polygon"}}).ancestors("square")
    ['square', 'polygon', 'shape']
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from beyondlabels.io._mappings import read_mapping
from beyondlabels.io._parse import read_text, text_lines
from beyondlabels.taxonomy import Taxonomy, dag_to_tree, taxonomy_from_edges

__all__ = [
    "WORDNET_ROOT",
    "find_wordnet_dir",
    "load_taxonomy",
    "load_wordnet",
    "read_taxonomy",
    "read_tsv",
    "wordnet_lemmas",
]

WORDNET_ROOT = "entity.n.01"
_WORDNET_DIRS = ("/usr/share/wordnet", "/usr/local/share/wordnet", "/usr/share/WordNet-3.0/dict")


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

    Example:
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
    """The WordNet 3.0 noun hierarchy as a tree (files and names: the module docstring; the DAG rule:
    :mod:`beyondlabels.taxonomy.graphs`).

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


def load_taxonomy(source: Taxonomy | Mapping[str, Any] | str | os.PathLike[str]) -> Taxonomy:
    """A :class:`Taxonomy` from a file path (YAML, JSON or TSV), a ``{root, parent}`` mapping, a Taxonomy (returned
    as is) or ``"wordnet"`` (WordNet 3.0 nouns, :func:`load_wordnet`).

    Raises:
        ValueError: if ``source`` is none of these, or the data is invalid.

    Example:
        >>> load_taxonomy({"root": "a", "parent": {"b": "a"}})
        Taxonomy(root='a', nodes=2, leaves=1, max_depth=1)
    """
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
