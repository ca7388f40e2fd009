"""Glue for the Hydra entry points: building objects from configs and summarising runs."""

from beyondlabels.utils.instantiate import instantiate_callbacks, instantiate_loggers
from beyondlabels.utils.run import close_wandb, metric_value, print_run_summary, scalar_metrics

__all__ = [
    "close_wandb",
    "instantiate_callbacks",
    "instantiate_loggers",
    "metric_value",
    "print_run_summary",
    "scalar_metrics",
]
