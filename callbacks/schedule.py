"""When an evaluation callback evaluates (internal to :mod:`beyondlabels.callbacks`): the schedule of
:class:`~beyondlabels.callbacks.base.EvaluationCore` and the :class:`Occasion` each evaluation runs on.

The schedule answers each Lightning hook with the occasion to evaluate on, or None: the end of the validation loops of
every N-th epoch (``every_n_epochs``; the end of the training epoch for a module without a validation loop), every
M-th optimiser step (``every_n_steps``), once at fit end (``evaluate_at_fit_end``), once under ``validate()`` and
``test()``; never in sanity checks. It keeps the last step evaluated (checkpointed by the callback).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from beyondlabels.callbacks.packages import logging_step, runs_validation, trainer_stage

log = logging.getLogger(__name__)

__all__ = ["EvaluationSchedule", "Occasion"]


@dataclass(frozen=True)
class Occasion:
    """When and how one evaluation runs (given by the hook that starts it)."""

    stage: str  # what the trainer runs: "fit", "validate", "test" (``trainer.state.fn``)
    step: int  # trainer.global_step: names the evaluation in the history, the files and the media
    epoch: int
    log_step: int  # the step the loggers get (Lightning's logging step)
    through_lightning: bool  # scalars through pl_module.log
    final: bool  # the evaluation at the end of fit

    @classmethod
    def now(
        cls, trainer: Any, *, through_lightning: bool = False, in_batch: bool = False, final: bool = False
    ) -> Occasion:
        """The occasion of an evaluation starting now. ``through_lightning``: its scalars go through
        ``pl_module.log`` (only from hooks in which Lightning allows ``self.log(on_epoch=True)``); ``in_batch``: now
        is inside a training batch, where Lightning's logging step is
        (:func:`~beyondlabels.callbacks.packages.logging_step`)."""
        return cls(
            trainer_stage(trainer),
            trainer.global_step,
            trainer.current_epoch,
            logging_step(trainer, in_batch),
            through_lightning,
            final,
        )

    @property
    def one_off(self) -> bool:
        """An evaluation outside fit (validate, test): logged and returned, kept out of the history and files."""
        return self.stage != "fit"

    @property
    def namespace(self) -> str:
        """What comes between ``<prefix>/`` and a key: nothing in fit and validate, the stage otherwise."""
        return "" if self.stage in ("fit", "validate") else f"{self.stage}/"


class EvaluationSchedule:
    """Which hooks evaluate, for the options ``every_n_epochs`` / ``every_n_steps`` (at most one set) and
    ``evaluate_at_fit_end`` of the callback named ``prefix`` (in what it says)."""

    def __init__(
        self, prefix: str, every_n_epochs: int | None, every_n_steps: int | None, evaluate_at_fit_end: bool
    ) -> None:
        self.prefix = prefix
        self.every_n_epochs, self.every_n_steps = every_n_epochs, every_n_steps
        self.evaluate_at_fit_end = evaluate_at_fit_end
        self.last_step_evaluated = -1
        self.train_epoch_fallback = False  # no validation loop: evaluate at the end of training epochs

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Choose where epoch evaluations run in this fit (said once) and check the cadence."""
        self.train_epoch_fallback = False
        if stage != "fit" or self.every_n_epochs is None:
            return
        if not runs_validation(trainer, pl_module):
            self.train_epoch_fallback = True
            log.info(
                "%s: %s has no validation loop, so evaluations run at the end of every %d training epoch(s) instead",
                self.prefix,
                type(pl_module).__name__,
                self.every_n_epochs,
            )
        else:
            self.check_cadence(trainer)

    def check_cadence(self, trainer: Any) -> None:
        """Warn when ``every_n_epochs`` and the trainer's ``check_val_every_n_epoch`` meet more rarely than either
        asks (neither divides the other): evaluations run only at the end of validation loops."""
        n, every = self.every_n_epochs, getattr(trainer, "check_val_every_n_epoch", None)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            return
        period = math.lcm(n, every)
        if period <= max(n, every):
            return
        max_epochs = getattr(trainer, "max_epochs", None)
        never = isinstance(max_epochs, int) and 0 < max_epochs < period
        log.warning(
            "%s: every_n_epochs=%d evaluates at the end of the validation loops of every %d-th epoch, and "
            "check_val_every_n_epoch=%d runs one every %d epochs: they meet every %d epochs (first after epoch %d)%s. "
            "Set every_n_epochs to a multiple or a divisor of %d, or evaluate every_n_steps.",
            self.prefix,
            n,
            n,
            every,
            every,
            period,
            period,
            f", so with max_epochs={max_epochs} no evaluation runs during training"
            + (" (only the one at fit end)" if self.evaluate_at_fit_end else "")
            if never
            else "",
            every,
        )

    def _epoch_due(self, trainer: Any) -> bool:
        return (trainer.current_epoch + 1) % self.every_n_epochs == 0 or bool(trainer.fast_dev_run)

    def at_validation_epoch_end(self, trainer: Any) -> Occasion | None:
        """At the end of a validation loop: once under ``validate()``; in fit, on the scheduled epochs."""
        if trainer.sanity_checking:
            return None
        stage = trainer_stage(trainer)
        if stage == "validate":  # trainer.validate(): one evaluation now, returned by validate()
            return Occasion.now(trainer, through_lightning=True)
        if self.every_n_epochs is None or self.train_epoch_fallback or stage != "fit":
            return None
        return Occasion.now(trainer, through_lightning=True, in_batch=True) if self._epoch_due(trainer) else None

    def at_train_epoch_end(self, trainer: Any) -> Occasion | None:
        """At the end of a training epoch: the scheduled epochs of a fit without a validation loop."""
        if self.train_epoch_fallback and self._epoch_due(trainer):
            return Occasion.now(trainer, through_lightning=True)
        return None

    def at_train_batch_end(self, trainer: Any) -> Occasion | None:
        """After a training batch: every ``every_n_steps``-th optimiser step, once per step."""
        if self.every_n_steps is None:
            return None
        step = trainer.global_step
        if step > 0 and step % self.every_n_steps == 0 and step != self.last_step_evaluated:
            return Occasion.now(trainer, in_batch=True)
        return None

    def at_fit_end(self, trainer: Any) -> Occasion | None:
        """At the end of a fit that was not interrupted, when its last step was not evaluated yet."""
        if self.evaluate_at_fit_end and not trainer.interrupted and trainer.global_step != self.last_step_evaluated:
            return Occasion.now(trainer, final=True)
        return None

    def started(self, occasion: Occasion) -> None:
        """Record that an evaluation of fit started at ``occasion.step`` (a one-off is not part of the schedule)."""
        if not occasion.one_off:
            self.last_step_evaluated = occasion.step
