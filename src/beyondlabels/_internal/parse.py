"""Text, JSON and YAML from files that came from elsewhere, parsed so that a reader returns a value or raises a
``ValueError`` naming the file (internal: shared by the readers of :mod:`beyondlabels.io`, not part of the public
API).

Rules (every reader of the package follows them through these functions):

- Text is UTF-8; one byte-order mark at its start is dropped (editors on Windows write one). Bytes that are not UTF-8
  are an error, never replaced silently.
- JSON is strict about keys: a key repeated within one object is an error (Python's parser keeps the last value).
- Nesting is bounded: lists and mappings nested more than :data:`MAX_DEPTH` deep are an error, found without
  recursion, so ``[[[[...]]]]`` a hundred thousand deep is a ``ValueError``, not a ``RecursionError``.
- Size is bounded: YAML aliases may share one value in many places; a document that counts more than
  :data:`MAX_VALUES` values once its aliases are expanded (a "billion laughs"), or that contains itself, is an
  error, found in time linear in the file.

Examples:
    >>> parse_json('\\ufeff{"a": [1, 2]}', "x.json")
    {'a': [1, 2]}
    >>> parse_json('{"a": 1, "a": 2}', "x.json")
    Traceback (most recent call last):
    ...
    ValueError: x.json: not valid JSON (duplicate key 'a': a key appears twice in one object)
    >>> parse_json("[" * 100 + "]" * 100, "x.json")
    Traceback (most recent call last):
    ...
    ValueError: x.json: nested more than 64 deep (lists or objects inside each other)
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_NPZ_BYTES",
    "MAX_VALUES",
    "JSONSyntaxError",
    "check_structure",
    "decode_text",
    "load_npz",
    "parse_json",
    "parse_yaml",
    "read_text",
    "text_lines",
]

MAX_DEPTH = 64  # the project's own files nest at most 4 deep (a manifest's table cell)
MAX_VALUES = 10_000_000  # values of one document with its YAML aliases expanded
MAX_NPZ_BYTES = 1 << 32  # 4 GiB: the arrays of one .npz archive, uncompressed, as its directory declares them


class JSONSyntaxError(ValueError):
    """Text that is not JSON at all (e.g. a line cut short by an interrupted write), as opposed to JSON that breaks
    one of the module's rules; ``detail`` is the parser's own message."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


_BOM = "\ufeff"
_NEWLINE = re.compile(r"\r\n|\r|\n")


