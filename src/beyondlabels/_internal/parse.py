"""Text, JSON and YAML from files that came from elsewhere, parsed so that a reader returns a value or raises a
``ValueError`` naming the file (internal: shared by the readers of :mod:`beyondlabels.io`, not part of the public
API). Files are opened by :mod:`beyondlabels._internal.files` (regular files only, a byte limit per reader).

Rules (every reader of the package follows them through these functions):

- Text is UTF-8; one byte-order mark at its start is dropped (editors on Windows write one). Bytes that are not UTF-8
  are an error, never replaced silently.
- JSON is strict about keys: a key repeated within one object is an error (Python's parser keeps the last value).
- JSON numbers are numbers: ``Infinity`` and ``-Infinity`` are errors wherever they stand (``nonfinite="nan"``, the
  default, keeps ``NaN``, which the project writes for an undefined value); readers that expect a metric value check
  that it is finite (``1e999`` parses as infinity).
- Nesting is bounded: lists and mappings nested more than :data:`MAX_DEPTH` deep are an error, found without
  recursion, so ``[[[[...]]]]`` a hundred thousand deep is a ``ValueError``, not a ``RecursionError``.
- Size is bounded. JSON of :data:`CENSUS_BYTES` bytes or more is counted before it is parsed, in one vectorised pass
  that knows strings from structure: its values (more than :data:`MAX_VALUES` is an error), its depth, and the memory
  its Python objects would take; a document whose bytes, text and objects would take more than
  :data:`MAX_MEMORY_RATIO` times its size (plus :data:`MEMORY_SLACK`) is refused before a single object is made
  (thirty megabytes of ``[{}, {}, ...]`` would take 24 times its size). YAML aliases and merge keys (``<<``) may
  share one value in many places; a document that counts more than :data:`MAX_VALUES` values once its aliases and
  merges are expanded (a "billion laughs"), or that contains itself, is an error, found on PyYAML's node graph before
  anything is constructed, in time linear in the file.

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
    >>> parse_json('{"precision@1": Infinity}', "x.json")
    Traceback (most recent call last):
    ...
    ValueError: x.json: not valid JSON (Infinity is not a number this file may hold)
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from beyondlabels._internal.files import MAX_FILE_BYTES, open_file, read_file

__all__ = [
    "CENSUS_BYTES",
    "MAX_DEPTH",
    "MAX_MEMORY_RATIO",
    "MAX_NPZ_BYTES",
    "MAX_VALUES",
    "MEMORY_SLACK",
    "JSONSyntaxError",
    "JSONCensus",
    "check_json_size",
    "check_structure",
    "decode_text",
    "json_census",
    "load_npz",
    "parse_json",
    "parse_yaml",
    "read_json",
    "read_text",
    "text_lines",
]

MAX_DEPTH = 64  # the project's own files nest at most 4 deep (a manifest's table cell)
MAX_VALUES = 10_000_000  # values of one document with its YAML aliases expanded
MAX_NPZ_BYTES = 1 << 32  # 4 GiB: the arrays of one .npz archive, uncompressed, as its directory declares them
MAX_MEMORY_RATIO = 10  # a JSON document may take at most this many times its size in memory once parsed ...
MEMORY_SLACK = 16 << 20  # ... plus 16 MiB (a small file's objects cost little whatever their ratio)
CENSUS_BYTES = 64 << 10  # JSON from this size on is counted before it is parsed


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


def read_text(path: str | os.PathLike[str], where: str | None = None, max_bytes: int | None = MAX_FILE_BYTES) -> str:
    """The text of a regular file of at most ``max_bytes`` bytes (:func:`beyondlabels._internal.files.read_file`,
    then :func:`decode_text`). ``OSError`` (a missing file among them) propagates; a pipe, a device or a file too
    large is a ``ValueError`` naming ``where``."""
    where = where or str(path)
    return decode_text(read_file(path, where, max_bytes), where)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {repeated!r}: a key appears twice in one object")
    return out


_NONFINITE = ("keep", "nan", "refuse")
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _constant(nonfinite: str) -> Any:
    """``parse_constant`` of ``json.loads`` for ``NaN``, ``Infinity`` and ``-Infinity`` under ``nonfinite``."""

    def constant(name: str) -> float:
        if nonfinite == "keep" or (nonfinite == "nan" and name == "NaN"):
            return _CONSTANTS[name]  # one object per constant, as json's own: two reads of a NaN compare equal
        raise ValueError(f"{name} is not a number this file may hold")

    return constant


def parse_json(text: str | bytes, where: str, *, nonfinite: str = "nan") -> Any:
    """Parse JSON text under the module's rules.

    Args:
        text: The document (bytes are decoded as UTF-8 first).
        where: What it is, for messages (the file, the line).
        nonfinite: ``"nan"`` (default) accepts ``NaN`` and refuses ``Infinity`` / ``-Infinity``; ``"refuse"``
            refuses all three; ``"keep"`` reads all three as floats.

    Raises:
        ValueError: naming ``where``: not UTF-8, not valid JSON, a repeated key, a refused constant, nested too deep,
            too many values, or more memory than :data:`MAX_MEMORY_RATIO` times its size.
    """
    if nonfinite not in _NONFINITE:
        raise ValueError(f"`nonfinite` must be one of {_NONFINITE}, got {nonfinite!r}")
    census = None
    if len(text) >= CENSUS_BYTES:
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        census = json_census(data)
        check_json_size(census, where)
        del data
    if isinstance(text, bytes):
        text = decode_text(text, where)
    elif text.startswith(_BOM):
        text = text[1:]
    return _loads(text, where, nonfinite, census)


def read_json(
    path: str | os.PathLike[str], where: str, *, max_bytes: int | None = MAX_FILE_BYTES, nonfinite: str = "nan"
) -> Any:
    """The JSON document of a file (:func:`beyondlabels._internal.files.read_file`'s checks, then
    :func:`parse_json`'s rules), its bytes dropped once decoded, so that its memory is its text and its objects.

    Raises:
        FileNotFoundError: if there is no such file.
        ValueError: naming ``where``, as :func:`parse_json` and for a file that is not regular or too large.
    """
    if nonfinite not in _NONFINITE:
        raise ValueError(f"`nonfinite` must be one of {_NONFINITE}, got {nonfinite!r}")
    data = read_file(path, where, max_bytes)
    census = None
    if len(data) >= CENSUS_BYTES:
        census = json_census(data)
        check_json_size(census, where, holds_bytes=False)
    text = decode_text(data, where)
    del data
    return _loads(text, where, nonfinite, census)


def _loads(text: str, where: str, nonfinite: str, census: JSONCensus | None) -> Any:
    """``json.loads`` under the module's rules; ``census``: the document was counted (and passed) already."""
    members = [0]

    def count(obj: dict[str, Any]) -> dict[str, Any]:
        members[0] += len(obj)
        return obj

    hooks: dict[str, Any] = {"object_hook": count} if census is not None else {"object_pairs_hook": _pairs}
    try:
        data = json.loads(text, parse_constant=_constant(nonfinite), **hooks)
    except RecursionError:
        raise ValueError(_too_deep(where, MAX_DEPTH)) from None
    except json.JSONDecodeError as exc:
        raise JSONSyntaxError(f"{where}: not valid JSON ({exc})", str(exc)) from None
    except ValueError as exc:  # a repeated key, a refused constant, an integer of more than 4300 digits
        raise ValueError(f"{where}: not valid JSON ({exc})") from None
    if census is None:
        check_structure(data, where, aliases=False)
    elif members[0] != census.members:  # the parser kept the last of a repeated key: name it if that is cheap
        del data
        detail = "a key appears twice in one object"
        if len(text) <= 16 * CENSUS_BYTES:
            try:
                json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant(nonfinite))
            except ValueError as exc:
                detail = str(exc)
        raise ValueError(f"{where}: not valid JSON ({detail})")
    return data


