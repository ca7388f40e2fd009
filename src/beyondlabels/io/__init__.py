"""Reading what training logged: offline W&B runs (``beyondlabels.io.wandb_offline``)."""

from beyondlabels.io.wandb_offline import (
    OfflineRun,
    find_offline_runs,
    iter_record_bytes,
    iter_records,
    read_offline_run,
)

__all__ = [
    "OfflineRun",
    "find_offline_runs",
    "iter_record_bytes",
    "iter_records",
    "read_offline_run",
]
