"""Reading (and writing) what training and evaluation wrote: the project's own evaluation files
(``beyondlabels.io.run_files``: history.jsonl, schema.json, per-query files), saved embeddings
(``beyondlabels.io.arrays``) and offline W&B runs (``beyondlabels.io.wandb_offline``), a metric's per-query values
across a run's evaluations as one table (``beyondlabels.io.query_tables``) and the checkpoint selection's
``selection.json`` (``beyondlabels.io.selection_file``); the files of the data types:
taxonomies (``beyondlabels.io.taxonomy_files``: YAML, JSON, TSV, WordNet 3.0), feature profiles
(``beyondlabels.io.profiles_files``) and the hierarchy task's predictions (``beyondlabels.io.predictions``); text
encoders named in configs (``beyondlabels.io.text_encoders``). Every file the project writes goes through
``beyondlabels.io.atomic`` (written whole or not at all), into a folder whose lock its writer holds
(``beyondlabels.io.run_lock``: one writer per run folder)."""

from beyondlabels.io.predictions import HierarchyPredictions, read_hierarchy_predictions
from beyondlabels.io.profiles_files import load_profiles, read_profiles
from beyondlabels.io.qrels import QrelsChange, QrelsUpdate, load_qrels, load_run, update_qrels
from beyondlabels.io.query_tables import PerQueryTable, align_by_query_id, per_query_table
from beyondlabels.io.run_files import (
    EvaluationRun,
    HistoryLog,
    HistoryReplacedError,
    StepRetention,
    evaluation_schema,
    find_evaluation_runs,
    read_evaluation_run,
    read_history,
    run_label,
    run_overrides,
    save_per_query,
)
from beyondlabels.io.run_lock import RunFolderInUseError, RunFolderLock
from beyondlabels.io.selection_file import SELECTION_FILE, Selection, read_selection, write_selection
from beyondlabels.io.taxonomy_files import (
    WORDNET_ROOT,
    find_wordnet_dir,
    load_taxonomy,
    load_wordnet,
    read_taxonomy,
    read_tsv,
    wordnet_lemmas,
)
from beyondlabels.io.text_encoders import text_encoder
from beyondlabels.io.wandb_offline import (
    IncompleteRunError,
    OfflineRun,
    find_offline_runs,
    iter_record_bytes,
    iter_records,
    read_offline_run,
)

__all__ = [
    "WORDNET_ROOT",
    "HierarchyPredictions",
    "PerQueryTable",
    "SELECTION_FILE",
    "Selection",
    "align_by_query_id",
    "per_query_table",
    "read_selection",
    "write_selection",
    "find_wordnet_dir",
    "load_profiles",
    "load_taxonomy",
    "load_wordnet",
    "read_hierarchy_predictions",
    "read_profiles",
    "read_taxonomy",
    "read_tsv",
    "text_encoder",
    "wordnet_lemmas",
    "QrelsChange",
    "QrelsUpdate",
    "load_qrels",
    "load_run",
    "update_qrels",
    "EvaluationRun",
    "HistoryLog",
    "HistoryReplacedError",
    "RunFolderInUseError",
    "RunFolderLock",
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
