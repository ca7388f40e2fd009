"""Reading (and writing) what training and evaluation wrote: the project's own evaluation files
(``beyondlabels.io.run_files``: history.jsonl, schema.json, per-query files), saved embeddings
(``beyondlabels.io.arrays``) and offline W&B runs (``beyondlabels.io.wandb_offline``). Every file the project
writes goes through ``beyondlabels.io.atomic`` (written whole or not at all)."""

from beyondlabels.io.qrels import QrelsChange, QrelsUpdate, load_qrels, load_run, update_qrels
from beyondlabels.io.run_files import (
    EvaluationRun,
    HistoryLog,
    StepRetention,
    evaluation_schema,
    find_evaluation_runs,
    read_evaluation_run,
    read_history,
    run_label,
    run_overrides,
    save_per_query,
)
from beyondlabels.io.wandb_offline import (
    IncompleteRunError,
    OfflineRun,
    find_offline_runs,
    iter_record_bytes,
    iter_records,
    read_offline_run,
)

__all__ = [
    "QrelsChange",
    "QrelsUpdate",
    "load_qrels",
    "load_run",
    "update_qrels",
    "EvaluationRun",
    "HistoryLog",
    "StepRetention",
    "IncompleteRunError",
    "OfflineRun",
    "evaluation_schema",
    "find_evaluation_runs",
    "find_offline_runs",
    "iter_record_bytes",
    "iter_records",
    "read_evaluation_run",
    "read_history",
    "read_offline_run",
    "run_label",
    "run_overrides",
    "save_per_query",
]
