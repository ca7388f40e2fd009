"""The names :mod:`beyondlabels.callbacks` and both Lightning package modules export (internal; it imports only the
family registry, so that ``import beyondlabels.callbacks`` stays light)."""

from __future__ import annotations

from beyondlabels.families import callback_families

__all__ = ["exported"]


def exported() -> list[str]:
    """Beside each registered family's ``<Name>EvalCallback``: the base of every family and of one of your own, the
    convergence monitor, and the loader sharding the evaluations use under DDP (sorted)."""
    names = ["ConvergenceMonitor", "EvaluationCallback", *(f.callback for f in callback_families()), "shard_loader"]
    return sorted(names)
