"""pca_projection against sklearn.decomposition.PCA (coordinates up to each component's sign, ratios), its sign rule,
bad input, and the projection scatter plot (PNG written, title with the percentages, legend rule, argument checks)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.decomposition import PCA

from beyondlabels.functional.projection import pca_projection  # noqa: E402
from beyondlabels.reporting.plots import save_embedding_projection_png  # noqa: E402
from tests.gpu.devices import accelerator_device, needs_accelerator


def anisotropic(n: int, d: int, seed: int) -> np.ndarray:
    """Gaussian rows with distinct column scales (distinct variances, so every component is unique up to sign)."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)) * np.linspace(3.0, 0.2, d) + rng.normal(size=d) * 5


@pytest.mark.parametrize("n, d, k", [(300, 12, 2), (40, 64, 2), (25, 3, 3), (2, 5, 1)])
def test_matches_sklearn_up_to_sign(n, d, k):
    x = anisotropic(n, d, seed=n + d)
    coords, ratio = pca_projection(torch.tensor(x, dtype=torch.float32), num_components=k)
    ref = PCA(n_components=k, svd_solver="full").fit(x)
    expected = ref.transform(x)
    assert coords.shape == (n, k) and ratio.shape == (k,) and coords.dtype == torch.float64
    np.testing.assert_allclose(ratio.numpy(), ref.explained_variance_ratio_, rtol=0, atol=1e-5)
    for j in range(k):
        sign = np.sign(expected[:, j] @ coords[:, j].numpy())  # sklearn's own sign rule may differ from ours
        np.testing.assert_allclose(
            coords[:, j].numpy(), sign * expected[:, j], rtol=0, atol=1e-4 * np.abs(expected).max()
        )


def test_ratio_is_component_variance_over_total_variance():
    x = anisotropic(200, 6, seed=3)
    coords, ratio = pca_projection(x, num_components=2)
    total = x.var(axis=0, ddof=1).sum()
    np.testing.assert_allclose(ratio.numpy(), coords.numpy().var(axis=0, ddof=1) / total, atol=1e-12)


def test_sign_rule_makes_the_largest_loading_positive_and_output_deterministic():
    x = anisotropic(150, 8, seed=4)
    coords, _ = pca_projection(x)
    centred = x - x.mean(axis=0)
    # loadings recovered by least squares from the coordinates: centred @ v_j = coords[:, j]
    loadings = np.linalg.lstsq(centred, coords.numpy(), rcond=None)[0]
    for j in range(2):
        assert loadings[np.argmax(np.abs(loadings[:, j])), j] > 0
    assert torch.equal(pca_projection(x)[0], coords)
    # -x has the same components up to sign; the rule picks the same signs, so its coordinates are exactly negated
    flipped, _ = pca_projection(-x)
    np.testing.assert_allclose(flipped.numpy(), -coords.numpy(), atol=1e-9)


def test_row_order_and_translation_do_not_change_the_picture():
    x = anisotropic(80, 5, seed=5)
    perm = np.random.default_rng(0).permutation(80)
    a, ra = pca_projection(x)
    b, rb = pca_projection(x[perm] + 100.0)
    np.testing.assert_allclose(b.numpy(), a.numpy()[perm], atol=1e-8)
    np.testing.assert_allclose(rb.numpy(), ra.numpy(), atol=1e-12)


def test_constant_rows_give_zero_coordinates_and_nan_ratios():
    coords, ratio = pca_projection(torch.ones(5, 3))
    assert torch.equal(coords, torch.zeros(5, 2)) and bool(torch.isnan(ratio).all())


@pytest.mark.parametrize(
    "embeddings, k, match",
    [
        (torch.zeros(0, 4), 2, "at least 2 rows"),
        (torch.zeros(1, 4), 2, "at least 2 rows"),
        (torch.zeros(4), 2, "must be a 2-D"),
        (torch.tensor([[0.0, 1.0], [float("nan"), 2.0]]), 2, "NaN or infinite"),
        (torch.tensor([[0.0, 1.0], [float("inf"), 2.0]]), 2, "NaN or infinite"),
        (torch.ones(3, 2, dtype=torch.bool), 2, "real numbers"),
        (torch.ones(5, 3), 0, "`num_components`"),
        (torch.ones(5, 3), 4, r"^`num_components` must be an int in \[1, 3\] \(at most min\(N, D\)\), got 4\.$"),
        (torch.ones(5, 3), True, "`num_components`"),
    ],
)
def test_bad_input_is_named(embeddings, k, match):
    with pytest.raises(ValueError, match=match):
        pca_projection(embeddings, num_components=k)


def test_plot_writes_a_png_titled_with_the_explained_variance(tmp_path):
    rng = np.random.default_rng(0)
    coords, labels = rng.normal(size=(60, 2)), np.arange(60) % 3
    path = save_embedding_projection_png(
        coords, labels, ["a", "b", "c"], [0.4567, float("nan")], tmp_path / "sub" / "p.png", title="eval"
    )
    image = Image.open(path)
    assert image.format == "PNG" and image.size[0] > 100
    assert image.text["Title"] == "eval\nPC1 45.7%, PC2 n/a of the variance"
    many = save_embedding_projection_png(
        coords, np.arange(60) % 30, [f"c{i}" for i in range(30)], [0.5, 0.1], tmp_path / "many.png"
    )
    assert many.is_file()  # more than 20 classes: one colour scale, no legend


@pytest.mark.parametrize(
    "coords, labels, names, explained, match",
    [
        (np.zeros((3, 3)), [0, 0, 0], ["a"], [0.5, 0.5], "`coords` must be"),
        (np.zeros((0, 2)), [], ["a"], [0.5, 0.5], "`coords` must be"),
        (np.zeros((3, 2)), [0, 0], ["a"], [0.5, 0.5], "`labels` must be 3"),
        (np.zeros((3, 2)), [0.0, 0.0, 0.0], ["a"], [0.5, 0.5], "`labels` must be 3 integer"),
        (np.zeros((3, 2)), [0, 1, 2], ["a", "b"], [0.5, 0.5], "`labels` must index `class_names`"),
        (np.zeros((3, 2)), [0, 0, 0], ["a"], [0.5], "`explained`"),
    ],
)
def test_plot_arguments_are_checked(tmp_path, coords, labels, names, explained, match):
    with pytest.raises(ValueError, match=match):
        save_embedding_projection_png(coords, labels, names, explained, tmp_path / "x.png")


@pytest.mark.gpu
@needs_accelerator
def test_cuda_matches_cpu():
    device = accelerator_device()
    x = torch.tensor(anisotropic(500, 64, seed=9), dtype=torch.float32)
    coords, ratio = pca_projection(x)
    coords_gpu, ratio_gpu = pca_projection(x.to(device))
    assert coords_gpu.device == device and ratio_gpu.device == device
    torch.testing.assert_close(ratio_gpu.cpu(), ratio, rtol=0, atol=1e-10)
    torch.testing.assert_close(coords_gpu.cpu(), coords, rtol=0, atol=1e-8)  # the same signs: the rule, not the SVD
