"""The embedded demo: procedural shapes with captions, taxonomy and feature profiles, a tiny CLIP, a tiny text-to-image
generator and the frozen evaluator made from the tiny CLIP."""

from beyondlabels.demo.datamodule import ShapesDataModule, ShapesDataset
from beyondlabels.demo.evaluator import demo_evaluator, export_demo_evaluator
from beyondlabels.demo.generator import ShapeGenerator
from beyondlabels.demo.metadata import ancestors, demo_profiles, demo_taxonomy, profiles_dict, taxonomy_dict
from beyondlabels.demo.model import TinyCLIP
from beyondlabels.demo.shapes import CLASS_NAMES, render_shapes

__all__ = [
    "CLASS_NAMES",
    "ShapeGenerator",
    "ShapesDataModule",
    "ShapesDataset",
    "TinyCLIP",
    "ancestors",
    "demo_evaluator",
    "demo_profiles",
    "demo_taxonomy",
    "export_demo_evaluator",
    "profiles_dict",
    "render_shapes",
    "taxonomy_dict",
]
