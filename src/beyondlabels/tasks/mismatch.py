"""``task=mismatch``: label-mismatch similarity of retrieved pairs against feature profiles, percentile ranks and the
frequency-aware Monte Carlo null (definitions: :mod:`beyondlabels.functional.mismatch`); a JSON report and the
observed-vs-null histogram PNG beside it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from beyondlabels._internal.parse import read_json
from beyondlabels.io.pairs import load_mismatch_pairs
from beyondlabels.tasks._common import ReportFiles, mismatch_json, profile_labels

__all__ = ["run"]

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> dict[str, Any]:
    """Analyse ``pairs`` against ``profiles`` with the mismatch metric
    (:class:`~beyondlabels.metrics.LabelMismatchAnalysis`) and write the report."""
    import torch

    from beyondlabels.functional.mismatch import mismatch_output_schema, mismatch_pair_table
    from beyondlabels.functional.profiles import feature_similarity, pair_distribution
    from beyondlabels.io.profiles_files import load_profiles
    from beyondlabels.metrics import LabelMismatchAnalysis
    from beyondlabels.reporting.heatmap import save_null_histogram_png

    if not cfg.get("pairs") or not cfg.get("profiles"):
        raise ValueError(
            "task=mismatch needs pairs=PATH (CSV or npz: query_label, retrieved_label[, rank]) "
            "and profiles=PATH (YAML/JSON)"
        )
    profiles = load_profiles(str(cfg.profiles))
    q_text, r_text, queries = load_mismatch_pairs(cfg.pairs, int(cfg.get("rank_max", 1)))
    mode = profile_labels(profiles, q_text + r_text, f"pairs file {cfg.pairs}")
    to_index = (
        (lambda ts: profiles.require_classes(ts))
        if mode == "names"
        else (lambda ts: torch.tensor([int(t) for t in ts]))
    )
    q, r = to_index(q_text), to_index(r_text)
    c = len(profiles)
    if cfg.get("counts"):
        raw = read_json(Path(cfg.counts), f"counts file {cfg.counts}", max_bytes=64 << 20)
        if not isinstance(raw, dict):
            raise ValueError(f"counts file {cfg.counts} must hold a JSON object {{class: count}}")
        unknown = [k for k in raw if k not in profiles]
        if unknown:
            raise ValueError(f"counts file {cfg.counts} names classes {unknown[:5]} that the profiles do not have")
        counts = torch.tensor([float(raw.get(name, 0)) for name in profiles.classes], dtype=torch.float64)
    else:
        counts = torch.bincount(to_index(queries), minlength=c).to(torch.float64)
    m = feature_similarity(profiles)
    trials, seed = int(cfg.get("trials", 10_000)), int(cfg.get("seed", 42))
    metric = LabelMismatchAnalysis(m, labels=list(range(c)), counts=counts, num_trials=trials, seed=seed)
    metric.update(q, r)
    analysis = metric.compute()
    null = analysis["null_distribution"]
    schema = mismatch_output_schema()
    report: dict[str, Any] = {"task": "mismatch", **mismatch_json(analysis, schema)}
    report["pair_distribution"] = pair_distribution(m, profiles.classes, top=10)
    report["mismatch_pairs"] = mismatch_pair_table(q, r, m, profiles.classes, top=20)
    report["settings"] = {
        "pairs": str(cfg.pairs),
        "profiles": str(cfg.profiles),
        "counts": cfg.get("counts"),
        "labels": mode,
        "trials": trials,
        "seed": seed,
        "rank_max": int(cfg.get("rank_max", 1)),
    }

    def histogram(output: Path) -> None:
        if analysis["num_mismatches"]:
            save_null_histogram_png(
                null, float(analysis["mean_similarity"]), output.with_suffix(".png"), p_value=float(analysis["p_value"])
            )

    ReportFiles(cfg, "mismatch.json").write(report, schema=schema, figures=histogram)
    log.info(
        "mismatches %d: mean similarity %.3f, null %.3f ± %.4f, p = %.3g",
        report["num_mismatches"],
        report["mean_similarity"],
        report["null_mean"],
        report["null_std"],
        report["p_value"],
    )
    return report
