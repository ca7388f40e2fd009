"""The README and the docs run as written: every fenced command and snippet of README.md and docs/*.md is run (on
the smoke configuration, fragments completed by the fixture named in its marker, tests/docs/readme_fixtures.py; the
README's quick start as a script in an empty folder, tests/docs/script_runner.py) or marked with the reason it is not;
every command quoted inline is accounted for; the figures a table or an output block quotes from a run are either
reproduced from the run the page shows or marked as measured elsewhere, with the machine named; the README stays a
front page (its size, its family table made from the registry); and the Configuration table lists the options conf/
has.

Markers, fixtures and how to extend them: tests/docs/readme_blocks.py and tests/docs/readme_fixtures.py.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from tests.docs.readme_blocks import (
    PYTHON_LANGS,
    SHELL_LANGS,
    Block,
    read_file,
    shell_commands,
)
from tests.docs.readme_fixtures import (
    INLINE,
    OUTPUT,
    PYTHON,
    REPO_ROOT,
    SHELL,
    ShellFixture,
    Skip,
    Workdir,
    doc_pages,
    figure_tokens,
)
from tests.docs.script_runner import run_as_user_script

FILES = doc_pages()
DOCS = {path: read_file(path, REPO_ROOT) for path in FILES}
BLOCKS = [block for doc in DOCS.values() for block in doc.blocks]
README = DOCS[REPO_ROOT / "README.md"]
CONFIGURATION = DOCS[REPO_ROOT / "docs" / "configuration.md"]
README_MAX_BYTES = 20_000
# a table or a non-command fence with at least this many figures quotes numbers (from a run or a measurement)
MIN_FIGURES = 3


def _ids(blocks: list[Block]) -> list[str]:
    return [block.name for block in blocks]


def _resolve(skip: Skip | object) -> Skip:
    return skip() if callable(skip) else skip


def _check_covered(skip: Skip) -> None:
    """A ``covered=path::test`` reference names a test that exists."""
    if not skip.covered:
        return
    path, _, name = skip.covered.partition("::")
    text = (REPO_ROOT / path).read_text(encoding="utf-8")
    assert not name or re.search(rf"^def {re.escape(name)}\(", text, re.M), f"{skip.covered} does not exist"


# ---- every block, table and inline command is accounted for ---------------------------------------------------------
def test_every_command_block_is_run_or_marked_with_a_reason():
    problems = []
    for doc in DOCS.values():
        problems += doc.errors
        problems += [f"line {m.line}: marker above neither a fence nor a table" for m in doc.dangling_markers]
    for block in BLOCKS:
        where, marker = f"{block.file}:{block.line}", block.marker
        if block.is_command:
            if block.mode not in ("run", "skip", "compile"):
                problems.append(f"{where}: a {block.lang} block is run, compiled or skipped, not {block.mode!r}")
            if block.mode in ("skip", "compile") and not (marker and marker.get("reason")):
                problems.append(f"{where}: {block.mode} needs reason=...")
            fixture = marker.get("fixture") if marker else None
            table = PYTHON if block.lang in PYTHON_LANGS else SHELL
            if fixture is not None and fixture not in table:
                kind = "PYTHON" if table is PYTHON else "SHELL"
                problems.append(f"{where}: no fixture {fixture!r} in readme_fixtures.{kind}")
            if marker and marker.get("covered"):
                _check_covered(Skip("", marker.get("covered")))
        elif block.mode in ("run", "skip", "compile"):
            problems.append(f"{where}: a {block.lang or 'plain'} fence is not a command; mark it output or measured")
    assert not problems, "\n".join(problems)


def _quoting_figures():
    for doc in DOCS.values():
        for item in [*doc.tables, *(b for b in doc.blocks if not b.is_command)]:
            if len(item.figures()) >= MIN_FIGURES or item.marker is not None:
                yield item


def test_quoted_figures_come_from_the_run_shown_or_name_their_machine():
    problems = []
    for item in _quoting_figures():
        where, marker = f"{item.file}:{item.line} ({item.section})", item.marker
        if marker is None:
            problems.append(
                f"{where} quotes {len(item.figures())} figures without a readme-test marker: reproduce "
                "them (output fixture=NAME) or name the machine (measured machine=.. by=..)"
            )
        elif marker.mode == "output":
            if marker.get("fixture") not in OUTPUT:
                problems.append(f"{where}: output needs fixture=NAME of readme_fixtures.OUTPUT")
        elif marker.mode == "measured":
            if not (marker.get("machine") or "").strip() or not (marker.get("by") or "").strip():
                problems.append(f'{where}: measured needs machine="..." (where) and by="..." (the command)')
        else:
            problems.append(f"{where}: a table or output fence is marked output or measured, not {marker.mode!r}")
    assert not problems, "\n".join(problems)


def test_every_inline_command_is_run_or_skipped_with_a_reason():
    quoted = {command for doc in DOCS.values() for _, command in doc.inline_commands}
    missing = sorted(quoted - set(INLINE))
    stale = sorted(set(INLINE) - quoted)
    assert not missing, f"commands without an entry in readme_fixtures.INLINE (run, or skip with why): {missing}"
    assert not stale, f"readme_fixtures.INLINE entries that README.md and docs/ no longer quote: {stale}"


@pytest.mark.parametrize("command", sorted(c for c, v in INLINE.items() if v.skip is not None))
def test_a_skipped_inline_command_says_why(command: str):
    skip = _resolve(INLINE[command].skip)  # some first check what they can (an extra is declared and installed)
    assert isinstance(skip, Skip) and skip.reason
    _check_covered(skip)


# the config trees of train.py (conf/) and of evaluate.py and the beyondlabels command (shipped in the package)
CONFIG_ROOTS = (REPO_ROOT / "conf", REPO_ROOT / "src" / "beyondlabels" / "conf" / "beyondlabels" / "evaluate")


def test_the_configuration_table_lists_every_option_of_conf():
    """Each `group/` row of the Configuration table (docs/configuration.md) names exactly the group's option files (a
    group's base file, `default.yaml` of debug/ and trainer/, which the others extend, excepted), in conf/ or in the
    package's tree of evaluate.py (task/, eval/)."""
    (table,) = [t for t in CONFIGURATION.tables if t.rows[0].replace(" ", "").startswith("|group|options|")]
    checked = 0
    for row in table.rows[2:]:
        group_cell, options = [c.strip() for c in row.strip().strip("|").split("|", 1)]
        groups = re.findall(r"`([\w]+)/`", group_cell)
        if len(groups) != 1 or groups[0] in ("hydra", "paths"):
            continue
        group = groups[0]
        listed = set(re.findall(r"`([\w]+)`", re.sub(r"\([^)]*\)", "", options)))
        files = {p.stem for root in CONFIG_ROOTS for p in (root / group).glob("*.yaml")}
        if group in ("debug", "trainer"):
            files.discard("default")
        assert listed == files, f"the `{group}/` row lists {sorted(listed)}; {group}/ has {sorted(files)}"
        checked += 1
    assert checked >= 9


