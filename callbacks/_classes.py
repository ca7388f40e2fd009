"""The callback classes of one Lightning package, made from the package-neutral cores and the family registry
(:mod:`beyondlabels.families`); internal to :mod:`beyondlabels.callbacks`, whose package modules export them.

Each package module (:mod:`beyondlabels.callbacks.pytorch_lightning`, :mod:`beyondlabels.callbacks.lightning`) gets,
with its package's ``Callback`` as a base: ``EvaluationCallback`` (:class:`~beyondlabels.callbacks.base.EvaluationCore`,
the base of a family of your own), one ``<Name>EvalCallback`` per registered family (its core on that
``EvaluationCallback``) and ``ConvergenceMonitor``. Each class is defined in the package module (``__module__``,
``__qualname__``: pickling, LightningCLI's ``class_path`` and ``isinstance`` see an ordinary class there) and carries
its core's docstring; a family's class keeps the checkpoint name of its record (``checkpoint_name``), so that a
renamed callback resumes earlier checkpoints. Earlier names of a renamed callback stay importable (a
``FutureWarning``, once per process).
"""

from __future__ import annotations

import warnings
from typing import Any

from beyondlabels.callbacks.base import EvaluationCore
from beyondlabels.callbacks.convergence import ConvergenceMonitorCore
from beyondlabels.families import callback_families, deprecated_callbacks

__all__ = ["deprecated_alias", "package_classes"]

_warned: set[str] = set()  # the earlier names already warned about in this process


def _subclass(name: str, bases: tuple[type, ...], module: str, core: type, **attributes: Any) -> type:
    namespace = {"__module__": module, "__qualname__": name, "__doc__": core.__doc__, "callback_name": name}
    namespace.update(attributes)
    return type(name, bases, namespace)


def package_classes(callback_base: type, module: str) -> dict[str, type]:
    """``{name: class}`` of every callback of one Lightning package: ``callback_base`` is the package's ``Callback``,
    ``module`` the package module the classes are defined in."""
    evaluation = _subclass("EvaluationCallback", (EvaluationCore, callback_base), module, EvaluationCore)
    classes = {"EvaluationCallback": evaluation}
    for family in callback_families():
        core = family.load("core")
        bases = (core, evaluation)
        classes[family.callback] = _subclass(family.callback, bases, module, core, checkpoint_name=family.state_name)
    monitor = ConvergenceMonitorCore
    classes["ConvergenceMonitor"] = _subclass("ConvergenceMonitor", (monitor, callback_base), module, monitor)
    return classes


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
