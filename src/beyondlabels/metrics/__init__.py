"""torchmetrics classes: states and validation, delegating the math to ``beyondlabels.functional``.

Every family derives from :class:`PerSampleMetric` (per-sample "cat" states deduplicated by id) and describes its
outputs with an :class:`~beyondlabels.schema.OutputSchema`. The metric of every family of the registry
(:mod:`beyondlabels.families`) is exported here under its class name, beside the base and the retrieval family's
variant with the label-mismatch analysis (:class:`RetrievalWithMismatch`, chosen by :func:`retrieval_metric`).
"""

from typing import Any

from beyondlabels.families import FAMILIES, resolve
from beyondlabels.metrics import ranking as _ranking
from beyondlabels.metrics.base import GatheredSamples as GatheredSamples
from beyondlabels.metrics.base import PerSampleMetric as PerSampleMetric
from beyondlabels.metrics.mismatch import RetrievalWithMismatch as RetrievalWithMismatch
from beyondlabels.metrics.mismatch import retrieval_metric as retrieval_metric

globals().update({f.metric.rpartition(":")[2]: resolve(f.metric) for f in FAMILIES})

_FAMILY_METRICS = [f.metric.rpartition(":")[2] for f in FAMILIES]
__all__ = sorted(["GatheredSamples", "PerSampleMetric", "RetrievalWithMismatch", "retrieval_metric", *_FAMILY_METRICS])


def __getattr__(name: str) -> Any:
    found = _ranking.renamed(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return found
