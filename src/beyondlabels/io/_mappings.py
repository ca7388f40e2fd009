"""Reading side-information files (YAML or JSON) into plain mappings, strictly.

Shared by :mod:`beyondlabels.io.taxonomy_files` and :mod:`beyondlabels.io.profiles_files`. Strict means: the suffix
decides the parser (``.yaml``/``.yml`` or ``.json``), the top level must be a mapping, and a key repeated inside one
mapping is an error (plain YAML and JSON loaders silently keep the last one, which would hide a duplicated class or
node). Text, nesting and YAML aliases follow the rules of :mod:`beyondlabels._internal.parse` (UTF-8 with a byte-order
mark dropped, nesting and expanded size bounded, errors naming the file).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from beyondlabels._internal.parse import parse_yaml, read_json, read_text

MAX_BYTES = 256 << 20  # the largest taxonomy or profiles file read (WordNet's noun hierarchy as YAML: 4 MB)
YAML_SUFFIXES = (".yaml", ".yml")
JSON_SUFFIXES = (".json",)


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key repeated within one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # unhashable key: the base constructor reports it
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_mapping(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """Parse a YAML or JSON file whose top level is a mapping.

    Args:
        path: the file; its suffix (``.yaml``, ``.yml`` or ``.json``) selects the parser.
        what: what the file holds (``"taxonomy"``, ``"profiles"``), used in error messages.

    Returns:
        The parsed top-level mapping.

    Raises:
        ValueError: for an unsupported suffix, a parse error, a duplicated key, or a top level that is not a mapping.
        FileNotFoundError: if the file does not exist.

    Examples:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     file = pathlib.Path(tmp, "t.json")
        ...     _ = file.write_text('{"root": "a", "parent": {"b": "a"}}')
        ...     read_mapping(file, "taxonomy")
        {'root': 'a', 'parent': {'b': 'a'}}
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in YAML_SUFFIXES + JSON_SUFFIXES:
        raise ValueError(
            f"{what} file '{path}': unsupported suffix {path.suffix!r}; "
            f"use one of {', '.join(YAML_SUFFIXES + JSON_SUFFIXES)} (the suffix selects the parser)"
        )
    where = f"{what} file '{path}' could not be parsed"
    if suffix in JSON_SUFFIXES:
        data = read_json(path, where, max_bytes=MAX_BYTES)
    else:
        data = parse_yaml(read_text(path, where, MAX_BYTES), where, _StrictLoader)
    if not isinstance(data, dict):
        raise ValueError(
            f"{what} file '{path}': the top level must be a mapping, got {type(data).__name__}"
            + (" (the file is empty)" if data is None else "")
        )
    return data
