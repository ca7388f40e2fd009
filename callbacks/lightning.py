"""The evaluation callbacks as ``lightning.pytorch`` callbacks (``import lightning.pytorch as pl``, or ``import
lightning as L``).

Each class is its package-neutral core (the logic, in :mod:`beyondlabels.callbacks.base` and the family modules)
with ``lightning.pytorch.Callback`` as a base; nothing else: ``EvaluationCallback``, one ``<Name>EvalCallback`` per
family, ``ConvergenceMonitor``, checked against the family registry (:mod:`beyondlabels.families`) at import; a
family registered outside beyondlabels gets its class made here. :mod:`beyondlabels.callbacks.pytorch_lightning` (also
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
    from lightning.pytorch import Callback
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the package
    raise ImportError(
        "beyondlabels.callbacks.lightning holds the callbacks for the `lightning` package (import lightning.pytorch), "
        "which is not installed: `pip install lightning`, or with pytorch_lightning import the callbacks from "
        "beyondlabels.callbacks"
    ) from exc

from beyondlabels.callbacks._classes import deprecated_alias, package_classes
from beyondlabels.callbacks._names import exported
from beyondlabels.callbacks.base import EvaluationCore
from beyondlabels.callbacks.base import shard_loader as shard_loader  # exported (__all__ is made below)
from beyondlabels.callbacks.convergence import ConvergenceMonitorCore
from beyondlabels.callbacks.crossmodal import CrossModalEvalCore
from beyondlabels.callbacks.hierarchy import HierarchyEvalCore
from beyondlabels.callbacks.retrieval import RetrievalEvalCore
from beyondlabels.callbacks.rprecision import RPrecisionCore
from beyondlabels.callbacks.zeroshot import ZeroShotEvalCore


class EvaluationCallback(EvaluationCore, Callback):
    __doc__ = EvaluationCore.__doc__


class RetrievalEvalCallback(RetrievalEvalCore, EvaluationCallback):
    __doc__ = RetrievalEvalCore.__doc__


class CrossModalEvalCallback(CrossModalEvalCore, EvaluationCallback):
    __doc__ = CrossModalEvalCore.__doc__


class HierarchyEvalCallback(HierarchyEvalCore, EvaluationCallback):
    __doc__ = HierarchyEvalCore.__doc__


class RPrecisionEvalCallback(RPrecisionCore, EvaluationCallback):
    __doc__ = RPrecisionCore.__doc__
    checkpoint_name = "RPrecisionCallback"  # its earlier name: earlier checkpoints resume


class ZeroShotEvalCallback(ZeroShotEvalCore, EvaluationCallback):
    __doc__ = ZeroShotEvalCore.__doc__


class ConvergenceMonitor(ConvergenceMonitorCore, Callback):
    __doc__ = ConvergenceMonitorCore.__doc__


# checked against the family registry; a family registered outside beyondlabels gets its class made here
globals().update(package_classes(globals(), Callback, __name__))

__all__ = exported()  # the names of beyondlabels.callbacks, all defined here


def __getattr__(name: str) -> Any:
    return deprecated_alias(globals(), name, __name__)
