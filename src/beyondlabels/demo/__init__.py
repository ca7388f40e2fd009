"""The embedded demo: procedural shapes with captions, taxonomy and feature profiles, and a tiny CLIP."""

from beyondlabels.demo.datamodule import ShapesDataModule, ShapesDataset
from beyondlabels.demo.metadata import ancestors, demo_profiles, demo_taxonomy, load_profiles, load_taxonomy
from beyondlabels.demo.model import TinyCLIP
from beyondlabels.demo.shapes import CLASS_NAMES, render_shapes

__all__ = [
    "CLASS_NAMES",
    "ShapesDataModule",
    "ShapesDataset",
    "TinyCLIP",
    "ancestors",
    "demo_profiles",
    "demo_taxonomy",
    "load_profiles",
    "load_taxonomy",
    "render_shapes",
]
