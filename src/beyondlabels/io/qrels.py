"""Judgements (qrels) and runs, read from TREC or JSON files, and append-only updates of qrels.

Formats
    - TREC qrels: one judgement per line, ``query iteration document grade`` (whitespace-separated; the iteration
      column is ignored). Grades are ints; a negative one (TREC's -1 / -2) is kept as it is and read as trec_eval
      reads it, as a pooled document that was not judged (:mod:`beyondlabels.functional.ranking`).
    - TREC runs: ``query Q0 document rank score tag``; documents are ranked by score (ties: the rule of
      :func:`beyondlabels.functional.ranking.judge_run`), the rank column is not used (as in trec_eval).
    - JSON qrels: ``{query: {document: grade or null}}`` (int grades, as in TREC files); null marks a listed but
      unjudged document.
    - JSON runs: ``{query: {document: score}}`` or ``{query: [document, ...]}`` in rank order.

    A file whose name ends in ``.json`` is read as JSON, anything else as TREC text. Query and document ids are
    strings. Lines that are empty or start with ``#`` are skipped in TREC files.

    Files come from elsewhere, so nothing is read loosely: text is UTF-8 (a byte-order mark at the start is dropped,
    so it never becomes part of the first query's id); a grade is a decimal integer (``2``, ``-1``, ``+3``, ``1.0``)
    of at most 2**53 in size, a score a decimal number (``0.5``, ``-1e-3``), never ``1_0`` (which Python reads as
    10), ``0x1`` or non-ASCII digits; a JSON key given twice in one object, and JSON nested deeper than 64, are
    errors (:mod:`beyondlabels._internal.parse`). Every error names the file (and the line).

Append-only qrels
    Judgements are only ever added: :func:`update_qrels` merges a newer version into an older one and *reports* every
    existing judgement the newer version changes or removes (a grade that changes, a judged document that becomes
    unjudged or disappears). Judging a previously unjudged document is an addition, not a change. With
    ``on_change="warn"`` (default) the newer judgement is kept and every change is logged and returned; with
    ``"error"`` a change raises; with ``"keep"`` the older judgement is kept.

Examples:
    >>> old = {"1": {"a": 1, "b": None}}
    >>> update = update_qrels(old, {"1": {"a": 2, "b": 0, "c": 1}}, on_change="keep")
    >>> update.qrels, [(c.query, c.document, c.old, c.new) for c in update.changes], update.added
    ({'1': {'a': 1, 'b': 0, 'c': 1}}, [('1', 'a', 1, 2)], 2)
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beyondlabels._internal.checks import check_choice, is_int
from beyondlabels._internal.files import read_file
from beyondlabels._internal.parse import decode_text, read_json, text_lines

__all__ = ["QrelsChange", "QrelsUpdate", "load_qrels", "load_run", "update_qrels"]

log = logging.getLogger(__name__)

Qrels = dict[str, dict[str, "int | None"]]
Run = dict[str, "dict[str, float] | list[str]"]


# A grade as text: a decimal integer, optionally with a zero fraction ("1.0", as trec_eval reads it); a score: a
# decimal number. ASCII only (re.ASCII): str.isdigit and float() also take "1_0", "١" and surrounding spaces.
_GRADE = re.compile(r"[+-]?[0-9]+(?:\.0*)?", re.ASCII)
_SCORE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_MAX_GRADE = 1 << 53  # every int up to here is exact as a float64 (the kernel's type)
MAX_BYTES = 1 << 30  # the largest qrels or run file read (a 10^7-line TREC qrels file is about 300 MB)


def _read_json(path: Path, what: str) -> Any:
    return read_json(path, f"{path}: malformed {what} JSON", max_bytes=MAX_BYTES)


def _json_object(file: Path, what: str, layout: str) -> dict[str, Any] | None:
    """The top-level object of a ``.json`` file (``layout``: what it maps, for the message); None for any other file
    (TREC text)."""
    if file.suffix.lower() != ".json":
        return None
    data = _read_json(file, what)
    if not isinstance(data, dict):
        raise ValueError(f"{file}: {what} JSON must be an object {layout}, got {type(data).__name__}")
    return data


def _lines(file: Path) -> list[str]:
    return text_lines(decode_text(read_file(file, str(file), MAX_BYTES), str(file)))


def _trec_rows(file: Path, what: str, columns: str) -> Iterator[tuple[str, list[str]]]:
    """``(where, fields)`` of each line of a TREC text file that is not empty or a ``#`` comment; a line without
    exactly the fields named in ``columns`` is an error naming the file and line."""
    size = len(columns.split())
    for number, line in enumerate(_lines(file), start=1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        where = f"{file}:{number}"
        if len(parts) != size:
            raise ValueError(
                f"{where}: a TREC {what} line has {size} columns '{columns}', got {len(parts)}: {line.strip()[:200]!r}"
            )
        yield where, parts


def _grade(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value[:40]
        if len(value) <= 40 and _GRADE.fullmatch(value):
            value = int(value.split(".")[0])
        elif len(value) <= 40 and _SCORE.fullmatch(value) and not float(value).is_integer():
            value = float(value)  # a fraction: the error below
        else:
            raise ValueError(
                f"{where}: grade {text!r} is not a number written as a decimal integer; grades are ints such as 2, -1 "
                "or 1.0 (or null in JSON for unjudged), never 1_0, 1e1 or 0x1."
            )
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    if not is_int(value):
        raise ValueError(
            f"{where}: grade {value!r} is not an int; grades are ints (0 and up judged, negative pooled but not "
            "judged, as in trec_eval), or null in JSON for a listed but unjudged document."
        )
    if abs(value) > _MAX_GRADE:
        digits = len(str(abs(value)))
        raise ValueError(f"{where}: grade of {digits} digits is larger than 2**53, the largest an exact float holds.")
    return value


def _score(text: str, where: str) -> float:
    if len(text) > 400 or not _SCORE.fullmatch(text):
        raise ValueError(f"{where}: score {text[:40]!r} is not a number written as a decimal (such as 0.5 or -1e-3)")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{where}: score {text[:40]!r} is not finite")
    return value


def _document(doc: Any, where: str) -> str:
    if isinstance(doc, bool) or not isinstance(doc, (str, int)):
        raise ValueError(f"{where}: document {str(doc)[:40]!r} is not an id (a string or an integer)")
    return str(doc)


def _check_path(path: str | os.PathLike[str], what: str) -> Path:
    file = Path(path)
    if not file.exists():  # anything there that is not a regular file is refused when opened (a pipe never blocks)
        raise FileNotFoundError(f"{what} file {file} does not exist (expected a TREC text file or a .json file)")
    return file


def load_qrels(path: str | os.PathLike[str]) -> Qrels:
    """Read qrels: ``{query: {document: grade or None}}`` (formats: the module docstring).

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: for a malformed line or entry (file and line named), a bad grade, or a document judged twice
            with different grades in one TREC file.
    """
    file = _check_path(path, "qrels")
    data = _json_object(file, "qrels", "{query: {document: grade or null}}")
    if data is not None:
        for query, judgements in data.items():
            if not isinstance(judgements, dict):
                raise ValueError(
                    f"{file}: query {query!r} must map to {{document: grade or null}}, got {type(judgements).__name__}"
                )
            for doc, g in judgements.items():  # in place: JSON keys are strings already, most grades ints
                if g is None or (type(g) is int and -_MAX_GRADE <= g <= _MAX_GRADE):
                    continue  # what _grade keeps as it is, found without its checks (the bulk of a file)
                grade = _grade(g, f"{file}: query {query!r}, document {doc!r}")
                if grade is not g:
                    judgements[doc] = grade
        return data
    qrels: Qrels = {}
    for where, (query, _, doc, grade) in _trec_rows(file, "qrels", "query iteration document grade"):
        value = _grade(grade, where)
        judgements = qrels.setdefault(query, {})
        if doc in judgements and judgements[doc] != value:
            raise ValueError(
                f"{where}: document {doc!r} of query {query!r} is judged twice ({judgements[doc]} and {value})"
            )
        judgements[doc] = value
    if not qrels:
        raise ValueError(f"{file}: no judgements (expected lines 'query iteration document grade')")
    return qrels


def load_run(path: str | os.PathLike[str]) -> Run:
    """Read a run: ``{query: {document: score}}`` (TREC, JSON scores) or ``{query: [document, ...]}`` (JSON lists).

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: for a malformed line or entry (file and line named), a non-numeric score, or a document listed
            twice for one query.
    """
    file = _check_path(path, "run")
    data = _json_object(file, "run", "{query: {document: score}} or {query: [document, ...]}")
    run: Run = {}
    if data is not None:
        for query, docs in data.items():
            where = f"{file}: query {query!r}"
            if isinstance(docs, dict):
                scores = {}
                for doc, score in docs.items():
                    finite = isinstance(score, float) and math.isfinite(score)
                    if isinstance(score, bool) or not (finite or (isinstance(score, int) and abs(score) <= 1 << 1000)):
                        shown = str(score)[:40]
                        raise ValueError(f"{where}: document {doc!r} has score {shown!r}; scores are finite numbers")
                    scores[str(doc)] = float(score)
                run[str(query)] = scores
            elif isinstance(docs, list):
                ranked = [_document(d, where) for d in docs]
                if len(set(ranked)) != len(ranked):
                    raise ValueError(f"{where}: a document is listed twice; a ranking holds each document once")
                run[str(query)] = ranked
            else:
                raise ValueError(
                    f"{where}: must map to {{document: score}} or a list of documents, got {type(docs).__name__}"
                )
        return run
    for where, (query, _, doc, _, score, _) in _trec_rows(file, "run", "query Q0 document rank score tag"):
        value = _score(score, where)
        scores = run.setdefault(query, {})
        if doc in scores:
            raise ValueError(f"{where}: document {doc!r} is listed twice for query {query!r}")
        scores[doc] = value
    if not run:
        raise ValueError(f"{file}: no ranked documents (expected lines 'query Q0 document rank score tag')")
    return run


@dataclass(frozen=True)
class QrelsChange:
    """An existing judgement that a newer qrels version changed (``new`` None: unjudged or removed)."""

    query: str
    document: str
    old: int
    new: int | None


@dataclass(frozen=True)
class QrelsUpdate:
    """The result of :func:`update_qrels`: the merged qrels, the changes to existing judgements, and how many
    judgements were added."""

    qrels: Qrels
    changes: list[QrelsChange] = field(default_factory=list)
    added: int = 0


def update_qrels(
    old: Mapping[str, Mapping[str, int | None]], new: Mapping[str, Mapping[str, int | None]], on_change: str = "warn"
) -> QrelsUpdate:
    """Merge a newer qrels version into an older one, append-only (rules: the module docstring).

    Raises:
        ValueError: for an unknown ``on_change``, or with ``on_change="error"`` when an existing judgement changed
            (the first changes are named).
    """
    check_choice(on_change, "on_change", ("warn", "error", "keep"))
    merged: Qrels = {str(q): dict(j) for q, j in old.items()}
    changes: list[QrelsChange] = []
    added = 0
    for query, judgements in old.items():
        newer = new.get(query, {})
        for doc, grade in judgements.items():
            if grade is not None and newer.get(doc) != grade:
                changes.append(QrelsChange(str(query), str(doc), int(grade), newer.get(doc)))
    for query, judgements in new.items():
        target = merged.setdefault(str(query), {})
        for doc, grade in judgements.items():
            before = target.get(str(doc))
            if before is None:  # a new document, or one judged for the first time
                added += grade is not None
                target[str(doc)] = grade
            elif on_change == "warn":
                target[str(doc)] = grade
    if on_change == "warn":
        for change in changes:  # a judgement the newer version dropped: unjudged now
            if change.document not in new.get(change.query, {}):
                merged[change.query][change.document] = None
    if changes:
        sample = "; ".join(f"query {c.query!r} document {c.document!r}: {c.old} -> {c.new}" for c in changes[:5])
        message = f"the newer qrels change {len(changes)} existing judgement(s) (qrels are append-only): {sample}"
        if on_change == "error":
            raise ValueError(message + ". Judge new documents only, or pass on_change='warn' / 'keep'.")
        log.warning(
            "%s; %s", message, "kept the newer judgements" if on_change == "warn" else "kept the older judgements"
        )
    return QrelsUpdate(merged, changes, added)
