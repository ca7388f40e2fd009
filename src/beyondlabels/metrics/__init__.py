"""torchmetrics classes: states and validation, delegating the math to ``beyondlabels.functional``.

Every family derives from :class:`PerSampleMetric` (per-sample "cat" states deduplicated by id) and describes its
outputs with an :class:`~beyondlabels.schema.OutputSchema`.
"""

from beyondlabels.metrics.base import GatheredSamples, PerSampleMetric
from beyondlabels.metrics.crossmodal import CrossModalRetrieval
from beyondlabels.metrics.hierarchy import HierarchicalPrecisionRecall
from beyondlabels.metrics.mismatch import LabelMismatchAnalysis, RetrievalWithMismatch
from beyondlabels.metrics.ranking import RankingAudit
from beyondlabels.metrics.retrieval import EmbeddingRetrieval
from beyondlabels.metrics.rprecision import TextImageRPrecision
from beyondlabels.metrics.zeroshot import ZeroShotClassification

__all__ = ["CrossModalRetrieval", "EmbeddingRetrieval", "GatheredSamples", "HierarchicalPrecisionRecall", "LabelMismatchAnalysis", "PerSampleMetric", "RankingAudit", "RetrievalWithMismatch", "TextImageRPrecision", "ZeroShotClassification"]
