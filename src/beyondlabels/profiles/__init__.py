"""Class feature profiles (ordinal and set-valued attributes): validation, dense tensors.

The definitions (levels, set groups, class order) are stated once in :mod:`beyondlabels.profiles.features`; the
files (YAML, JSON) are read by :mod:`beyondlabels.io.profiles_files`.
Similarity between profiles is computed in :mod:`beyondlabels.functional.profiles`
(:func:`~beyondlabels.functional.profiles.feature_similarity`,
:func:`~beyondlabels.functional.profiles.profile_class_gains`). Torch only: no file formats, no Lightning, no
torchmetrics.

Examples:
    >>> from beyondlabels.profiles import FeatureProfiles
    >>> profiles = FeatureProfiles.from_dict({
    ...     "features": {"ordinal": {"corners": "0 none .. 2 many"}, "sets": {"edges": ["straight", "curved"]}},
    ...     "classes": {"square": {"corners": 1, "edges": ["straight"]}},
    ... })
    >>> profiles.profile("square")
    {'corners': 1, 'edges': ['straight']}
"""

from beyondlabels.profiles.features import FeatureProfiles

__all__ = ["FeatureProfiles"]
