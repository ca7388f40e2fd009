"""Pure tensor kernels: tensors in, tensors out. No state, no torchmetrics, no Lightning."""

from beyondlabels.functional.retrieval import (
    cosine_topk,
    embedding_retrieval_metrics,
    encode_labels,
    normalize_rows,
)

__all__ = ["cosine_topk", "embedding_retrieval_metrics", "encode_labels", "normalize_rows"]
