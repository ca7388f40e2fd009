"""Which Lightning package a trainer, module, callback or logger belongs to, found without importing either package.

Lightning ships the same classes twice: as ``pytorch_lightning`` and as ``lightning.pytorch`` (what Lightning's own
documentation teaches). The two copies are different classes: a ``pytorch_lightning`` callback given to a
``lightning.pytorch`` Trainer, or Lightning's ``is_overridden`` asked about a module of the other package, fails
(``ValueError: Expected a parent``). The evaluation callbacks therefore keep their logic in package-neutral cores
that only look at the trainer and module they receive, through the functions here, and come as one thin subclass per
package (:mod:`beyondlabels.callbacks.pytorch_lightning`, :mod:`beyondlabels.callbacks.lightning`), each importing
only its own package.

Examples:
    >>> class Trainer:  # stands for a class of either package
    ...     pass
    >>> Trainer.__module__ = "lightning.pytorch.trainer.trainer"
    >>> lightning_package(Trainer())
    'lightning.pytorch'
    >>> lightning_package(object()) is None
    True
"""

from __future__ import annotations

from typing import Any

from beyondlabels.families import callback_families

__all__ = [
    "CALLBACK_MODULES",
    "PACKAGES",
    "callback_name",
    "check_same_package",
    "is_lightning_instance",
    "lightning_package",
    "lightning_state_key",
    "logging_step",
    "overrides",
    "runs_validation",
    "trainer_stage",
]

# The two distributions of Lightning, by the name their classes are imported from.
PACKAGES = ("lightning.pytorch", "pytorch_lightning")
# Where the evaluation callbacks of each package are imported from.
CALLBACK_MODULES = {
    "lightning.pytorch": "beyondlabels.callbacks.lightning",
    "pytorch_lightning": "beyondlabels.callbacks",
}


def _package_of_class(cls: type) -> str | None:
    module = getattr(cls, "__module__", "") or ""
    return next((p for p in PACKAGES if module == p or module.startswith(p + ".")), None)


def lightning_package(obj: Any) -> str | None:
    """The Lightning package (``"lightning.pytorch"`` or ``"pytorch_lightning"``) of the nearest Lightning class that
    ``obj`` (an instance or a class) derives from; None when it derives from none."""
    cls = obj if isinstance(obj, type) else type(obj)
    for base in cls.__mro__:
        package = _package_of_class(base)
        if package is not None:
            return package
    return None


def is_lightning_instance(obj: Any, class_name: str) -> bool:
    """Whether ``obj`` is an instance of the Lightning class named ``class_name`` (e.g. ``"ModelCheckpoint"``,
    ``"WandbLogger"``) of either package, subclasses included."""
    return any(base.__name__ == class_name and _package_of_class(base) is not None for base in type(obj).__mro__)


def _is_lightning_base(cls: type) -> bool:
    """Whether ``cls`` is one of the base classes whose hooks are Lightning's defaults (``LightningModule`` and its hook
    mixins, ``LightningDataModule``, ``Callback``), not a class built on them (such as Lightning's demo models)."""
    package = _package_of_class(cls)
    return package is not None and (
        cls.__module__.startswith(f"{package}.core.") or cls.__module__ == f"{package}.callbacks.callback"
    )


def overrides(obj: Any, method: str) -> bool:
    """Whether ``obj`` (a LightningModule, DataModule or Callback of either package) defines ``method`` rather than
    inheriting Lightning's default: the method is set on the instance, or the first class of its MRO that defines it
    is not one of Lightning's base classes (a subclass Lightning ships, like its demo ``BoringModel``, counts as
    defining it). False when no class defines it.

    A module given to ``fit`` as ``torch.compile(module)`` has its steps replaced on the instance by Lightning's
    compile wrapper (``_compiler_ctx`` keeps the originals): the wrapped method is judged, not the wrapper."""
    if method in getattr(obj, "__dict__", {}):
        original = _compiled_original(obj, method)
        if original is None:
            return True
        func = getattr(original, "__func__", None)
        if getattr(original, "__self__", None) is not obj or not any(
            vars(b).get(method) is func for b in type(obj).__mro__
        ):
            return True  # the module's own instance attribute, compiled
    for base in type(obj).__mro__:
        if method in vars(base):
            return not _is_lightning_base(base)
    return False


def _compiled_original(obj: Any, method: str) -> Any:
    """The method Lightning's compile wrapper replaced on ``obj`` (``LightningModule._compiler_ctx``), or None."""
    ctx = vars(obj).get("_compiler_ctx") if hasattr(obj, "__dict__") else None
    return ctx.get(f"original_{method}") if isinstance(ctx, dict) else None


