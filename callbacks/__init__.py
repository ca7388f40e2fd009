"""Lightning callbacks that evaluate a model while it trains and log through Lightning loggers.

Callbacks only schedule, sample, feed metrics from :mod:`beyondlabels.metrics` and log; the math lives in
:mod:`beyondlabels.functional`. Their logic is package-neutral (:class:`~beyondlabels.callbacks.base.EvaluationCore`
and one core per family); each Lightning package gets its own thin classes, class statements checked against the
family registry (:mod:`beyondlabels.families`):

- ``pytorch_lightning``: ``from beyondlabels.callbacks import RetrievalEvalCallback`` (the names below, from
  :mod:`beyondlabels.callbacks.pytorch_lightning`);
- ``lightning.pytorch`` (``import lightning as L``): ``from beyondlabels.callbacks.lightning import
  RetrievalEvalCallback``.

Names: a family's callback is ``<Name>EvalCallback``; ``EvaluationCallback`` is their base (and the base of a family
of your own); ``ConvergenceMonitor`` watches values already logged, as Lightning's ``LearningRateMonitor`` and
``DeviceStatsMonitor`` watch theirs, and evaluates nothing. An earlier name of a renamed callback
(``RPrecisionCallback``) still imports, with a ``FutureWarning``.

The names are imported on first use, so ``beyondlabels.callbacks.lightning`` never imports ``pytorch_lightning``.
A callback given to a Trainer of the other package raises a ``TypeError`` at setup that names the module to import
it from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from beyondlabels.callbacks._names import exported
from beyondlabels.families import deprecated_callbacks

if TYPE_CHECKING:  # what a type checker and an IDE see; at run time the names are imported on first use
    from beyondlabels.callbacks.pytorch_lightning import (
        ConvergenceMonitor as ConvergenceMonitor,
    )
    from beyondlabels.callbacks.pytorch_lightning import (
        CrossModalEvalCallback as CrossModalEvalCallback,
    )
    from beyondlabels.callbacks.pytorch_lightning import (
        EvaluationCallback as EvaluationCallback,
    )
    from beyondlabels.callbacks.pytorch_lightning import (
        HierarchyEvalCallback as HierarchyEvalCallback,
    )
    from beyondlabels.callbacks.pytorch_lightning import (
        RetrievalEvalCallback as RetrievalEvalCallback,
    )
    from beyondlabels.callbacks.pytorch_lightning import (
        RPrecisionEvalCallback as RPrecisionEvalCallback,
    )
    from beyondlabels.callbacks.pytorch_lightning import (
        ZeroShotEvalCallback as ZeroShotEvalCallback,
    )
    from beyondlabels.callbacks.pytorch_lightning import (
        shard_loader as shard_loader,
    )

__all__ = exported()


def __getattr__(name: str) -> Any:
    if name in exported():  # a family registered after this module was imported (beyondlabels.families.register)
        from beyondlabels.callbacks import pytorch_lightning

        globals()["__all__"] = exported()

        return getattr(pytorch_lightning, name)
    if name in deprecated_callbacks():
        from beyondlabels.callbacks import _classes, pytorch_lightning

        return _classes.deprecated_alias(vars(pytorch_lightning), name, __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *exported()})
