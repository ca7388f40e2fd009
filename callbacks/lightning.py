"""The evaluation callbacks as ``lightning.pytorch`` callbacks (``import lightning.pytorch as pl``, or ``import
lightning as L``).

Each class is its package-neutral core (the logic, in :mod:`beyondlabels.callbacks.base` and the family modules)
with ``lightning.pytorch.Callback`` as a base; nothing else. The classes are made from the family registry
(:mod:`beyondlabels.families`, :mod:`beyondlabels.callbacks._classes`): ``EvaluationCallback``, one
``<Name>EvalCallback`` per family, ``ConvergenceMonitor``. :mod:`beyondlabels.callbacks.pytorch_lightning` (also
exported by :mod:`beyondlabels.callbacks`) holds the same classes for ``pytorch_lightning``. Subclass
:class:`EvaluationCallback` here for a new family of your own.

Examples:
    >>> import lightning.pytorch as pl
    >>> from beyondlabels.callbacks.lightning import RetrievalEvalCallback
    >>> isinstance(RetrievalEvalCallback(), pl.Callback)
    True
"""

from __future__ import annotations

from typing import Any

try:
    import lightning.pytorch
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the package
    raise ImportError(
        "beyondlabels.callbacks.lightning holds the callbacks for the `lightning` package (import lightning.pytorch), "
        "which is not installed: `pip install lightning`, or with pytorch_lightning import the callbacks from "
        "beyondlabels.callbacks"
    ) from exc

from beyondlabels.callbacks._classes import deprecated_alias, package_classes
from beyondlabels.callbacks._names import exported
from beyondlabels.callbacks.base import shard_loader as shard_loader  # exported (__all__ is made below)

globals().update(package_classes(lightning.pytorch.Callback, __name__))

__all__ = exported()  # the names of beyondlabels.callbacks, all defined here


def __getattr__(name: str) -> Any:
    return deprecated_alias(globals(), name, __name__)
