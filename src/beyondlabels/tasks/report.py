"""``task=report``: one self-contained HTML file of training runs and sweeps
(:mod:`beyondlabels.reporting.html_report`).

``runs`` are run folders (``logs/train/runs/<date>/``) and Hydra multirun folders (``logs/train/multiruns/<date>/``);
the report goes to ``output`` (default ``<job folder>/report.html``). A multirun's section groups its jobs by setting
(their overrides but ``seed_keys``) as ``task=compare`` does; ``metrics`` selects the columns of its tables (keys as
logged, e.g. ``[retrieval/precision@1]``; default: the headline keys, the scalars with a direction and per-query
values); ``baseline`` and ``metric`` (with ``guardrails``, at ``level``) add the Holm-corrected tests of every other
group against the baseline group; ``bootstrap_rounds`` and ``ci_seed`` (of ``conf/evaluate.yaml``) set the bootstrap
of the groups' intervals and of the tests. Each run folder among ``runs`` also prints its run summary, as ``train.py``
ends (:mod:`beyondlabels.reporting.summary`; ``full_table=true``: every key).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from beyondlabels._internal.checks import check_int, check_int_at_least, check_number_between
from beyondlabels._internal.convert import plain
from beyondlabels.io.run_folders import is_multirun_folder, is_run_folder
from beyondlabels.reporting.html_report import write_report
from beyondlabels.reporting.summary import print_summary, summarize_run_folder
from beyondlabels.tasks._common import full_table, path_list, report_path

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
            raise FileNotFoundError(
                f"runs: {root} does not exist; pass a run folder (logs/train/runs/<date>) or a multirun folder"
            )
        if not root.is_dir():
            raise FileNotFoundError(f"runs: {root} is not a folder; pass a run folder or a multirun folder, not a file")
        if not (is_multirun_folder(root) or is_run_folder(root)):
            raise ValueError(
                f"runs: {root} is not a run folder (it holds no .hydra/ and no evaluation folder with history.jsonl, "
                "schema.json or media/) nor a multirun folder (multirun.yaml and job folders 0/, 1/, ...). The "
                "evaluation callbacks write into <trainer.default_root_dir>/<prefix>/: pass the Trainer's "
                "default_root_dir (a logger's own folder, such as lightning_logs/version_0, holds none)"
            )
    return roots


def _key_list(cfg: DictConfig, name: str) -> list[str] | None:
    value = plain(cfg.get(name))
    value = [value] if isinstance(value, str) else (list(value) if value else None)
    if value is not None and not all(isinstance(k, str) and k for k in value):
        raise ValueError(
            f"{name} must be a list of keys, e.g. [retrieval/precision@1] (or [seed] for seed_keys), got {value!r}"
        )
    return value


def run(cfg: DictConfig) -> dict[str, Any]:
    """Write the HTML report of ``runs`` and return ``{"report": path, "runs": [paths]}``."""
    roots = check_runs(cfg.get("runs"))
    keys = _key_list(cfg, "metrics")
    full = full_table(cfg)
    level = cfg.get("level", 0.05)
    check_number_between(
        level, "level", 0, 1, hint="e.g. 0.05, the family-wise error rate of the tests against baseline="
    )
    baseline, metric = cfg.get("baseline"), cfg.get("metric")
    if (baseline is None) != (metric is None):
        raise ValueError(
            "the test against a baseline needs both baseline=GROUP (e.g. \"baseline='model.lr=0.001'\") "
            "and metric=KEY (e.g. retrieval/precision@1)"
        )
    rounds, seed = cfg.get("bootstrap_rounds", 2000), cfg.get("ci_seed", 11)
    check_int_at_least(rounds, "bootstrap_rounds", 1, hint="resamples of every interval of a sweep's groups, e.g. 2000")
    check_int(seed, "ci_seed", hint="the seed of a sweep's bootstrap intervals and tests")
    output = report_path(cfg, "report.html")
    path = write_report(
        roots,
        output,
        title=cfg.get("title"),
        keys=keys,
        seed_keys=_key_list(cfg, "seed_keys") or ["seed"],
        baseline=None if baseline is None else str(baseline),
        metric=None if metric is None else str(metric),
        guardrails=_key_list(cfg, "guardrails") or [],
        level=float(level),
        rounds=rounds,
        seed=seed,
    )
    log.info("report: %s", path)
    for root in roots:
        if not is_multirun_folder(root):
            print_summary(summarize_run_folder(root), full=full)
            print()
    print(f"report: {path}")
    return {"report": str(path), "runs": [str(r) for r in roots]}