def runs_validation(trainer: Any, pl_module: Any) -> bool:
    """Whether ``trainer`` will run a validation loop while fitting ``pl_module``: Lightning's own answer
    (``Trainer.enable_validation``: a validation data source, ``validation_step`` defined, ``limit_val_batches > 0``),
    or, for a trainer without it, ``validation_step`` defined and ``limit_val_batches != 0``."""
    answer = getattr(trainer, "enable_validation", None)
    if isinstance(answer, bool):
        return answer
    return overrides(pl_module, "validation_step") and getattr(trainer, "limit_val_batches", 1) != 0


def trainer_stage(trainer: Any) -> str:
    """What ``trainer`` is running: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"`` (``trainer.state.fn``);
    ``"fit"`` for a trainer that does not say."""
    fn = getattr(getattr(trainer, "state", None), "fn", None)
    value = getattr(fn, "value", fn)
    return value if value in ("fit", "validate", "test", "predict") else "fit"


def logging_step(trainer: Any, in_batch: bool) -> int:
    """The step Lightning gives the loggers for what is logged now: the step of the last training batch (Lightning
    logs a validation, and the metrics of a training epoch, at the step of the batch they follow). ``in_batch``: now is
    inside a training batch (``on_train_batch_end``, a validation run from it), where that batch is not yet counted.

    Reads ``fit_loop.epoch_loop._batches_that_stepped``, the internal counter Lightning's own loggers, its
    ``LearningRateMonitor`` and ``DeviceStatsMonitor`` log at (the same in both packages); ``global_step - 1`` for a
    trainer without it (one optimiser step per batch)."""
    counted = getattr(getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None), "_batches_that_stepped", None)
    if not isinstance(counted, int):
        return max(int(trainer.global_step) - 1, 0)
    return max(counted if in_batch else counted - 1, 0)


def callback_name(cls: type) -> str:
    """The name a Trainer gets a callback class under, for error messages: the exported class's own name (its
    ``callback_name``), the registered name of a family's core (:mod:`beyondlabels.families`), else the class name.

    Examples:
        >>> from beyondlabels.callbacks.retrieval import RetrievalEvalCore
        >>> callback_name(RetrievalEvalCore), callback_name(int)
        ('RetrievalEvalCallback', 'int')
    """
    for base in cls.__mro__:
        if "callback_name" in vars(base):
            return vars(base)["callback_name"]
        reference = f"{base.__module__}:{base.__qualname__}"
        named = [f.callback for f in callback_families() if f.core == reference]
        if named:
            return named[0]
    return cls.__name__


def lightning_state_key(callback: Any, **parts: Any) -> str:
    """The key of ``callback``'s state in a checkpoint, in Lightning's format (class name, then ``parts``): the same
    under both packages, so a checkpoint written under one resumes under the other. The class name is the class's
    ``checkpoint_name`` when the class itself sets one (a renamed callback keeps its earlier name, so that earlier
    checkpoints resume; :mod:`beyondlabels.families`), else its ``__qualname__`` (subclasses included).

    Examples:
        >>> class RetrievalEvalCallback:
        ...     pass
        >>> lightning_state_key(RetrievalEvalCallback(), prefix="retrieval")
        "RetrievalEvalCallback{'prefix': 'retrieval'}"
    """
    cls = type(callback)
    return f"{vars(cls).get('checkpoint_name') or cls.__qualname__}{parts!r}"


def check_same_package(callback: Any, trainer: Any) -> None:
    """Raise a ``TypeError`` naming the fix when ``callback`` was made for another Lightning package than
    ``trainer``'s (a trainer of neither package, e.g. a stand-in in a test, is accepted).

    Raises:
        TypeError: ``callback`` is a package-neutral core (no Lightning base at all) or a callback of the other
            package; the message says which module to import the callback from.
    """
    theirs = lightning_package(trainer)
    if theirs is None:
        return
    ours = lightning_package(callback)
    if ours == theirs:
        return
    name = callback_name(type(callback))
    fix = f"use `from {CALLBACK_MODULES[theirs]} import {name}`, the same callback for {theirs}"
    if ours is None:
        raise TypeError(
            f"{type(callback).__module__}.{type(callback).__name__} is the package-neutral core of a beyondlabels "
            f"callback, not a Lightning callback; the Trainer is a {theirs} Trainer: {fix}."
        )
    raise TypeError(
        f"{type(callback).__module__}.{type(callback).__name__} is a {ours} callback, but the Trainer is a {theirs} "
        f"Trainer (the two Lightning packages do not mix): {fix}, or build every object (Trainer, LightningModule, "
        f"callbacks, loggers) from one package."
    )
