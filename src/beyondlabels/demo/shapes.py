"""Procedural shape images with captions: the embedded demo's data.

Every picture is 32×32 RGB and shows one shape from :data:`CLASS_NAMES` with a random colour, size,
rotation, position, background and pixel noise. The classes deliberately come in confusable families
(square / rectangle / rhombus / parallelogram / trapezoid; circle / ellipse / octagon / hexagon /
pentagon; three kinds of triangle; star / cross / arrow), so that a small model confuses related
classes more than unrelated ones — which is what graded and hierarchical metrics are meant to see.

Each picture comes with a caption that leads with the shape and names its size, colour and position, e.g.
``"a rectangle, small red, in the upper left"`` (:func:`compose_caption`), so the same data serves image
retrieval, text-image retrieval and text-to-image generation.

Generation is a pure function of the seed: the same seed gives the same pictures, captions and
attributes on any machine (numpy's PCG64 generator, float64 geometry).

Examples:
    >>> sample = render_shapes(num_per_class=2, seed=0)
    >>> sample.images.shape, sample.images.dtype
    ((32, 3, 32, 32), dtype('uint8'))
    >>> sample.captions[0]
    'a square, medium orange, in the center'
    >>> bool((render_shapes(num_per_class=2, seed=0).images == sample.images).all())
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IMAGE_SIZE = 32
SUPERSAMPLE = 3

CLASS_NAMES: tuple[str, ...] = (
    "square",
    "rectangle",
    "rhombus",
    "parallelogram",
    "trapezoid",
    "equilateral_triangle",
    "right_triangle",
    "obtuse_triangle",
    "pentagon",
    "hexagon",
    "octagon",
    "circle",
    "ellipse",
    "star",
    "cross",
    "arrow",
)

COLORS: dict[str, tuple[float, float, float]] = {
    "red": (0.90, 0.15, 0.15),
    "green": (0.20, 0.80, 0.25),
    "blue": (0.20, 0.35, 0.95),
    "yellow": (0.95, 0.90, 0.20),
    "magenta": (0.90, 0.25, 0.85),
    "cyan": (0.20, 0.85, 0.90),
    "orange": (0.95, 0.55, 0.10),
    "white": (0.95, 0.95, 0.95),
}

# Circumradius as a fraction of half the image side.
SIZES: dict[str, tuple[float, float]] = {
    "small": (0.34, 0.44),
    "medium": (0.48, 0.58),
    "large": (0.62, 0.74),
}

# Row-major 3×3 grid of position words; centres in [-1, 1] image coordinates (y grows downwards).
POSITIONS: tuple[str, ...] = (
    "upper left",
    "top",
    "upper right",
    "left",
    "center",
    "right",
    "lower left",
    "bottom",
    "lower right",
)


def class_phrase(name: str) -> str:
    """The words a caption uses for a class name: ``"right_triangle"`` → ``"right triangle"``."""
    return name.replace("_", " ")


def compose_caption(shape: str, size: str | None = None, color: str | None = None, position: str | None = None) -> str:
    """The caption of a picture, leading with its shape; attributes given as None are left out.

    Examples:
        >>> compose_caption("octagon", "small", "red", "upper left")
        'an octagon, small red, in the upper left'
        >>> compose_caption("right_triangle", color="blue"), compose_caption("square")
        ('a right triangle, blue', 'a square')
    """
    phrase = class_phrase(shape)
    caption = ("an " if phrase[0] in "aeiou" else "a ") + phrase
    looks = " ".join(word for word in (size, color) if word)
    if looks:
        caption += ", " + looks
    if position:
        caption += f", in the {position}"
    return caption


@dataclass(frozen=True)
class ShapeSample:
    """A generated split: images (N, 3, 32, 32) uint8 and per-image attributes, all of length N."""

    images: np.ndarray
    labels: np.ndarray
    captions: list[str]
    colors: list[str]
    sizes: list[str]
    positions: list[str]
    rotations: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def _regular_polygon(n: int, phase: float = 0.0) -> np.ndarray:
    angles = phase + 2.0 * np.pi * np.arange(n) / n
    return np.stack([np.cos(angles), np.sin(angles)], axis=1)


def _star(inner: float) -> np.ndarray:
    angles = np.pi / 2 + np.pi * np.arange(10) / 5
    radii = np.where(np.arange(10) % 2 == 0, 1.0, inner)
    return np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)


def _outline(name: str, rng: np.random.Generator) -> tuple[str, np.ndarray]:
    """Class outline before placement: ``("polygon", vertices)`` or ``("ellipse", [[a, b]])``."""
    u = rng.uniform
    if name == "square":
        return "polygon", np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], float)
    if name == "rectangle":
        h = 1.0 / u(1.7, 2.2)
        return "polygon", np.array([[-1, -h], [1, -h], [1, h], [-1, h]], float)
    if name == "rhombus":
        r = u(0.50, 0.65)
        return "polygon", np.array([[-1, 0], [0, -r], [1, 0], [0, r]], float)
    if name == "parallelogram":
        s, h = u(0.35, 0.55), u(0.40, 0.55)
        return "polygon", np.array([[-1, h], [1 - 2 * s, h], [1, -h], [-1 + 2 * s, -h]], float)
    if name == "trapezoid":
        t, h = u(0.35, 0.55), u(0.50, 0.65)
        return "polygon", np.array([[-1, h], [1, h], [t, -h], [-t, -h]], float)
    if name == "equilateral_triangle":
        return "polygon", _regular_polygon(3, np.pi / 2)
    if name == "right_triangle":
        r = u(0.7, 1.3)
        return "polygon", np.array([[-1, 1], [1, 1], [-1, 1 - 2 * r]], float)
    if name == "obtuse_triangle":
        apex_x, apex_h = u(0.45, 0.8), u(0.65, 0.95)
        return "polygon", np.array([[-1, 0.5], [0.2, 0.5], [0.2 + apex_x, 0.5 - apex_h]], float)
    if name == "pentagon":
        return "polygon", _regular_polygon(5, -np.pi / 2)
    if name == "hexagon":
        return "polygon", _regular_polygon(6)
    if name == "octagon":
        return "polygon", _regular_polygon(8, np.pi / 8)
    if name == "circle":
        return "ellipse", np.array([[1.0, 1.0]])
    if name == "ellipse":
        return "ellipse", np.array([[1.0, u(0.45, 0.62)]])
    if name == "star":
        return "polygon", _star(u(0.38, 0.48))
    if name == "cross":
        w = u(0.28, 0.36)
        return "polygon", np.array(
            [
                [-w, -1],
                [w, -1],
                [w, -w],
                [1, -w],
                [1, w],
                [w, w],
                [w, 1],
                [-w, 1],
                [-w, w],
                [-1, w],
                [-1, -w],
                [-w, -w],
            ],
            float,
        )
    if name == "arrow":
        shaft, head = u(0.18, 0.26), u(0.50, 0.65)
        neck = u(0.05, 0.25)
        return "polygon", np.array(
            [[-1, -shaft], [neck, -shaft], [neck, -head], [1, 0], [neck, head], [neck, shaft], [-1, shaft]],
            float,
        )
    raise ValueError(f"unknown shape class {name!r}; expected one of {CLASS_NAMES}")


def _inside_polygon(px: np.ndarray, py: np.ndarray, vertices: np.ndarray) -> np.ndarray:
    """Even-odd rule: True where the point lies inside the (possibly concave) polygon."""
    x0, y0 = vertices[:, 0], vertices[:, 1]
    x1, y1 = np.roll(x0, -1), np.roll(y0, -1)
    px, py = px[..., None], py[..., None]
    straddles = (y0 > py) != (y1 > py)
    with np.errstate(divide="ignore", invalid="ignore"):
        x_cross = x0 + (py - y0) * (x1 - x0) / (y1 - y0)
    crossings = straddles & (px < x_cross)
    return (crossings.sum(axis=-1) % 2).astype(bool)


_GRID_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _pixel_grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Supersampled pixel centres in [-1, 1] coordinates, shape (size*S, size*S)."""
    if size not in _GRID_CACHE:
        n = size * SUPERSAMPLE
        c = (np.arange(n) + 0.5) / n * 2.0 - 1.0
        _GRID_CACHE[size] = np.meshgrid(c, c, indexing="xy")
    return _GRID_CACHE[size]


