"""torchmetrics classes: states and validation, delegating the math to ``beyondlabels.functional``."""

from beyondlabels.metrics.retrieval import EmbeddingRetrieval

__all__ = ["EmbeddingRetrieval"]