@dataclass
class JSONCensus:
    """What a JSON document holds, counted outside its strings (:func:`json_census`).

    Attributes:
        size: Bytes of the document.
        width: Bytes per character of its text in Python (1, 2 or 4: the widest character decides).
        objects, lists: Objects and lists, and how many of each are not empty.
        members: Members of all objects (the colons).
        items: Values inside lists and objects (members included).
        strings: Strings (keys included) and the bytes inside them.
        distinct_keys: Object keys told apart (one parse shares the string of a key met again), and the bytes of
            the keys met again.
        numbers: Numbers that are not cached small integers.
        depth: The deepest nesting of lists and objects.
    """

    size: int = 0
    width: int = 1
    objects: int = 0
    full_objects: int = 0
    lists: int = 0
    full_lists: int = 0
    members: int = 0
    items: int = 0
    strings: int = 0
    string_bytes: int = 0
    distinct_keys: int = 0
    repeated_key_bytes: int = 0
    numbers: int = 0
    depth: int = 0

    @property
    def values(self) -> int:
        """Values of the document: itself and every value inside."""
        return 1 + self.items

    def memory(self, shared_keys: bool = True, holds_bytes: bool = True, holds_text: bool = True) -> int:
        """An upper bound of the bytes that reading the document takes in CPython: the bytes and the decoded text
        while they are held, and every object the parser makes (``sys.getsizeof`` of CPython 3.10 to 3.13, rounded
        up).

        Args:
            shared_keys: One parse of the whole document (a key met again shares its string); False for JSON lines
                parsed one by one.
            holds_bytes: The file's bytes stay alive while it is parsed.
            holds_text: Its decoded text does (a JSON lines reader decodes a line at a time).
        """
        strings = self.strings - (self.members - self.distinct_keys if shared_keys else 0)
        memo = self.distinct_keys * 48 if shared_keys else 0  # the parser's own table of the keys it met
        string_bytes = self.string_bytes - (self.repeated_key_bytes if shared_keys else 0)
        structure = (
            self.objects * 64
            + self.full_objects * 120
            + self.members * 40
            + self.lists * 56
            + self.full_lists * 32
            + (self.items - self.members) * 10
            + strings * (49 if self.width == 1 else 80)
            + string_bytes * self.width
            + self.numbers * 32
        )
        return self.size * (holds_bytes + self.width * holds_text) + structure + memo


