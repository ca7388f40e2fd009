"""The files of one evaluation callback's folder, written on rank 0 at a cost that does not grow with the run.

:class:`EvaluationFiles` owns everything an evaluation writes beside the loggers:

- ``history.jsonl``: one record per evaluation, appended (:class:`~beyondlabels.io.run_files.HistoryLog`);
- ``schema.json``: written once per fit (again only after a failed write);
- step files: ``per_query/step_<step>.npz`` (compact, :func:`~beyondlabels.io.run_files.save_per_query`) and the
  pictures a family draws per evaluation (e.g. ``embedding_projection/step_<step>.png``), kept under a retention
  policy (:class:`~beyondlabels.io.run_files.StepRetention`: the latest, the best by one key, every N-th);
- plots of the whole run (one PNG per curve key, ``confidence_intervals.png``), redrawn every ``plot_every_n``
  evaluations and at the end of fit, from at most ``max_curves`` curves and ``max_points`` points each.

Every file is written atomically (:mod:`beyondlabels.io.atomic`). Each write is independent: one that fails (a full
disk) is reported, does not stop the others, and is retried at the next evaluation: the history's pending records, a
pending per-query file, the schema, the plots (they stay due) and the removals the retention policy asked for. A
failed per-evaluation picture is not drawn again (its data is gone).

Examples:
    >>> import tempfile
    >>> from beyondlabels.schema import KeySpec, OutputSchema
    >>> schema = OutputSchema({"map@r": KeySpec("scalar", True)}, {"map@r": KeySpec("per_query", True)})
    >>> files = EvaluationFiles(Path(tempfile.mkdtemp()), schema, prefix="retrieval", keep_every_n=2, best="map@r")
    >>> history = []
    >>> for step, value in [(10, 0.4), (20, 0.6), (30, 0.5), (40, 0.3)]:
    ...     record = {"step": step, "epoch": 0, "map@r": value}
    ...     per_query = {"query_id": [1, 2], "map@r": [value, value]}
    ...     errors = files.write_evaluation(record, {"per_query": per_query}, history)
    ...     history.append(record)
    ...     errors += files.write_history(history)
    >>> sorted(p.name for p in (files.folder / "per_query").iterdir())  # 10: 1st, 20: best, 30: 3rd, 40: latest
    ['step_000000010.npz', 'step_000000020.npz', 'step_000000030.npz', 'step_000000040.npz']
    >>> sorted(files.retention.kept), errors
    ([10, 20, 30, 40], [])
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from beyondlabels.io.atomic import remove_stale_temporaries, write_json
from beyondlabels.io.run_files import HISTORY_FILE, SCHEMA_FILE, HistoryLog, StepRetention, save_per_query
from beyondlabels.schema import OutputSchema

log = logging.getLogger(__name__)

__all__ = ["EvaluationFiles", "step_file_name", "thin"]

PER_QUERY = "per_query"


def step_file_name(step: int, suffix: str) -> str:
    """``step_<step, 9 digits><suffix>``: the name of every per-evaluation file (sorts by step)."""
    return f"step_{int(step):09d}{suffix}"


def thin(items: Sequence[Any], at_most: int) -> list[Any]:
    """At most ``at_most`` of ``items``, evenly spaced, always with the first and the last.

    Examples:
        >>> thin(list(range(10)), 4), thin([1, 2], 5)
        ([0, 3, 6, 9], [1, 2])
    """
    n = len(items)
    if n <= at_most:
        return list(items)
    if at_most == 1:
        return [items[-1]]
    return [items[round(i * (n - 1) / (at_most - 1))] for i in range(at_most)]


class EvaluationFiles:
    """The folder of one evaluation callback (behaviour: the module docstring).

    Args:
        folder: The callback's folder.
        schema: The output schema of the records (written as ``schema.json``; its curve keys get a PNG each).
        prefix: The callback's prefix (plot titles).
        history: The records so far (see :meth:`start`).
        per_query: Write per-query files: True (under the retention policy), ``"all"`` (every evaluation) or False.
        keep_every_n: The retention policy keeps every N-th evaluation's step files (besides the latest and the best).
        best: The key whose best evaluation keeps its step files (None: none); its direction comes from ``schema``.
        plot_every_n: Redraw the whole-run plots every N evaluations (and at fit end, :meth:`draw_plots`).
        band_keys: The keys drawn in ``confidence_intervals.png`` (empty: no such plot).
        max_curves: Curves per curve PNG (evenly spaced evaluations, the first and the latest among them).
        max_points: Points per line of ``confidence_intervals.png``.
    """

    def __init__(
        self,
        folder: str | Path,
        schema: OutputSchema,
        prefix: str,
        history: Sequence[Mapping[str, Any]] = (),
        *,
        per_query: bool | str = True,
        keep_every_n: int = 10,
        best: str | None = None,
        plot_every_n: int = 10,
        band_keys: Sequence[str] = (),
        max_curves: int = 8,
        max_points: int = 500,
    ) -> None:
        self.folder, self.schema, self.prefix = Path(folder), schema, prefix
        self.per_query = per_query
        self.keep_every_n = 1 if per_query == "all" else keep_every_n
        self.best = best
        self.plot_every_n, self.band_keys = plot_every_n, tuple(band_keys)
        self.max_curves, self.max_points = max_curves, max_points
        self.step_kinds: dict[str, str] = {PER_QUERY: ".npz"}  # sub-folder -> suffix of the files kept per step
        self.start(history)

    # ---- one fit -------------------------------------------------------------------------------------------------
    def start(self, history: Sequence[Mapping[str, Any]]) -> None:
        """Begin writing for a fit whose history so far is ``history`` (restored from a checkpoint, or empty): the
        next history write replaces the file, the schema is written again, the retention policy is replayed, and the
        temporaries of writes killed before they completed are removed."""
        try:
            for path in remove_stale_temporaries(self.folder):
                log.info("%s: removed %s, left by a write that was killed before it completed", self.prefix, path)
        except OSError as exc:
            log.warning("%s: could not look for stale temporaries in %s (%s)", self.prefix, self.folder, exc)
        if getattr(self, "history_log", None) is not None:
            self.history_log.close()
        self.history_log = HistoryLog(self.folder / HISTORY_FILE)
        self.retention = StepRetention(self.keep_every_n, self.best, self.schema.mode(self.best) if self.best else None)
        for record in history:
            if "error" not in record:
                self.retention.add(int(record["step"]), record)
        self.schema_written = False
        self.pending_per_query: dict[int, Mapping[str, Any]] = {}
        self.pending_removals: set[int] = set()  # steps whose files a failed removal left
        self.plotted_evaluations = sum(1 for r in history if "error" not in r)  # a restored run's plots exist
        self.evaluations = self.plotted_evaluations

    def close(self) -> None:
        """The end of a fit: give back the folder's lock that the history writer took (:class:`HistoryLog`)."""
        self.history_log.close()

    def step_path(self, kind: str, step: int, suffix: str) -> Path:
        """The path of this evaluation's file of ``kind`` (a sub-folder, e.g. ``"samples"``), kept and removed with
        the other step files of ``step`` by the retention policy."""
        self.step_kinds.setdefault(kind, suffix)
        return self._step_file(kind, step)

    def _step_file(self, kind: str, step: int) -> Path:
        return self.folder / kind / step_file_name(step, self.step_kinds[kind])

    # ---- one evaluation --------------------------------------------------------------------------------------------
    def write_evaluation(
        self,
        record: dict[str, Any],
        results: Mapping[str, Any],
        history: Sequence[Mapping[str, Any]],
        final: bool = False,
    ) -> list[BaseException]:
        """Write what the evaluation ``record`` (not yet in ``history``, the records before it) brings: its per-query
        file (``record["per_query_file"]`` names it), the retention policy's removals, the schema and, when due (or
        ``final``), the plots. Returns the failures, each already logged; raises nothing."""
        errors: list[BaseException] = []
        step = int(record["step"])
        per_query = results.get("per_query")
        if self.per_query and isinstance(per_query, Mapping) and per_query:
            self.pending_per_query[step] = per_query
            record["per_query_file"] = self._step_file(PER_QUERY, step).relative_to(self.folder).as_posix()
        for dropped in self.retention.add(step, record):
            self.pending_per_query.pop(dropped, None)
            self.pending_removals.add(dropped)
        for dropped in sorted(self.pending_removals):
            self._remove_step_files(dropped, errors)
        for pending in sorted(self.pending_per_query):
            self.attempt(errors, f"per-query file of step {pending}", self._write_per_query, pending)
        if not self.schema_written:
            self.attempt(errors, SCHEMA_FILE, self._write_schema)
        self.evaluations += 1
        if final or self.evaluations - self.plotted_evaluations >= self.plot_every_n:
            errors += self.draw_plots([*history, record])
        return errors

    def write_history(self, history: Sequence[Mapping[str, Any]]) -> list[BaseException]:
        """Append the records of ``history`` not yet on disk (after a failure: all pending ones); returns the
        failure."""
        errors: list[BaseException] = []
        self.attempt(errors, HISTORY_FILE, self.history_log.write, history)
        return errors

    def plots_stale(self) -> bool:
        return self.evaluations > self.plotted_evaluations

    def draw_plots(self, history: Sequence[Mapping[str, Any]]) -> list[BaseException]:
        """Redraw the whole-run plots from ``history``; returns the failures (the plots stay due)."""
        from beyondlabels.reporting.plots import save_curves_png, save_history_band_png

        errors: list[BaseException] = []
        records = [r for r in history if "error" not in r]
        for key in self.schema.curve_keys():
            available = [r for r in records if r.get(key)]
            chosen = thin(available, self.max_curves)
            if chosen:
                curves = {f"step {r['step']}": r[key] for r in chosen}
                title = f"{self.prefix}: {key} per evaluation" + (
                    f" ({len(chosen)} of {len(available)})" if len(chosen) < len(available) else ""
                )
                self.attempt(
                    errors, f"{key}.png", save_curves_png, curves, self.folder / f"{key}.png", title=title, ylabel=key
                )
        if self.band_keys:
            self.attempt(
                errors,
                "confidence_intervals.png",
                save_history_band_png,
                thin(records, self.max_points),
                self.band_keys,
                self.band_path,
                title=f"{self.prefix}: 95% CI over queries",
            )
        if not errors:
            self.plotted_evaluations = self.evaluations
        return errors

    @property
    def band_path(self) -> Path:
        return self.folder / "confidence_intervals.png"

    # ---- the writes --------------------------------------------------------------------------------------------------
    def _write_per_query(self, step: int) -> None:
        save_per_query(self._step_file(PER_QUERY, step), self.pending_per_query[step], self.schema)
        del self.pending_per_query[step]

    def _write_schema(self) -> None:
        write_json(self.folder / SCHEMA_FILE, self.schema.to_json(), indent=1)
        self.schema_written = True

    def _remove_step_files(self, step: int, errors: list[BaseException]) -> None:
        before = len(errors)
        for kind in self.step_kinds:
            path = self._step_file(kind, step)
            self.attempt(errors, f"removing {path.relative_to(self.folder)}", path.unlink, missing_ok=True)
        if len(errors) == before:
            self.pending_removals.discard(step)

    def attempt(self, errors: list[BaseException], what: str, write: Any, *args: Any, **kwargs: Any) -> None:
        """Run one write; a failure is logged and collected, and the other writes go on."""
        try:
            write(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - collected; the callback decides (log, or raise in strict mode)
            log.error(
                "%s: writing %s in %s failed (%s: %s); nothing already on disk was changed",
                self.prefix,
                what,
                self.folder,
                type(exc).__name__,
                exc,
            )
            errors.append(exc)
