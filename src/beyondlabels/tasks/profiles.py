"""``task=profiles``: the class similarity M_feature of feature profiles, its distinct-pair distribution and top
pairs as JSON, and a heatmap PNG beside it (definitions: :mod:`beyondlabels.functional.profiles`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from beyondlabels.tasks._common import ReportFiles

__all__ = ["run"]

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> dict[str, Any]:
    """Describe ``profiles`` and write the report."""
    from beyondlabels.functional.profiles import feature_similarity, pair_distribution
    from beyondlabels.io.profiles_files import load_profiles
    from beyondlabels.reporting.heatmap import save_similarity_heatmap_png

    if not cfg.get("profiles"):
        raise ValueError("task=profiles needs profiles=PATH (YAML/JSON: features {ordinal, sets}, classes)")
    profiles = load_profiles(str(cfg.profiles))
    m = feature_similarity(profiles)
    report = {
        "task": "profiles",
        "classes": list(profiles.classes),
        "matrix": m.tolist(),
        "pair_distribution": pair_distribution(m, profiles.classes, top=int(cfg.get("top_pairs", 10))),
        "settings": {"profiles": str(cfg.profiles)},
    }

    def heatmap(output: Path) -> None:
        save_similarity_heatmap_png(m, profiles.classes, output.with_suffix(".png"))

    ReportFiles(cfg, "profiles.json").write(report, figures=heatmap)
    log.info(
        "profiles: %d classes, %d pairs, mean %.3f",
        len(profiles),
        report["pair_distribution"]["num_pairs"],
        report["pair_distribution"]["mean"],
    )
    return report