_CHUNK = 1 << 19  # bytes counted at once (about 40 times this in temporary arrays)


def json_census(data: bytes) -> JSONCensus:
    """Count what the JSON document ``data`` holds (:class:`JSONCensus`) without parsing it: one vectorised pass over
    its bytes, a chunk at a time, that tells strings (with their escaped quotes) from structure, and tells keys apart
    by a polynomial hash of their bytes (a random base drawn per call, so no file can be made to collide). Exact for
    valid JSON (up to a hash collision, which only lowers the key count); for anything else an estimate (the parser
    then refuses it)."""
    import secrets

    import numpy as np

    out = JSONCensus(size=len(data))
    view = np.frombuffer(data, dtype=np.uint8)
    base = secrets.randbits(64) | 1
    state: dict[str, Any] = {"backslashes": 0, "quotes": 0, "depth": 0, "numeric": False, "open": -1, "pending": 0}
    state["base"] = (np.uint64(base), np.uint64(pow(base, -1, 1 << 64)))
    keys: list[Any] = []
    for start in range(0, view.size, _CHUNK):
        keys.append(_census_chunk(view[start : start + _CHUNK], start, state, out, np))
    if state["quotes"] % 2:  # a string left open at the end
        out.string_bytes += out.size - state["open"] - 1
    out.strings = state["quotes"] // 2 + state["quotes"] % 2
    high = int(view.max()) if view.size else 0
    out.width = 4 if high >= 0xF0 else 2 if high >= 0xE0 else 1
    hashes = np.concatenate([k[0] for k in keys]) if keys else np.zeros(0, np.uint64)
    lengths = np.concatenate([k[1] for k in keys]) if keys else np.zeros(0, np.int64)
    _, first = np.unique(hashes, return_index=True)
    out.distinct_keys = out.members - hashes.size + first.size  # keys cut by a chunk's edge count as distinct
    out.repeated_key_bytes = int(lengths.sum() - lengths[first].sum())
    return out