# ---- Python snippets ------------------------------------------------------------------------------------------------
PYTHON_BLOCKS = [b for b in BLOCKS if b.lang in PYTHON_LANGS]


def _is_script(block: Block) -> bool:
    fixture = block.marker.get("fixture") if block.marker else None
    return fixture in PYTHON and PYTHON[fixture].script is not None


# a whole program (the quick start: a training run in a fresh interpreter) is an end-to-end test: marked slow
@pytest.mark.parametrize(
    "block",
    [pytest.param(b, marks=pytest.mark.slow) if _is_script(b) else b for b in PYTHON_BLOCKS],
    ids=_ids(PYTHON_BLOCKS),
)
def test_python_block(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    code = compile(block.text, f"{block.file}:{block.line}", "exec")  # a SyntaxError names the block
    if block.mode != "run":
        pytest.skip(block.marker.get("reason"))
    fixture = PYTHON[block.marker.get("fixture")] if block.marker and block.marker.get("fixture") else None
    if fixture is not None and fixture.script:  # a whole program, run as a user runs it
        fixture.check({"run": run_as_user_script(block.text, tmp_path, fixture.script)}, tmp_path)
        return
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    try:
        if fixture is not None:
            exec(compile(fixture.prelude, f"fixture {block.marker.get('fixture')}", "exec"), namespace)
        exec(code, namespace)
        if fixture is not None:
            fixture.check(namespace, tmp_path)
    finally:
        from beyondlabels.utils import close_wandb

        close_wandb()


# ---- shell blocks ---------------------------------------------------------------------------------------------------
SHELL_BLOCKS = [b for b in BLOCKS if b.lang in SHELL_LANGS]


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Workdir:
    return Workdir(tmp_path_factory.mktemp("readme") / "repo")


@pytest.mark.slow
@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=_ids(SHELL_BLOCKS))
def test_shell_block(block: Block, workdir: Workdir):
    if block.mode != "run":
        pytest.skip(block.marker.get("reason"))
    name = block.marker.get("fixture") if block.marker else None
    fixture = SHELL[name] if name else SHELL_DEFAULT
    fixture.prepare(workdir)
    ran, skipped = [], []
    for argv in shell_commands(block.text):
        command = fixture.rewrite(argv, workdir)
        if isinstance(command, Skip):
            _check_covered(command)
            skipped.append(command)
            continue
        ran.append(workdir.run(workdir.fill(command)))
    fixture.check(workdir, ran)  # a block whose every command is skipped still had each one's reason checked


