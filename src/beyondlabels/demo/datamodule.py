"""LightningDataModule over the procedural shapes (:mod:`beyondlabels.demo.shapes`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from beyondlabels._internal.checks import check_choice
from beyondlabels.demo.shapes import CLASS_NAMES, ShapeSample, class_phrase, compose_caption, render_shapes

SPLITS = ("train", "val", "test")


def split_seed(seed: int, split: str) -> int:
    """Independent, reproducible seed of one split derived from the run seed."""
    return int(np.random.SeedSequence([seed, SPLITS.index(split)]).generate_state(1)[0])


class ShapesDataset(Dataset):
    """Items are dicts: ``image`` (3×32×32 float in [0, 1]), ``caption``, ``label`` and a global ``id``.

    ``id`` is the item's index within its split; it identifies the sample across DDP ranks so that
    metrics can drop the copies a DistributedSampler adds.

    ``caption_keep`` < 1 turns on caption dropout: every time an item is read, its size, colour and position are
    each named with probability ``caption_keep`` (drawn from the global torch generator, so seeded runs repeat),
    the shape always (:func:`~beyondlabels.demo.shapes.compose_caption`). Captions that often name only the shape
    make the contrastive loss organise the embedding by shape first, the demo's class.
    """

    def __init__(self, sample: ShapeSample, class_names: tuple[str, ...], caption_keep: float = 1.0) -> None:
        if not 0.0 <= caption_keep <= 1.0:
            raise ValueError(f"caption_keep must lie in [0, 1], got {caption_keep}")
        self.sample = sample
        self.class_names = class_names
        self.caption_keep = caption_keep
        self.images = torch.from_numpy(sample.images)
        self.labels = torch.from_numpy(sample.labels)

    def __len__(self) -> int:
        return len(self.sample)

    def caption(self, index: int) -> str:
        """The item's caption: the full one, or (``caption_keep`` < 1) a freshly drawn partial one."""
        if self.caption_keep >= 1.0:
            return self.sample.captions[index]
        named = (torch.rand(3) < self.caption_keep).tolist()
        s = self.sample
        attributes = [
            value if keep else None for value, keep in zip((s.sizes[index], s.colors[index], s.positions[index]), named)
        ]
        return compose_caption(self.class_names[int(s.labels[index])], *attributes)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {
            "image": self.images[index].float().div_(255.0),
            "caption": self.caption(index),
            "label": self.labels[index],
            "id": index,
        }


class ShapesDataModule(pl.LightningDataModule):
    """Balanced train / val / test splits of demo shapes, generated on the fly from ``data_seed``.

    Args:
        train_per_class: training pictures per class.
        val_per_class: validation pictures per class (also the default retrieval evaluation set).
        test_per_class: test pictures per class.
        data_seed: data seed; the splits are a pure function of it (independent of the run's ``seed``).
        batch_size: batch size of every loader.
        num_workers: DataLoader workers (0 keeps everything in the main process).
        class_names: subset of :data:`~beyondlabels.demo.shapes.CLASS_NAMES` (default: all 16).
        caption_keep: caption dropout of the training split (see :class:`ShapesDataset`); 1.0 keeps every caption
            whole. Validation and test captions are always whole.
    """

    def __init__(
        self,
        train_per_class: int = 480,
        val_per_class: int = 32,
        test_per_class: int = 32,
        data_seed: int = 0,
        batch_size: int = 128,
        num_workers: int = 0,
        class_names: list[str] | tuple[str, ...] | None = None,
        caption_keep: float = 1.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= caption_keep <= 1.0:
            raise ValueError(f"caption_keep must lie in [0, 1], got {caption_keep}")
        for name, value in (
            ("train_per_class", train_per_class),
            ("val_per_class", val_per_class),
            ("test_per_class", test_per_class),
            ("batch_size", batch_size),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.save_hyperparameters()
        self.class_names = tuple(class_names) if class_names else CLASS_NAMES
        self.per_class = {"train": train_per_class, "val": val_per_class, "test": test_per_class}
        self.datasets: dict[str, ShapesDataset] = {}

    @property
    def class_phrases(self) -> list[str]:
        """The class names as the captions write them (``"right triangle"``), in label order: zero-shot class names."""
        return [class_phrase(name) for name in self.class_names]

    @property
    def class_prompts(self) -> list[str]:
        """One caption-like prompt per class, in label order, for zero-shot classification."""
        return [compose_caption(name) for name in self.class_names]

    @property
    def prompts(self) -> list[str]:
        """The validation captions in id order: the prompt pool of text-to-image evaluation
        (``RPrecisionEvalCallback``)."""
        return list(self.dataset("val").sample.captions)

    def dataset(self, split: str) -> ShapesDataset:
        """The split's dataset, generated on first use."""
        check_choice(split, "split", SPLITS)
        if split not in self.datasets:
            sample = render_shapes(self.per_class[split], split_seed(self.hparams.data_seed, split), self.class_names)
            keep = self.hparams.caption_keep if split == "train" else 1.0
            self.datasets[split] = ShapesDataset(sample, self.class_names, caption_keep=keep)
        return self.datasets[split]

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit"):
            self.dataset("train")
        if stage in (None, "fit", "validate"):
            self.dataset("val")
        if stage in (None, "test"):
            self.dataset("test")

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self.dataset(split),
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
            drop_last=shuffle and len(self.dataset(split)) > self.hparams.batch_size,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
