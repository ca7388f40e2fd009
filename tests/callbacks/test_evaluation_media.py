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
    with pytest.raises(ValueError, match="already a figure or table"):
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
    media.table("pics", ["x_image", "score", "count", "name", "gap"],
                [{"x_image": picture, "score": np.float32(0.5), "count": torch.tensor(3), "name": "a", "gap": float("nan")}])
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
