"""Lightning callbacks that evaluate a model while it trains and log through Lightning loggers.

Callbacks only schedule, sample, feed metrics from :mod:`beyondlabels.metrics` and log; the math lives
in :mod:`beyondlabels.functional`. :class:`EvaluationCallback` is the base every family builds on.
"""

from beyondlabels.callbacks.base import EvaluationCallback, shard_loader
from beyondlabels.callbacks.convergence import ConvergenceMonitor
from beyondlabels.callbacks.crossmodal import CrossModalEvalCallback
from beyondlabels.callbacks.hierarchy import HierarchyEvalCallback
from beyondlabels.callbacks.retrieval import RetrievalEvalCallback
from beyondlabels.callbacks.rprecision import RPrecisionCallback
from beyondlabels.callbacks.zeroshot import ZeroShotEvalCallback

__all__ = ["ConvergenceMonitor", "CrossModalEvalCallback", "EvaluationCallback", "HierarchyEvalCallback", "RetrievalEvalCallback", "RPrecisionCallback", "ZeroShotEvalCallback", "shard_loader"]
