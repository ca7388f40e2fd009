"""EvaluationMedia and the media folder without a trainer: argument checks, cell conversion, the manifest's files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from beyondlabels.callbacks.media import EvaluationMedia


def test_names_cells_and_sources_are_checked():
    media = EvaluationMedia("demo", step=5, epoch=0)
    media.table("pairs", ["true class", "n"], [["cat", 1]])  # a column without a picture may hold any name
    with pytest.raises(ValueError, match="already a figure, table or curve"):
        media.figure("pairs", b"\x89PNG....")
    with pytest.raises(ValueError, match="`name` must be a name of letters"):
        media.table("bad/name", ["a"], [])
    with pytest.raises(ValueError, match="image column of table 'pics'"):
        media.table("pics", ["query image"], [[torch.zeros(3, 2, 2)]])
    with pytest.raises(ValueError, match="row 0 has 1 cells for 2 columns"):
        media.table("short", ["a", "b"], [[1]])
    with pytest.raises(ValueError, match="distinct non-empty strings"):
        media.table("twice", ["a", "a"], [])
    with pytest.raises(ValueError, match="C×H×W tensor or array with C in"):
        media.table("wide", ["x_image"], [[torch.zeros(5, 2, 2)]])
    with pytest.raises(ValueError, match="not a PNG image"):
        media.figure("text", b"GIF89a")
    with pytest.raises(ValueError, match="a PNG path, PNG bytes or a matplotlib figure"):
        media.figure("number", 3)


def test_cells_become_python_values_and_images_files(tmp_path: Path):
    media = EvaluationMedia("demo", step=5, epoch=2)
    picture = torch.tensor([[[0.0, 0.5]], [[1.0, 0.25]], [[0.2, 2.0]]])  # 3 x 1 x 2, one value above 1
    media.table(
        "pics",
        ["x_image", "score", "count", "name", "gap"],
        [{"x_image": picture, "score": np.float32(0.5), "count": torch.tensor(3), "name": "a", "gap": float("nan")}],
    )
    media.curve("curve", [0.5, float("inf")])
    manifest = media.write(tmp_path / "media")
    on_disk = json.loads((tmp_path / "media" / "media.json").read_text(encoding="utf-8"))
    assert on_disk == manifest
    assert on_disk["tables"][0]["rows"] == [[{"image": "tables/pics/r000_x_image.png"}, 0.5, 3, "a", None]]
    assert on_disk["curves"] == [{"name": "curve", "xname": "k", "x": [1, 2], "y": [0.5, None]}]
    with Image.open(tmp_path / "media" / "tables" / "pics" / "r000_x_image.png") as image:
        pixels = np.asarray(image)
    # rounded value * 255, clipped to [0, 255]: worked by hand
    assert pixels.tolist() == [[[0, 255, 51], [128, 64, 255]]]


def test_curves_share_the_namespace_of_figures_and_tables(tmp_path: Path):
    from beyondlabels.io.media_files import write_media_folder

    media = EvaluationMedia("demo", step=1, epoch=0)
    media.table("precision_curve", ["a"], [[1]])
    with pytest.raises(ValueError, match="`curve name` 'precision_curve' is already a figure, table or curve"):
        media.curve("precision_curve", [0.5])
    pixel = np.zeros((1, 1, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="the media name 'pr' is used twice; give every figure, table and curve"):
        write_media_folder(
            tmp_path / "media",
            prefix="demo",
            step=1,
            epoch=0,
            figures=[],
            tables=[("pr", ["img"], [[pixel]])],
            curves=[("pr", "k", [1], [0.5])],
        )
    assert not (tmp_path / "media").exists()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _write(folder: Path, step: int, pixel: np.ndarray, extra=()):
    from beyondlabels.io.media_files import write_media_folder

    figure = EvaluationMedia("demo", step, 0)
    figure.figure("fig", _png(pixel))
    return write_media_folder(
        folder,
        prefix="demo",
        step=step,
        epoch=0,
        figures=[("fig", figure.figures[0].png, "")],
        tables=[("t", ["img"], [[pixel], [pixel]]), *extra],
        curves=[],
    )


def _png(pixel: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    Image.fromarray(pixel).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("failure", ["row length", "image shape", "disk full"])
def test_a_failed_write_leaves_the_previous_folder_as_it_was(tmp_path: Path, monkeypatch, failure: str):
    from beyondlabels.io import media_files

    folder = tmp_path / "media"
    black, white = np.zeros((2, 2, 3), np.uint8), np.full((2, 2, 3), 255, np.uint8)
    _write(folder, 1, black)
    before = _snapshot(folder)
    assert sorted(before) == ["fig.png", "media.json", "tables/t/r000_img.png", "tables/t/r001_img.png"]
    if failure == "row length":
        extra, error = [("u", ["a", "b"], [[1]])], ValueError
    elif failure == "image shape":
        extra, error = [("u", ["img"], [[np.zeros((2, 2, 5), np.uint8)]])], ValueError
    else:  # the third file of the new folder cannot be written
        extra, error, real, calls = [], OSError, media_files.atomic_file, []

        def full(path, *args, **kwargs):
            calls.append(path)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            return real(path, *args, **kwargs)

        monkeypatch.setattr(media_files, "atomic_file", full)
    with pytest.raises(error):
        _write(folder, 2, white, extra)
    assert _snapshot(folder) == before  # the step-1 manifest, and the black pictures it names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["media"]  # no staging folder is left
    if failure == "image shape":
        with pytest.raises(ValueError, match=r"row 0, column 'img': an image cell must be an H×W×C uint8 array"):
            _write(folder, 2, white, extra)


def test_a_new_write_replaces_the_folder_whole_and_repairs_a_killed_one(tmp_path: Path):
    folder = tmp_path / "media"
    black, white = np.zeros((2, 2, 3), np.uint8), np.full((2, 2, 3), 255, np.uint8)
    _write(folder, 1, black, [("old", ["img"], [[black]])])
    # a write killed between its two renames: the complete previous folder aside, a half-written staging folder
    folder.rename(tmp_path / ".media.previous")
    (tmp_path / ".media.staging" / "tables").mkdir(parents=True)
    (tmp_path / ".media.staging" / "tables" / "junk.png").write_bytes(b"half")
    with pytest.raises(ValueError):
        _write(folder, 2, white, [("u", ["a", "b"], [[1]])])
    assert json.loads((folder / "media.json").read_text())["step"] == 1  # put back before anything else
    _write(folder, 3, white)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["media"]
    assert sorted(_snapshot(folder)) == ["fig.png", "media.json", "tables/t/r000_img.png", "tables/t/r001_img.png"]
    assert json.loads((folder / "media.json").read_text())["step"] == 3
    with Image.open(folder / "tables" / "t" / "r001_img.png") as image:
        assert np.asarray(image).tolist() == white.tolist()
