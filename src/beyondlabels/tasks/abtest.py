"""``task=abtest``: every run against a baseline run on one metric's per-query values, paired by query id (paired
bootstrap and t intervals; decision: no conclusion / reject / cannot distinguish / better / worse, definitions:
:mod:`beyondlabels.functional.abtest`), with guardrail metrics that must not get worse by more than ``tolerance``. A
per-query file holding several kinds of query (the cross-modal file: image and caption queries) is paired on the rows of
the key's own kind (:func:`beyondlabels.io.run_files.query_values`). Groups of seeds against a baseline group are
``task=compare``."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from beyondlabels._internal.convert import plain
from beyondlabels.io import find_evaluation_runs, read_evaluation_run
from beyondlabels.tasks._common import ReportFiles, path_list

__all__ = ["run"]


def run(cfg: DictConfig) -> dict[str, Any]:
    """Test ``runs`` against ``baseline`` on ``metric`` and print (and with ``output``, save) the table."""
    from beyondlabels.reporting.stats import ab_comparison, print_ab_table

    roots = path_list(cfg.get("runs"))
    if not cfg.get("baseline") or not cfg.get("metric"):
        raise ValueError(
            "task=abtest needs baseline=PATH (one of the runs) and metric=KEY (e.g. retrieval/precision@1)"
        )
    if str(cfg.baseline) not in roots:
        roots.append(str(cfg.baseline))
    files = list(dict.fromkeys(file for root in roots for file in find_evaluation_runs(root)))
    guardrails = plain(cfg.get("guardrails")) or []
    table = ab_comparison(
        [read_evaluation_run(f) for f in files],
        cfg.baseline,
        str(cfg.metric),
        [guardrails] if isinstance(guardrails, str) else list(guardrails),
        which=cfg.get("which", "final"),
        tolerance=float(cfg.get("tolerance", 0.02)),
        intersect=bool(cfg.get("intersect", False)),
        rounds=int(cfg.get("bootstrap_rounds", 2000)),
        seed=int(cfg.get("ci_seed", 11)),
    )
    print_ab_table(table)
    if cfg.get("output"):
        ReportFiles(cfg).write(table)
    return table
