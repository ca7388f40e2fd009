"""Lightning callbacks that evaluate a model while it trains and log through Lightning loggers.

Callbacks only schedule, sample, feed metrics from :mod:`beyondlabels.metrics` and log; the math lives in
:mod:`beyondlabels.functional`. Their logic is package-neutral (:class:`~beyondlabels.callbacks.base.EvaluationCore`
and one core per family); each Lightning package gets its own thin classes:

- ``pytorch_lightning``: ``from beyondlabels.callbacks import RetrievalEvalCallback`` (the names below, from
  :mod:`beyondlabels.callbacks.pytorch_lightning`);
- ``lightning.pytorch`` (``import lightning as L``): ``from beyondlabels.callbacks.lightning import
  RetrievalEvalCallback``.

The names are imported on first use, so ``beyondlabels.callbacks.lightning`` never imports ``pytorch_lightning``.
A callback given to a Trainer of the other package raises a ``TypeError`` at setup that names the module to import
it from.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConvergenceMonitor",
    "CrossModalEvalCallback",
    "EvaluationCallback",
    "HierarchyEvalCallback",
    "RPrecisionCallback",
    "RetrievalEvalCallback",
    "ZeroShotEvalCallback",
    "shard_loader",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from beyondlabels.callbacks import pytorch_lightning

        return getattr(pytorch_lightning, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
