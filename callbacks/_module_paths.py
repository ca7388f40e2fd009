"""What a callback option that names a module method refers to: a method name, or a dotted path of attributes from the
LightningModule to a callable (``encode_image``, ``model.encode_image``, ``clip.visual``: a submodule is callable,
its ``forward`` runs). Internal to :mod:`beyondlabels.callbacks`; the families use it through
:func:`beyondlabels.callbacks.base.check_method_paths` and
:meth:`~beyondlabels.callbacks.base.EvaluationCore.check_methods`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from beyondlabels._internal.checks import check_text

__all__ = ["TWO_TOWER_METHODS", "check_method_path", "resolve_method"]

# The method options of a family that embeds images and texts with two towers of the module (cross-modal, zero-shot),
# with what each method does (``EvaluationCore.check_methods(pl_module, **TWO_TOWER_METHODS)``).
TWO_TOWER_METHODS = {
    "image_method": "returns image embeddings [B, D]",
    "text_method": "returns text embeddings [M, D]",
    "tokenizer": "maps a list of strings to the tokens text_method takes",
}

# How many paths to a method of the wanted name an error message proposes.
_SUGGESTIONS = 3


def check_method_path(value: object, option: str, optional: bool = False) -> str | None:
    """``value`` when it is a method name or a dotted path of attribute names (``"model.encode_image"``); None too
    when ``optional``. A ``ValueError`` names ``option`` otherwise."""
    if check_text(value, option, optional=optional) is None:
        return None
    if not all(part.isidentifier() for part in value.split(".")):
        raise ValueError(
            f"`{option}` must be a method name or a dotted path of attribute names from the LightningModule (e.g. "
            f"'encode_image', 'model.encode_image' or 'clip.visual'), got {value!r}."
        )
    return value


def _described(value: Any) -> str:
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _suggestions(module: Any, name: str) -> list[str]:
    """Dotted paths from ``module`` to callables called ``name`` on its submodules (a few, shortest first)."""
    named = getattr(module, "named_modules", None)
    if not callable(named):
        return []
    found = []
    for prefix, sub in named():
        if prefix and callable(getattr(sub, name, None)):
            found.append(f"{prefix}.{name}")
    return sorted(found, key=lambda p: (p.count("."), p))[:_SUGGESTIONS]


def resolve_method(module: Any, path: str, option: str, callback: str, role: str) -> Callable[..., Any]:
    """The callable ``path`` names on ``module``. An ``AttributeError`` says which part of the path is missing (or
    what is not callable), on which object, and what to set: ``callback(option=...)`` to the method or submodule that
    ``role`` (e.g. ``"returns embeddings [B, D]"``), with the paths to a callable of that name found on the module's
    submodules."""
    owner = type(module).__name__
    fix = (
        f"set {callback}({option}=...) to the name or dotted path (e.g. 'model.encode_image') of the LightningModule's "
        f"method or submodule that {role}"
    )
    parts = path.split(".")
    target = module
    for depth, part in enumerate(parts):
        try:
            target = getattr(target, part)
        except AttributeError:
            found = _suggestions(module, parts[-1])
            hint = f"; {owner} has {', '.join(repr(p) for p in found)}" if found else ""
            walked = ".".join(parts[:depth])
            where = "" if not walked else f" ({owner}.{walked} is {_described(target)} without an attribute {part!r})"
            raise AttributeError(f"{owner} has no method {path!r}{where}; {fix}{hint}") from None
    if not callable(target):
        raise AttributeError(f"{owner}.{path} is {_described(target)}, not a method or a module; {fix}")
    return target
