"""Pure tensor kernels: tensors in, tensors out. No state, no torchmetrics, no Lightning.

``search`` is the one exact cosine search every family uses; ``labels`` the one rule that codes labels;
``relevance`` graded class gains; ``retrieval`` the retrieval metrics computed from them.
"""

from beyondlabels.functional.labels import encode_labels, label_code
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.functional.retrieval import (
    aggregate_retrieval,
    embedding_retrieval_metrics,
    retrieval_output_schema,
    retrieval_per_query,
)
from beyondlabels.functional.search import Neighbors, cosine_topk, exclusion_index, normalize_rows, search_neighbors

__all__ = [
    "ClassGains",
    "Neighbors",
    "aggregate_retrieval",
    "cosine_topk",
    "embedding_retrieval_metrics",
    "encode_labels",
    "exclusion_index",
    "label_code",
    "normalize_rows",
    "retrieval_output_schema",
    "retrieval_per_query",
    "search_neighbors",
]
