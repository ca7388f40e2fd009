"""The key prefixes under which evaluations are logged: one list for every reader of logged keys.

Each evaluation callback logs ``<prefix>/<key>``; its default prefix is the family name below. The model's own
validation keys are logged under ``val/``. Tables that pick scalars out of a run's logged keys (run summaries, W&B
comparisons without a schema) select the keys starting with one of :data:`LOGGED_PREFIXES`.

Examples:
    >>> LOGGED_PREFIXES[:3]
    ('val/', 'retrieval/', 'crossmodal/')
"""

from __future__ import annotations

__all__ = ["FAMILY_PREFIXES", "LOGGED_PREFIXES", "MODEL_PREFIX"]

# The default prefix of each evaluation callback (beyondlabels.callbacks.*EvalCallback)
FAMILY_PREFIXES = ("retrieval", "crossmodal", "hierarchy", "rprecision", "zeroshot")
# The LightningModule's own validation keys
MODEL_PREFIX = "val"
LOGGED_PREFIXES = tuple(f"{name}/" for name in (MODEL_PREFIX, *FAMILY_PREFIXES))
