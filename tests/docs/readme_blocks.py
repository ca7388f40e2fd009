"""Read a Markdown file the way tests/docs/test_readme.py checks it: its fenced blocks, its tables and the commands
quoted inline in its prose, each with the ``readme-test`` marker that says how the test treats it.

A marker is an HTML comment (invisible on GitHub) on its own line above a fence or a table, blank lines allowed
between them::

    <!-- readme-test: run fixture=saved_outputs -->
    <!-- readme-test: skip reason="needs a SLURM cluster" -->
    <!-- readme-test: skip reason="1 min 48 s of training" covered=tests/demo/test_generator.py::test_t2i_demo -->
    <!-- readme-test: compile reason="a template with placeholders" -->
    <!-- readme-test: output fixture=sweep_table -->
    <!-- readme-test: measured machine="2-core Intel Xeon" by="make train" -->

The first word is the mode, then ``key=value`` options (values quoted as in a shell). A command fence (``bash``,
``python``, ...) without a marker is run as written.

Example:
    >>> text = "# T\\n\\n<!-- readme-test: run fixture=f -->\\n```bash\\npython a.py x=1 \\\\\\n  y=2  # note\\n```\\n"
    >>> (block,) = read_markdown(text).blocks
    >>> block.line, block.lang, block.marker.mode, block.marker.options, block.section
    (4, 'bash', 'run', {'fixture': 'f'}, 'T')
    >>> shell_commands(block.text)
    [['python', 'a.py', 'x=1', 'y=2']]
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("run", "skip", "compile", "output", "measured")
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console"})
PYTHON_LANGS = frozenset({"python", "py"})
COMMAND_LANGS = SHELL_LANGS | PYTHON_LANGS

_MARKER = re.compile(r"^\s*<!--\s*readme-test:(?P<body>.*?)-->\s*$")
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^\s`]*)\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_INLINE = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")
# an inline code span that is a command a reader may type: an interpreter, make, pip, a tool's CLI or a script
_COMMAND_START = re.compile(
    r"^(?:[A-Z][A-Z0-9_]*=\S*\s+)*(?:python\s|make(?:\s|$)|pip\s|mlflow\s|tensorboard\s|wandb\s|beyondlabels\s|scripts/)"
)
# a figure: a decimal number, a ratio (1.02x, 4.8×) or a time (1 min 48 s)
_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])|\d+(?:\.\d+)?[x×](?!\w)|\d+\s*min\s+\d+\s*s\b")


@dataclass(frozen=True)
class Marker:
    mode: str
    options: dict[str, str]
    line: int

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)


@dataclass(frozen=True)
class Block:
    """A fenced block: its first line (the opening fence, 1-based), language, text and the marker above it."""

    file: str
    line: int
    lang: str
    text: str
    marker: Marker | None
    section: str

    @property
    def is_command(self) -> bool:
        return self.lang in COMMAND_LANGS

    @property
    def mode(self) -> str:
        if self.marker is not None:
            return self.marker.mode
        return "run" if self.is_command else "text"

    @property
    def name(self) -> str:
        """A stable id: the fixture (or mode) and the section, then the line (which moves when the file is edited)."""
        what = (self.marker.get("fixture") if self.marker else None) or self.mode
        return f"{self.file}:{self.line}:{what}"

    def figures(self) -> list[str]:
        return _FIGURE.findall(self.text)


@dataclass(frozen=True)
class Table:
    file: str
    line: int
    rows: list[str]
    marker: Marker | None
    section: str

    def figures(self) -> list[str]:
        return _FIGURE.findall("\n".join(self.rows[2:]))  # the header and the rule line hold no figures


@dataclass
class Markdown:
    blocks: list[Block] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    inline_commands: list[tuple[int, str]] = field(default_factory=list)  # (line, command) outside fences
    dangling_markers: list[Marker] = field(default_factory=list)  # markers above neither a fence nor a table
    errors: list[str] = field(default_factory=list)  # markers that do not parse


def parse_marker(body: str, line: int) -> Marker:
    """``mode key=value ...`` (values quoted as in a shell). Raises ValueError on an unknown mode or a bare word."""
    words = shlex.split(body)
    if not words or words[0] not in MODES:
        raise ValueError(f"line {line}: a readme-test marker starts with one of {MODES}, got {body.strip()!r}")
    options = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise ValueError(f"line {line}: readme-test options are key=value, got {word!r}")
        options[key] = value
    return Marker(words[0], options, line)


def read_markdown(text: str, file: str = "README.md") -> Markdown:
    """The blocks, tables, inline commands and markers of Markdown ``text``."""
    out = Markdown()
    lines = text.splitlines()
    pending: Marker | None = None
    section, i = "", 0
    while i < len(lines):
        line = lines[i]
        marker, fence = _MARKER.match(line), _FENCE.match(line)
        if marker:
            if pending is not None:
                out.dangling_markers.append(pending)
            try:
                pending = parse_marker(marker.group("body"), i + 1)
            except ValueError as exc:
                out.errors.append(str(exc))
                pending = None
            i += 1
            continue
        if fence:
            end = _closing_fence(lines, i + 1, fence.group("fence"))
            body = "\n".join(lines[i + 1 : end]) + "\n"
            out.blocks.append(Block(file, i + 1, fence.group("lang").lower(), body, pending, section))
            pending, i = None, end + 1
            continue
        if _TABLE_ROW.match(line):
            start = i
            while i < len(lines) and _TABLE_ROW.match(lines[i]):
                i += 1
            out.tables.append(Table(file, start + 1, lines[start:i], pending, section))
            pending = None
            continue
        if line.strip():
            heading = _HEADING.match(line)
            if heading:
                section = heading.group("title")
            if pending is not None:  # prose between a marker and its block
                out.dangling_markers.append(pending)
                pending = None
        i += 1
    if pending is not None:
        out.dangling_markers.append(pending)
    out.inline_commands = _inline_commands(lines)
    return out


def _closing_fence(lines: list[str], start: int, fence: str) -> int:
    for j in range(start, len(lines)):
        if lines[j].strip().startswith(fence[0] * len(fence)) and not lines[j].strip().strip(fence[0]):
            return j
    return len(lines)


def _inline_commands(lines: list[str]) -> list[tuple[int, str]]:
    """Every inline code span outside fences that starts like a command, with its line; a span may run over one
    line break (a wrapped paragraph), which becomes a space."""
    prose, inside, fence = [], False, ""
    for n, line in enumerate(lines, 1):
        match = _FENCE.match(line)
        if match and (not inside or match.group("fence")[0] * 3 == fence[:3] and not match.group("lang")):
            inside, fence = (not inside), match.group("fence")
            prose.append((n, ""))
            continue
        prose.append((n, "" if inside or _MARKER.match(line) else line))
    text = "\n".join(p for _, p in prose)
    starts = [0]
    for _, p in prose:
        starts.append(starts[-1] + len(p) + 1)
    found = []
    for match in _INLINE.finditer(text):
        span = " ".join(match.group(1).split())
        if _COMMAND_START.match(span):
            line = next(n for n, start in enumerate(starts, 1) if start > match.start()) - 1
            found.append((line, span))
    return found


def shell_commands(text: str) -> list[list[str]]:
    """The commands of a shell block as argument lists: ``\\``-continued lines joined, ``#`` comments dropped."""
    commands, current = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        words = shlex.split(current, comments=True)
        if words:
            commands.append(words)
        current = ""
    if current.strip():
        commands.append(shlex.split(current, comments=True))
    return commands


def read_file(path: Path, root: Path) -> Markdown:
    return read_markdown(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
