"""The documentation site builds with warnings as errors (every cross-reference resolves): its API reference documents
every public name and nothing else, shows the docstrings' Sphinx roles as links or code, never raw; every page of
docs/ is in its navigation; its index has the install line and the quick start."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["functional", "metrics", "taxonomy", "profiles", "io", "reporting", "tasks", "utils", "schema"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_docs.py"), str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if re.match(r"(WARNING|ERROR)\b", line)]
    assert result.returncode == 0 and not warnings, "\n".join(warnings) or output[-3000:]
    return site_dir


def anchors(page: Path) -> set[str]:
    return set(re.findall(r'id="([\w.]+)"', page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", PAGES)
def test_every_public_name_of_a_package_has_its_entry(site: Path, name: str):
    module = importlib.import_module(f"beyondlabels.{name}")
    public = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    found = anchors(site / "api" / name / "index.html")
    missing = [n for n in public if f"beyondlabels.{name}.{n}" not in found]
    assert not missing, f"beyondlabels.{name}: no entry for {missing}"


def test_every_callback_has_its_entry_with_its_arguments(site: Path):
    from beyondlabels.callbacks import pytorch_lightning as package

    html = (site / "api" / "callbacks" / "index.html").read_text(encoding="utf-8")
    found = anchors(site / "api" / "callbacks" / "index.html")
    missing = [n for n in package.__all__ if f"beyondlabels.callbacks.pytorch_lightning.{n}" not in found]
    assert not missing, f"beyondlabels.callbacks: no entry for {missing}"
    assert "every_n_epochs" in html  # the constructor's arguments, inherited from the shared base


def _api_pages(site: Path) -> list[Path]:
    return sorted((site / "api").glob("*/index.html"))


def _entries(page: Path) -> list[str]:
    """The ids of the page's object headings (``beyondlabels.`` paths)."""
    return re.findall(r'<h\d[^>]*id="(beyondlabels\.[\w.]+)"', page.read_text(encoding="utf-8"))


def _module_and_rest(entry: str) -> tuple[object, list[str]]:
    """The longest importable module an entry's path starts with, and the rest of the path."""
    parts = entry.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            return importlib.import_module(".".join(parts[:cut])), parts[cut:]
        except ImportError:
            continue
    raise AssertionError(f"{entry}: no module")


def test_the_reference_shows_the_public_api_once(site: Path):
    """No private or special name (a part starting with ``_``), no module member its module does not export (its
    ``__all__``: not ``package_classes`` or ``exported`` of the callback modules), and no module-level object twice
    (``shard_loader`` once)."""
    seen: dict[int, str] = {}
    problems = []
    for page in _api_pages(site):
        for entry in _entries(page):
            if any(part.startswith("_") for part in entry.split(".")):
                problems.append(f"{page.parent.name}: {entry} is not public")
            module, rest = _module_and_rest(entry)
            if len(rest) != 1:  # a module, or a member of a class (inherited ones repeat by design)
                continue
            exported = getattr(module, "__all__", None)
            if exported is not None and rest[0] not in exported:
                problems.append(f"{page.parent.name}: {entry} is not in {module.__name__}.__all__")
            obj = getattr(module, rest[0])
            if callable(obj) and id(obj) in seen:
                problems.append(f"{entry} is documented twice (also as {seen[id(obj)]})")
            seen.setdefault(id(obj), entry)
    assert not problems, "\n".join(problems)


ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|data|attr|exc|obj|const):(?:`|<code>)")


def test_no_page_shows_a_raw_sphinx_role(site: Path):
    """The docstrings keep Sphinx roles (``:class:`~beyondlabels.metrics.EmbeddingRetrieval```); the site shows them as
    links (scripts/griffe_extensions.py), or as code where the reference has no page for the target."""
    raw = {}
    for page in site.rglob("*.html"):
        found = ROLE.findall(page.read_text(encoding="utf-8"))
        if found:
            raw[str(page.relative_to(site))] = len(found)
    assert not raw, f"raw roles: {raw}"


def test_roles_become_links_to_their_entries(site: Path):
    """A role naming a documented object is a link to its entry, whichever path the role takes: the callbacks'
    ``:class:`~beyondlabels.functional.relevance.ClassGains``` (documented as ``beyondlabels.functional.ClassGains``)
    and ``:class:`~beyondlabels.metrics.EmbeddingRetrieval```."""
    links = set()
    for page in _api_pages(site):
        html = page.read_text(encoding="utf-8")
        links |= set(re.findall(r'<a class="autorefs autorefs-internal"[^>]*href="[^"]*#(beyondlabels\.[\w.]+)"', html))
    for target in ("beyondlabels.functional.ClassGains", "beyondlabels.metrics.EmbeddingRetrieval"):
        assert target in links, f"no link to {target}"
    assert len(links) >= 50, f"only {len(links)} objects linked from the docstrings"


def test_every_page_of_docs_is_in_the_navigation(site: Path):
    """docs/*.md each have their page and a place in mkdocs.yml's nav (mkdocs only mentions the others)."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = set(re.findall(r"^\s+- (?:[^:\n]+: )?([\w/]+\.md)\s*$", config, re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages == nav, f"not in the nav: {sorted(pages - nav)}; in the nav, not in docs/: {sorted(nav - pages)}"
    for page in pages:
        built = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        assert built.is_file(), page


def _text(html: str) -> str:
    """The text of an HTML fragment: tags dropped, entities decoded, whitespace as one space."""
    return " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())


def test_the_index_has_the_install_lines_and_the_quick_start(site: Path):
    """The site's first page shows the README's install commands and its quick start, code for code."""
    from tests.docs.readme_blocks import read_file

    index = _text((site / "index.html").read_text(encoding="utf-8"))
    readme = read_file(ROOT / "README.md", ROOT)
    (install,) = [b for b in readme.blocks if b.section == "Install" and b.lang == "bash"]
    (quickstart,) = [b for b in readme.blocks if b.marker is not None and b.marker.get("fixture") == "quickstart"]
    for block in (install, quickstart):
        assert " ".join(block.text.split()) in index, block.text[:200]


def test_the_guides_are_pages_of_the_site(site: Path):
    for guide in ("convergence", "selection", "rprecision", "search", "adding_a_metric_family"):
        assert (site / guide / "index.html").is_file(), guide