SHELL_DEFAULT = ShellFixture()  # a block without a fixture runs as written


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(c for c, v in INLINE.items() if v.run is not None))
def test_inline_command(command: str, workdir: Workdir):
    INLINE[command].run(workdir)


# ---- figures reproduced from the run the README shows ----------------------------------------------------------------
OUTPUT_ITEMS = [item for item in _quoting_figures() if item.marker and item.marker.mode == "output"]


@pytest.mark.slow
@pytest.mark.parametrize("item", OUTPUT_ITEMS, ids=[f"{i.file}:{i.line}" for i in OUTPUT_ITEMS])
def test_quoted_output_is_the_run_output(item, workdir: Workdir):
    shown = item.text if isinstance(item, Block) else "\n".join(item.rows)
    produced = OUTPUT[item.marker.get("fixture")](workdir, (REPO_ROOT / item.file).read_text(encoding="utf-8"))
    assert table_tokens(shown), "the block quotes no figures"
    assert table_tokens(produced) == table_tokens(shown), f"the README shows\n{shown}\nthe run printed\n{produced}"


def table_tokens(text: str) -> list[str]:
    """The figures of the body rows of printed tables (``│ ... │`` lines; titles and captions, which the README
    may leave out, are not compared)."""
    return figure_tokens("\n".join(line for line in text.splitlines() if line.strip().startswith("│")))


def test_shell_commands_split_as_a_shell_does():
    """The splitter the shell blocks go through: continuation lines, comments and quotes as bash reads them."""
    text = "python evaluate.py task=compare \"baseline='model.lr=0.001'\" \\\n    metric=m  # a comment\n\n"
    text += "pip install 'a[b]'\n"
    assert shell_commands(text) == [
        ["python", "evaluate.py", "task=compare", "baseline='model.lr=0.001'", "metric=m"],
        ["pip", "install", "a[b]"],
    ]


@pytest.mark.slow
def test_the_per_query_file_holds_the_arrays_the_readme_counts(workdir: Workdir):
    """The retrieval family's per-query file of the smoke run (the demo's callbacks) holds the count the docs give."""
    import numpy as np

    flat = " ".join(" ".join(path.read_text(encoding="utf-8").split()) for path in FILES)
    (count,) = re.findall(r"the retrieval family's file holds (\d+) arrays", flat)
    (first, *_) = sorted((workdir.root / workdir.run_folder() / "retrieval" / "per_query").glob("step_*.npz"))
    with np.load(first) as arrays:
        assert len(arrays.files) == int(count), sorted(arrays.files)


# ---- the README is a front page ----------------------------------------------------------------------------------
def test_the_readme_is_a_front_page():
    """What it is, the families, install, a quick start, links: the rest is in docs/ (issue: an 85 KB README)."""
    size = len((REPO_ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size:,} bytes; move sections into docs/ (at most {README_MAX_BYTES:,})"
    )
    quickstart = [b for b in README.blocks if b.marker is not None and b.marker.get("fixture") == "quickstart"]
    assert len(quickstart) == 1 and len(quickstart[0].text.splitlines()) <= 40, "one quick start of at most 40 lines"


def test_the_readme_family_table_is_the_registry():
    """A row per family of beyondlabels.families, in its order, with the family's callback, task and headline keys
    (the schema's headline at the default ks)."""
    from beyondlabels.families import FAMILIES

    (table,) = [t for t in README.tables if t.rows[0].replace(" ", "").startswith("|family|")]
    header = [c.strip() for c in table.rows[0].strip().strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in row.strip().strip("|").split("|")))) for row in table.rows[2:]]
    assert [row["family"] for row in rows] == [f"`{f.name}`" for f in FAMILIES]
    for family, row in zip(FAMILIES, rows):
        schema = family.load("schema")
        headline = (schema(ks=(1, 5, 10)) if "ks" in inspect.signature(schema).parameters else schema()).headline
        assert row["callback"] == (f"`{family.callback}`" if family.callback else "–"), row
        assert row["`evaluate.py` task"] == (f"`task={family.task.name}`" if family.task else "–"), row
        assert re.findall(r"`([^`]+)`", row["headline keys"]) == list(headline), row


def test_the_docs_index_includes_the_readmes_install_and_quick_start():
    """docs/index.md includes README.md's install and quick start sections (pymdownx.snippets): one source, the one
    this module runs; each section is in the README, between its start and end lines."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    index = (REPO_ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for section in ("install", "quickstart"):
        assert f'--8<-- "README.md:{section}"' in index, section
        start, end = readme.index(f"--8<-- [start:{section}]"), readme.index(f"--8<-- [end:{section}]")
        assert start < end, section
    quickstart = readme[readme.index("--8<-- [start:quickstart]") : readme.index("--8<-- [end:quickstart]")]
    assert "readme-test: run fixture=quickstart" in quickstart and "pip install" in readme[: readme.index(quickstart)]
