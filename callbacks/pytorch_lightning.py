"""The evaluation callbacks as ``pytorch_lightning`` callbacks (``import pytorch_lightning as pl``).

Each class is its package-neutral core (the logic, in :mod:`beyondlabels.callbacks.base` and the family modules)
with ``pytorch_lightning.Callback`` as a base; nothing else. The classes are made from the family registry
(:mod:`beyondlabels.families`, :mod:`beyondlabels.callbacks._classes`): ``EvaluationCallback``, one
``<Name>EvalCallback`` per family, ``ConvergenceMonitor``. :mod:`beyondlabels.callbacks` exports these names, and
:mod:`beyondlabels.callbacks.lightning` holds the same classes for ``lightning.pytorch``. Subclass
:class:`EvaluationCallback` here for a new family of your own.

Examples:
    >>> import pytorch_lightning as pl
    >>> from beyondlabels.callbacks.pytorch_lightning import RetrievalEvalCallback
    >>> isinstance(RetrievalEvalCallback(), pl.Callback)
    True
"""

from __future__ import annotations

from typing import Any

try:
    import pytorch_lightning
except ImportError as exc:  # pragma: no cover - pytorch_lightning is a dependency; kept clear for slim installs
    raise ImportError(
        "beyondlabels.callbacks (and beyondlabels.callbacks.pytorch_lightning) hold the callbacks for the "
        "`pytorch_lightning` package, which is not installed: `pip install pytorch-lightning`, or with the `lightning` "
        "package import the callbacks from beyondlabels.callbacks.lightning"
    ) from exc

from beyondlabels.callbacks._classes import deprecated_alias, package_classes
from beyondlabels.callbacks._names import exported
from beyondlabels.callbacks.base import shard_loader as shard_loader  # exported (__all__ is made below)

globals().update(package_classes(pytorch_lightning.Callback, __name__))

__all__ = exported()  # the names of beyondlabels.callbacks, all defined here


def __getattr__(name: str) -> Any:
    return deprecated_alias(globals(), name, __name__)
