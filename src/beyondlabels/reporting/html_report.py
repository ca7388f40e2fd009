"""One self-contained HTML file that shows a training run, or a sweep, the way its folders hold it.

Per run and evaluation family: the values of the last successful evaluation, each with its interval as ``value [low,
high]`` (from ``<key>_ci_low`` / ``<key>_ci_high``); the curves of the interval keys over the trainer steps with their
bands; the checkpoint selection of ``selection.json`` (the steps as good as the best drawn over the curve, the corrected
best value, the classes that regressed since the best); the last evaluation's media from ``media/media.json`` (tables
with their thumbnails, figures, curves); the PNGs of the family folder; what was missing or broken; the run's Hydra
config and overrides. A multirun folder opens with its jobs grouped by setting across seeds (the table of
``task=compare``: a row per setting, ``mean [low, high]`` across seeds and the pooled per-query interval of each
headline key; against a baseline, the Holm-corrected tests) and a picture per key, then a list of its jobs (overrides
and final values) linking to each job's section.

The file needs nothing else: every picture is inlined as ``data:image/png;base64``, the styles are inline, it
references no URL, and it renders without a script. A small inline script only records, as attributes of ``<html>``,
whether every image loaded (``data-images``, ``data-images-broken``) and any script error (``data-script-errors``),
so a headless browser can check the page. All text is escaped.

What it embeds comes from the folder readers (:mod:`beyondlabels.io.run_folders`), so a report made from a folder
that someone else sent carries nothing from outside that folder: PNGs inside it only (each checked to decode, at
most ``MAX_PNG_BYTES`` and ``MAX_PNG_PIXELS``), never one that a symbolic link or a manifest entry leads to
elsewhere; those are listed as problems. See SECURITY.md.

Examples:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> run = Path(tempfile.mkdtemp())
    >>> (run / "retrieval").mkdir()
    >>> record = {"step": 8, "epoch": 0, "map@r": 0.5, "map@r_ci_low": 0.4, "map@r_ci_high": 0.6}
    >>> _ = (run / "retrieval" / "history.jsonl").write_text(json.dumps(record) + "\\n")
    >>> page = report_html([run])
    >>> "0.5000 [0.4000, 0.6000]" in page, "http://" in page
    (True, False)
"""

from __future__ import annotations

import base64
import html
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from beyondlabels._internal.checks import is_number
from beyondlabels.io.atomic import write_text
from beyondlabels.io.run_files import EvaluationRun
from beyondlabels.io.run_folders import (
    FamilyFolder,
    MediaCurve,
    MediaImage,
    MultirunFolder,
    RunFolder,
    is_multirun_folder,
    read_multirun_folder,
    read_png,
    read_run_folder,
)
from beyondlabels.io.run_lock import writing
from beyondlabels.io.selection_file import Selection, read_selection
from beyondlabels.io.sweeps import SEED_KEYS
from beyondlabels.reporting._runs import read_folder_runs
from beyondlabels.reporting.sweeps import DAGGER, plot_sweep, sweep_comparison, sweep_headline_keys
from beyondlabels.reporting.tables import ARROWS

__all__ = [
    "grouped_sweep_html",
    "headline_keys",
    "interval_keys",
    "report_html",
    "sweep_section_html",
    "sweep_table_html",
    "write_report",
]

_INTERVAL_SUFFIXES = ("_ci_low", "_ci_high")
# Keys drawn in one band chart at most (the band plot's own limit).
_KEYS_PER_CHART = 6

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d232a; margin: 0;
       background: #f5f6f8; }
