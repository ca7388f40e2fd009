"""Griffe extensions for the API reference (``mkdocs.yml`` loads them into mkdocstrings), applied to the package as
loaded, never to its files.

:class:`SphinxRoles`: the Sphinx roles of the docstrings (``:class:`~a.b.C```, ``:func:`f```, ``:mod:`a.b```, ...)
become cross-references of mkdocs-autorefs, so that the site shows links, never raw roles; the docstrings keep
Sphinx's syntax, which any Python reader knows. Each role is resolved as Sphinx resolves it:

- a dotted path (``beyondlabels.metrics.EmbeddingRetrieval``) from the package root, else a name in the scope of the
  object whose docstring holds it, then of each enclosing class and module (``:meth:`compute``` in a method of a
  class is that class's ``compute``; a name the module imports is what it imports), inherited members included;
- ``~`` shows the last part of the path only; ``:role:`text <target>``` shows ``text``; ``:func:`` and ``:meth:``
  add ``()`` as Sphinx does.

A target that the reference documents (a public member of a page's module, see :func:`documented_paths`, and the
public members of its classes) becomes a required autoref ``[`C`][path]``: the strict build fails if it does not
resolve. Any other target (a private module, the demo, torch, an attribute the pages leave out) becomes an optional
autoref: a link where the site has the target after all, else the name as code. A role that names nothing found
is kept as code and reported as a warning (the strict build fails on it).

:class:`PublicNames`: the pages show the public API only (see its docstring).
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import griffe

log = logging.getLogger("mkdocs.plugins.griffe_extensions")

ROLE = re.compile(
    r":(?:py:)?(?P<role>class|mod|func|meth|data|attr|exc|obj|const):`(?P<tilde>[~!]?)(?P<body>[^`]+)`",
)
_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
_CALLABLE_ROLES = ("func", "meth")
_DIRECTIVE = re.compile(r"^:::\s+(?P<identifier>[\w.]+)\s*$")
_OPTION = re.compile(r"^\s+(?P<key>\w+):\s*(?P<value>\S*)\s*$")


def iter_objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    """``obj`` and every object defined under it (aliases, which point elsewhere, are not followed)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from iter_objects(member)


def _lookup(scope: griffe.Object, parts: list[str]) -> griffe.Object | griffe.Alias | None:
    """``scope``'s member at ``parts`` (inherited members of classes included), or None."""
    current = scope
    for part in parts:
        try:
            members = current.all_members if current.is_class else current.members
            current = members[part]
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
    return current


def target_path(found: griffe.Object | griffe.Alias) -> str:
    """The canonical path of what ``found`` names (an alias to something not loaded: the path it points to)."""
    if found.is_alias:
        try:
            return found.final_target.canonical_path
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return found.target_path
    return found.canonical_path


def _enclosing(obj: griffe.Object) -> Iterator[griffe.Object]:
    scope: griffe.Object | None = obj
    while scope is not None:
        yield scope
        scope = scope.parent


def _external_base_member(obj: griffe.Object, parts: list[str]) -> str | None:
    """``Base.name`` for a name an enclosing class inherits from a base outside the loaded packages
    (``compute`` in a ``torchmetrics.Metric`` subclass), or for a module's docstring, from a class of the module."""
    classes = [s for s in _enclosing(obj) if s.is_class]
    if not classes and obj.is_module:
        classes = [m for m in obj.members.values() if not m.is_alias and m.is_class]
    for cls in classes:
        for base in cls.bases:
            path = getattr(base, "canonical_path", str(base))
            if path.split(".")[0] not in obj.modules_collection.members:
                return ".".join([path, *parts])
    return None


def resolve(obj: griffe.Object, target: str, documented: frozenset[str] = frozenset()) -> tuple[str, bool] | None:
    """``(path, known)``: the canonical path a role's ``target`` names in the docstring of ``obj``, and whether it
    was found (False: a path outside the loaded packages, or an attribute that only exists at run time); None when
    the name is found nowhere.

    A dotted path from a loaded package root first, then the name in the scope of ``obj`` and of each object
    enclosing it (a function's class, the class's module, the module's package), then a documented object of that
    name (a name a function imports locally), then a member of an enclosing class's external base.
    """
    parts = target.lstrip(".").split(".")
    collection = obj.modules_collection
    scopes = [collection.members[parts[0]]] if parts[0] in collection.members else []
    for scope, rest in [(s, parts[1:]) for s in scopes] + [(s, parts) for s in _enclosing(obj)]:
        found = _lookup(scope, rest)
        if found is not None:
            return target_path(found), True
    named = sorted(p for p in documented if p.endswith("." + target))
    if len(named) == 1:
        return named[0], True
    if len(parts) > 1:  # a run-time attribute of a class found here (set in __init__, unseen by inspection)
        for scope, rest in [(s, parts[1:-1]) for s in scopes] + [(s, parts[:-1]) for s in _enclosing(obj)]:
            found = _lookup(scope, rest)
            if found is not None and found.is_class:
                return f"{target_path(found)}.{parts[-1]}", False
    if not scopes and len(parts) > 1:
        return target, False  # outside the loaded packages: torch.Tensor, torchmetrics.Metric, ...
    external = _external_base_member(obj, parts)
    return (external, False) if external else None


