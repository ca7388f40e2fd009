"""A Lightning callback that watches one logged metric over training and says when it stopped improving or turned down.

It never recomputes a metric: it reads values that were already logged — the history of the
:class:`~beyondlabels.callbacks.base.EvaluationCore` whose prefix the monitored key carries (``retrieval`` for
``retrieval/precision@1``), or else ``trainer.callback_metrics[monitor]`` at the end of each validation run (and each
training epoch, for keys logged there). Its statistics come from :mod:`beyondlabels.functional.bootstrap`.

After every new value (``v`` is the series of values so far, ``w`` the window)
    - **window mean** = mean of the last ``w`` values, with a percentile bootstrap band (``window_ci_low`` /
      ``window_ci_high``) over them;
    - **plateau** (from ``2w`` values on): the last window is not significantly better than the window before it —
      the bootstrap interval of ``mean(last) - mean(previous)`` does not clear ``min_delta`` in the better direction;
    - **downturn** (from ``2w`` values on): the last window is significantly worse than the best earlier window that
      does not overlap it (the best window mean under ``mode``) — e.g. R-precision turning down as the model
      overfits. The best window is chosen after looking at ``m = (len(v) - w) // w`` candidates, so this interval
      is taken at the Bonferroni level ``1 - (1 - confidence) / m``: a flat, noisy curve does not read as a decline.

    The values of a training curve are not independent draws and the rule is checked after every evaluation, so treat
    it as a smoothed, seeded rule of thumb, not a test at an exact level. ``min_delta`` is what keeps noise out: on a
    flat curve of pure noise (sd 0.01, 40 evaluations, window 5, 30 seeds) a downturn was reported in 24 of 30 runs
    with ``min_delta=0``, in 2 with ``min_delta=0.01`` (= the noise) and in none with 0.02, while a curve falling by
    0.02 per evaluation after its peak was flagged 7-9 evaluations after the peak in every run. Everything is logged at the step of the value as ``<prefix>/<monitor>/window_mean``,
    ``.../window_ci_low``, ``.../window_ci_high``, ``.../plateau`` and ``.../downturn`` (0 or 1) through every logger
    and into ``trainer.callback_metrics``; the moment a plateau or downturn starts is an *event* (logged as a warning
    and kept in :attr:`ConvergenceMonitor.events`). With ``stop_on=["downturn"]`` (and/or ``"plateau"``) the callback
    stops training: the ranks agree through ``trainer.strategy.reduce_boolean_decision`` and then set
    ``trainer.should_stop``. The series, the events and the last step read are saved in checkpoints and resume with
    them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from beyondlabels.callbacks.base import EvaluationCore, LightningModule, Trainer
from beyondlabels.callbacks.packages import check_same_package, lightning_state_key
from beyondlabels.functional.bootstrap import bootstrap_ci, bootstrap_difference_ci

log = logging.getLogger(__name__)

__all__ = ["ConvergenceMonitorCore"]

EVENTS = ("plateau", "downturn")


class ConvergenceMonitorCore:
    """Watch a logged metric for a plateau or a downturn (rules: the module docstring). Package-neutral: a Trainer
    gets it as ``ConvergenceMonitor`` of :mod:`beyondlabels.callbacks` or :mod:`beyondlabels.callbacks.lightning`.

    Args:
        monitor: The logged key, e.g. ``"retrieval/precision@1"`` or ``"val/loss"``.
        window: Values per window (evaluations, not steps).
        mode: ``"max"`` (higher is better) or ``"min"``.
        min_delta: The smallest change that counts as an improvement or a decline, in the metric's units. The default
            (0.01, one point of a metric in [0, 1]) keeps evaluation noise of that size from reading as a downturn;
            set it to the noise of your metric (e.g. a loss).
        stop_on: Events that stop training: ``[]`` (default: only report), ``["downturn"]``, ``["plateau"]`` or both.
        rounds: Bootstrap resamples.
        confidence: Level of the bootstrap intervals.
        seed: Seed of the bootstrap (the same on every rank).
        prefix: Namespace of the logged keys.

    Example:
        >>> from beyondlabels.callbacks import ConvergenceMonitor
        >>> monitor = ConvergenceMonitor("retrieval/r_precision", window=3, rounds=200)
        >>> for step, value in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]):
        ...     state = monitor.observe(step, value)
        >>> state["downturn"], [e["event"] for e in monitor.events]
        (1.0, ['plateau', 'downturn'])
    """

    def __init__(
        self,
        monitor: str = "retrieval/precision@1",
        window: int = 10,
        mode: str = "max",
        min_delta: float = 0.01,
        stop_on: Sequence[str] = (),
        rounds: int = 2000,
        confidence: float = 0.95,
        seed: int = 11,
        prefix: str = "convergence",
    ) -> None:
        super().__init__()
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"`monitor` must be a logged metric name such as 'retrieval/precision@1', got {monitor!r}.")
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise ValueError(f"`window` must be an int >= 2 (values per window), got {window!r}.")
        if mode not in ("max", "min"):
            raise ValueError(f"`mode` must be 'max' (higher is better) or 'min', got {mode!r}.")
        if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float)) or min_delta < 0:
            raise ValueError(f"`min_delta` must be a number >= 0, got {min_delta!r}.")
        stop_on = [stop_on] if isinstance(stop_on, str) else list(stop_on or [])
        unknown = [e for e in stop_on if e not in EVENTS]
        if unknown:
            raise ValueError(f"`stop_on` may hold {list(EVENTS)}, got {unknown}.")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"`prefix` must be a non-empty name, got {prefix!r}.")
        bootstrap_ci([0.0, 1.0], rounds=rounds, confidence=confidence, seed=seed)  # the stats module's own checks
        self.monitor, self.window, self.mode, self.min_delta = monitor, window, mode, float(min_delta)
        self.stop_on, self.rounds, self.confidence, self.seed, self.prefix = stop_on, rounds, confidence, seed, prefix
        self.series: list[tuple[int, float]] = []
        self.events: list[dict[str, Any]] = []
        self.state: dict[str, float] = {}
        self.stopped_at: int | None = None

    # ---- Lightning plumbing --------------------------------------------------------------------------------------------
    callback_name = "ConvergenceMonitor"

    @property
    def state_key(self) -> str:
        return lightning_state_key(self, monitor=self.monitor, window=self.window, mode=self.mode)

    def state_dict(self) -> dict[str, Any]:
        return {"series": [list(p) for p in self.series], "events": list(self.events), "stopped_at": self.stopped_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        series = state_dict.get("series", [])
        try:
            self.series = [(int(step), float(value)) for step, value in series]
        except (TypeError, ValueError):
            log.warning("%s: ignoring a checkpointed series of unexpected form", self.state_key)
            self.series = []
        events = state_dict.get("events", [])
        self.events = [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []
        stopped = state_dict.get("stopped_at")
        self.stopped_at = stopped if isinstance(stopped, int) and not isinstance(stopped, bool) else None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        check_same_package(self, trainer)
        source = self._source(trainer)
        if source is not None:
            key = self.monitor[len(source.prefix) + 1 :]
            wanted = source.schema.mode(key)
            if wanted is not None and wanted != self.mode:
                log.warning("ConvergenceMonitor(monitor=%r) uses mode=%r but the key is better when %s; set mode=%r.", self.monitor, self.mode, "higher" if wanted == "max" else "lower", wanted)

    def _source(self, trainer: Trainer) -> EvaluationCore | None:
        for callback in trainer.callbacks:
            if isinstance(callback, EvaluationCore) and self.monitor.startswith(f"{callback.prefix}/"):
                if self.monitor[len(callback.prefix) + 1 :] in callback.schema.scalar_keys():
                    return callback
        return None

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._source(trainer) is not None:  # step-scheduled evaluations
            self._collect(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self._collect(trainer, decide_on_every_rank=True)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._collect(trainer, decide_on_every_rank=True)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._collect(trainer, stopping=False)  # the evaluation at fit end

    # ---- reading values -------------------------------------------------------------------------------------------------
    def _new_values(self, trainer: Trainer) -> list[tuple[int, float]]:
        last = self.series[-1][0] if self.series else -1
        source = self._source(trainer)
        if source is not None:
            key = self.monitor[len(source.prefix) + 1 :]
            fresh = []  # the records after the last one read, found from the end: O(new records), not O(history)
            for r in reversed(source.history):
                if int(r["step"]) <= last:
                    break
                fresh.append(r)
            return [
                (int(r["step"]), float(r[key]))
                for r in reversed(fresh)
                if "error" not in r and isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
            ]
        value = trainer.callback_metrics.get(self.monitor)
        step = trainer.global_step
        if value is None or step <= last:
            return []
        value = float(value.item() if isinstance(value, torch.Tensor) else value)
        return [(step, value)] if math.isfinite(value) else []

    def _collect(self, trainer: Trainer, stopping: bool = True, decide_on_every_rank: bool = False) -> None:
        """Observe the monitored values that are new since the last call, then decide whether to stop (all ranks).

        ``decide_on_every_rank``: take the stop decision even when this rank has no new value. The epoch hooks set it:
        a logged value can be missing or NaN on one rank only, and a rank that skipped the decision's all-reduce
        would leave the others waiting in it. The batch hook need not: it reads an evaluation callback's history,
        which every rank holds alike."""
        new = self._new_values(trainer)
        if not new and not (decide_on_every_rank and stopping and self.stop_on):
            return
        for step, value in new:
            logged = {f"{self.prefix}/{self.monitor}/{name}": v for name, v in self.observe(step, value).items()}
            for logger in trainer.loggers:
                logger.log_metrics(logged, step=step)
            device = trainer.strategy.root_device
            trainer.callback_metrics.update({k: torch.tensor(v, device=device) for k, v in logged.items()})
        if stopping and self.stop_on:
            wanted = any(self.state.get(event, 0.0) == 1.0 for event in self.stop_on)
            if trainer.strategy.reduce_boolean_decision(wanted, all=True):
                trainer.should_stop = True
                self.stopped_at = trainer.global_step
                log.warning("ConvergenceMonitor: stopping training at step %d (%s of %s)", trainer.global_step, "/".join(self.stop_on), self.monitor)

    # ---- the statistics ----------------------------------------------------------------------------------------------------
    def observe(self, step: int, value: float) -> dict[str, float]:
        """Add one value of the monitored metric and return the window statistics and event flags (what is logged)."""
        self.series.append((int(step), float(value)))
        values = [v for _, v in self.series]
        w = self.window
        last = values[-w:]
        band = bootstrap_ci(last, rounds=self.rounds, confidence=self.confidence, seed=self.seed)
        state = {"window_mean": band.estimate, "window_ci_low": band.low, "window_ci_high": band.high, "plateau": 0.0, "downturn": 0.0}
        sign = 1.0 if self.mode == "max" else -1.0
        if len(values) >= 2 * w:
            change = bootstrap_difference_ci(values[-2 * w : -w], last, rounds=self.rounds, confidence=self.confidence, seed=self.seed)
            improved = (change.low > self.min_delta) if sign > 0 else (change.high < -self.min_delta)
            state["plateau"] = 0.0 if improved else 1.0
            earlier = values[:-w]
            means = [sum(earlier[i : i + w]) / w for i in range(len(earlier) - w + 1)]
            best = max(range(len(means)), key=lambda i: sign * means[i])
            # the best of m candidate windows is picked after seeing them: a Bonferroni level keeps noise from
            # reading as a decline (m = the non-overlapping windows among the earlier values)
            level = 1.0 - (1.0 - self.confidence) / max(1, len(earlier) // w)
            decline = bootstrap_difference_ci(earlier[best : best + w], last, rounds=self.rounds, confidence=level, seed=self.seed)
            declined = (decline.high < -self.min_delta) if sign > 0 else (decline.low > self.min_delta)
            state["downturn"] = 1.0 if declined else 0.0
            for event in EVENTS:
                if state[event] == 1.0 and self.state.get(event, 0.0) != 1.0:
                    record = {"step": int(step), "event": event, "window_mean": band.estimate, "best_window_mean": means[best], "best_window_end_step": self.series[best + w - 1][0]}
                    self.events.append(record)
                    log.warning("ConvergenceMonitor: %s of %s at step %d (window mean %.4f, best earlier window %.4f)", event, self.monitor, step, band.estimate, means[best])
        self.state = state
        return dict(state)
