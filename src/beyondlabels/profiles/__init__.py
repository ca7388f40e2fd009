"""Class feature profiles (ordinal and set-valued attributes): loaders, validation, dense tensors.

The definitions (levels, set groups, class order) are stated once in :mod:`beyondlabels.profiles.features`.
Similarity between profiles is computed in :mod:`beyondlabels.functional.profiles`
(:func:`~beyondlabels.functional.profiles.feature_similarity`, :func:`~beyondlabels.functional.profiles.profile_class_gains`). Torch, YAML and JSON only: no Lightning, no torchmetrics.

Example:
    >>> from beyondlabels.profiles import load_profiles
    >>> profiles = load_profiles({
    ...     "features": {"ordinal": {"corners": "0 none .. 2 many"}, "sets": {"edges": ["straight", "curved"]}},
    ...     "classes": {"square": {"corners": 1, "edges": ["straight"]}},
    ... })
    >>> profiles.profile("square")
    {'corners': 1, 'edges': ['straight']}
"""

from beyondlabels.profiles.features import FeatureProfiles, load_profiles

__all__ = ["FeatureProfiles", "load_profiles"]
