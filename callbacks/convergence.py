"""A Lightning callback that watches one logged metric over training and says when it stopped improving or turned down.

It never recomputes a metric: it reads values that were already logged — the history of the
:class:`~beyondlabels.callbacks.base.EvaluationCore` whose prefix the monitored key carries (``retrieval`` for
``retrieval/precision@1``), with that evaluation's per-query values when it keeps them, or else
``trainer.callback_metrics[monitor]`` at the end of each validation run (and each training epoch, for keys logged
there). The decisions are :class:`beyondlabels.functional.convergence.ConvergenceRule` (definitions, assumptions and
the false-alarm guarantee there): a downturn or plateau is flagged in at most ``alpha`` of the runs where it is not
real, over up to ``max_looks`` evaluations, at any noise level, when the noise is AR(1) with a lag-1 correlation
from one evaluation to the next of at most ``exp(-1/window)`` (independent noise included). Beyond it (evaluations
every few steps: a correlation near 1) no rule over these values can tell a wandering curve from a falling one: such
looks decide nothing, and the monitor warns once, with the measured correlation and what would bring it back in
range. For a key with per-query values (the same queries at every evaluation) a paired confirmation of the latest
evaluation against the best one must agree with the series rule before a downturn is flagged; it can only remove
flags, so the rate stays the series rule's whatever the per-query structure (``paired=False``: the series rule
alone); a scalar-only key (``val/loss``) has the series rule.

Everything is logged, at the logging step of the evaluation the value came from, as ``<prefix>/<monitor>/<name>`` for
``window_mean``, ``window_ci_low``, ``window_ci_high``, ``noise`` (the noise sd), ``correlation`` and
``correlation_high`` (its lag-1 correlation and a 99% upper bound), ``noise_df``, ``covered`` (1 when the look can
decide), ``plateau`` and ``downturn`` (0 or 1), ``plateau_p`` and ``downturn_p`` (the look-corrected p-values, from the
first look on), ``paired_p`` (the paired confirmation's), ``spent`` (the level spent on downturn looks) and ``paired``
(1 when the downturn p-value is the paired one's), through every logger and into ``trainer.callback_metrics``;
the moment a plateau or downturn starts is an *event* (logged as a warning and kept in
:attr:`ConvergenceMonitorCore.events`). With ``stop_on=["downturn"]`` (and/or ``"plateau"``) the callback stops
training: a stop that one rank decides stops every rank at the same step (``trainer.strategy.reduce_boolean_decision``
with ``all=False``, as Lightning's ``EarlyStopping``). A key that is not the same on every rank (logged without
``sync_dist``) is tested on each rank, so under ``world_size`` ranks each rank's rule runs at ``alpha / world_size``
and the job keeps ``alpha``; the evaluation callbacks' keys are the same gathered values on every rank and keep
``alpha`` (``synced=True`` says so of another key, e.g. one logged with ``sync_dist=True``).
The rule's state (series, looks spent, best per-query evaluation, events), its settings and the step it stopped at
are saved in checkpoints and resume with them. A run resumed under other settings (``window``, ``mode``,
``min_delta``, ``alpha`` — also through another world size —, ``max_looks``, ``noise``, ``noise_estimate``) warns,
naming each change, and restarts the rule with the level already spent counted as spent (the guarantee then holds at
the new ``alpha`` over the looks before and after the resume); raising instead would end a resumed run over a
setting the user changed on purpose.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from beyondlabels._internal.checks import check_bool, check_optional_bool
from beyondlabels.callbacks.base import EvaluationCore, LightningModule, Trainer
from beyondlabels.callbacks.packages import check_same_package, lightning_state_key, logging_step, trainer_stage
from beyondlabels.functional.convergence import STATE_VERSION, ConvergenceRule, covered_correlation

log = logging.getLogger(__name__)

__all__ = ["ConvergenceMonitorCore"]

EVENTS = ("plateau", "downturn")
RULE_SETTINGS = ("window", "mode", "min_delta", "alpha", "max_looks", "noise", "noise_estimate")


class ConvergenceMonitorCore:
    """Watch a logged metric for a plateau or a downturn (what is logged: the module docstring; the rule:
    :mod:`beyondlabels.functional.convergence`). Package-neutral: a Trainer gets it as ``ConvergenceMonitor`` of
    :mod:`beyondlabels.callbacks` or :mod:`beyondlabels.callbacks.lightning`.

    Named as Lightning names its callbacks that watch what others log (``LearningRateMonitor``,
    ``DeviceStatsMonitor``), not ``*EvalCallback``: it evaluates nothing and has no family, metric or loader; it reads
    values already logged, by any evaluation callback or by the module itself.

    Args:
        monitor: The logged key, e.g. ``"retrieval/precision@1"`` or ``"val/loss"``.
        window: Values per window (evaluations, not steps).
        mode: ``"max"`` (higher is better) or ``"min"``.
        min_delta: The smallest change that matters, in the metric's units (default 0: any real change).
        stop_on: Events that stop training: ``[]`` (default: only report), ``["downturn"]``, ``["plateau"]`` or both.
        rounds: Bootstrap resamples of the window band.
        confidence: Level of the window band.
        seed: Seed of the window band's bootstrap (the same on every rank).
        prefix: Namespace of the logged keys.
        alpha: False-alarm rate per run of each of downturn and plateau.
        max_looks: Evaluations the level ``alpha`` is spent over; later ones are not tested.
        noise: The noise sd of the monitored values when known; None estimates it from the series.
        paired: Require the paired confirmation when the evaluation callback keeps per-query values of the key.
        noise_estimate: ``"ar1"`` (default: AR(1) noise, for values correlated from one evaluation to the next),
            ``"differences"`` (independent noise) or ``"windows"`` (the larger of the differences' and successive
            windows' scales).
        synced: Whether the monitored key is the same on every rank under DDP: None (default) for the evaluation
            callbacks' keys (gathered), False for any other (each rank then tests at ``alpha / world_size``); True for
            a key logged with ``sync_dist=True``.

    Examples:
        >>> import torch
        >>> from beyondlabels.callbacks import ConvergenceMonitor
        >>> monitor = ConvergenceMonitor("retrieval/r_precision", window=5, rounds=200, min_delta=0.01)
        >>> noise = torch.randn(72, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> curve = (0.5 + 0.01 * noise[:60]).tolist() + (0.5 - 0.02 * torch.arange(1, 13) + 0.01 * noise[60:]).tolist()
        >>> for step, value in enumerate(curve):  # flat, then falling from 60
        ...     state = monitor.observe(step, value)
        >>> state["downturn"], [(e["event"], e["step"]) for e in monitor.events]
        (1.0, [('plateau', 62), ('downturn', 64)])
    """

    def __init__(
        self,
        monitor: str = "retrieval/precision@1",
        window: int = 10,
        mode: str = "max",
        min_delta: float = 0.0,
        stop_on: Sequence[str] = (),
        rounds: int = 2000,
        confidence: float = 0.95,
        seed: int = 11,
        prefix: str = "convergence",
        alpha: float = 0.05,
        max_looks: int = 1000,
        noise: float | None = None,
        paired: bool = True,
        noise_estimate: str = "ar1",
        synced: bool | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(
                f"`monitor` must be a logged metric name such as 'retrieval/precision@1', got {monitor!r}."
            )
        stop_on = [stop_on] if isinstance(stop_on, str) else list(stop_on or [])
        unknown = [e for e in stop_on if e not in EVENTS]
        if unknown:
            raise ValueError(f"`stop_on` may hold {list(EVENTS)}, got {unknown}.")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"`prefix` must be a non-empty name, got {prefix!r}.")
        check_bool(paired, "paired", hint="True: per-query values when the evaluation keeps them")
        check_optional_bool(synced, "synced", hint="None: the evaluation callbacks' keys; True: the same on every rank")
        self.rule = ConvergenceRule(
            window=window,
            mode=mode,
            min_delta=min_delta,
            alpha=alpha,
            max_looks=max_looks,
            noise=noise,
            noise_estimate=noise_estimate,
            confidence=confidence,
            rounds=rounds,
            seed=seed,
        )
        if "plateau" in stop_on and not min_delta > 0:
            raise ValueError(
                "`stop_on` holds 'plateau' with `min_delta` 0: a plateau is a gain per window below `min_delta`, and "
                "no curve can be shown to gain less than 0. Set min_delta to the smallest gain per window worth "
                f"training for (metric units, e.g. 0.005), got min_delta={min_delta!r}."
            )
        self.monitor, self.window, self.mode, self.min_delta = monitor, window, mode, float(min_delta)
        self.stop_on, self.prefix, self.paired, self.synced = stop_on, prefix, paired, synced
        self.alpha = self.rule.alpha  # the job's level; each rank's rule spends alpha / world_size on an unsynced key
        self.run_state: dict[str, Any] = self.rule.new_state()
        self.state: dict[str, float] = {}
        self.stopped_at: int | None = None

    @property
    def series(self) -> list[tuple[int, float]]:
        """The values read so far, ``(step, value)``."""
        return [(int(step), float(value)) for step, value in self.run_state["series"]]

    @property
    def events(self) -> list[dict[str, Any]]:
        """The plateau and downturn events so far (see :meth:`ConvergenceRule.observe`)."""
        return self.run_state["events"]

    # ---- Lightning plumbing ------------------------------------------------------------------------------------------
    callback_name = "ConvergenceMonitor"

    @property
    def state_key(self) -> str:
        return lightning_state_key(self, monitor=self.monitor, window=self.window, mode=self.mode)

    def state_dict(self) -> dict[str, Any]:
        return {
            **copy.deepcopy(self.run_state),
            "stopped_at": self.stopped_at,
            "last_state": dict(self.state),
            "rule": self._settings(),
        }

    def _settings(self) -> dict[str, Any]:
        """The rule's settings that the decisions and the false-alarm level depend on."""
        return {name: getattr(self.rule, name) for name in RULE_SETTINGS}

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        """A checkpoint of this monitor under another ``window`` or ``mode`` holds its state under another key (the
        key names them): load it here, so that :meth:`load_state_dict` sees the change and carries the level over."""
        states = checkpoint.get("callbacks") or {}
        if self.state_key in states:
            return
        prefix = lightning_state_key(self, monitor=self.monitor)[:-1] + ", "
        claimed = {getattr(c, "state_key", None) for c in getattr(trainer, "callbacks", [])}
        found = [k for k in states if isinstance(k, str) and k.startswith(prefix) and k not in claimed]
        if len(found) == 1:
            self.load_state_dict(copy.deepcopy(states[found[0]]))
        elif found:
            log.warning(
                "%s: the checkpoint holds %d states of monitors of %s under other settings (%s); none is resumed",
                self.state_key,
                len(found),
                self.monitor,
                ", ".join(found),
            )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        stopped = state_dict.get("stopped_at")
        self.stopped_at = stopped if isinstance(stopped, int) and not isinstance(stopped, bool) else None
        fresh = self.rule.new_state()
        try:
            if state_dict.get("version") == STATE_VERSION:
                run = {key: state_dict[key] for key in fresh if key != "beyond"}
                run["beyond"] = state_dict.get("beyond")  # absent from checkpoints of the rule of independent noise
                run["series"] = [[int(step), float(value)] for step, value in run["series"]]
                if (
                    not isinstance(run["looks"], int)
                    or not isinstance(run["events"], list)
                    or not isinstance(run["flags"], dict)
                ):
                    raise TypeError("looks, events or flags of an unexpected type")
                beyond = run["beyond"]
                if beyond is not None and (isinstance(beyond, bool) or not isinstance(beyond, int)):
                    raise TypeError("beyond of an unexpected type")
                saved = state_dict.get("rule")
                if isinstance(saved, dict) and {k: saved.get(k) for k in RULE_SETTINGS} != self._settings():
                    self.run_state, self.state = self._restart(run, saved, fresh), {}
                    return
                self.run_state = run
                last = state_dict.get("last_state", {})
                self.state = {k: float(v) for k, v in last.items()} if isinstance(last, dict) else {}
                return
            self.run_state = self._convert(state_dict, fresh)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning(
                "%s: ignoring a checkpointed monitor state of unexpected form (%s); the monitor starts afresh",
                self.state_key,
                exc,
            )
            self.run_state, self.state = fresh, {}

    def _restart(self, run: dict[str, Any], saved: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint of this monitor under other rule settings: its looks were tested against another rule, so the
        rule restarts (the per-query best and the flags are dropped; the series and events are kept) and the level
        those looks spent is counted as spent now: ``ceil(spent / (alpha / max_looks))`` looks of the new rule, so
        the run's looks, old and new, spend at most the new ``alpha`` together."""
        changes = ", ".join(f"{k} {saved.get(k)!r} -> {v!r}" for k, v in self._settings().items() if saved.get(k) != v)
        old_level = float(saved.get("alpha", self.rule.alpha)) / int(saved.get("max_looks", self.rule.max_looks))
        looks = {}
        for name in ("looks", "plateau_looks"):
            spent = int(run[name]) * old_level
            looks[name] = min(self.rule.max_looks, math.ceil(spent / self.rule.per_look_level() - 1e-9))
        log.warning(
            "%s: the checkpoint's monitor had other rule settings (%s): the rule restarts with the new settings, "
            "keeping the %d values and %d events, dropping the best per-query evaluation and the flags, and counting "
            "the level already spent (%.3g) as %d of its %d looks",
            self.state_key,
            changes,
            len(run["series"]),
            len(run["events"]),
            int(run["looks"]) * old_level,
            looks["looks"],
            self.rule.max_looks,
        )
        return {**fresh, "series": run["series"], "events": run["events"], **looks}

    def _convert(self, state_dict: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint of the earlier monitor (a series and its events, no spent level): the series and events are
        kept, and the looks the new rule would have made on that series are counted as spent."""
        series = [[int(step), float(value)] for step, value in state_dict.get("series", [])]
        events = state_dict.get("events", [])
        looks = min(self.rule.max_looks, max(0, len(series) - 2 * self.window + 1))
        flags, beyond = {e: 0.0 for e in EVENTS}, None
        if looks:
            tests = self.rule.series_tests([v for _, v in series])
            flags = {e: float(tests[e][0, -1]) for e in EVENTS}
            seen = tests["beyond"][0].nonzero().flatten()
            beyond = series[int(seen[0]) + 2 * self.window - 1][0] if seen.numel() else None
        log.warning(
            "%s: the checkpoint holds monitor state of an earlier rule (without a stated false-alarm rate): its %d "
            "values and %d events are kept, %d looks are counted as spent, and the paired test starts at the next "
            "evaluation",
            self.state_key,
            len(series),
            len(events) if isinstance(events, list) else 0,
            looks,
        )
        return {
            **fresh,
            "series": series,
            "events": [e for e in events if isinstance(e, dict)] if isinstance(events, list) else [],
            "looks": looks,
            "plateau_looks": looks,
            "flags": flags,
            "beyond": beyond,
        }

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        check_same_package(self, trainer)
        source = self._source(trainer)
        synced = self.synced if self.synced is not None else source is not None  # the evaluations' keys are gathered
        self._spend_per_rank(int(getattr(trainer, "world_size", 1) or 1), synced=synced)
        if source is not None:
            key = self.monitor[len(source.prefix) + 1 :]
            wanted = source.schema.mode(key)
            if wanted is not None and wanted != self.mode:
                log.warning(
                    "ConvergenceMonitor(monitor=%r) uses mode=%r but the key is better when %s; set mode=%r.",
                    self.monitor,
                    self.mode,
                    "higher" if wanted == "max" else "lower",
                    wanted,
                )

    def _spend_per_rank(self, world_size: int, synced: bool) -> None:
        """A key that differs between ranks is tested on each: each rank's rule runs at ``alpha / world_size`` so
        that a stop decided by any rank (the union of their false alarms) keeps ``alpha`` for the job."""
        alpha = self.alpha if synced or world_size <= 1 else self.alpha / world_size
        if alpha != self.rule.alpha:
            self.rule = dataclasses.replace(self.rule, alpha=alpha)
            if alpha != self.alpha:
                log.info(
                    "ConvergenceMonitor(%s): the key is not known to be the same on every rank (synced=True says so), "
                    "so each of the %d ranks tests it at alpha %g, keeping %g for the job",
                    self.monitor,
                    world_size,
                    alpha,
                    self.alpha,
                )

    def _source(self, trainer: Trainer) -> EvaluationCore | None:
        for callback in trainer.callbacks:
            if isinstance(callback, EvaluationCore) and self.monitor.startswith(f"{callback.prefix}/"):
                if self.monitor[len(callback.prefix) + 1 :] in callback.schema.scalar_keys():
                    return callback
        return None

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._source(trainer) is not None:  # step-scheduled evaluations
            self._collect(trainer, in_batch=True)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:  # a validation of fit runs inside its training batch
            self._collect(trainer, decide_on_every_rank=True, in_batch=trainer_stage(trainer) == "fit")

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._collect(trainer, decide_on_every_rank=True)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._collect(trainer, stopping=False)  # the evaluation at fit end

    # ---- reading values ----------------------------------------------------------------------------------------------
    def _new_values(self, trainer: Trainer) -> list[tuple[int, float, Any]]:
        """``(step, value, per_query or None)`` of each value logged since the last one read."""
        last = self.run_state["series"][-1][0] if self.run_state["series"] else -1
        source = self._source(trainer)
        if source is not None:
            key = self.monitor[len(source.prefix) + 1 :]
            fresh = []  # the records after the last one read, found from the end: O(new records), not O(history)
            for r in reversed(source.history):
                if int(r["step"]) <= last:
                    break
                fresh.append(r)
            with_per_query = self.paired and key in source.schema.per_query
            return [
                (
                    int(r["step"]),
                    float(r[key]),
                    source.per_query_values(key, int(r["step"])) if with_per_query else None,
                )
                for r in reversed(fresh)
                if "error" not in r and isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
            ]
        value = trainer.callback_metrics.get(self.monitor)
        step = trainer.global_step
        if value is None or step <= last:
            return []
        value = float(value.item() if isinstance(value, torch.Tensor) else value)
        return [(step, value, None)] if math.isfinite(value) else []

    def _collect(
        self, trainer: Trainer, stopping: bool = True, decide_on_every_rank: bool = False, in_batch: bool = False
    ) -> None:
        """Observe the monitored values that are new since the last call, then decide whether to stop (all ranks).

        ``decide_on_every_rank``: take the stop decision even when this rank has no new value. The epoch hooks set it:
        a logged value can be missing or NaN on one rank only, and a rank that skipped the decision's all-reduce
        would leave the others waiting in it. The batch hook need not: it reads an evaluation callback's history,
        which every rank holds alike.

        The statistics reach the loggers at Lightning's logging step (``in_batch``: called inside a training batch),
        the step at which the evaluation callbacks and the module's own validation keys are logged; the rule itself
        counts the trainer steps of the history records."""
        new = self._new_values(trainer)
        if not new and not (decide_on_every_rank and stopping and self.stop_on):
            return
        for step, value, per_query in new:
            try:
                stats = self.observe(step, value, per_query=per_query)
            except ValueError as exc:
                if per_query is None:
                    raise
                log.error(
                    "ConvergenceMonitor: the per-query values of %s at step %d cannot be paired (%s); the series rule "
                    "decides this evaluation",
                    self.monitor,
                    step,
                    exc,
                )
                stats = self.observe(step, value)
            logged = {f"{self.prefix}/{self.monitor}/{name}": v for name, v in stats.items() if math.isfinite(v)}
            for logger in trainer.loggers:
                logger.log_metrics(logged, step=logging_step(trainer, in_batch))
            device = trainer.strategy.root_device
            trainer.callback_metrics.update({k: torch.tensor(v, device=device) for k, v in logged.items()})
        if stopping and self.stop_on:
            wanted = any(self.state.get(event, 0.0) == 1.0 for event in self.stop_on)
            if trainer.strategy.reduce_boolean_decision(wanted, all=False):
                trainer.should_stop = True
                self.stopped_at = trainer.global_step
                log.warning(
                    "ConvergenceMonitor: stopping training at step %d (%s of %s)",
                    trainer.global_step,
                    "/".join(self.stop_on),
                    self.monitor,
                )

    # ---- the decisions -----------------------------------------------------------------------------------------------
    def observe(self, step: int, value: float, per_query: tuple[Any, Any] | None = None) -> dict[str, float]:
        """Add one value of the monitored metric and return the window statistics, p-values and event flags (what is
        logged). ``per_query``: ``(query_ids or None, values)`` of the same evaluation, for the paired downturn test."""
        known = len(self.run_state["events"])
        looks, beyond = self.run_state["looks"], self.run_state.get("beyond")
        state = self.rule.observe(self.run_state, step, value, per_query=per_query)
        for record in self.run_state["events"][known:]:
            log.warning(
                "ConvergenceMonitor: %s of %s at step %d (window mean %.4f, p = %.3g at alpha %g)",
                record["event"],
                self.monitor,
                record["step"],
                record["window_mean"],
                record["p"],
                self.rule.alpha,
            )
        self._warn_if_uncovered(state, beyond)
        if looks < self.rule.max_looks <= self.run_state["looks"]:
            log.warning(
                "ConvergenceMonitor: %s has spent its false-alarm level %g over max_looks=%d evaluations; later ones "
                "are not tested for a downturn or plateau (raise max_looks to test more)",
                self.monitor,
                self.rule.alpha,
                self.rule.max_looks,
            )
        self.state = state
        return dict(state)

    def _warn_if_uncovered(self, state: dict[str, float], beyond_before: Any) -> None:
        """Once, at the look that first measured the noise correlated beyond ``exp(-1/window)`` (the run's looks are
        not covered from then on)."""
        if beyond_before is not None or self.run_state.get("beyond") is None:
            return
        rho, bound = state.get("correlation", math.nan), covered_correlation(self.rule.window)
        span = -1.0 / math.log(rho) if 0 < rho < 1 else math.inf  # correlation time, in evaluations
        every, window = ("many", "many") if math.isinf(span) else (math.ceil(span / self.rule.window), math.ceil(span))
        log.warning(
            "ConvergenceMonitor: the noise of %s is correlated from one evaluation to the next beyond what the rule "
            "covers (lag-1 correlation %.3f; covered up to %.3f, a correlation time of one window of %d evaluations): "
            "from step %d on its looks decide nothing. Evaluations this close together cannot tell a wandering curve "
            "from a falling one: evaluate less often or use a wider window (were the noise AR(1): every %s-th of these "
            "evaluations, or window >= %s; real curves often decorrelate sooner at a wider spacing)",
            self.monitor,
            rho,
            bound,
            self.rule.window,
            self.run_state["beyond"],
            every,
            window,
        )
