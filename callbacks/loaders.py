"""Which loader an evaluation callback evaluates and how (internal to :mod:`beyondlabels.callbacks`): the loader
source of :class:`~beyondlabels.callbacks.base.EvaluationCore` (a datamodule or module method, the trainer's own
loaders, a DataLoader or a callable; one of several by ``dataloader_idx``), its batch limit, its sharding between DDP
ranks (:func:`shard_loader`) and the ids of positional batches."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from beyondlabels.callbacks.packages import lightning_package, overrides, runs_validation

log = logging.getLogger(__name__)

__all__ = ["TRAINER_LOADERS", "EvaluationLoaders", "check_loader_options", "shard_loader"]

# The trainer's own loaders for the standard loader method names, used when neither the datamodule nor the module
# defines the method (loaders given to fit / validate / test directly).
TRAINER_LOADERS = {"val_dataloader": "val_dataloaders", "test_dataloader": "test_dataloaders"}


def check_loader_options(dataloader: Any, dataloader_idx: Any, test_dataloader: Any) -> None:
    for name, source in (("dataloader", dataloader), ("test_dataloader", test_dataloader)):
        if source is None and name == "test_dataloader":
            continue
        if isinstance(source, str) and not source or not (isinstance(source, (str, DataLoader)) or callable(source)):
            raise ValueError(
                f"`{name}` must be the name of a datamodule or module method, a DataLoader or a zero-argument callable "
                f"returning one{' (or None)' if name == 'test_dataloader' else ''}, got {source!r}."
            )
    if isinstance(dataloader_idx, bool) or not (
        isinstance(dataloader_idx, int) and dataloader_idx >= 0 or isinstance(dataloader_idx, str) and dataloader_idx
    ):
        raise ValueError(
            f"`dataloader_idx` must be an int >= 0 (a position) or a loader's name, got {dataloader_idx!r}."
        )


class EvaluationLoaders:
    """The loaders of one evaluation callback (``owner_name`` names it in messages): ``dataloader`` in fit and
    validate, ``test_dataloader`` under test, ``dataloader_idx`` of several, at most ``limit_batches`` batches.
    What is said once per fit (the loader chosen, a batch limit) is kept in ``said``; ``positions`` are the dataset
    indices of this rank's samples in order under DDP (None on one process)."""

    def __init__(
        self,
        prefix: str,
        owner_name: str,
        dataloader: Any,
        dataloader_idx: int | str,
        test_dataloader: Any,
        limit_batches: int | None,
    ) -> None:
        self.prefix, self.owner_name = prefix, owner_name
        self.dataloader, self.dataloader_idx, self.test_dataloader = dataloader, dataloader_idx, test_dataloader
        self.limit_batches = limit_batches
        self.said: set[str] = set()
        self.positions: list[int] | None = None

    def make(self, trainer: Any, pl_module: Any, stage: str = "fit") -> DataLoader:
        source = self.test_dataloader if stage == "test" else self.dataloader
        loader = self._choose_loader(self._source_loaders(source, trainer, pl_module), source)
        if not isinstance(loader, DataLoader):
            raise TypeError(
                f"dataloader must give a torch DataLoader (or a list or dict of them, of which dataloader_idx chooses "
                f"one), got {type(loader).__name__}"
            )
        self.positions = None
        if trainer.world_size > 1:
            if isinstance(loader.dataset, IterableDataset):
                raise TypeError(
                    "an IterableDataset cannot be sharded between ranks by the evaluation; give a map-style dataset "
                    "(with __getitem__ and __len__) or one evaluation loader per rank that yields global ids"
                )
            loader = shard_loader(loader, trainer.world_size, trainer.global_rank)
            self.positions = list(iter(loader.sampler))
        return loader

    def owner(self, trainer: Any, pl_module: Any, name: str) -> Any:
        """The datamodule, else the module, that defines the loader method ``name`` (Lightning's default, which only
        raises, does not count); None when neither does."""
        for owner in (getattr(trainer, "datamodule", None), pl_module):
            if (
                owner is not None
                and callable(getattr(owner, name, None))
                and (lightning_package(owner) is None or overrides(owner, name))
            ):
                return owner
        return None

    def _source_loaders(self, source: Any, trainer: Any, pl_module: Any) -> Any:
        """What ``source`` gives: a method's loader(s) (of the datamodule or module that defines it; for the standard
        names defined by neither, the loaders the trainer was given), a DataLoader, or a callable's loader(s)."""
        if not isinstance(source, str):
            return source() if callable(source) and not isinstance(source, DataLoader) else source
        owner = self.owner(trainer, pl_module, source)
        if owner is not None:
            return getattr(owner, source)()
        given = getattr(trainer, TRAINER_LOADERS[source], None) if source in TRAINER_LOADERS else None
        if given is None:
            raise AttributeError(self._no_loader(source))
        return given

    def _no_loader(self, name: str, at_setup: bool = False) -> str:
        option = "test_dataloader" if name == self.test_dataloader and name != self.dataloader else "dataloader"
        if name not in TRAINER_LOADERS:
            trainer_has = ""
        elif at_setup:
            trainer_has = " and the trainer runs no validation loop that would give its loaders"
        else:
            trainer_has = f" and the trainer holds no {TRAINER_LOADERS[name]}"
        return (
            f"{self.owner_name}(`{option}`={name!r}): neither the datamodule nor the LightningModule defines "
            f"{name}(){trainer_has}; define it, or set {option}= to a DataLoader, a zero-argument callable returning "
            "one, or the name of a method that returns one"
        )

    def check_source(self, trainer: Any, pl_module: Any) -> None:
        """At fit's setup: a loader method named by ``dataloader`` must exist somewhere (the trainer's validation
        loaders stand in for ``"val_dataloader"`` when it validates)."""
        name = self.dataloader
        if not isinstance(name, str) or self.owner(trainer, pl_module, name) is not None:
            return
        if name == "val_dataloader" and runs_validation(trainer, pl_module):
            return
        raise ValueError(self._no_loader(name, at_setup=True))

    def _choose_loader(self, loaders: Any, source: Any) -> Any:
        """The loader at ``dataloader_idx`` when ``loaders`` is a list or dict of several (said once per fit)."""
        if not isinstance(loaders, (list, tuple, Mapping)):
            return loaders
        idx, names = self.dataloader_idx, list(loaders) if isinstance(loaders, Mapping) else None
        what = f"{source}()" if isinstance(source, str) else "the evaluation loader source"
        items = list(loaders.values()) if names is not None else list(loaders)
        if isinstance(idx, str) and (names is None or idx not in loaders) or isinstance(idx, int) and idx >= len(items):
            named = f" ({', '.join(map(repr, names))})" if names is not None else ""
            raise ValueError(
                f"`dataloader_idx={idx!r}` does not name one of the {len(items)} loaders {what} gives{named}; set it "
                "to a position" + (" or a name" if names is not None else "")
            )
        chosen = loaders[idx] if isinstance(idx, str) else items[idx]
        if len(items) > 1 and "loader choice" not in self.said:
            self.said.add("loader choice")
            log.info(
                "%s: %s gives %d loaders; evaluating loader %r (dataloader_idx=%r; set it to choose another)",
                self.prefix,
                what,
                len(items),
                idx,
                idx,
            )
        return chosen

    def batch_ids(self, batch_size: int, given: Any, offset: int) -> torch.Tensor | None:
        """The ids of a batch: as given, else (positional batches) the dataset index of each sample under DDP or the
        position in the fixed evaluation order on one process."""
        if given is not None:
            return given if isinstance(given, torch.Tensor) else torch.as_tensor(given)
        if self.positions is not None:
            return torch.as_tensor(self.positions[offset : offset + batch_size], dtype=torch.long)
        return torch.arange(offset, offset + batch_size)

    def _batch_limit(self, trainer: Any, loader: DataLoader, stage: str) -> int | None:
        """``limit_batches``, else what the trainer's ``limit_val_batches`` (``limit_test_batches`` under test)
        allows, counted as Lightning counts it (a fraction of the loader's batches, rounded down, at least one);
        a limit below the loader's length is said once per fit."""
        if self.limit_batches is not None:
            return self.limit_batches
        option = "limit_test_batches" if stage == "test" else "limit_val_batches"
        value = getattr(trainer, option, None)
        try:
            total: int | None = len(loader)
        except TypeError:
            total = None
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or value <= 0
            or isinstance(value, float)
            and value >= 1.0
        ):
            return None  # all (0 means no validation loop: the evaluation then runs at the end of training epochs)
        if isinstance(value, float):
            if total is None:
                return None
            limit = max(int(total * value), 1)
        else:
            limit = int(value)
        if total is not None and limit < total and option not in self.said:
            self.said.add(option)
            reason = " (fast_dev_run)" if getattr(trainer, "fast_dev_run", False) else ""
            log.info(
                "%s: evaluating %d of %d batches of the evaluation loader, as the trainer's %s=%r%s asks (set "
                "limit_batches= to choose another number)",
                self.prefix,
                limit,
                total,
                option,
                value,
                reason,
            )
        return limit

    def batches(self, trainer: Any, loader: DataLoader, stage: str = "fit") -> Iterable[Any]:
        limit = self._batch_limit(trainer, loader, stage)
        for index, batch in enumerate(loader):
            if limit is not None and index >= limit:
                break
            yield batch


def shard_loader(loader: DataLoader, world_size: int, rank: int) -> DataLoader:
    """The same loader over this rank's shard: a ``DistributedSampler`` (no shuffling, no dropping) with the user's
    options kept (batch size, also a ``batch_sampler``'s, ``collate_fn``, workers, pinning, worker init, ...)."""
    batch_size = loader.batch_size
    if batch_size is None:
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
        if batch_size is None:
            raise TypeError(
                f"the evaluation loader uses a {type(loader.batch_sampler).__name__} without a batch_size; give it a "
                "`batch_size` attribute or use a plain batch_size so that it can be sharded between ranks"
            )
    sampler = DistributedSampler(loader.dataset, num_replicas=world_size, rank=rank, shuffle=False, drop_last=False)
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "sampler": sampler,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "drop_last": False,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
    if "pin_memory_device" in inspect.signature(DataLoader).parameters:
        options["pin_memory_device"] = loader.pin_memory_device
    return DataLoader(loader.dataset, **options)
