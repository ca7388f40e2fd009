"""The demo data: deterministic, balanced, captions that name what is drawn, metadata covering every class."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from beyondlabels.demo import (
    CLASS_NAMES,
    ShapesDataModule,
    ancestors,
    profiles_dict,
    render_shapes,
    taxonomy_dict,
)
from beyondlabels.demo.shapes import COLORS, POSITIONS, SIZES, class_phrase


def test_same_seed_same_data_other_seed_other_data():
    a, b, c = render_shapes(3, seed=7), render_shapes(3, seed=7), render_shapes(3, seed=8)
    assert np.array_equal(a.images, b.images) and a.captions == b.captions
    assert not np.array_equal(a.images, c.images)


def test_balanced_and_interleaved():
    sample = render_shapes(5, seed=1)
    counts = np.bincount(sample.labels, minlength=len(CLASS_NAMES))
    assert counts.tolist() == [5] * len(CLASS_NAMES)
    assert sample.labels[: len(CLASS_NAMES)].tolist() == list(range(len(CLASS_NAMES)))


def test_at_least_twelve_classes_with_confusable_families():
    assert len(CLASS_NAMES) >= 12
    families = [
        {"square", "rectangle", "rhombus", "trapezoid"},
        {"circle", "ellipse", "octagon", "hexagon"},
        {"star", "cross", "arrow"},
    ]
    for family in families:
        assert family <= set(CLASS_NAMES)
    assert sum("triangle" in name for name in CLASS_NAMES) >= 3


def test_captions_name_the_class_colour_size_and_position():
    sample = render_shapes(4, seed=2)
    for caption, label, color, size, position in zip(
        sample.captions, sample.labels, sample.colors, sample.sizes, sample.positions
    ):
        assert class_phrase(CLASS_NAMES[label]) in caption
        assert re.search(rf"\b{color}\b", caption) and re.search(rf"\b{size}\b", caption)
        assert caption.endswith(position)
        assert color in COLORS and size in SIZES and position in POSITIONS
        assert not re.search(r"\ba [aeiou]", caption), caption


def test_shape_is_drawn_in_its_colour_and_its_cell():
    """Pixels close to the caption colour exist and their centroid lies in the named grid cell."""
    sample = render_shapes(6, seed=3, noise_std=0.0)
    for image, color, position in zip(sample.images, sample.colors, sample.positions):
        target = np.array(COLORS[color])[:, None, None] * 255
        close = np.abs(image.astype(float) - target).max(axis=0) < 60
        assert close.sum() >= 3
        ys, xs = np.nonzero(close)
        row, col = divmod(POSITIONS.index(position), 3)
        assert abs(xs.mean() / 32 * 3 - (col + 0.5)) < 1.0 and abs(ys.mean() / 32 * 3 - (row + 0.5)) < 1.0


def test_render_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_per_class"):
        render_shapes(0, seed=0)
    with pytest.raises(ValueError, match="class_names"):
        render_shapes(1, seed=0, class_names=["square", "blob"])
    with pytest.raises(ValueError, match="noise_std"):
        render_shapes(1, seed=0, noise_std=-1)


def test_taxonomy_covers_every_class_as_a_leaf_and_reaches_the_root():
    taxonomy = taxonomy_dict()
    parents = set(taxonomy["parent"].values())
    for name in CLASS_NAMES:
        path = ancestors(name, taxonomy)
        assert path[0] == name and path[-1] == taxonomy["root"]
        assert name not in parents, f"{name} must be a leaf"
    leaves = {n for n in taxonomy["parent"] if n not in parents}
    assert leaves == set(CLASS_NAMES)
    # confusable families share a deep ancestor, unrelated classes only the root
    assert ancestors("square")[1] == ancestors("rectangle")[1]
    assert set(ancestors("circle")) & set(ancestors("star")) == {"shape"}
    with pytest.raises(ValueError, match="blob"):
        ancestors("blob", taxonomy)


def test_profiles_cover_every_class_with_valid_values():
    profiles = profiles_dict()
    ordinal, sets = profiles["features"]["ordinal"], profiles["features"]["sets"]
    assert set(profiles["classes"]) == set(CLASS_NAMES)
    for name, profile in profiles["classes"].items():
        assert set(profile) == set(ordinal) | set(sets), name
        for feature in ordinal:
            assert profile[feature] in (0, 1, 2), (name, feature)
        for feature, allowed in sets.items():
            assert set(profile[feature]) <= set(allowed), (name, feature)
    assert profiles["classes"]["square"] != profiles["classes"]["rectangle"]


def test_datamodule_items_and_ids():
    dm = ShapesDataModule(train_per_class=2, val_per_class=1, test_per_class=1, batch_size=8, data_seed=5)
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    assert batch["image"].shape == (8, 3, 32, 32) and batch["image"].dtype == torch.float32
    assert 0.0 <= float(batch["image"].min()) and float(batch["image"].max()) <= 1.0
    assert batch["id"].tolist() == list(range(8)) and len(batch["caption"]) == 8
    assert len(dm.dataset("train")) == 2 * len(CLASS_NAMES)
    # splits are independent draws of the same seed, and the data seed alone decides them
    assert not torch.equal(dm.dataset("train").images[:16], dm.dataset("val").images[:16])
    again = ShapesDataModule(train_per_class=2, val_per_class=1, data_seed=5)
    assert torch.equal(again.dataset("val").images, dm.dataset("val").images)
    assert dm.class_prompts[0] == "a square"
    with pytest.raises(ValueError, match="batch_size"):
        ShapesDataModule(batch_size=0)
