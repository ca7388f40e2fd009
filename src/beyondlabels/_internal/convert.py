"""Conversion of config values to plain Python (internal: not part of the public API)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def plain(value: Any) -> Any:
    """Nested mappings and sequences (also Hydra's DictConfig / ListConfig) as plain dicts (string keys) and lists;
    other values as they are.

    Examples:
        >>> plain({"a": (1, 2), 3: {"b": "c"}})
        {'a': [1, 2], '3': {'b': 'c'}}
    """
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value]
    return value
