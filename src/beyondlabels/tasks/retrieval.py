"""``task=retrieval``: embedding retrieval of saved embeddings (an ``.npz`` with ``embeddings``, ``labels``, optional
``ids``).

Writes a JSON report (every scalar of the output schema at the top level, the curve as a list, the schema under
``schema``), the per-query values beside it (``<output stem>.per_query.npz``), ``<output>.png`` with the precision@k
curve, and prints a table. With ``profiles=PATH``: the graded keys ``profile_*`` and a ``mismatch`` section (top-1
mismatches against the profiles, with Spearman). With ``wandb=true``: also an offline W&B run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from beyondlabels._internal.checks import check_bool, check_optional_positive_int
from beyondlabels.functional import retrieval_output_schema
from beyondlabels.functional.mismatch import mismatch_output_schema
from beyondlabels.io.arrays import load_embeddings_npz
from beyondlabels.metrics import retrieval_metric
from beyondlabels.reporting import retrieval_report, save_precision_curve_png
from beyondlabels.schema import OutputSchema
from beyondlabels.tasks._common import ReportFiles, mismatch_json, parse_ks, profile_labels, with_intervals

__all__ = ["curve_max_k", "run"]


def curve_max_k(value: Any, ks: list[int], n: int) -> int:
    """``eval.curve_max_k``: null means max(k); the curve never goes past the gallery (n - 1) unless k does.

    Examples:
        >>> curve_max_k(None, [1, 5], 100), curve_max_k(50, [1, 5], 20)
        (5, 19)
    """
    if value is None:
        return max(ks)
    check_optional_positive_int(value, "eval.curve_max_k", hint="null: max(k)")
    return max(max(ks), min(value, n - 1))


def run(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate ``input`` with the retrieval callback's metric, chosen where the callback chooses it
    (:func:`~beyondlabels.metrics.retrieval_metric`: :class:`~beyondlabels.metrics.EmbeddingRetrieval`, or
    :class:`~beyondlabels.metrics.RetrievalWithMismatch` with ``profiles``; definitions:
    :mod:`beyondlabels.functional.retrieval`) and write the report."""
    if not cfg.get("input"):
        raise ValueError("task=retrieval needs input=PATH.npz (arrays 'embeddings' N×D and 'labels' N, optional 'ids')")
    ks = parse_ks(cfg.k)
    data = load_embeddings_npz(cfg.input)
    n = len(data.labels)
    max_k = curve_max_k(cfg.eval.get("curve_max_k"), ks, n)
    max_queries = cfg.eval.get("max_queries")
    deep_metrics = check_bool(cfg.eval.get("deep_metrics", True), "eval.deep_metrics")
    gains = _profile_gains(cfg, data) if cfg.get("profiles") else None
    options = dict(
        ks=ks,
        chunk_size=int(cfg.eval.chunk_size),
        precision=str(cfg.eval.precision),
        curve_max_k=max_k,
        max_queries=max_queries,
        query_seed=int(cfg.eval.get("query_seed", 0)),
        deep_metrics=deep_metrics,
        distance=cfg.eval.get("distance", "cosine"),
    )
    metric = retrieval_metric(
        gains, num_trials=int(cfg.get("trials", 10_000)), seed=int(cfg.get("seed", 42)), projection_points=0, **options
    )
    metric.update(data.embeddings, data.labels, data.ids)
    metrics = metric.compute()
    graded_names = [gains.name] if gains is not None else []
    schema = with_intervals(
        cfg,
        metrics,
        retrieval_output_schema(ks, graded=graded_names, sampled=max_queries is not None, deep_metrics=deep_metrics),
    )
    files = ReportFiles(cfg)
    per_query_file = files.save_per_query(metrics["per_query"], schema)
    settings = {"input": str(cfg.input), **OmegaConf.to_container(cfg.eval, resolve=True), "curve_max_k": max_k}
    report = retrieval_report(
        metrics,
        schema,
        ks=ks,
        num_items=n,
        num_labels=data.num_labels,
        label_names=data.label_names,
        settings=settings,
        per_query_file=per_query_file,
    )
    if gains is not None:
        mismatch = mismatch_output_schema(spearman=True)
        report["mismatch"] = mismatch_json({k: metrics[f"mismatch_{k}"] for k in mismatch.scalar_keys()}, mismatch)
    figures: dict[str, Path] = {}

    def curve_png(output: Path) -> None:
        figures["png"] = save_precision_curve_png(
            {Path(cfg.input).stem: report["precision_curve"]},
            output.with_suffix(".png"),
            title=f"precision@k — {Path(cfg.input).name}",
        )

    files.write(report, schema=schema, title=f"retrieval: {cfg.input}", figures=curve_png)
    if cfg.get("wandb"):
        _log_to_wandb(cfg, report, schema, ks, figures["png"])
    return report


def _log_to_wandb(cfg: DictConfig, report: dict[str, Any], schema: OutputSchema, ks: list[int], png: Path) -> None:
    import wandb

    run = wandb.init(
        project="beyondlabels",
        job_type="evaluate",
        dir=str(cfg.paths.output_dir),
        mode="offline",
        config={"input": str(cfg.input), "k": ks},
    )
    curve = report["precision_curve"]
    scalars = {f"retrieval/{k}": report[k] for k in schema.scalar_keys() if k in report}
    plot = wandb.plot.line_series(
        xs=list(range(1, len(curve) + 1)), ys=[curve], keys=[Path(cfg.input).stem], title="precision@k", xname="k"
    )
    run.log({**scalars, "retrieval/precision_at_k_curve": plot, "retrieval/precision_at_k_png": wandb.Image(str(png))})
    run.summary.update(scalars)


def _profile_gains(cfg: DictConfig, data: Any) -> Any:
    """The profile-derived ClassGains (graded keys ``profile_*``) for the labels of ``data`` (class names, or indices
    in profiles-file order)."""
    from beyondlabels.functional.profiles import profile_class_gains
    from beyondlabels.io.profiles_files import load_profiles

    profiles = load_profiles(str(cfg.profiles))
    mode = profile_labels(profiles, [str(v) for v in data.label_names.values()], f"input {cfg.input}")
    return profile_class_gains(profiles, name="profile", labels=None if mode == "names" else "index")