def _coverage(name: str, rng: np.random.Generator, radius: float, angle: float, centre: np.ndarray) -> np.ndarray:
    """Fraction of each pixel covered by the placed shape, (32, 32) floats in [0, 1]."""
    kind, outline = _outline(name, rng)
    gx, gy = _pixel_grid(IMAGE_SIZE)
    cos, sin = np.cos(angle), np.sin(angle)
    if kind == "ellipse":
        # Point p is inside when its rotated, recentred coordinates fall in the unit ellipse.
        a, b = outline[0] * radius
        dx, dy = gx - centre[0], gy - centre[1]
        u = cos * dx + sin * dy
        v = -sin * dx + cos * dy
        mask = (u / a) ** 2 + (v / b) ** 2 <= 1.0
    else:
        outline = outline - (outline.max(0) + outline.min(0)) / 2.0
        outline = outline / np.linalg.norm(outline, axis=1).max()
        rotation = np.array([[cos, -sin], [sin, cos]])
        vertices = outline @ rotation.T * radius + centre
        mask = _inside_polygon(gx, gy, vertices)
    s = SUPERSAMPLE
    return mask.reshape(IMAGE_SIZE, s, IMAGE_SIZE, s).mean(axis=(1, 3))


def render_shapes(
    num_per_class: int,
    seed: int,
    class_names: tuple[str, ...] | list[str] = CLASS_NAMES,
    noise_std: float = 0.04,
) -> ShapeSample:
    """Render ``num_per_class`` pictures of every class, deterministically from ``seed``.

    The split is balanced: each class appears exactly ``num_per_class`` times, classes interleaved
    (picture ``i`` has label ``i % len(class_names)``). Colour, size, position and rotation
    are drawn independently of the class; the shape's centre is jittered inside its 3×3 grid cell and
    the caption's position word names that cell.

    Args:
        num_per_class: pictures per class, ≥ 1.
        seed: generator seed; the only source of randomness.
        class_names: subset (or order) of :data:`CLASS_NAMES` to draw; labels index this sequence.
        noise_std: standard deviation of Gaussian pixel noise on a [0, 1] scale.

    Raises:
        ValueError: if ``num_per_class`` < 1, ``class_names`` is empty or names an unknown class,
            or ``noise_std`` is negative.
    """
    if num_per_class < 1:
        raise ValueError(f"num_per_class must be >= 1, got {num_per_class}")
    if noise_std < 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    class_names = tuple(class_names)
    unknown = [c for c in class_names if c not in CLASS_NAMES]
    if not class_names or unknown:
        raise ValueError(f"class_names must be a non-empty subset of {CLASS_NAMES}; unknown: {unknown}")

    rng = np.random.default_rng(seed)
    n = num_per_class * len(class_names)
    labels = np.arange(n) % len(class_names)
    color_names, size_names = list(COLORS), list(SIZES)
    images = np.empty((n, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    captions, colors, sizes, positions = [], [], [], []
    rotations = np.empty(n)
    for i, label in enumerate(labels):
        color = color_names[rng.integers(len(color_names))]
        size = size_names[rng.integers(len(size_names))]
        cell = int(rng.integers(len(POSITIONS)))
        angle = rng.uniform(0.0, 2.0 * np.pi)
        radius = rng.uniform(*SIZES[size])
        # Cell centres at -0.5 / 0 / +0.5; larger shapes are pulled towards the middle so they fit.
        row, col = divmod(cell, 3)
        reach = 0.5 * (1.0 - max(0.0, radius - 0.45))
        centre = np.array([(col - 1) * reach, (row - 1) * reach]) + rng.uniform(-0.08, 0.08, size=2)
        name = class_names[label]
        cover = _coverage(name, rng, radius, angle, centre)

        foreground = np.clip(np.array(COLORS[color]) + rng.normal(0.0, 0.04, size=3), 0.0, 1.0)
        background = rng.uniform(0.0, 0.3, size=3)
        picture = background[:, None, None] * (1 - cover) + foreground[:, None, None] * cover
        picture = picture + rng.normal(0.0, noise_std, size=picture.shape)
        images[i] = np.round(np.clip(picture, 0.0, 1.0) * 255).astype(np.uint8)

        captions.append(compose_caption(name, size, color, POSITIONS[cell]))
        colors.append(color)
        sizes.append(size)
        positions.append(POSITIONS[cell])
        rotations[i] = angle
    return ShapeSample(images, labels.astype(np.int64), captions, colors, sizes, positions, rotations)
