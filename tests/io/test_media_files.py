"""The media folder swap replaces only a media folder it wrote: a user's own ``media/`` (no media.json) or a link in
its place is refused and left as it was; files are written inside the folder only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from beyondlabels.io.media_files import write_media_folder

PIXEL = np.zeros((1, 1, 3), dtype=np.uint8)


def _write(folder: Path, step: int = 1) -> dict:
    return write_media_folder(
        folder, prefix="demo", step=step, epoch=0, figures=[], tables=[("t", ["img"], [[PIXEL]])], curves=[]
    )


def test_a_media_folder_the_writer_made_is_replaced_whole(tmp_path: Path):
    folder = tmp_path / "media"
    _write(folder, 1)
    (folder / "tables" / "t" / "stale.png").write_bytes(b"x")
    _write(folder, 2)
    assert json.loads((folder / "media.json").read_text())["step"] == 2
    assert not (folder / "tables" / "t" / "stale.png").exists()


def test_a_users_own_media_folder_is_never_removed(tmp_path: Path):
    folder = tmp_path / "media"
    folder.mkdir()
    (folder / "holiday.jpg").write_bytes(b"precious")
    with pytest.raises(ValueError, match=r"not a media folder this project wrote"):
        _write(folder)
    assert (folder / "holiday.jpg").read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["media"], "no staging folder is left behind"


def test_an_empty_folder_is_taken(tmp_path: Path):
    folder = tmp_path / "media"
    folder.mkdir()
    _write(folder)
    assert (folder / "media.json").is_file()


def test_a_link_in_the_place_of_the_media_folder_is_refused(tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    _write(elsewhere)  # even a media folder of ours, when reached through a link
    (tmp_path / "run").mkdir()
    os.symlink(elsewhere, tmp_path / "run" / "media")
    with pytest.raises(ValueError, match=r"symbolic link"):
        _write(tmp_path / "run" / "media", 2)
    assert json.loads((elsewhere / "media.json").read_text())["step"] == 1
