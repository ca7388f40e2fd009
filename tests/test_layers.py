"""The shape of the house, read from the import statements of every library module (function-level imports included,
``if TYPE_CHECKING:`` blocks excluded):

- no import cycle;
- nothing outside ``beyondlabels.demo`` (but ``train.py``) imports the demo;
- the data types (``taxonomy``, ``profiles``) import no kernel, metric, callback, report, demo, file format (``io``),
  task or utility;
- kernels (``functional``) import no metric, callback, file format, task, utility or Lightning package; metrics import
  no callback or Lightning;
- no module imports an underscored name from a public module (shared helpers live in internal ``_*.py`` modules);
- an underscored module (``functional/_topk.py``) is imported only from its own subpackage; what several subpackages
  share lives in ``beyondlabels._internal``, which imports no other part of beyondlabels.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")


def _library_modules() -> dict[str, Path]:
    """``{dotted name: file}`` of every library module, ``callbacks/`` as ``beyondlabels.callbacks``, plus the entry
    points under their file names."""
    modules: dict[str, Path] = {}
    for base, package_root in ((ROOT / "src", ROOT / "src"), (ROOT / "callbacks", ROOT)):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(package_root).with_suffix("").parts)
            if base.name == "callbacks":
                parts = ["beyondlabels", *parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    for script in ("evaluate.py", "train.py"):
        modules[script[:-3]] = ROOT / script
    return modules


MODULES = _library_modules()


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _imports() -> tuple[dict[str, set[str]], list[tuple[str, str, str]], dict[str, set[str]]]:
    """(module → imported library modules, underscored names imported from public modules, module → third-party
    top-level packages)."""
    edges: dict[str, set[str]] = defaultdict(set)
    private: list[tuple[str, str, str]] = []
    external: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        is_package = path.name == "__init__.py"
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    (edges[name] if alias.name.startswith("beyondlabels") else external[name]).add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not target.startswith("beyondlabels"):
                    external[name].add(target)
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if full in MODULES:
                        edges[name].add(full)
                        continue
                    edges[name].add(target)
                    public_module = not target.split(".")[-1].startswith("_")
                    if alias.name.startswith("_") and not alias.name.startswith("__") and public_module:
                        private.append((name, target, alias.name))
    return edges, private, external


EDGES, PRIVATE, EXTERNAL = _imports()


def _in(module: str, *packages: str) -> bool:
    return any(module == f"beyondlabels.{p}" or module.startswith(f"beyondlabels.{p}.") for p in packages)


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(EDGES.get(v, ())):
            if w not in MODULES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in MODULES:
        if module not in index:
            visit(module)
    return found


def test_the_import_graph_is_read():
    """The checks below would pass vacuously on an empty graph."""
    assert "beyondlabels.functional.search" in MODULES and "beyondlabels.callbacks.base" in MODULES
    assert "beyondlabels.metrics.base" in EDGES["beyondlabels.metrics.retrieval"]
    assert "pytorch_lightning" in EXTERNAL["beyondlabels.callbacks.pytorch_lightning"]


def test_no_import_cycle():
    cycles = _cycles()
    assert not cycles, "modules that import each other (directly or through others):\n" + "\n".join(map(str, cycles))


def test_only_the_demo_and_train_py_import_the_demo():
    offenders = sorted(
        (m, t)
        for m, targets in EDGES.items()
        for t in targets
        if _in(t, "demo") and not _in(m, "demo") and m != "train"
    )
    assert not offenders, "library modules importing beyondlabels.demo:\n" + "\n".join(map(str, offenders))


@pytest.mark.parametrize(
    "layer, forbidden",
    [
        (("taxonomy", "profiles"), ("functional", "metrics", "callbacks", "reporting", "demo", "io", "tasks", "utils")),
        (("functional",), ("metrics", "callbacks", "reporting", "demo", "io", "tasks", "utils")),
        (("metrics",), ("callbacks", "demo")),
        (("io",), ("callbacks", "demo")),
    ],
)
def test_layers_import_only_downwards(layer, forbidden):
    offenders = sorted((m, t) for m, targets in EDGES.items() if _in(m, *layer) for t in targets if _in(t, *forbidden))
    assert not offenders, f"{layer} importing {forbidden}:\n" + "\n".join(map(str, offenders))


def test_kernels_and_metrics_import_no_lightning_package():
    offenders = sorted(
        (m, t)
        for m, targets in EXTERNAL.items()
        if _in(m, "functional", "metrics", "taxonomy", "profiles")
        for t in targets
        if t.split(".")[0] in LIGHTNING
    )
    assert not offenders, "kernels or metrics importing Lightning:\n" + "\n".join(map(str, offenders))


def test_no_underscored_name_is_imported_from_a_public_module():
    assert not PRIVATE, (
        "(importer, public module, private name); declare the helper in an internal module:\n"
        + "\n".join(map(str, sorted(PRIVATE)))
    )


def _subpackage(module: str) -> str:
    """``beyondlabels.functional`` for ``beyondlabels.functional._topk``; the module itself for a top-level one."""
    return ".".join(module.split(".")[:2])


def test_underscored_modules_are_private_to_their_subpackage():
    offenders = sorted(
        (m, t)
        for m, targets in EDGES.items()
        for t in targets
        if t in MODULES
        and any(part.startswith("_") and not part.startswith("__") for part in t.split(".")[2:])
        and _subpackage(t) != _subpackage(m)
    )
    assert not offenders, "(importer, module private to another subpackage); move it to beyondlabels._internal:\n" + (
        "\n".join(map(str, offenders))
    )


def test_the_internal_package_imports_no_other_part_of_beyondlabels():
    assert any(m.startswith("beyondlabels._internal.") for m in MODULES)
    offenders = sorted(
        (m, t) for m, targets in EDGES.items() if _in(m, "_internal") for t in targets if not _in(t, "_internal")
    )
    assert not offenders, "beyondlabels._internal importing the rest of the package:\n" + "\n".join(map(str, offenders))
