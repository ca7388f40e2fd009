"""The evaluation callbacks as ``pytorch_lightning`` callbacks (``import pytorch_lightning as pl``).

Each class is its package-neutral core (the logic, in :mod:`beyondlabels.callbacks.base` and the family modules)
with ``pytorch_lightning.Callback`` as a base; nothing else. :mod:`beyondlabels.callbacks` exports these names, and
:mod:`beyondlabels.callbacks.lightning` holds the same classes for ``lightning.pytorch``. Subclass
:class:`EvaluationCallback` here for a new family of your own.

Example:
    >>> import pytorch_lightning as pl
    >>> from beyondlabels.callbacks.pytorch_lightning import RetrievalEvalCallback
    >>> isinstance(RetrievalEvalCallback(), pl.Callback)
    True
"""

from __future__ import annotations

try:
    import pytorch_lightning
except ImportError as exc:  # pragma: no cover - pytorch_lightning is a dependency; kept clear for slim installs
    raise ImportError(
        "beyondlabels.callbacks (and beyondlabels.callbacks.pytorch_lightning) hold the callbacks for the "
        "`pytorch_lightning` package, which is not installed: `pip install pytorch-lightning`, or with the `lightning` "
        "package import the callbacks from beyondlabels.callbacks.lightning"
    ) from exc

from beyondlabels.callbacks.base import EvaluationCore, shard_loader
from beyondlabels.callbacks.convergence import ConvergenceMonitorCore
from beyondlabels.callbacks.crossmodal import CrossModalEvalCore
from beyondlabels.callbacks.hierarchy import HierarchyEvalCore
from beyondlabels.callbacks.retrieval import RetrievalEvalCore
from beyondlabels.callbacks.rprecision import RPrecisionCore
from beyondlabels.callbacks.zeroshot import ZeroShotEvalCore

__all__ = ["ConvergenceMonitor", "CrossModalEvalCallback", "EvaluationCallback", "HierarchyEvalCallback", "RPrecisionCallback", "RetrievalEvalCallback", "ZeroShotEvalCallback", "shard_loader"]


class EvaluationCallback(EvaluationCore, pytorch_lightning.Callback):
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


class ConvergenceMonitor(ConvergenceMonitorCore, pytorch_lightning.Callback):
    __doc__ = ConvergenceMonitorCore.__doc__
