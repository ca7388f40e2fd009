"""Which checkpoint to keep, kept current while training: a component an evaluation callback runs after each of its
evaluations (``RetrievalEvalCallback(selection=CheckpointSelection("precision@1"))``).

After every successful evaluation in fit, on every rank (the per-query values are gathered, the same on every rank):

- the evaluation's per-query values of ``key`` (and the queries' labels, when the family gives them) join those of
  the earlier evaluations kept under the retention policy of the per-query files
  (:class:`~beyondlabels.io.run_files.StepRetention`'s: the latest, the best by ``key`` (the earlier of equal means),
  every ``keep_every_n``-th counting from the first; the evaluation callback's own ``keep_every_n`` by default, so
  that with ``keep_best`` the same key the evaluations are those whose files it keeps and ``evaluate.py task=select``
  finds the same);
- :func:`beyondlabels.functional.selection.select_checkpoints` recomputes, over those evaluations lined up by query id
  (:func:`beyondlabels.io.query_tables.align_by_query_id`): the model confidence set, the best evaluation with its
  selection-corrected estimate, and what got worse from the best evaluation to the latest;
- the evaluation callback logs, with its own scalars (one row, the evaluation's logging step, every rank),
  ``<prefix>/set_size``, ``<prefix>/best_step``, ``<prefix>/best_value``, ``<prefix>/best_estimate``,
  ``<prefix>/best_ci_low``, ``<prefix>/best_ci_high``, ``<prefix>/latest_in_set`` (1 when the latest evaluation is in
  the set), ``<prefix>/negative_flip_rate`` and ``<prefix>/positive_flip_rate`` (from the best evaluation to the
  latest), ``<prefix>/regressed_classes`` (classes whose regression survives the FDR control; with labels),
  ``<prefix>/evaluations`` (those considered) and ``<prefix>/seconds`` (what this costs);
- rank 0 writes ``selection.json`` into the evaluation callback's folder (:mod:`beyondlabels.io.selection_file`), which
  the run summary and ``report.html`` read.

At the end of fit it reads the files of the trainer's ModelCheckpoints (their step: from the checkpoint file, else a
``step=N`` in its name), says in the log which of them hold a step in the set, and adds them to ``selection.json``.
A failure here is logged and never stops training (``strict``: raised, on every rank). The state (the kept columns,
the labels, the retention policy's count) is saved in the evaluation callback's checkpoint state and resumes with it.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from beyondlabels._internal.checks import check_confidence, check_number, check_rounds, check_seed, check_text
from beyondlabels.functional.selection import STATISTICS, select_checkpoints
from beyondlabels.io.paths import check_name
from beyondlabels.io.query_tables import align_by_query_id
from beyondlabels.io.selection_file import write_selection

log = logging.getLogger(__name__)

__all__ = ["CheckpointSelection"]

LOGGED = (
    "set_size",
    "best_step",
    "best_value",
    "best_estimate",
    "best_ci_low",
    "best_ci_high",
    "latest_in_set",
    "negative_flip_rate",
    "positive_flip_rate",
    "regressed_classes",
    "evaluations",
    "seconds",
)


def _array(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values)


class CheckpointSelection:
    """The checkpoint selection an evaluation callback keeps current during fit (what it logs and writes: the module
    docstring; the statistics: :mod:`beyondlabels.functional.selection`, :mod:`beyondlabels.functional.regressions`).

    Args:
        key: The per-query key of the evaluation callback to select by (un-prefixed, e.g. ``"precision@1"``); its
            direction comes from the callback's output schema.
        size: The set's test size: the set holds the best evaluated checkpoint with probability ``1 - size``.
        statistic: ``"R"`` (the range statistic) or ``"max"``.
        rounds: Bootstrap resamples of the queries.
        confidence: Level of the corrected estimate's interval.
        seed: Seed of the resamples (the same on every rank).
        threshold: The value of ``key`` from which a query counts as right (negative flips, forgetting events).
        fdr: False discovery rate of the per-class regressions.
        keep_every_n: The retention policy's period; None: the evaluation callback's ``keep_every_n`` (1 with
            ``save_per_query="all"``).
        prefix: Namespace of the logged keys (a second selection on the same trainer needs another one).

    Examples:
        >>> selection = CheckpointSelection("precision@1", rounds=200)
        >>> selection.bind(mode="max", keep_every_n=1, owner="retrieval")
        >>> for step, hits in [(10, [1, 0, 1, 1]), (20, [1, 1, 1, 1]), (30, [1, 1, 0, 1])]:
        ...     logged = selection.observe(step, {"query_id": [0, 1, 2, 3], "precision@1": hits})
        >>> logged["selection/best_step"], logged["selection/set_size"]
        (20.0, 3.0)
    """

    def __init__(
        self,
        key: str = "precision@1",
        size: float = 0.1,
        statistic: str = "R",
        rounds: int = 1000,
        confidence: float = 0.95,
        seed: int = 0,
        threshold: float = 0.5,
        fdr: float = 0.1,
        keep_every_n: int | None = None,
        prefix: str = "selection",
    ) -> None:
        self.key = check_text(key, "key", hint="a per-query key of the evaluation callback, e.g. 'precision@1'")
        self.size = check_number(size, "size", above=0.0, below=1.0, hint="e.g. 0.1 for a 90% set")
        if statistic not in STATISTICS:
            raise ValueError(f"`statistic` must be one of {list(STATISTICS)}, got {statistic!r}.")
        self.statistic, self.rounds, self.seed = statistic, check_rounds(rounds), check_seed(seed)
        self.confidence = check_confidence(confidence)
        self.threshold = check_number(threshold, "threshold", hint="the value from which a query counts as right")
        self.fdr = check_number(fdr, "fdr", above=0.0, below=1.0, hint="e.g. 0.1")
        if keep_every_n is not None and (isinstance(keep_every_n, bool) or not isinstance(keep_every_n, int)):
            raise ValueError(f"`keep_every_n` must be None or an int >= 1, got {keep_every_n!r}.")
        if keep_every_n is not None and keep_every_n < 1:
            raise ValueError(f"`keep_every_n` must be None or an int >= 1, got {keep_every_n!r}.")
        self.keep_every_n = keep_every_n
        self.prefix = check_name(prefix, "prefix")
        self.mode: str | None = None
        self.owner = ""
        self.every_n = keep_every_n or 1
        self.count = 0  # evaluations seen (the every_n-th are kept for good)
        self.periodic: set[int] = set()  # the steps kept for good
        self.columns: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.labels: tuple[np.ndarray, np.ndarray] | None = None
        self.last: dict[str, Any] | None = None

    # ---- set-up by the evaluation callback -------------------------------------------------------------------------
    def bind(self, mode: str, keep_every_n: int, owner: str) -> None:
        """Set the key's direction and the retention period of the evaluation callback ``owner`` (at its setup)."""
        self.mode, self.owner = mode, owner
        self.every_n = self.keep_every_n or keep_every_n

    def keys(self) -> list[str]:
        """The keys logged, prefixed."""
        return [f"{self.prefix}/{name}" for name in LOGGED]

    # ---- one evaluation --------------------------------------------------------------------------------------------
    def observe(self, step: int, per_query: Mapping[str, Any] | None) -> dict[str, float]:
        """Add the evaluation at ``step`` (its per-query values) and recompute; returns the scalars to log (empty when
        the evaluation has no values of ``key``)."""
        if self.mode is None:
            raise RuntimeError("CheckpointSelection.bind() was not called: give it to an evaluation callback")
        if not isinstance(per_query, Mapping) or self.key not in per_query or "query_id" not in per_query:
            return {}
        started = time.perf_counter()
        ids, values = _array(per_query["query_id"]).astype(np.int64), _array(per_query[self.key]).astype(np.float64)
        self._keep(int(step), ids, values)
        labels = per_query.get("label")
        if labels is not None and np.issubdtype(_array(labels).dtype, np.integer) and len(_array(labels)) == len(ids):
            self.labels = (ids, _array(labels).astype(np.int64))
        self.last = self.compute()
        return self._scalars(self.last, time.perf_counter() - started)

    def _keep(self, step: int, ids: np.ndarray, values: np.ndarray) -> None:
        """Add an evaluation and drop the columns the retention policy no longer keeps (neither every_n-th, nor the
        latest, nor the best mean)."""
        if self.count % self.every_n == 0:
            self.periodic.add(step)
        self.count += 1
        self.columns[step] = (ids, values)
        sign = 1.0 if self.mode == "max" else -1.0
        means = {}
        for kept, (_, column) in self.columns.items():
            finite = column[np.isfinite(column)]
            if finite.size:
                means[kept] = sign * float(finite.mean())
        best = max(sorted(means), key=lambda s: means[s]) if means else None  # max keeps the first (earliest) of ties
        for kept in list(self.columns):
            if kept not in self.periodic and kept not in (step, best):
                del self.columns[kept]

    def compute(self) -> dict[str, Any]:
        """:func:`~beyondlabels.functional.selection.select_checkpoints` over the kept evaluations, with ``key``,
        ``monitor``, ``queries_dropped`` and ``checkpoints`` (filled at fit end)."""
        steps = sorted(self.columns)
        query_ids, table, dropped = align_by_query_id([self.columns[s] for s in steps], [f"step {s}" for s in steps])
        labels = None
        if self.labels is not None:
            label_ids, label_values = self.labels
            order = np.argsort(label_ids, kind="stable")
            position = np.searchsorted(label_ids[order], query_ids).clip(max=max(len(order) - 1, 0))
            known = len(order) > 0 and bool(np.all(label_ids[order][position] == query_ids))
            labels = torch.as_tensor(label_values[order][position]) if known else None
        result = select_checkpoints(
            torch.as_tensor(table),
            steps,
            mode=self.mode or "max",
            size=self.size,
            statistic=self.statistic,
            rounds=self.rounds,
            confidence=self.confidence,
            seed=self.seed,
            labels=labels,
            threshold=self.threshold,
            fdr=self.fdr,
        )
        previous = (self.last or {}).get("checkpoints", [])
        return {
            "key": self.key,
            "monitor": f"{self.owner}/{self.key}",
            **result,
            "queries_dropped": dropped,
            "checkpoints": previous,
        }

    def _scalars(self, result: Mapping[str, Any], seconds: float) -> dict[str, float]:
        classes = result.get("classes") or {}
        values = {
            "set_size": len(result["set_steps"]),
            "best_step": result["best_step"],
            "best_value": result["best_value"],
            "best_estimate": result["estimate"],
            "best_ci_low": result["ci_low"],
            "best_ci_high": result["ci_high"],
            "latest_in_set": float(result["latest_step"] in result["set_steps"]),
            "negative_flip_rate": result["flips"]["negative_flip_rate"],
            "positive_flip_rate": result["flips"]["positive_flip_rate"],
            "regressed_classes": sum(1 for r in classes.get("regressed", []) if r) if classes else math.nan,
            "evaluations": len(result["steps"]),
            "seconds": seconds,
        }
        return {f"{self.prefix}/{name}": float(v) for name, v in values.items() if math.isfinite(float(v))}

    def write(self, folder: str | Path) -> None:
        """Write the latest result as ``<folder>/selection.json`` (rank 0)."""
        if self.last is not None:
            write_selection(folder, self.last)

    # ---- the end of fit --------------------------------------------------------------------------------------------
    def saved_checkpoints(self, trainer: Any) -> list[dict[str, Any]]:
        """``{"file", "step", "in_set"}`` of every checkpoint file of the trainer's ModelCheckpoints (those they list,
        and the ``.ckpt`` files in their folders); ``in_set`` is None for a step that is not among the evaluations
        considered (unknown, or one whose values the retention policy dropped)."""
        if self.last is None:
            return []
        in_set, considered = set(self.last["set_steps"]), set(self.last["steps"])
        found: dict[str, dict[str, Any]] = {}
        for callback in getattr(trainer, "checkpoint_callbacks", []) or []:
            paths = [*getattr(callback, "best_k_models", {})]
            paths += [getattr(callback, name, "") for name in ("best_model_path", "last_model_path")]
            folder = getattr(callback, "dirpath", None)
            suffix = getattr(callback, "FILE_EXTENSION", ".ckpt")
            if folder and Path(folder).is_dir():  # save_top_k=-1 without a monitor keeps files it does not list
                paths += sorted(str(p) for p in Path(folder).glob(f"*{suffix}") if p.is_file())
            for path in paths:
                if path and str(path) not in found and Path(path).is_file():
                    step = _checkpoint_step(Path(path))
                    verdict = (step in in_set) if step in considered else None  # None: not an evaluation considered
                    found[str(path)] = {"file": str(path), "step": step, "in_set": verdict}
        return sorted(found.values(), key=lambda c: (c["step"] is None, c["step"] or 0, c["file"]))

    def finish(self, trainer: Any, folder: str | Path | None) -> list[dict[str, Any]]:
        """At the end of fit: match the saved checkpoints to the set, say which are in it, and (``folder``: rank 0)
        write them into ``selection.json``."""
        if self.last is None:
            return []
        checkpoints = self.saved_checkpoints(trainer)
        self.last["checkpoints"] = checkpoints
        if checkpoints and getattr(trainer, "is_global_zero", True):

            def named(verdict: bool | None) -> str:
                names = [f"{Path(c['file']).name} (step {c['step']})" for c in checkpoints if c["in_set"] is verdict]
                return ", ".join(names) or "none"

            log.info(
                "%s: saved checkpoints as good as the best (%g%% set of %s): %s; worse: %s; not among the evaluations "
                "considered (a step without kept per-query values): %s",
                self.owner,
                100 * (1 - self.size),
                self.key,
                named(True),
                named(False),
                named(None),
            )
        if folder is not None:
            self.write(folder)
        return checkpoints

    # ---- checkpoints -------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        steps = sorted(self.columns)
        return {
            "steps": steps,
            "ids": [torch.as_tensor(self.columns[s][0]) for s in steps],
            "values": [torch.as_tensor(self.columns[s][1]) for s in steps],
            "labels": None if self.labels is None else [torch.as_tensor(part) for part in self.labels],
            "periodic": sorted(self.periodic),
            "count": self.count,
        }

    def load_state_dict(self, state: Any) -> None:
        """Restore the kept columns and the retention policy's count; a malformed state is ignored with a warning (the
        selection restarts from the next evaluation). The next evaluation recomputes the result."""
        try:
            steps = [int(s) for s in state["steps"]]
            columns = {
                s: (_array(i).astype(np.int64), _array(v).astype(np.float64))
                for s, i, v in zip(steps, state["ids"], state["values"], strict=True)
            }
            labels = state.get("labels")
            labels = None if labels is None else (_array(labels[0]).astype(np.int64), _array(labels[1]))
            periodic = {int(s) for s in state["periodic"]}
            count = state["count"]
            if isinstance(count, bool) or not isinstance(count, int) or count < len(periodic):
                raise ValueError(f"count {count!r}")
        except (KeyError, TypeError, ValueError) as exc:
            log.warning(
                "checkpoint selection of %s: ignoring a checkpointed state of unexpected form (%s)", self.key, exc
            )
            return
        self.columns, self.labels, self.periodic, self.count, self.last = columns, labels, periodic, count, None


_STEP_IN_NAME = re.compile(r"(?:^|[^a-z])step[=_-]?(\d+)")


def _checkpoint_step(path: Path) -> int | None:
    """The ``global_step`` a checkpoint file holds (read lazily: its tensors are mapped, not loaded), else a
    ``step=N`` in its name; None when neither says."""
    try:
        checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        step = checkpoint.get("global_step") if isinstance(checkpoint, dict) else None
        if isinstance(step, int) and not isinstance(step, bool):
            return step
    except Exception as exc:  # noqa: BLE001 - a checkpoint that cannot be read safely is named by its file only
        log.debug("could not read the global_step of %s: %s", path, exc)
    match = _STEP_IN_NAME.search(path.stem)
    return int(match.group(1)) if match else None
