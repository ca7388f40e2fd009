"""One writer per evaluation folder, for the evaluation callbacks (private to the callbacks): the fit's lock of the
output folder (:mod:`beyondlabels.io.run_lock`), taken at ``setup`` on rank 0 with every rank told the outcome, and
given back with the files' writer at the end of the fit or when it fails."""

from __future__ import annotations

from typing import Any

from beyondlabels.io.run_lock import RunFolderLock, lock_on_rank_zero

__all__ = ["close_files", "hold_folder", "release_folder"]


def hold_folder(callback: Any, trainer: Any) -> None:
    """Take ``callback``'s output folder's lock for the fit (and check that no other process holds the run folder
    above it, when the folder is ``<default_root_dir>/<prefix>``); every rank raises the same
    :class:`~beyondlabels.io.run_lock.RunFolderInUseError` when another process holds either."""
    folder = callback.output_folder(trainer)
    if folder is not None:
        callback._folder_lock = lock_on_rank_zero(
            folder,
            trainer.is_global_zero,
            lambda value: trainer.strategy.broadcast(value, src=0),
            check_parent=callback.save_dir is None,
        )


def close_files(callback: Any) -> None:
    """Give back what the files' writer holds (the history's lock); the next evaluation makes a new one."""
    if callback.files is not None:
        callback.files.close()
    callback.files = None


def release_folder(callback: Any) -> None:
    """The end of a fit (or of a failed one): the files' writer and the folder's lock are given back."""
    close_files(callback)
    lock: RunFolderLock | None = getattr(callback, "_folder_lock", None)
    if lock is not None:
        lock.release()
    callback._folder_lock = None
