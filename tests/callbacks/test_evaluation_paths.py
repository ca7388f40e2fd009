"""A callback writes inside its own folder only: a prefix that names no single folder ('..', '.', a separator, a
name longer than a file name) is refused when the callback is made, and a folder the file system cannot name does
not end the fit (strict=False) but is logged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import pytorch_lightning as pl

from beyondlabels.callbacks import RetrievalEvalCallback  # noqa: E402
from tests.callbacks.toy import LinearEncoder, PointDataModule


def _fit(root: Path, callback) -> pl.Trainer:
    trainer = pl.Trainer(
        default_root_dir=str(root),
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(LinearEncoder(), PointDataModule())
    return trainer


@pytest.mark.parametrize("prefix", ["..", ".", "a/b", "a\\b", "x\x00y", "p" * 300, "é" * 128])
def test_a_prefix_that_is_not_one_folder_name_is_refused(prefix):
    with pytest.raises(ValueError, match=r"`prefix` must be one file name"):
        RetrievalEvalCallback(prefix=prefix, num_mismatches=0)


def test_a_dot_dot_prefix_never_writes_beside_the_run_folder(tmp_path: Path):
    """What the refusal prevents: history, schema, media and per-query files in the parent of the run folder."""
    run = tmp_path / "run"
    run.mkdir()
    try:
        callback = RetrievalEvalCallback(prefix="..", num_mismatches=0)
    except ValueError:
        return
    _fit(run, callback)
    assert not (tmp_path / "history.jsonl").exists() and not (tmp_path / "media").exists()


def test_a_folder_too_long_for_the_file_system_is_logged_not_fatal(tmp_path: Path, caplog):
    """Every write fails with ENAMETOOLONG; strict=False: the fit ends normally and the failure is logged."""
    deep = tmp_path.joinpath(*(["d" * 250] * 20))  # more than PATH_MAX (4096) bytes
    callback = RetrievalEvalCallback(prefix="retrieval", save_dir=str(deep), num_mismatches=0, strict=False)
    with caplog.at_level(logging.ERROR):
        trainer = _fit(tmp_path, callback)
    assert trainer.state.finished
    assert "File name too long" in caplog.text
