"""Pure tensor kernels: tensors in, tensors out. No state, no torchmetrics, no Lightning.

``search`` is the one exact cosine search every family uses; ``labels`` the one rule that codes labels;
``relevance`` graded class gains; ``retrieval`` the retrieval metrics computed from them; ``hierarchy``
hierarchical precision / recall over a class tree and taxonomy-derived gains; ``bootstrap`` intervals of a mean,
``abtest`` paired A/B tests with their decision protocol, ``agreement`` Cohen's kappa and rank correlations;
``multiple_testing`` Holm's and Benjamini–Hochberg's adjustments and the paired randomization test, ``sweeps`` a
sweep's settings across seeds, ``convergence`` the sequential downturn and plateau rule, ``selection`` the model
confidence set of a run's checkpoints and the selection-corrected estimate of the best one, ``regressions`` negative
flips, per-class regressions and forgetting events between checkpoints.
"""

from beyondlabels.functional.abtest import ABResult, ab_test, paired_differences, paired_t_ci, sample_size
from beyondlabels.functional.agreement import Correlation, cohen_kappa, kendall_tau, spearman
from beyondlabels.functional.audit import (
    AuditSettings,
    LabelAudit,
    audit_label_shares,
    audit_neighbors,
    suspect_overlap,
)
from beyondlabels.functional.bootstrap import Interval, bootstrap_ci, bootstrap_difference_ci
from beyondlabels.functional.convergence import ConvergenceRule
from beyondlabels.functional.crossmodal import (
    aggregate_crossmodal,
    crossmodal_output_schema,
    crossmodal_per_query,
    crossmodal_retrieval_metrics,
)
from beyondlabels.functional.hierarchy import (
    aggregate_hierarchy,
    hierarchical_precision_recall,
    hierarchy_output_schema,
    hierarchy_per_query,
    lca_depth,
    mapping_quality,
    mistake_lca_depth,
    node_indices,
    per_class_means,
    taxonomy_class_gains,
)
from beyondlabels.functional.labels import encode_labels, label_code
from beyondlabels.functional.mismatch import (
    class_mean_cosine,
    class_pair_spearman,
    frequency_null,
    mismatch_analysis,
    mismatch_output_schema,
    mismatch_pair_table,
    percentile_ranks,
)
from beyondlabels.functional.multiple_testing import benjamini_hochberg, holm_adjust, paired_randomization_test
from beyondlabels.functional.profiles import feature_similarity, pair_distribution, profile_class_gains
from beyondlabels.functional.ranking import (
    fuse_term_scores,
    judge_run,
    ranking_metrics,
    ranking_output_schema,
    term_satisfaction,
)
from beyondlabels.functional.regressions import class_regressions, forgetting_events, negative_flips
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.functional.retrieval import (
    aggregate_retrieval,
    embedding_retrieval_metrics,
    retrieval_output_schema,
    retrieval_per_query,
)
from beyondlabels.functional.rprecision import (
    CandidateSets,
    aggregate_rprecision,
    candidate_scores,
    draw_candidate_sets,
    fold_assignment,
    rprecision_output_schema,
    rprecision_per_query,
    text_image_r_precision,
)
from beyondlabels.functional.search import Neighbors, cosine_topk, exclusion_index, normalize_rows, search_neighbors
from beyondlabels.functional.selection import best_checkpoint_estimate, model_confidence_set
from beyondlabels.functional.sweeps import (
    GroupDifference,
    SeedSummary,
    paired_group_difference,
    pooled_query_interval,
    seed_summary,
)
from beyondlabels.functional.zeroshot import (
    aggregate_classification,
    class_prompts,
    classification_metrics,
    classification_per_query,
    prompt_ensemble,
    topk_classes,
    zeroshot_output_schema,
    zeroshot_scores,
)

__all__ = [
    "AuditSettings",
    "LabelAudit",
    "audit_label_shares",
    "audit_neighbors",
    "suspect_overlap",
    "ConvergenceRule",
    "GroupDifference",
    "SeedSummary",
    "benjamini_hochberg",
    "best_checkpoint_estimate",
    "class_regressions",
    "forgetting_events",
    "holm_adjust",
    "model_confidence_set",
    "negative_flips",
    "paired_group_difference",
    "paired_randomization_test",
    "pooled_query_interval",
    "seed_summary",
    "CandidateSets",
    "candidate_scores",
    "draw_candidate_sets",
    "fold_assignment",
    "rprecision_output_schema",
    "text_image_r_precision",
    "aggregate_rprecision",
    "rprecision_per_query",
    "class_mean_cosine",
    "class_pair_spearman",
    "feature_similarity",
    "frequency_null",
    "mismatch_analysis",
    "mismatch_output_schema",
    "mismatch_pair_table",
    "pair_distribution",
    "percentile_ranks",
    "profile_class_gains",
    "ABResult",
    "Correlation",
    "Interval",
    "ab_test",
    "bootstrap_ci",
    "bootstrap_difference_ci",
    "paired_differences",
    "paired_t_ci",
    "cohen_kappa",
    "fuse_term_scores",
    "judge_run",
    "kendall_tau",
    "ranking_metrics",
    "ranking_output_schema",
    "sample_size",
    "spearman",
    "term_satisfaction",
    "ClassGains",
    "Neighbors",
    "aggregate_crossmodal",
    "aggregate_retrieval",
    "class_prompts",
    "classification_metrics",
    "aggregate_classification",
    "classification_per_query",
    "crossmodal_output_schema",
    "crossmodal_per_query",
    "crossmodal_retrieval_metrics",
    "cosine_topk",
    "embedding_retrieval_metrics",
    "encode_labels",
    "exclusion_index",
    "hierarchical_precision_recall",
    "aggregate_hierarchy",
    "hierarchy_per_query",
    "hierarchy_output_schema",
    "label_code",
    "lca_depth",
    "mapping_quality",
    "mistake_lca_depth",
    "node_indices",
    "normalize_rows",
    "per_class_means",
    "prompt_ensemble",
    "retrieval_output_schema",
    "retrieval_per_query",
    "search_neighbors",
    "taxonomy_class_gains",
    "topk_classes",
    "zeroshot_output_schema",
    "zeroshot_scores",
]
