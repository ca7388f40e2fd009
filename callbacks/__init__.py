"""Lightning callbacks that evaluate a model while it trains and log through Lightning loggers.

Callbacks only schedule, sample, feed metrics from :mod:`beyondlabels.metrics` and log; the math lives
in :mod:`beyondlabels.functional`.
"""

from beyondlabels.callbacks.retrieval import RetrievalEvalCallback

__all__ = ["RetrievalEvalCallback"]
