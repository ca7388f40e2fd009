"""Reports of evaluations: JSON-ready dicts, terminal tables and PNG plots."""

from beyondlabels.reporting.plots import save_precision_curve_png
from beyondlabels.reporting.prefixes import LOGGED_PREFIXES
from beyondlabels.reporting.retrieval import retrieval_report
from beyondlabels.reporting.tables import (
    compare_evaluation_runs,
    compare_wandb_runs,
    format_value,
    print_comparison,
    print_metrics_table,
)

__all__ = [
    "LOGGED_PREFIXES",
    "compare_evaluation_runs",
    "compare_wandb_runs",
    "format_value",
    "print_comparison",
    "print_metrics_table",
    "retrieval_report",
    "save_precision_curve_png",
]
