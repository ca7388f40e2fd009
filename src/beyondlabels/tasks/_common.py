"""What the offline evaluation tasks share (internal: not part of the public API): command-line values, intervals,
and the one report writer every task ends with (:class:`ReportFiles`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from beyondlabels._internal.checks import check_bool, check_ks
from beyondlabels._internal.convert import plain
from beyondlabels.io import save_per_query
from beyondlabels.io.atomic import write_json
from beyondlabels.io.run_lock import writing
from beyondlabels.metrics.intervals import add_confidence_intervals
from beyondlabels.schema import OutputSchema

log = logging.getLogger(__name__)


def parse_ks(value: Any, name: str = "k") -> list[int]:
    """Cut-offs from the command line (``k``, ``top_r``): one positive int (``k=5``) or a list of them
    (``k=[1,5,10]``); sorted, unique (:func:`~beyondlabels._internal.checks.check_ks` on the plain value).

    Raises:
        ValueError: for anything else (floats such as ``1.5``, strings, booleans, ``k <= 0``, an empty list),
            naming ``name``.

    Examples:
        >>> parse_ks(5), parse_ks([10, 1, 5, 1])
        ([5], [1, 5, 10])
    """
    return list(check_ks(plain(value), name))


def path_list(value: Any) -> list[str]:
    """One path or a list of them (``runs=PATH`` or ``runs=[A,B]``) as a list of strings."""
    value = plain(value)
    return [value] if isinstance(value, str) else [str(v) for v in (value or [])]


def with_intervals(cfg: DictConfig, metrics: dict[str, Any], schema: OutputSchema) -> OutputSchema:
    """Add ``<key>_ci_low`` / ``<key>_ci_high`` of the headline keys to ``metrics`` (seeded bootstrap over queries;
    ``bootstrap_rounds``, ``ci_seed``; :func:`beyondlabels.metrics.intervals.add_confidence_intervals`) and return the
    schema that describes them."""
    rounds, seed = int(cfg.get("bootstrap_rounds", 2000)), int(cfg.get("ci_seed", 11))
    with_bounds, extended = add_confidence_intervals(metrics, schema, rounds=rounds, seed=seed)
    metrics.update(with_bounds)
    return extended


def scalar_report(task: str, metrics: Mapping[str, Any], schema: OutputSchema) -> dict[str, Any]:
    """``{"task": task}`` and every scalar of ``schema`` from ``metrics`` (counts as ints)."""
    report: dict[str, Any] = {"task": task}
    for key in schema.scalar_keys():
        value = float(metrics[key])
        report[key] = int(value) if schema[key].count else value
    return report


def full_table(cfg: DictConfig) -> bool:
    """``full_table`` of ``task=compare`` / ``task=report``: print every key instead of the run summary's headline.

    Raises:
        ValueError: for anything but true or false.
    """
    return check_bool(
        cfg.get("full_table", False), "full_table", hint="true: every key; false: the summary's headline keys"
    )


def report_path(cfg: DictConfig, default_name: str = "report.json") -> Path:
    """The report's path: ``output``, default ``<job folder>/<default_name>``; its folder is created."""
    output = Path(cfg.output) if cfg.get("output") else Path(cfg.paths.output_dir) / default_name
    output.parent.mkdir(parents=True, exist_ok=True)
    return output


class ReportFiles:
    """A task's report and the files beside it: the per-query values (``<stem>.per_query.npz``) and figures
    (``<stem>.png``). The one writer every task ends with.

    Args:
        cfg: The task's config (``output``, ``paths.output_dir``).
        default_name: File name of the report when ``output`` is not set.
    """

    def __init__(self, cfg: DictConfig, default_name: str = "report.json") -> None:
        self.path = report_path(cfg, default_name)
        self.per_query_path: Path | None = None

    def save_per_query(self, per_query: Mapping[str, Any], schema: OutputSchema | None = None) -> str:
        """Write the per-query values beside the report; returns the file's name (the report's ``per_query_file``)."""
        with writing(self.path.parent):
            path = save_per_query(self.path.parent / f"{self.path.stem}.per_query.npz", per_query, schema)
        self.per_query_path = path
        return path.name

    def write(
        self,
        report: dict[str, Any],
        *,
        schema: OutputSchema | None = None,
        title: str | None = None,
        figures: Callable[[Path], Any] | None = None,
    ) -> Path:
        """Write ``figures(path)`` (PNGs beside the report), then ``report`` (with ``schema`` under ``schema``), and a
        terminal table of its scalars titled ``title`` (None: no table); returns the report's path. The folder's lock
        is held for the writes (:func:`beyondlabels.io.run_lock.writing`: the folder may be a training's run folder).

        A figure that fails, whatever the reason (a label matplotlib cannot lay out, a full disk), is logged and listed
        under the report's ``problems``; the report is written all the same."""
        if schema is not None:
            report["schema"] = schema.to_json()
        with writing(self.path.parent):
            if figures is not None:
                try:
                    figures(self.path)
                except Exception as exc:  # noqa: BLE001 - one figure never costs the report
                    problem = f"the figures beside {self.path.name} were not drawn: {type(exc).__name__}: {exc}"
                    log.error("%s", problem)
                    report.setdefault("problems", []).append(problem[:2000])
            write_json(self.path, report)
        if title is not None and schema is not None:
            from beyondlabels.reporting import print_metrics_table

            print_metrics_table(report, title=title, schema=schema)
        if self.per_query_path is not None:
            log.info("report: %s  per-query values: %s", self.path, self.per_query_path)
        else:
            log.info("report: %s", self.path)
        return self.path


def profile_labels(profiles: Any, texts: list[str], what: str) -> str:
    """How ``texts`` (labels as text) name the profiled classes: ``"names"`` when every one is a class name,
    ``"index"`` when every one is an int in ``0..C-1`` (the class at that position of the profiles file)."""
    names = set(profiles.classes)
    if all(t in names for t in texts):
        return "names"
    if all(t.lstrip("-").isdigit() and 0 <= int(t) < len(profiles) for t in texts):
        return "index"
    unknown = sorted({t for t in texts if t not in names})[:5]
    raise ValueError(
        f"{what} holds labels {unknown} that are not classes of the profiles file; use the class names of the profiles "
        f"(e.g. {list(profiles.classes)[:3]}) or class indices 0..{len(profiles) - 1} in profiles-file order"
    )


def mismatch_json(analysis: Mapping[str, Any], schema: OutputSchema) -> dict[str, Any]:
    """The scalars of a mismatch analysis (counts as ints) and ``null_ci95`` as ``[low, high]``."""
    out = {
        k: (int(analysis[k]) if schema[k].count else float(analysis[k])) for k in schema.scalar_keys() if k in analysis
    }
    out["null_ci95"] = [out.get("null_ci95_low"), out.get("null_ci95_high")]
    return out
