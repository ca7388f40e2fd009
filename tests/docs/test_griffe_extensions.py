"""The Sphinx roles of a small package's docstrings, resolved and rewritten as scripts/griffe_extensions.py does for
the site: each rule of its docstring on a case of its own (the site test builds the real package)."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("griffe_extensions", ROOT / "scripts" / "griffe_extensions.py")
ext = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ext)

MODULES = {
    "core.py": '''
"""The core: :class:`Thing` and :func:`helper`."""
from torchmetrics import Metric

class Thing(Metric):
    """A thing; :meth:`run` runs it, :meth:`compute` is torchmetrics'; :attr:`Thing.size` is set at run time."""

    def run(self):
        """Runs; see :meth:`stop` and :class:`~pkg.other.Other`."""

    def stop(self):
        """Stops."""


def helper():
    """Helps :class:`Thing`; :func:`~pkg.other.far_away`; :class:`torch.Tensor`; :func:`nowhere`."""
''',
    "other.py": '''
"""Other things."""
from pkg.core import Thing as Imported

class Other:
    """Titled: :class:`the thing <Imported>`."""


def far_away():
    """Far: :func:`pkg.core.helper`."""
''',
}


@pytest.fixture(scope="module")
def pkg():
    with griffe.temporary_visited_package("pkg", MODULES) as package:
        yield package


DOCUMENTED = frozenset({"pkg.core.Thing", "pkg.core.Thing.run", "pkg.core.helper", "pkg.other.Other"})


def _convert(pkg, path: str) -> tuple[str, list[str]]:
    obj = pkg[path.removeprefix("pkg.")]
    return ext.convert(obj.docstring.value, obj, DOCUMENTED)


def test_names_resolve_in_the_scope_of_the_docstring(pkg):
    text, missing = _convert(pkg, "pkg.core.Thing.run")
    # stop: the method of the enclosing class, not documented (an optional link); ~: the last part shown
    assert text == (
        'Runs; see <autoref optional identifier="pkg.core.Thing.stop"><code>stop()</code></autoref> and '
        "[`Other`][pkg.other.Other]."
    )
    assert not missing


def test_documented_targets_become_required_links(pkg):
    text, missing = _convert(pkg, "pkg.core")
    assert text == "The core: [`Thing`][pkg.core.Thing] and [`helper()`][pkg.core.helper]." and not missing


def test_a_class_docstring_sees_its_members_its_external_base_and_run_time_attributes(pkg):
    text, missing = _convert(pkg, "pkg.core.Thing")
    assert "[`run()`][pkg.core.Thing.run]" in text
    assert 'identifier="torchmetrics.Metric.compute"' in text  # inherited from a base outside the package
    assert 'identifier="pkg.core.Thing.size"><code>Thing.size</code>' in text  # unseen by analysis: optional
    assert not missing


def test_imports_titles_external_paths_and_names_found_nowhere(pkg, caplog):
    text, missing = _convert(pkg, "pkg.other.Other")
    assert text == "Titled: [`the thing`][pkg.core.Thing]."  # the import resolved to its target
    text, missing = _convert(pkg, "pkg.core.helper")
    assert "[`Thing`][pkg.core.Thing]" in text and 'identifier="pkg.other.far_away"><code>far_away()</code>' in text
    assert 'identifier="torch.Tensor"><code>torch.Tensor</code>' in text
    assert "`nowhere()`" in text and missing == ["nowhere"]  # kept as code; the extension warns:


def test_the_extension_rewrites_every_docstring_and_warns_of_names_found_nowhere(caplog):
    with griffe.temporary_visited_package("pkg", MODULES) as package:
        with caplog.at_level(logging.WARNING, logger=ext.log.name):
            ext.SphinxRoles(docs_dir=str(ROOT / "docs")).on_package(pkg=package)
        docstrings = [o.docstring.value for o in ext.iter_objects(package) if o.docstring is not None]
    assert len(docstrings) == 8 and not any(ext.ROLE.search(d) for d in docstrings)  # 2 modules, 2 classes, 4 functions
    assert [r.getMessage() for r in caplog.records] == [
        "pkg.core.helper: the docstring's role target 'nowhere' names nothing found"
    ]


def test_a_dotted_path_from_the_root(pkg):
    text, missing = _convert(pkg, "pkg.other.far_away")
    assert text == "Far: [`pkg.core.helper()`][pkg.core.helper]." and not missing


def test_the_role_pattern_leaves_other_text_alone():
    text = "a :class:`X`, :py:func:`~a.f`, not :math:`x` nor ``:class:``"
    assert [(m.group("role"), m.group("tilde"), m.group("body")) for m in ext.ROLE.finditer(text)] == [
        ("class", "", "X"),
        ("func", "~", "a.f"),
    ]
