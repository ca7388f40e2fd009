"""Glue for the Hydra entry points: building objects from configs and summarising runs."""

from beyondlabels.utils.instantiate import instantiate_callbacks, instantiate_loggers
from beyondlabels.utils.run import (
    WANDB_RUN_FILE,
    close_wandb,
    keep_wandb_run_id,
    metric_value,
    print_run_summary,
    resumed_wandb_run_id,
    scalar_metrics,
    wandb_run_id,
)
from beyondlabels.utils.run_folder import RunFolderLockCallback, launched_as_rank_zero

__all__ = [
    "WANDB_RUN_FILE",
    "close_wandb",
    "keep_wandb_run_id",
    "resumed_wandb_run_id",
    "wandb_run_id",
    "instantiate_callbacks",
    "instantiate_loggers",
    "metric_value",
    "print_run_summary",
    "scalar_metrics",
    "RunFolderLockCallback",
    "launched_as_rank_zero",
]