def _shown(role: str, tilde: str, body: str) -> tuple[str, str]:
    """(the text shown, the target) of a role's body."""
    titled = _TITLED.match(body)
    if titled:
        return titled.group("title"), titled.group("target").strip()
    target = body.strip().removesuffix("()")
    text = target.rsplit(".", 1)[-1] if tilde == "~" else target
    return (text + "()" if role in _CALLABLE_ROLES and not text.endswith(")") else text), target


def convert(text: str, obj: griffe.Object, documented: frozenset[str]) -> tuple[str, list[str]]:
    """``text`` with every role replaced by an autoref, and the targets that resolved to nothing."""
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        shown, target = _shown(match.group("role"), match.group("tilde"), match.group("body"))
        resolved = resolve(obj, target, documented)
        if resolved is None:
            missing.append(target)
            return f"`{shown}`"
        path, known = resolved
        if known and path in documented:
            return f"[`{shown}`][{path}]"
        return f'<autoref optional identifier="{html.escape(path)}"><code>{html.escape(shown)}</code></autoref>'

    return ROLE.sub(replace, text), missing


def _page_roots(docs_dir: Path) -> list[tuple[str, dict[str, str]]]:
    """The ``::: identifier`` directives of the API pages, each with the indented ``key: value`` lines below it."""
    roots: list[tuple[str, dict[str, str]]] = []
    for page in sorted((docs_dir / "api").glob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            directive, option = _DIRECTIVE.match(line), _OPTION.match(line)
            if directive:
                roots.append((directive.group("identifier"), {}))
            elif option and roots:
                roots[-1][1][option.group("key")] = option.group("value")
            elif line.strip() and roots and not line.startswith(" "):
                roots.append(("", {}))  # prose: the directive's options are over
    return [(identifier, options) for identifier, options in roots if identifier]


def _rendered(obj: griffe.Object | griffe.Alias) -> bool:
    """Whether mkdocstrings renders ``obj`` as a member: documented (itself or a member), not a submodule, resolved."""
    try:
        return bool(obj.has_docstrings) and not obj.is_module
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return False  # an import from a package not loaded (typing.Any): not rendered


def documented_paths(collection: griffe.ModulesCollection, docs_dir: Path) -> frozenset[str]:
    """The canonical paths the API pages render: each page's object; a module's public members (its ``__all__``);
    a class's members whose names do not start with ``_`` (inherited ones where the page asks for them); only
    objects with a docstring (in them or their members), as mkdocstrings renders them."""
    paths: set[str] = set()

    def add_class(cls: griffe.Object | griffe.Alias, inherited: bool) -> None:
        members = cls.all_members if inherited else cls.members
        for name, member in members.items():
            if not name.startswith("_") and _rendered(member):
                paths.add(target_path(member))

    for identifier, options in _page_roots(docs_dir):
        first, *rest = identifier.split(".")
        root = _lookup(collection.members[first], rest) if first in collection.members else None
        if root is None:
            continue
        inherited = options.get("inherited_members") == "true"
        paths.add(target_path(root))
        if root.is_class:
            add_class(root, inherited)
        if not root.is_module:
            continue
        for name, member in root.members.items():
            if name.startswith("_") or not _rendered(member) or not member.is_public:
                continue
            paths.add(target_path(member))
            if member.is_class:
                add_class(member, inherited)
    return frozenset(paths)


class PublicNames(griffe.Extension):
    """With mkdocstrings' ``filters: public`` a page shows a module's ``__all__`` (not what it imports or defines for
    its own use: ``exported``, ``package_classes`` in the callback modules) and a class's names without a leading
    underscore; Griffe counts special names as public too, so the attributes that inspection finds on every class
    (``__doc__``, ``__module__``, ``__dataclass_fields__``, ...) are dropped here. Runs after :class:`SphinxRoles`."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        for obj in iter_objects(pkg):
            if obj.is_class:
                for name in [n for n in obj.members if n.startswith("__") and n.endswith("__") and n != "__init__"]:
                    obj.del_member(name)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a loaded package (see the module's docstring)."""

    def __init__(self, docs_dir: str | None = None) -> None:
        super().__init__()
        self.docs_dir = Path(docs_dir) if docs_dir else Path(__file__).resolve().parents[1] / "docs"

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        documented = documented_paths(pkg.modules_collection, self.docs_dir)
        for obj in iter_objects(pkg):
            if obj.docstring is None or ":" not in obj.docstring.value:
                continue
            obj.docstring.value, missing = convert(obj.docstring.value, obj, documented)
            for target in missing:
                log.warning("%s: the docstring's role target %r names nothing found", obj.path, target)