def _census_chunk(c: Any, offset: int, state: dict[str, Any], out: JSONCensus, np: Any) -> tuple[Any, Any]:
    """Add one chunk ``c`` (bytes ``offset...``) to ``out``; ``state`` carries what crosses chunk boundaries.
    Returns the hashes and lengths of the keys that lie wholly in the chunk."""
    n = c.size
    idx = np.arange(n, dtype=np.int32)
    last_plain = np.maximum.accumulate(np.where(c == 92, np.int32(-1 - min(state["backslashes"], 1 << 30)), idx))
    quotes = np.flatnonzero(c == 34)
    before = np.where(quotes > 0, last_plain[np.maximum(quotes - 1, 0)], -1 - state["backslashes"])
    real = quotes[(quotes - 1 - before) % 2 == 0]  # a quote after an odd run of backslashes is escaped
    state["backslashes"] = (state["backslashes"] + n) if last_plain[-1] < 0 else int(n - 1 - last_plain[-1])
    del last_plain, before, quotes
    parity = state["quotes"] % 2
    flags = np.zeros(n, dtype=np.int8)
    flags[real] = 1
    outside = (np.cumsum(flags, dtype=np.int32) + parity) % 2 == 0
    outside[real] = False
    del flags
    k = np.arange(real.size) + state["quotes"]  # bytes inside strings: closing positions minus opening ones
    opening, closing = real[k % 2 == 0] + offset, real[k % 2 == 1] + offset
    if parity and closing.size:
        out.string_bytes += int(closing[0]) - state["open"] - 1
        closing = closing[1:]
    out.string_bytes += int(closing.sum() - opening[: closing.size].sum()) - closing.size
    if opening.size > closing.size:
        state["open"] = int(opening[-1])
    state["quotes"] += real.size
    _census_structure(c, outside, state, out, np)
    _census_numbers(c, outside, state, out, np)
    return _key_hashes(c, outside, real, state, np)


def _census_structure(c: Any, outside: Any, state: dict[str, Any], out: JSONCensus, np: Any) -> None:
    n = c.size
    brackets = np.flatnonzero(outside & ((c == 123) | (c == 91) | (c == 125) | (c == 93)))
    kinds = c[brackets]
    opens = (kinds == 123) | (kinds == 91)
    following = c[np.minimum(brackets + 1, n - 1)]
    empty = opens & (brackets + 1 < n) & (following == kinds + 2)
    if state["pending"] and brackets.size and brackets[0] == 0 and kinds[0] == state["pending"] + 2:
        out.full_objects -= state["pending"] == 123  # "{" ending the last chunk, "}" starting this one
        out.full_lists -= state["pending"] == 91
        out.items -= 1
    state["pending"] = int(kinds[-1]) if brackets.size and brackets[-1] == n - 1 and opens[-1] else 0
    out.objects += int((kinds == 123).sum())
    out.lists += int((kinds == 91).sum())
    out.full_objects += int(((kinds == 123) & ~empty).sum())
    out.full_lists += int(((kinds == 91) & ~empty).sum())
    level = np.cumsum(np.where(opens, 1, -1)) + state["depth"]
    if level.size:
        out.depth = max(out.depth, int(level.max()))
        state["depth"] = int(level[-1])
    out.members += int(np.count_nonzero(outside & (c == 58)))
    out.items += int(np.count_nonzero(outside & (c == 44))) + int((opens & ~empty).sum())


def _census_numbers(c: Any, outside: Any, state: dict[str, Any], out: JSONCensus, np: Any) -> None:
    """Numbers outside strings, less those of at most two digits (CPython shares the ints 0..256)."""
    numeric = ((c >= 48) & (c <= 57)) | (c == 45) | (c == 46) | (c == 43) | (c == 69) | (c == 101)
    numeric &= outside
    begin = np.flatnonzero(numeric & ~np.concatenate(([state["numeric"]], numeric[:-1])))
    finish = np.append(np.flatnonzero(numeric & ~np.concatenate((numeric[1:], [False]))), c.size + 8)
    finish = finish[np.searchsorted(finish, begin)]  # c.size + 8: a number running on past the chunk
    cached = (finish - begin < 2) & (c[begin] != 45) & (c[begin] != 46)
    out.numbers += int(np.count_nonzero(~cached))
    state["numeric"] = bool(numeric[-1])


def _key_hashes(c: Any, outside: Any, real: Any, state: dict[str, Any], np: Any) -> tuple[Any, Any]:
    """Hashes and lengths of the keys (the string before each colon) that lie wholly in the chunk."""
    colons = np.flatnonzero(outside & (c == 58))
    close = np.searchsorted(real, colons) - 1
    whole = close >= 1
    close = close[whole]
    start, end = real[close - 1], real[close]  # the key's quotes
    if not start.size:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    base, inverse = state["base"]
    with np.errstate(over="ignore"):
        span = slice(int(start.min()), int(end.max()) + 1)
        powers = np.full(span.stop - span.start, base, dtype=np.uint64).cumprod()
        sums = np.cumsum(c[span].astype(np.uint64) * powers)
        del powers
        first = start - span.start
        rest = np.full(first.max() + 2, inverse, dtype=np.uint64).cumprod()
        hashes = (sums[end - span.start - 1] - sums[first]) * rest[first]
        lengths = (end - start - 1).astype(np.int64)
        hashes = hashes * np.uint64(0x9E3779B97F4A7C15) + lengths.astype(np.uint64)
    return hashes, lengths


