"""torchmetrics classes: states and validation, delegating the math to ``beyondlabels.functional``.

Every family derives from :class:`PerSampleMetric` (per-sample "cat" states deduplicated by id) and describes its
outputs with an :class:`~beyondlabels.schema.OutputSchema`.
"""

from beyondlabels.metrics.base import GatheredSamples, PerSampleMetric
from beyondlabels.metrics.retrieval import EmbeddingRetrieval

__all__ = ["EmbeddingRetrieval", "GatheredSamples", "PerSampleMetric"]