def decode_text(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text without a leading byte-order mark; ``ValueError`` naming ``where`` otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: not UTF-8 text ({exc})") from None
    return text[1:] if text.startswith(_BOM) else text


def text_lines(text: str) -> list[str]:
    """The lines of ``text`` as a file opened in text mode gives them: ``\\n``, ``\\r\\n`` or ``\\r`` ends a line
    (not the other separators of ``str.splitlines``, which may sit inside a name); no line ends are kept.

    Examples:
        >>> text_lines("a\\tb\\r\\nc\\u2028d\\n")
        ['a\\tb', 'c\\u2028d', '']
    """
    return _NEWLINE.split(text)


def read_text(path: str | os.PathLike[str], where: str | None = None) -> str:
    """The text of a file (:func:`decode_text`). ``OSError`` (a missing file among them) propagates."""
    return decode_text(Path(path).read_bytes(), where or str(path))


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {repeated!r}: a key appears twice in one object")
    return out


def parse_json(text: str | bytes, where: str) -> Any:
    """Parse JSON text under the module's rules.

    Raises:
        ValueError: naming ``where``: not UTF-8, not valid JSON, a repeated key, or nested too deep.
    """
    if isinstance(text, bytes):
        text = decode_text(text, where)
    elif text.startswith(_BOM):
        text = text[1:]
    try:
        data = json.loads(text, object_pairs_hook=_pairs)
    except RecursionError:
        raise ValueError(_too_deep(where, MAX_DEPTH)) from None
    except json.JSONDecodeError as exc:
        raise JSONSyntaxError(f"{where}: not valid JSON ({exc})", str(exc)) from None
    except ValueError as exc:  # a repeated key, an integer of more than 4300 digits
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    check_structure(data, where)
    return data


def parse_yaml(text: str, where: str, loader: Any = None) -> Any:
    """Parse YAML text with ``loader`` (a ``yaml.SafeLoader`` subclass; default ``SafeLoader``) under the module's
    rules.

    Raises:
        ValueError: naming ``where``: not valid YAML, nested too deep, too many values once aliases are expanded,
            or a document that contains itself.
    """
    import yaml

    if text.startswith(_BOM):
        text = text[1:]
    if _bracket_depth(text) > MAX_DEPTH:  # PyYAML's scanner costs O(depth) per token inside [ ] and { }
        raise ValueError(_too_deep(where, MAX_DEPTH))
    try:
        data = yaml.load(text, Loader=loader or yaml.SafeLoader)  # noqa: S506 - SafeLoader or a subclass
    except RecursionError:
        raise ValueError(_too_deep(where, MAX_DEPTH)) from None
    except (yaml.YAMLError, ValueError, TypeError) as exc:  # TypeError: an unhashable key (a list as a mapping key)
        raise ValueError(f"{where}: not valid YAML ({exc})") from None
    check_structure(data, where)
    return data


def check_structure(data: Any, where: str, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> None:
    """Raise a ``ValueError`` naming ``where`` when lists, tuples and dicts in ``data`` nest more than ``max_depth``
    deep, count more than ``max_values`` values with shared ones counted at each place, or contain themselves.

    Iterative, and linear in the number of distinct containers: a container met again (a YAML alias) adds its
    known count instead of being walked again.

    Examples:
        >>> shared = [1, 2, 3]
        >>> check_structure([shared] * 2, "x.yaml", max_values=12)  # 1 + 2 * (1 + 3) values
        >>> check_structure([shared] * 3, "x.yaml", max_values=12)
        Traceback (most recent call last):
        ...
        ValueError: x.yaml: more than 12 values once its aliases are expanded
    """
    if not isinstance(data, (list, tuple, dict)):
        return
    counts: dict[int, int] = {}  # id -> values below it (itself included), for containers walked whole
    open_ids: set[int] = set()
    stack: list[tuple[Any, Any, int]] = [(data, iter(_children(data)), 1)]
    open_ids.add(id(data))
    totals = [1]  # values so far below each open container
    total = 1  # sum(totals): every value counted so far
    while stack:
        container, children, depth = stack[-1]
        child = next(children, _END)
        if child is _END:
            stack.pop()
            open_ids.discard(id(container))
            count = totals.pop()
            counts[id(container)] = count
            if totals:
                totals[-1] += count
            continue
        if not isinstance(child, (list, tuple, dict)):
            totals[-1] += 1
            total += 1
        elif id(child) in counts:
            totals[-1] += counts[id(child)]
            total += counts[id(child)]
        elif id(child) in open_ids:
            raise ValueError(f"{where}: a list or mapping contains itself (a recursive YAML alias)")
        elif depth + 1 > max_depth:
            raise ValueError(_too_deep(where, max_depth))
        else:
            stack.append((child, iter(_children(child)), depth + 1))
            open_ids.add(id(child))
            totals.append(1)
            total += 1
        if total > max_values:
            raise ValueError(f"{where}: more than {max_values} values once its aliases are expanded")


_END = object()


def _bracket_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` against ``]``/``}`` anywhere in ``text`` (quotes not taken apart, so
    brackets inside strings count too: an upper bound of YAML's flow nesting), in one vectorised pass."""
    import numpy as np

    data = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    if data.size == 0:
        return 0
    step = np.zeros(data.size, dtype=np.int64)
    step[(data == ord("[")) | (data == ord("{"))] = 1
    step[(data == ord("]")) | (data == ord("}"))] = -1
    level = np.cumsum(step)
    lowest = np.minimum.accumulate(np.concatenate(([0], level[:-1])))
    return int((level - np.minimum(lowest, 0)).max())


def _too_deep(where: str, depth: int) -> str:
    return f"{where}: nested more than {depth} deep (lists or objects inside each other)"


def _children(container: Any) -> Any:
    return container.values() if isinstance(container, dict) else container


def load_npz(path: str | os.PathLike[str], where: str, max_bytes: int = MAX_NPZ_BYTES) -> dict[str, Any]:
    """Every array of an ``.npz`` archive (no pickles), read whole; any broken archive is a ``ValueError`` naming
    ``where``. Archives whose arrays declare more than ``max_bytes`` uncompressed are refused before reading (a
    small archive may unpack to terabytes). ``OSError`` for a missing file propagates.
    """
    import zipfile

    import numpy as np

    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{where}: not a readable .npz archive ({type(exc).__name__}: {exc})") from None
    if declared > max_bytes:
        raise ValueError(
            f"{where}: its arrays unpack to {declared} bytes, more than the {max_bytes} read from one archive"
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except Exception as exc:  # noqa: BLE001 - zipfile, zlib and numpy raise many types for a broken archive
        raise ValueError(f"{where}: not a readable .npz archive ({type(exc).__name__}: {exc})") from None
    odd = sorted(name for name, value in arrays.items() if not isinstance(value, np.ndarray))
    if odd:
        raise ValueError(f"{where}: the archive holds members that are not .npy arrays: {odd[:5]}")
    return arrays
