"""``task=report``: one self-contained HTML file of training runs and sweeps
(:mod:`beyondlabels.reporting.html_report`).

``runs`` are run folders (``logs/train/runs/<date>/``) and Hydra multirun folders (``logs/train/multiruns/<date>/``);
the report goes to ``output`` (default ``<job folder>/report.html``). ``metrics`` selects the columns of a sweep's job
table (keys as logged, e.g. ``[retrieval/precision@1]``; default: every key with an interval).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from beyondlabels.io._convert import plain
from beyondlabels.io.run_folders import is_multirun_folder, is_run_folder
from beyondlabels.reporting.html_report import write_report
from beyondlabels.tasks._common import path_list, report_path

__all__ = ["check_runs", "run"]

log = logging.getLogger(__name__)


def check_runs(value: Any) -> list[Path]:
    """``runs`` as folders, each a run folder or a multirun folder.

    Raises:
        ValueError: for no ``runs``, or a folder that is neither (the message says what one holds).
        FileNotFoundError: for a path that does not exist or is not a folder.
    """
    roots = [Path(p) for p in path_list(value)]
    if not roots:
        raise ValueError("task=report needs runs=[PATH, ...]: run folders (logs/train/runs/<date>) or multirun folders")
    for root in roots:
        if not root.exists():
            raise FileNotFoundError(f"runs: {root} does not exist; pass a run folder (logs/train/runs/<date>) or a multirun folder")
        if not root.is_dir():
            raise FileNotFoundError(f"runs: {root} is not a folder; pass a run folder or a multirun folder, not a file")
        if not (is_multirun_folder(root) or is_run_folder(root)):
            raise ValueError(
                f"runs: {root} is not a run folder (it holds no .hydra/ and no evaluation folder with history.jsonl, "
                "schema.json or media/) nor a multirun folder (multirun.yaml and job folders 0/, 1/, ...)"
            )
    return roots


def run(cfg: DictConfig) -> dict[str, Any]:
    """Write the HTML report of ``runs`` and return ``{"report": path, "runs": [paths]}``."""
    roots = check_runs(cfg.get("runs"))
    keys = plain(cfg.get("metrics"))
    keys = [keys] if isinstance(keys, str) else (list(keys) if keys else None)
    output = report_path(cfg, "report.html")
    path = write_report(roots, output, title=cfg.get("title"), keys=keys)
    log.info("report: %s", path)
    print(f"report: {path}")
    return {"report": str(path), "runs": [str(r) for r in roots]}