def check_json_size(census: JSONCensus, where: str, **held: bool) -> None:
    """Raise a ``ValueError`` naming ``where`` when a document counted by :func:`json_census` nests more than
    :data:`MAX_DEPTH` deep, holds more than :data:`MAX_VALUES` values, or would take more memory than
    :data:`MAX_MEMORY_RATIO` times its size plus :data:`MEMORY_SLACK` (``held``: what
    :meth:`JSONCensus.memory` counts)."""
    if census.depth > MAX_DEPTH:
        raise ValueError(_too_deep(where, MAX_DEPTH))
    if census.values > MAX_VALUES:
        raise ValueError(f"{where}: more than {MAX_VALUES} values ({census.values}): too large to read")
    need, allowed = census.memory(**held), MAX_MEMORY_RATIO * census.size + MEMORY_SLACK
    if need > allowed:
        raise ValueError(
            f"{where}: reading its {census.size} bytes would take about {math.ceil(need / 2**20)} MiB in memory, more "
            f"than {MAX_MEMORY_RATIO} times its size: it holds {census.objects} objects, {census.lists} lists, "
            f"{census.strings} strings and {census.numbers} numbers; a file of this project holds far fewer small "
            "values for its size (qrels and runs also read as TREC text)"
        )


def parse_yaml(text: str, where: str, loader: Any = None) -> Any:
    """Parse YAML text with ``loader`` (a ``yaml.SafeLoader`` subclass; default ``SafeLoader``) under the module's
    rules: the node graph is checked (depth, values with aliases and merge keys expanded) before any object is made.

    Raises:
        ValueError: naming ``where``: not valid YAML, nested too deep, too many values once aliases and merge keys
            are expanded, or a document that contains itself.
    """
    import yaml

    if text.startswith(_BOM):
        text = text[1:]
    if _bracket_depth(text) > MAX_DEPTH:  # PyYAML's scanner costs O(depth) per token inside [ ] and { }
        raise ValueError(_too_deep(where, MAX_DEPTH))
    reader = None
    try:
        reader = (loader or yaml.SafeLoader)(text)
        node = reader.get_single_node()
        if node is not None:
            _check_nodes(node, where)
        data = reader.construct_document(node) if node is not None else None
    except RecursionError:
        raise ValueError(_too_deep(where, MAX_DEPTH)) from None
    except (yaml.YAMLError, ValueError, TypeError) as exc:  # TypeError: an unhashable key (a list as a mapping key)
        if isinstance(exc, ValueError) and str(exc).startswith(where):
            raise
        raise ValueError(f"{where}: not valid YAML ({exc})") from None
    finally:
        if reader is not None:
            reader.dispose()
    check_structure(data, where)
    return data


_MERGE = "tag:yaml.org,2002:merge"


def _node_children(node: Any) -> list[tuple[Any, int]]:
    """``(child, weight)`` of a YAML node: a merged mapping counts its entries (weight 0 for itself), every other
    child counts itself too (weight 1)."""
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return [(child, 1) for child in node.value]
    if not isinstance(node, yaml.MappingNode):
        return []
    children: list[tuple[Any, int]] = []
    for key, value in node.value:
        if key.tag == _MERGE:
            merged = value.value if isinstance(value, yaml.SequenceNode) else [value]
            children.extend((m, 0) for m in merged)
        else:
            children.extend(((key, 1), (value, 1)))
    return children


def _check_nodes(root: Any, where: str) -> None:
    """:func:`check_structure` on PyYAML's node graph, before construction: an alias is the node it names (counted
    at each place, walked once), a merge key (``<<``) adds the entries of the mappings it merges, as PyYAML's
    constructor would copy them."""
    import yaml

    too_many = " once its aliases are expanded (merge keys << too)"
    _walk(root, _node_children, yaml.Node, where, MAX_DEPTH, MAX_VALUES, too_many)


