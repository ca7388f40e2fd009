"""The key prefixes under which evaluations are logged: one list for every reader of logged keys.

Each evaluation callback logs ``<prefix>/<key>``; its default prefix is its family's name, and the families are those
of the registry (:mod:`beyondlabels.families`) that have a callback, in registry order. The model's own validation
keys are logged under ``val/``. Tables that pick scalars out of a run's logged keys (run summaries, W&B comparisons
without a schema) select the keys starting with one of :data:`LOGGED_PREFIXES`.

Examples:
    >>> LOGGED_PREFIXES[:3]
    ('val/', 'retrieval/', 'crossmodal/')
"""

from __future__ import annotations

from beyondlabels.families import callback_families

__all__ = ["FAMILY_PREFIXES", "LOGGED_PREFIXES", "MODEL_PREFIX"]

# The default prefix of each evaluation callback (beyondlabels.callbacks.*EvalCallback)
FAMILY_PREFIXES = tuple(family.prefix for family in callback_families())
# The LightningModule's own validation keys
MODEL_PREFIX = "val"
LOGGED_PREFIXES = tuple(f"{name}/" for name in (MODEL_PREFIX, *FAMILY_PREFIXES))
