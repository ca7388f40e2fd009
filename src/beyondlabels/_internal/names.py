"""Name checks and name listings in error messages, shared by the data types."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SHOW = 5  # how many offending names an error message lists


def listing(names: Iterable[Any], limit: int = SHOW) -> str:
    """``'a', 'b', 'c'`` or ``'a', 'b', ... (7 in all)``."""
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names)} in all)"


def check_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        hint = " (in YAML, quote names such as yes/no/on/off/null or numbers)" if not isinstance(value, str) else ""
        raise ValueError(f"{where} must be a non-empty string, got {value!r} ({type(value).__name__}){hint}")
    return value