def check_structure(
    data: Any, where: str, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES, aliases: bool = True
) -> None:
    """Raise a ``ValueError`` naming ``where`` when lists, tuples and dicts in ``data`` nest more than ``max_depth``
    deep, count more than ``max_values`` values with shared ones counted at each place, or contain themselves.

    Iterative, and linear in the number of distinct containers: a container met again (a YAML alias) adds its
    known count instead of being walked again. ``aliases=False`` (JSON, which has none) words the message without
    them.

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
    too_many = " once its aliases are expanded" if aliases else ": too large to read"
    _walk(data, _weighted_children, (list, tuple, dict), where, max_depth, max_values, too_many)


def _walk(
    root: Any,
    children: Callable[[Any], Iterable[tuple[Any, int]]],
    containers: type | tuple[type, ...],
    where: str,
    max_depth: int,
    max_values: int,
    too_many: str,
) -> None:
    """The walk of :func:`check_structure` and :func:`_check_nodes`: iterative, depth first, each container walked
    once (one met again adds its known count). ``children`` gives ``(child, weight)`` of a container: a child of
    weight 1 counts itself and what is below it, one of weight 0 (a merged YAML mapping) only what is below it; a
    child that is not an instance of ``containers`` is a value with nothing below it. The message for more than
    ``max_values`` values ends in ``too_many``."""
    counts: dict[int, int] = {}  # id -> values below a container walked whole (itself included)
    open_ids = {id(root)}
    stack: list[tuple[Any, Any, int, int]] = [(root, iter(children(root)), 1, 1)]
    totals = [1]  # values so far below each open container
    total = 1  # sum(totals): every value counted so far
    while stack:
        container, below, depth, weight = stack[-1]
        pair = next(below, None)
        if pair is None:
            stack.pop()
            open_ids.discard(id(container))
            count = totals.pop()
            counts[id(container)] = count
            if totals:
                totals[-1] += count - (1 - weight)
            continue
        child, child_weight = pair
        if not isinstance(child, containers):
            totals[-1] += child_weight
            total += child_weight
        elif id(child) in counts:
            add = counts[id(child)] - (1 - child_weight)
            totals[-1] += add
            total += add
        elif id(child) in open_ids:
            raise ValueError(f"{where}: a list or mapping contains itself (a recursive YAML alias)")
        elif depth + 1 > max_depth:
            raise ValueError(_too_deep(where, max_depth))
        else:
            stack.append((child, iter(children(child)), depth + 1, child_weight))
            open_ids.add(id(child))
            totals.append(1)
            total += child_weight
        if total > max_values:
            raise ValueError(f"{where}: more than {max_values} values{too_many}")


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


def _weighted_children(container: Any) -> Iterable[tuple[Any, int]]:
    """``(child, 1)`` of a list, tuple or dict (its values)."""
    return zip(container.values() if isinstance(container, dict) else container, repeat(1))


def load_npz(path: str | os.PathLike[str], where: str, max_bytes: int = MAX_NPZ_BYTES) -> dict[str, Any]:
    """Every array of an ``.npz`` archive (no pickles), read whole; any broken archive is a ``ValueError`` naming
    ``where``. Archives whose arrays declare more than ``max_bytes`` uncompressed are refused before reading (a
    small archive may unpack to terabytes); the file itself is a regular file of at most ``max_bytes`` bytes
    (:func:`beyondlabels._internal.files.open_file`). ``OSError`` for a missing file propagates.
    """
    import zipfile

    import numpy as np

    with open_file(path, where, max_bytes) as handle:
        try:
            with zipfile.ZipFile(handle) as archive:
                declared = sum(info.file_size for info in archive.infolist())
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise ValueError(f"{where}: not a readable .npz archive ({type(exc).__name__}: {exc})") from None
        if declared > max_bytes:
            raise ValueError(
                f"{where}: its arrays unpack to {declared} bytes, more than the {max_bytes} read from one archive"
            )
        handle.seek(0)
        try:
            with np.load(handle, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
        except Exception as exc:  # noqa: BLE001 - zipfile, zlib and numpy raise many types for a broken archive
            raise ValueError(f"{where}: not a readable .npz archive ({type(exc).__name__}: {exc})") from None
    odd = sorted(name for name, value in arrays.items() if not isinstance(value, np.ndarray))
    if odd:
        raise ValueError(f"{where}: the archive holds members that are not .npy arrays: {odd[:5]}")
    return arrays
