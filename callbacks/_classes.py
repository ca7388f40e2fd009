"""The callback classes of the two Lightning package modules, checked against the family registry
(:mod:`beyondlabels.families`); internal to :mod:`beyondlabels.callbacks`, whose package modules export them.

Each package module (:mod:`beyondlabels.callbacks.pytorch_lightning`, :mod:`beyondlabels.callbacks.lightning`)
defines, with class statements and its package's ``Callback`` as a base: ``EvaluationCallback``
(:class:`~beyondlabels.callbacks.base.EvaluationCore`, the base of a family of your own), one ``<Name>EvalCallback`` per
family of beyondlabels (its core on that ``EvaluationCallback``) and ``ConvergenceMonitor``, each carrying its core's
docstring. :func:`package_classes` checks them at import (bases, module, the checkpoint name of the family's record,
so that a renamed callback resumes earlier checkpoints) and makes the class of a family registered outside
beyondlabels (:func:`beyondlabels.families.register`), which the module cannot name. Earlier names of a renamed
callback stay importable (a ``FutureWarning``, once per process).
"""

from __future__ import annotations

import warnings
from typing import Any

from beyondlabels.callbacks.base import EvaluationCore
from beyondlabels.callbacks.convergence import ConvergenceMonitorCore
from beyondlabels.callbacks.packages import callback_name
from beyondlabels.families import callback_families, deprecated_callbacks

__all__ = ["deprecated_alias", "package_classes"]

_warned: set[str] = set()  # the earlier names already warned about in this process


def _subclass(name: str, bases: tuple[type, ...], module: str, core: type, **attributes: Any) -> type:
    namespace = {"__module__": module, "__qualname__": name, "__doc__": core.__doc__, "callback_name": name}
    namespace.update(attributes)
    return type(name, bases, namespace)


def _check(cls: Any, name: str, bases: tuple[type, ...], module: str, state_name: str) -> None:
    """Raise a ``TypeError`` naming what differs when the class ``name`` of ``module`` is not the callback the
    registry describes."""
    problems = []
    if not isinstance(cls, type):
        problems.append(f"it is a {type(cls).__name__}, not a class")
    else:
        problems += [
            f"it does not derive from {b.__module__}.{b.__qualname__}" for b in bases if not issubclass(cls, b)
        ]
        if cls.__module__ != module or cls.__qualname__ != name:
            problems.append(f"it is {cls.__module__}.{cls.__qualname__}, not a class statement of {module}")
        if (vars(cls).get("checkpoint_name") or cls.__qualname__) != state_name:  # as lightning_state_key names it
            problems.append(f"its checkpoint name is not {state_name!r} (set checkpoint_name)")
        if callback_name(cls) != name:
            problems.append(f"its callback name is {callback_name(cls)!r}")
    if problems:
        raise TypeError(f"{module}.{name} is not the callback the family registry describes: {'; '.join(problems)}.")


def package_classes(namespace: dict[str, Any], callback_base: type, module: str) -> dict[str, type]:
    """Check the callback classes that ``namespace`` (a package module's globals; ``callback_base`` its package's
    ``Callback``) defines against the registry, and return the classes it lacks: those of the families registered
    outside beyondlabels.

    Raises:
        TypeError: a class differs from its record, or a family of beyondlabels has no class statement.
    """
    evaluation = namespace.get("EvaluationCallback")
    _check(evaluation, "EvaluationCallback", (EvaluationCore, callback_base), module, "EvaluationCallback")
    monitor = namespace.get("ConvergenceMonitor")
    _check(monitor, "ConvergenceMonitor", (ConvergenceMonitorCore, callback_base), module, "ConvergenceMonitor")
    made: dict[str, type] = {}
    for family in callback_families():
        core = family.load("core")
        defined = namespace.get(family.callback)
        if defined is not None:
            _check(defined, family.callback, (core, evaluation), module, family.state_name)
        elif family.core.startswith("beyondlabels."):
            raise TypeError(f"{module} has no class statement for the family {family.name!r}: add {family.callback}.")
        else:
            made[family.callback] = _subclass(
                family.callback, (core, evaluation), module, core, checkpoint_name=family.state_name
            )
    return made


def deprecated_alias(namespace: dict[str, Any], name: str, module: str) -> Any:
    """The class an earlier callback name stands for (a module ``__getattr__``), with a ``FutureWarning`` the first
    time in this process.

    Raises:
        AttributeError: for any other name, as a module without it would.
    """
    current = deprecated_callbacks().get(name)
    if current is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"{name} is now called {current} (`from {module} import {current}`); the old name will be removed in a "
            "later release. Checkpoints, logged keys and files are the same under both names.",
            FutureWarning,
            stacklevel=3,
        )
    return namespace[current]
