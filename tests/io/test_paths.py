"""The one path check: names are one file name; a relative path stays inside its folder, links followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from beyondlabels.io.paths import UnsafePathError, check_name, inside, is_inside


@pytest.mark.parametrize("name", ["retrieval", "a.b", "é" * 127, "x" * 255, ".hidden", "a b"])
def test_one_file_name_is_accepted(name):
    assert check_name(name, "prefix") == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\\b", "a\x00", "x" * 256, "é" * 128, None, 3])
def test_what_is_not_one_file_name_is_refused_naming_the_argument(name):
    with pytest.raises(UnsafePathError, match=r"^`prefix` must be one file name"):
        check_name(name, "prefix")


def test_a_refused_name_is_a_value_error():
    assert issubclass(UnsafePathError, ValueError)


@pytest.mark.parametrize("relative", ["../x", "a/../../x", "/etc/passwd", "", "a\x00b", None, ".."])
def test_escapes_by_name_are_refused(tmp_path: Path, relative):
    with pytest.raises(UnsafePathError, match=r"leaves its folder"):
        inside(tmp_path, relative, "the file")
    assert not is_inside(tmp_path, relative)


def test_a_link_out_of_the_folder_is_refused_and_one_inside_is_kept(tmp_path: Path):
    root, outside = tmp_path / "run", tmp_path / "secret"
    (root / "family").mkdir(parents=True)
    outside.mkdir()
    (outside / "key.png").write_bytes(b"x")
    (root / "family" / "a.png").write_bytes(b"y")
    os.symlink(outside / "key.png", root / "family" / "stolen.png")
    os.symlink(outside, root / "family" / "linked")
    os.symlink(root / "family" / "a.png", root / "family" / "alias.png")
    os.symlink("loop", root / "loop")
    for relative in ("family/stolen.png", "family/linked/key.png", "family/linked"):
        with pytest.raises(UnsafePathError, match=r"symbolic link leads out of it"):
            inside(root, relative)
    assert inside(root, "family/alias.png") == root / "family" / "alias.png"
    assert inside(root, "family/not_yet_written.png") == root / "family" / "not_yet_written.png"
    with pytest.raises(UnsafePathError):
        inside(root, "loop")


def test_the_folder_may_itself_be_reached_through_a_link(tmp_path: Path):
    (tmp_path / "runs" / "2024").mkdir(parents=True)
    (tmp_path / "runs" / "2024" / "history.jsonl").write_text("")
    os.symlink(tmp_path / "runs" / "2024", tmp_path / "latest")
    assert inside(tmp_path / "latest", "history.jsonl") == tmp_path / "latest" / "history.jsonl"
