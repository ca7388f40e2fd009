"""The evaluation callbacks as ``lightning.pytorch`` callbacks (``import lightning.pytorch as pl``, or ``import lightning as L``).

Each class is its package-neutral core (the logic, in :mod:`beyondlabels.callbacks.base` and the family modules)
with ``lightning.pytorch.Callback`` as a base; nothing else. :mod:`beyondlabels.callbacks.pytorch_lightning` (also
exported by :mod:`beyondlabels.callbacks`) holds the same classes for ``pytorch_lightning``. Subclass
:class:`EvaluationCallback` here for a new family of your own.

Example:
    >>> import lightning.pytorch as pl
    >>> from beyondlabels.callbacks.lightning import RetrievalEvalCallback
    >>> isinstance(RetrievalEvalCallback(), pl.Callback)
    True
"""

from __future__ import annotations

try:
    import lightning.pytorch
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the package
    raise ImportError(
        "beyondlabels.callbacks.lightning holds the callbacks for the `lightning` package (import lightning.pytorch), "
        "which is not installed: `pip install lightning`, or with pytorch_lightning import the callbacks from "
        "beyondlabels.callbacks"
    ) from exc

from beyondlabels.callbacks.base import EvaluationCore, shard_loader
from beyondlabels.callbacks.convergence import ConvergenceMonitorCore
from beyondlabels.callbacks.crossmodal import CrossModalEvalCore
from beyondlabels.callbacks.hierarchy import HierarchyEvalCore
from beyondlabels.callbacks.retrieval import RetrievalEvalCore
from beyondlabels.callbacks.rprecision import RPrecisionCore
from beyondlabels.callbacks.zeroshot import ZeroShotEvalCore

__all__ = ["ConvergenceMonitor", "CrossModalEvalCallback", "EvaluationCallback", "HierarchyEvalCallback", "RPrecisionCallback", "RetrievalEvalCallback", "ZeroShotEvalCallback", "shard_loader"]


class EvaluationCallback(EvaluationCore, lightning.pytorch.Callback):
    __doc__ = EvaluationCore.__doc__


class RetrievalEvalCallback(RetrievalEvalCore, EvaluationCallback):
    __doc__ = RetrievalEvalCore.__doc__


class CrossModalEvalCallback(CrossModalEvalCore, EvaluationCallback):
    __doc__ = CrossModalEvalCore.__doc__


class ZeroShotEvalCallback(ZeroShotEvalCore, EvaluationCallback):
    __doc__ = ZeroShotEvalCore.__doc__


class HierarchyEvalCallback(HierarchyEvalCore, EvaluationCallback):
    __doc__ = HierarchyEvalCore.__doc__


class RPrecisionCallback(RPrecisionCore, EvaluationCallback):
    __doc__ = RPrecisionCore.__doc__


class ConvergenceMonitor(ConvergenceMonitorCore, lightning.pytorch.Callback):
    __doc__ = ConvergenceMonitorCore.__doc__