main { max-width: 1180px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 12px 0 4px; } \
h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 2px solid #d0d5dc; }
h3 { font-size: 16px; margin: 20px 0 6px; } h4 { font-size: 14px; margin: 14px 0 4px; color: #3b4550; }
section.family { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 4px 16px 12px; \
margin: 12px 0; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
th, td { border: 1px solid #dde1e6; padding: 3px 8px; text-align: left; vertical-align: middle; }
th { background: #eef1f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.scroll { overflow-x: auto; max-width: 100%; }
.muted { color: #66707a; } \
.problems { background: #fff4e5; border-left: 4px solid #f0a020; padding: 6px 12px; margin: 8px 0; }
.overview { display: flex; flex-wrap: wrap; gap: 4px 24px; align-items: flex-start; }
.overview > div:last-child { flex: 1 1 480px; min-width: 0; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; } figure { margin: 0; max-width: 100%; }
.figures > figure { flex: 0 1 560px; min-width: 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e6ea; background: #fff; } \
figcaption { font-size: 12px; color: #4b5560; }
td img { max-height: 96px; max-width: 160px; display: block; }
pre { background: #272c33; color: #e6e6e6; padding: 10px; overflow-x: auto; font-size: 12px; border-radius: 4px; }
code { background: #eef1f4; padding: 0 3px; border-radius: 3px; } nav ul { margin: 4px 0; }
"""

# Records whether the page rendered (every image decoded, no script error) as attributes of <html>; the page itself
# needs no script.
_CHECK_SCRIPT = """
(function () {
  var root = document.documentElement, errors = 0;
  window.addEventListener("error", function (event) {
    if (event.target && event.target.tagName === "IMG") { event.target.setAttribute("data-failed", "1"); }
    else { errors += 1; root.setAttribute("data-script-errors", String(errors)); }
  }, true);
  window.addEventListener("load", function () {
    var images = document.images, broken = 0;
    for (var i = 0; i < images.length; i++) {
      var image = images[i];
      if (image.hasAttribute("data-failed") || !image.complete || image.naturalWidth === 0) { broken += 1; }
    }
    root.setAttribute("data-images", String(images.length));
    root.setAttribute("data-images-broken", String(broken));
    if (!root.hasAttribute("data-script-errors")) { root.setAttribute("data-script-errors", "0"); }
  });
})();
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _format(value: Any, count: bool = False) -> str:
    if not is_number(value):
        return "—"
    if math.isnan(value):
        return "nan"
    return f"{int(value):d}" if count and math.isfinite(value) else f"{value:.4f}"


def _anchor(*parts: str) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9_]+", "_", p) for p in parts)


def _img(data: bytes, alt: str, css_class: str = "") -> str:
    klass = f' class="{css_class}"' if css_class else ""
    return f'<img{klass} alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'


def headline_keys(family: FamilyFolder) -> list[str]:
    """The keys of a family's values table: its scalar keys (the schema's; without one, the numbers of its records),
    interval keys ``*_ci_low`` / ``*_ci_high`` left out (they show beside their key)."""
    if family.run is None:
        return []
    return [k for k in family.run.scalar_keys() if not k.endswith(_INTERVAL_SUFFIXES)]


def interval_keys(family: FamilyFolder) -> list[str]:
    """The keys of :func:`headline_keys` whose last evaluation has an interval (both bounds are numbers)."""
    last = family.run.last() if family.run is not None else None
    if last is None:
        return []
    return [k for k in headline_keys(family) if all(is_number(last.get(f"{k}{s}")) for s in _INTERVAL_SUFFIXES)]


def _value_cell(record: dict[str, Any], key: str, count: bool, label: str) -> str:
    """``value [low, high]`` of ``key`` in ``record``; the numbers also as ``data-`` attributes."""
    value = record.get(key)
    low, high = record.get(f"{key}_ci_low"), record.get(f"{key}_ci_high")
    text = _format(value, count)
    attrs = f' data-key="{_e(label)}"'
    if is_number(value):
        attrs += f' data-value="{value!r}"'
    if is_number(low) and is_number(high):
        text += f" [{_format(low)}, {_format(high)}]"
        attrs += f' data-low="{low!r}" data-high="{high!r}"'
    return f'<td class="num"{attrs}>{_e(text)}</td>'


def _problems(problems: Iterable[str]) -> str:
    items = "".join(f"<li>{_e(p)}</li>" for p in problems)
    return f'<div class="problems"><strong>Missing or broken</strong><ul>{items}</ul></div>' if items else ""


def _png(path: Path, alt: str, problems: list[str], css_class: str = "") -> str:
    """``path`` as an inline ``<img>``; a file that is not a whole PNG becomes a note and a problem."""
    try:
        return _img(read_png(path), alt, css_class)
    except ValueError as exc:
        problems.append(str(exc))
        return f'<span class="muted">({_e(path.name)}: not shown)</span>'


def _values_table(family: FamilyFolder) -> str:
    run = family.run
    last = run.last() if run is not None else None
    if run is None or last is None:
        return ""
    rows = []
    for key in headline_keys(family):
        spec = run.schema.get(key) if run.schema is not None else None
        direction = ARROWS.get(run.schema.mode(key) if run.schema is not None else None, "")
        count = spec is not None and spec.count
        rows.append(f"<tr><td>{_e(key)}</td><td>{_e(direction)}</td>{_value_cell(last, key, count, key)}</tr>")
    caption = f"last evaluation: step {_e(last.get('step'))}, epoch {_e(last.get('epoch'))}"
    failed = len(run.failures)
    if failed:
        caption += f"; {failed} failed evaluation(s), the last: {_e(run.failures[-1].get('error', ''))}"
    return (
        f'<p class="muted">{caption} · {len(run.records)} evaluation(s) · value [95% interval]</p>'
        f'<table class="values" data-prefix="{_e(family.prefix)}">'
        "<tr><th>metric</th><th></th><th>value [low, high]</th></tr>" + "".join(rows) + "</table>"
    )


def _chart_groups(keys: Sequence[str]) -> list[list[str]]:
    """Keys in charts of at most ``_KEYS_PER_CHART``: the ``name@k`` keys of one name together."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(key.split("@")[0], []).append(key)
    charts: list[list[str]] = []
    for members in groups.values():
        for start in range(0, len(members), _KEYS_PER_CHART):
            chunk = members[start : start + _KEYS_PER_CHART]
            if charts and len(charts[-1]) + len(chunk) <= _KEYS_PER_CHART and (len(chunk) == 1 or len(charts[-1]) == 1):
                charts[-1].extend(chunk)
            else:
                charts.append(list(chunk))
    return charts


def _band_charts(family: FamilyFolder, problems: list[str]) -> str:
    from beyondlabels.reporting.plots import save_history_band_png

    run = family.run
    keys = interval_keys(family)
    if run is None or not keys:
        return ""
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, chart in enumerate(_chart_groups(keys)):
            names = list(dict.fromkeys(k.split("@")[0] + ("@k" if "@" in k else "") for k in chart))
            title = f"{family.prefix}: {', '.join(names)}"
            try:
                path = save_history_band_png(
                    run.records, chart, Path(tmp) / f"band_{index}.png", title=title, max_keys=_KEYS_PER_CHART
                )
            except Exception as exc:  # noqa: BLE001 - any failure of a chart (RecursionError too) is a problem listed
                problems.append(f"{family.prefix}: the chart of {', '.join(chart)} could not be drawn: {_failure(exc)}")
                continue
            if path is not None:
                figures.append(f"<figure>{_png(path, title, problems)}</figure>")
    return (
        "<h4>Over the evaluations (band: interval)</h4>" + f'<div class="figures">{"".join(figures)}</div>'
        if figures
        else ""
    )


def _failure(exc: BaseException) -> str:
    """An exception as one short line of a report's problems."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."


def _curve_png(curve: MediaCurve, title: str) -> bytes:
    """A manifest curve drawn as the loggers draw it (:func:`beyondlabels.reporting.media_figures.curves_figure`)."""
    from beyondlabels.reporting.media_figures import curves_figure, figure_png

    return figure_png(curves_figure(curve.x, {curve.name: curve.y}, curve.xname, curve.name, title))


def _cell(cell: Any, problems: list[str]) -> str:
    if isinstance(cell, MediaImage):
        if cell.path is None:
            return f'<td class="muted">(missing: {_e(cell.missing)})</td>'
        return f"<td>{_png(cell.path, cell.path.name, problems)}</td>"
    if cell is None:
        return '<td class="muted">—</td>'
    if is_number(cell):
        return f'<td class="num">{_e(_format(cell) if isinstance(cell, float) else cell)}</td>'
    return f"<td>{_e(cell)}</td>"


def _media(family: FamilyFolder, problems: list[str]) -> str:
    manifest = family.manifest
    if manifest is None:
        return ""
    out = [
        "<h4>Media of the last evaluation</h4>"
        f'<p class="muted">step {_e(manifest.step)}, epoch {_e(manifest.epoch)}</p>'
    ]
    for table in manifest.tables:
        head = "".join(f"<th>{_e(c)}</th>" for c in table.columns)
        body = "".join("<tr>" + "".join(_cell(c, problems) for c in row) + "</tr>" for row in table.rows)
        out.append(
            f'<h4>{_e(table.name)}</h4><div class="scroll">'
            f'<table class="media-table" data-name="{_e(table.name)}"><tr>{head}</tr>{body}</table></div>'
        )
    figures = []
    for figure in manifest.figures:
        if figure.image.path is None:
            figures.append(
                f'<figure><span class="muted">(missing: {_e(figure.image.missing)})</span>'
                f"<figcaption>{_e(figure.name)}</figcaption></figure>"
            )
            continue
        caption = figure.name + (f": {figure.caption}" if figure.caption else "")
        figures.append(
            f"<figure>{_png(figure.image.path, figure.name, problems)}<figcaption>{_e(caption)}</figcaption></figure>"
        )
    for curve in manifest.curves:
        try:
            png = _curve_png(curve, f"{family.prefix}: {curve.name}")
        except Exception as exc:  # noqa: BLE001 - any failure of a chart (RecursionError too) is a problem listed
            problems.append(f"{family.prefix}: curve {curve.name!r} could not be drawn: {_failure(exc)}")
            continue
        figures.append(f"<figure>{_img(png, curve.name)}<figcaption>{_e(curve.name)}</figcaption></figure>")
    if figures:
        out.append(f'<div class="figures">{"".join(figures)}</div>')
    return "".join(out)


def _folder_images(family: FamilyFolder, problems: list[str]) -> str:
    shown = {f.name for f in family.manifest.figures} if family.manifest is not None else set()
    figures = []
    for label, path in family.images:
        if path.stem in shown or path.parent.name in shown:
            continue  # the manifest's copy is shown
        figures.append(f"<figure>{_png(path, label, problems)}<figcaption>{_e(label)}</figcaption></figure>")
    return f'<h4>Files of the folder</h4><div class="figures">{"".join(figures)}</div>' if figures else ""


def _regressed_table(selection: Selection) -> str:
    if not selection.regressed:
        return ""
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{_e(_format(row.get(k)) if isinstance(row.get(k), float) else row.get(k))}</td>'
            for k in ("label", "n", "reference_mean", "current_mean", "pvalue", "adjusted")
        )
        + "</tr>"
        for row in selection.regressed
    )
    head = "".join(f"<th>{h}</th>" for h in ("class", "queries", "at the best", "latest", "p", "adjusted (BH)"))
    return (
        f"<h4>Classes regressed since the best (step {_e(selection.best_step)}) to step {_e(selection.latest_step)}"
        f'</h4><table class="values regressed"><tr>{head}</tr>{rows}</table>'
    )


def _selection(family: FamilyFolder, problems: list[str]) -> str:
    """The checkpoint selection of the family's folder (``selection.json``): its lines, the set over the curve, the
    classes that regressed."""
    from beyondlabels.reporting.media_figures import figure_png
    from beyondlabels.reporting.selection import selection_figure, selection_lines

    try:
        selection = read_selection(family.path)
    except (OSError, ValueError) as exc:
        problems.append(f"{family.prefix}: checkpoint selection not read: {exc}")
        return ""
    if selection is None:
        return ""
    records = family.run.records if family.run is not None else []
    curve = [(int(r["step"]), float(r[selection.key])) for r in records if is_number(r.get(selection.key))]
    try:
        picture = f"<figure>{_img(figure_png(selection_figure(selection, curve)), 'checkpoint selection')}</figure>"
    except (ValueError, TypeError, OSError) as exc:
        problems.append(f"{family.prefix}: the checkpoint selection could not be drawn: {exc}")
        picture = ""
    lines = "".join(f"<li>{_e(line)}</li>" for line in selection_lines(selection))
    return (
        f'<div class="selection" data-prefix="{_e(family.prefix)}"><h4>Checkpoint selection: {_e(selection.monitor)}'
        f"</h4><ul>{lines}</ul>{picture}{_regressed_table(selection)}</div>"
    )


def _family_section(family: FamilyFolder, anchor: str) -> str:
    problems = list(family.problems)
    overview = "".join(f"<div>{part}</div>" for part in (_values_table(family), _band_charts(family, problems)) if part)
    body = (
        (f'<div class="overview">{overview}</div>' if overview else "")
        + _selection(family, problems)
        + _media(family, problems)
        + _folder_images(family, problems)
    )
    if not body:
        body = '<p class="muted">Nothing to show.</p>'
    return (
        f'<section class="family" id="{_e(anchor)}"><h3>{_e(family.prefix)}</h3>{_problems(problems)}{body}</section>'
    )


def _run_section(run: RunFolder, anchor: str, heading: str = "h2") -> str:
    overrides = ", ".join(run.overrides) if run.overrides else "none"
    parts = [
        f'<section class="run" id="{_e(anchor)}"><{heading}>{_e(run.name)}</{heading}>',
        f'<p class="muted">{_e(run.path)}</p><p>overrides: <code>{_e(overrides)}</code></p>',
        _problems(run.problems),
    ]
    parts.extend(_family_section(family, _anchor(anchor, family.prefix)) for family in run.families)
    if run.config is not None:
        parts.append(f"<details><summary>config (.hydra/config.yaml)</summary><pre>{_e(run.config)}</pre></details>")
    parts.append("</section>")
    return "".join(parts)


def _final_values(run: RunFolder) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``{prefixed key: {"value", "low", "high"}}`` of every number of a job's last evaluations (bounds None without
    an interval), and its interval keys in order."""
    records: dict[str, dict[str, Any]] = {}
    keys: list[str] = []
    for family in run.families:
        last = family.run.last() if family.run is not None else None
        if last is None:
            continue
        for key, value in last.items():
            if is_number(value) and not key.endswith(_INTERVAL_SUFFIXES):
                records[f"{family.prefix}/{key}"] = {
                    "value": value,
                    "low": last.get(f"{key}_ci_low"),
                    "high": last.get(f"{key}_ci_high"),
                }
        keys.extend(f"{family.prefix}/{key}" for key in interval_keys(family))
    return records, keys


def sweep_table_html(
    sweep: MultirunFolder,
    anchors: Sequence[str],
    keys: Sequence[str] | None = None,
    settings: Mapping[str, str] | None = None,
) -> str:
    """The list of a multirun's jobs: one row per job (a link to its section ``anchors[i]``, its setting from
    ``settings`` (``{job folder: group name}``) when given, its overrides) with the final ``value [low, high]`` of
    each key (prefixed as logged; default: every key with an interval in a job)."""
    finals = [_final_values(job) for job in sweep.jobs]
    columns = list(keys) if keys else list(dict.fromkeys(k for _, job_keys in finals for k in job_keys))
    named = {str(Path(folder).resolve()): name for folder, name in (settings or {}).items()}
    head = "<tr><th>job</th>" + ("<th>setting</th>" if settings is not None else "") + "<th>overrides</th>"
    head += "".join(f"<th>{_e(k)}</th>" for k in columns) + "</tr>"
    rows = []
    for job, anchor, (records, _) in zip(sweep.jobs, anchors, finals):
        cells = []
        for key in columns:
            entry = records.get(key)
            record = (
                {key: entry["value"], f"{key}_ci_low": entry["low"], f"{key}_ci_high": entry["high"]} if entry else {}
            )
            cells.append(_value_cell(record, key, False, key))
        overrides = ", ".join(job.overrides) or "none"
        setting = ""
        if settings is not None:
            name = named.get(str(job.path.resolve()))
            setting = f"<td>{_e(name)}</td>" if name is not None else '<td class="muted">(not grouped)</td>'
        rows.append(
            f'<tr><td><a href="#{_e(anchor)}">{_e(job.name)}</a></td>{setting}'
            f"<td><code>{_e(overrides)}</code></td>{''.join(cells)}</tr>"
        )
    return f'<div class="scroll"><table class="sweep">{head}{"".join(rows)}</table></div>'


def _sweep_runs(sweep: MultirunFolder, notes: list[str]) -> list[EvaluationRun]:
    """The evaluations of a multirun's jobs as ``task=compare`` reads them; an unreadable one is left out and noted."""
    try:
        runs, unread = read_folder_runs(sweep.path)
    except FileNotFoundError as exc:
        notes.append(f"the jobs could not be grouped: {exc}")
        return []
    notes.extend(f"left out of the grouped table: {exc}" for _, exc in unread)
    return runs


def _bounds(interval: Mapping[str, Any] | None) -> tuple[Any, Any]:
    interval = interval or {}
    low, high = interval.get("low"), interval.get("high")
    return (
        (low, high)
        if is_number(low) and is_number(high) and not (math.isnan(low) or math.isnan(high))
        else (None, None)
    )


def _group_cell(key: str, metric: Mapping[str, Any], survives: bool) -> str:
    """``mean [low, high]`` across seeds (the t interval; the bare mean for one seed), below it the pooled per-query
    interval ``q [low, high]``; the numbers also as ``data-`` attributes."""
    seeds = metric["seeds"]
    mean, n = seeds.get("mean"), seeds.get("n")
    low, high = _bounds(seeds.get("t"))
    text = _format(mean) + (f" [{_format(low)}, {_format(high)}]" if low is not None else "")
    attrs = f' data-key="{_e(key)}" data-n="{_e(n)}"'
    if is_number(mean):
        attrs += f' data-mean="{mean!r}"'
    if low is not None:
        attrs += f' data-low="{low!r}" data-high="{high!r}"'
    if survives:
        attrs += ' data-survives="1"'
        text += DAGGER
    q_low, q_high = _bounds(metric.get("pooled"))
    pooled = f"q [{_format(q_low)}, {_format(q_high)}]" if q_low is not None else "q —"
    if q_low is not None:
        attrs += f' data-pooled-low="{q_low!r}" data-pooled-high="{q_high!r}"'
    return f'<td class="num"{attrs}>{_e(text)}<br><span class="muted">{_e(pooled)}</span></td>'


def _signed(value: Any) -> str:
    return f"{value:+.4f}" if is_number(value) and math.isfinite(value) else "—"


def _tests_html(table: Mapping[str, Any]) -> str:
    base = table["baseline"]
    head = "".join(
        f"<th>{_e(h)}</th>" for h in ("group", "metric", "Δ seeds [t]", "Δ queries", "p", "p Holm", "d_z", "decision")
    )
    rows = []
    for c in base["comparisons"]:
        arrow = ARROWS.get(c.get("direction"), "")
        survives = c.get("decision") in ("better", "worse")
        if "seed_t" in c:
            t, q = c["seed_t"], c["per_query"]
            seeds = (
                f"{_signed(t.get('estimate'))} [{_signed(t.get('low'))}, {_signed(t.get('high'))}] "
                f"(n={len(c.get('seeds', []))})"
            )
            queries = (
                f"{_signed(q.get('estimate'))} [{_signed(q.get('low'))}, {_signed(q.get('high'))}] "
                f"(n={c.get('n_queries')})"
            )
            p, adjusted, d = _format(c.get("pvalue")), _format(c.get("p_adjusted")), _format(c.get("effect_size"))
        else:
            seeds = queries = p = adjusted = d = "—"
        decision = c.get("decision", "") + (f" {DAGGER}" if survives else "")
        metric = f"{c['metric']} {arrow}".strip()
        rows.append(
            f'<tr class="{"survives" if survives else "test"}" data-group="{_e(c["group"])}" '
            f'data-metric="{_e(c["metric"])}" data-decision="{_e(c.get("decision", ""))}">'
            f"<td>{_e(c['group'])}</td><td>{_e(metric)}</td>"
            f'<td class="num">{_e(seeds)}</td><td class="num">{_e(queries)}</td><td class="num">{_e(p)}</td>'
            f'<td class="num">{_e(adjusted)}</td><td class="num">{_e(d)}</td>'
            f'<td title="{_e(c.get("reason", ""))}">{_e(decision)}</td></tr>'
        )
    caption = (
        f"Against the baseline {base['group']}: {base['correction']} over {base['family_size']} comparisons, "
        f"level {base['level']}. p: {base['test']} ({base['permutations']} sign assignments, or all of them when "
        f"fewer); decisions use the adjusted p; {DAGGER}: the difference survives the correction. "
        f"{base.get('effect_size', '')}."
    )
    reasons = "".join(
        f"<li>{_e(c['group'])} on {_e(c['metric'])}: no conclusion ({_e(c.get('reason', ''))})</li>"
        for c in base["comparisons"]
        if c.get("decision") == "no conclusion"
    )
    table_html = f'<div class="scroll"><table class="sweep-tests"><tr>{head}</tr>{"".join(rows)}</table></div>'
    return f'<h4>Against the baseline</h4><p class="muted">{_e(caption)}</p>{table_html}' + (
        f'<ul class="muted">{reasons}</ul>' if reasons else ""
    )


def grouped_sweep_html(table: Mapping[str, Any]) -> str:
    """The grouped comparison of :func:`beyondlabels.reporting.sweeps.sweep_comparison` as HTML: a row per group
    (its name, the number of seeds ``n``) and a column per key, ``mean [low, high]`` across seeds above the pooled
    per-query interval ``q [low, high]``, :data:`~beyondlabels.reporting.sweeps.DAGGER` where the difference to
    the baseline survives the Holm–Bonferroni correction; then the tests against the baseline and the warnings.

    Examples:
        >>> t = {"confidence": 0.95, "baseline": None, "metrics": {"r/p@1": {"direction": "max"}}, "groups": {
        ...     "lr=1": {"jobs": [{}, {}], "metrics": {"r/p@1": {
        ...         "seeds": {"mean": 0.5, "n": 2, "t": {"low": 0.4, "high": 0.6}}, "pooled": None}}}}}
        >>> "0.5000 [0.4000, 0.6000]" in grouped_sweep_html(t)
        True
    """
    keys = list(table["metrics"])
    base = table.get("baseline")
    marks = (
        {(c["group"], c["metric"]) for c in base["comparisons"] if c.get("decision") in ("better", "worse")}
        if base
        else set()
    )
    base_name = base["group"] if base else None
    titles = [f"{k} {ARROWS.get(table['metrics'][k].get('direction'), '')}".strip() for k in keys]
    head = "<tr><th>setting</th><th>n</th>" + "".join(f"<th>{_e(t)}</th>" for t in titles) + "</tr>"
    rows = []
    for name, group in table["groups"].items():
        label = name + (" (baseline)" if name == base_name else "")
        cells = "".join(_group_cell(k, group["metrics"][k], (name, k) in marks) for k in keys)
        rows.append(
            f'<tr data-group="{_e(name)}"><td>{_e(label)}</td><td class="num">{len(group["jobs"])}</td>{cells}</tr>'
        )
    confidence = f"{table.get('confidence', 0.95):.0%}"
    notes = [
        f"Mean over seeds [{confidence} t interval across seeds]; n = seeds; "
        "q: pooled per-query bootstrap interval over the group's jobs."
    ]
    if table.get("common_overrides"):
        notes.append("Every group: " + ", ".join(table["common_overrides"]) + ".")
    out = [f'<div class="scroll"><table class="sweep-groups">{head}{"".join(rows)}</table></div>']
    out.extend(f'<p class="muted">{_e(n)}</p>' for n in notes)
    if base:
        out.append(_tests_html(table))
    warnings = "".join(f"<li>{_e(w)}</li>" for w in table.get("warnings", []))
    if warnings:
        out.append(f'<ul class="muted sweep-warnings">{warnings}</ul>')
    return "".join(out)


def _sweep_pictures(table: Mapping[str, Any], notes: list[str]) -> str:
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            paths = plot_sweep(table, Path(tmp) / "sweep")
        except Exception as exc:  # noqa: BLE001 - any failure of a chart (RecursionError too) is a note, not the end
            notes.append(f"the sweep pictures could not be drawn: {_failure(exc)}")
            return ""
        for key, path in zip(table["metrics"], paths):
            figures.append(
                f'<figure class="sweep-picture" data-key="{_e(key)}">{_png(path, key, notes)}'
                f"<figcaption>{_e(key)}</figcaption></figure>"
            )
    return f'<div class="figures">{"".join(figures)}</div>' if figures else ""


def sweep_section_html(
    sweep: MultirunFolder,
    anchors: Sequence[str],
    *,
    keys: Sequence[str] | None = None,
    seed_keys: Sequence[str] = SEED_KEYS,
    baseline: str | None = None,
    metric: str | None = None,
    guardrails: Sequence[str] = (),
    level: float = 0.05,
    rounds: int = 2000,
    seed: int = 11,
) -> str:
    """A multirun's jobs grouped by setting across seeds (:func:`beyondlabels.reporting.sweeps.sweep_comparison`
    over the jobs' evaluations, shown by :func:`grouped_sweep_html`, columns ``keys`` or the headline keys), with
    ``baseline`` and ``metric`` the Holm-corrected tests against the baseline group, the sweep's pictures
    (:func:`beyondlabels.reporting.sweeps.plot_sweep`), then the list of its jobs (:func:`sweep_table_html`, the same
    columns) linking to ``anchors``. What keeps the jobs from being grouped (no seed override, an unreadable job, an
    unknown key or baseline) is a note; the job list stays."""
    notes: list[str] = []
    runs = _sweep_runs(sweep, notes)
    table = None
    if runs:
        attempts = [(baseline, metric)] + ([(None, None)] if baseline is not None or metric is not None else [])
        for base, key in attempts:
            try:
                table = sweep_comparison(
                    runs,
                    seed_keys=seed_keys,
                    keys=keys,
                    baseline=base,
                    metric=key,
                    guardrails=guardrails if key else (),
                    level=level,
                    rounds=rounds,
                    seed=seed,
                )
                break
            except (ValueError, KeyError, TypeError, OSError) as exc:
                what = (
                    f"the test against baseline={base!r} on metric={key!r}"
                    if base is not None or key is not None
                    else "grouping the jobs by setting"
                )
                notes.append(f"{what} failed: {exc}")
    if table is not None and all(not s for g in table["groups"].values() for s in g["seeds"]):
        notes.append(
            f"no job sets a seed key (seed_keys={list(seed_keys) if not isinstance(seed_keys, str) else [seed_keys]}): "
            "every job would be a group of its own, so there is no grouped table; "
            "pass seed_keys=[...] naming the seed overrides"
        )
        table = None
    parts = []
    if table is not None:
        parts.append(f"<h3>Settings across seeds</h3>{grouped_sweep_html(table)}")
        parts.append(_sweep_pictures(table, notes))
    columns = list(keys) if keys else (list(table["metrics"]) if table is not None else sweep_headline_keys(runs))
    settings = (
        {job["path"]: name for name, group in table["groups"].items() for job in group["jobs"]}
        if table is not None
        else None
    )
    parts.append(f"<h3>Jobs</h3>{sweep_table_html(sweep, anchors, columns or None, settings)}")
    return _problems(notes) + "".join(parts)


def _read(source: str | os.PathLike[str] | RunFolder | MultirunFolder) -> RunFolder | MultirunFolder:
    if isinstance(source, (RunFolder, MultirunFolder)):
        return source
    return read_multirun_folder(source) if is_multirun_folder(source) else read_run_folder(source)


def report_html(
    runs: Sequence[str | os.PathLike[str] | RunFolder | MultirunFolder],
    *,
    title: str | None = None,
    keys: Sequence[str] | None = None,
    seed_keys: Sequence[str] = SEED_KEYS,
    baseline: str | None = None,
    metric: str | None = None,
    guardrails: Sequence[str] = (),
    level: float = 0.05,
    rounds: int = 2000,
    seed: int = 11,
) -> str:
    """The report of ``runs`` (run folders, multirun folders, or what :mod:`beyondlabels.io.run_folders` read) as
    one HTML document. A multirun's section opens with its jobs grouped by setting across ``seed_keys``, the tests
    against ``baseline`` on ``metric`` and ``guardrails`` at ``level``, and its pictures (:func:`sweep_section_html`;
    ``rounds`` and ``seed`` of its bootstrap intervals and tests); ``keys`` selects the columns of its tables.

    Raises:
        FileNotFoundError: if a path is not a folder.
    """
    sources = [_read(r) for r in runs]
    nav, sections = [], []
    for index, source in enumerate(sources):
        anchor = f"run{index}"
        if isinstance(source, MultirunFolder):
            job_anchors = [_anchor(anchor, "job", job.name) for job in source.jobs]
            nav.append(f'<li><a href="#{anchor}">{_e(source.path.name)}</a> (sweep of {len(source.jobs)} jobs)</li>')
            parts = [
                f'<section class="sweep" id="{anchor}"><h2>Sweep {_e(source.path.name)}</h2>'
                f'<p class="muted">{_e(source.path)}</p>',
                _problems(source.problems),
            ]
            parts.append(
                sweep_section_html(
                    source,
                    job_anchors,
                    keys=keys,
                    seed_keys=seed_keys,
                    baseline=baseline,
                    metric=metric,
                    guardrails=guardrails,
                    level=level,
                    rounds=rounds,
                    seed=seed,
                )
            )
            if source.config is not None:
                parts.append(f"<details><summary>multirun.yaml</summary><pre>{_e(source.config)}</pre></details>")
            parts.extend(_run_section(job, a, "h2") for job, a in zip(source.jobs, job_anchors))
            parts.append("</section>")
            sections.append("".join(parts))
        else:
            links = ", ".join(f'<a href="#{_e(_anchor(anchor, f.prefix))}">{_e(f.prefix)}</a>' for f in source.families)
            nav.append(f'<li><a href="#{anchor}">{_e(source.name)}</a>: {links or "no evaluation folder"}</li>')
            sections.append(_run_section(source, anchor))
    heading = title or "Evaluation report: " + ", ".join(s.path.name or str(s.path) for s in sources)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(heading)}</title><style>{_CSS}</style><script>{_CHECK_SCRIPT}</script></head>"
        f"<body><main><h1>{_e(heading)}</h1><nav><ul>{''.join(nav)}</ul></nav>{''.join(sections)}</main></body></html>\n"
    )


def write_report(
    runs: Sequence[str | os.PathLike[str] | RunFolder | MultirunFolder], output: str | os.PathLike[str], **options: Any
) -> Path:
    """Write :func:`report_html` of ``runs`` (``options``: its keyword arguments) to ``output`` (atomically; its
    folder is created) and return its path."""
    output = Path(output)
    page = report_html(runs, **options)
    with writing(output.parent):  # the folder may be a training's run folder: one writer
        write_text(output, page)
    return output
