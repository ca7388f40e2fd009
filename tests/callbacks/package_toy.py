"""A small dual encoder and its data as a user would write them, for either Lightning package.

``toy_classes("lightning.pytorch")`` or ``toy_classes("pytorch_lightning")`` returns LightningModules and a
LightningDataModule of that package, built from the package's own base classes, and ``all_callbacks(package, ...)``
every beyondlabels callback of that package beside the package's own ModelCheckpoint, EarlyStopping and
LearningRateMonitor. The module has every method the callbacks call: ``encode_image``, ``encode_text``,
``predict_labels`` and ``generate``; a colour evaluator scores the generated pictures.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

CLASS_NAMES = ("alpha", "beta", "gamma", "delta")
PROMPTS = [f"{name} shape number {i}" for i in range(6) for name in CLASS_NAMES]


def _seeded(text: str, size: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(int(hashlib.sha256(text.encode()).hexdigest()[:12], 16))
    return torch.randn(size, generator=g)


def colour(prompt: str) -> torch.Tensor:
    return torch.sigmoid(_seeded(prompt, 3))


class ColourEvaluator:
    """Pictures → mean colour, prompts → their colour (centred): a faithful generator matches its prompt exactly."""

    identity = {"model": "colour", "weights": "none"}
    identity_hash = "colour"

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        return images.mean(dim=(2, 3)) - 0.5

    def encode_texts(self, texts: Any) -> torch.Tensor:
        return torch.stack([colour(t) for t in texts]) - 0.5


class PairDataset(Dataset):
    """``{"image": 3×2×2 picture of a clustered point, "caption", "label", "id"}``."""

    def __init__(self, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        centres = rng.normal(size=(len(CLASS_NAMES), 12))
        self.labels = np.arange(n) % len(CLASS_NAMES)
        self.points = (centres[self.labels] + 0.9 * rng.normal(size=(n, 12))).astype(np.float32)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        label = int(self.labels[i])
        return {
            "image": torch.from_numpy(self.points[i]).view(3, 2, 2),
            "caption": f"{CLASS_NAMES[label]} picture {i}",
            "label": label,
            "id": i,
        }


@functools.cache
def toy_classes(package: str) -> tuple[type, type, type]:
    """``(DualEncoder, TrainOnlyEncoder, PairData)``: LightningModules with and without a validation loop and a
    LightningDataModule, of ``package``."""
    pl = importlib.import_module(package)

    class TrainOnlyEncoder(pl.LightningModule):
        """Without a validation loop (epoch-scheduled evaluations then run at the end of each training epoch)."""

        def __init__(self, lr: float = 0.05) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.image_proj = torch.nn.Linear(12, 6)
            self.text_proj = torch.nn.Linear(12, 6)
            self.lr = lr
            self.prompts = PROMPTS

        def encode_image(self, images: torch.Tensor) -> torch.Tensor:
            return self.image_proj(images.flatten(1))

        def encode_text(self, texts: list[str]) -> torch.Tensor:
            return self.text_proj(
                torch.stack([_seeded(t.split()[0] if t.split()[0] in CLASS_NAMES else t, 12) for t in texts]).to(
                    self.device
                )
            )

        def predict_labels(self, images: torch.Tensor) -> torch.Tensor:
            return self.encode_image(images)[:, : len(CLASS_NAMES)].argmax(dim=1)

        def generate(self, prompts: list[str]) -> torch.Tensor:
            return torch.stack([colour(p).view(3, 1, 1).expand(3, 4, 4) for p in prompts])

        def training_step(self, batch, batch_idx):
            img = torch.nn.functional.normalize(self.encode_image(batch["image"]), dim=1)
            txt = torch.nn.functional.normalize(self.encode_text(list(batch["caption"])), dim=1)
            loss = -(img * txt).sum(dim=1).mean()
            self.log("train/loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    class DualEncoder(TrainOnlyEncoder):
        def validation_step(self, batch, batch_idx):
            pass

    class PairData(pl.LightningDataModule):
        class_names = CLASS_NAMES

        def __init__(self, n_train: int = 32, n_eval: int = 24, batch_size: int = 8) -> None:
            super().__init__()
            self.train_set, self.eval_set, self.batch_size = PairDataset(n_train, 1), PairDataset(n_eval, 2), batch_size

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.train_set, batch_size=self.batch_size)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(self.eval_set, batch_size=self.batch_size)

    return DualEncoder, TrainOnlyEncoder, PairData


def callbacks_module(package: str) -> Any:
    """The beyondlabels module holding the callbacks of ``package``."""
    return importlib.import_module(
        {"lightning.pytorch": "beyondlabels.callbacks.lightning", "pytorch_lightning": "beyondlabels.callbacks"}[
            package
        ]
    )


def all_callbacks(package: str, checkpoint_dir: str) -> list[Any]:
    """Every beyondlabels callback of ``package`` and the package's own ModelCheckpoint, EarlyStopping and
    LearningRateMonitor (watching a retrieval key) in one list."""
    from beyondlabels.taxonomy import Taxonomy

    ours = callbacks_module(package)
    lightning_callbacks = importlib.import_module(f"{package}.callbacks")
    tree = Taxonomy(
        {"AB": "root", "CD": "root", "alpha": "AB", "beta": "AB", "gamma": "CD", "delta": "CD"}, root="root"
    )
    return [
        ours.RetrievalEvalCallback(ks=(1, 3), prog_bar=["precision@1"], strict=True, bootstrap_rounds=200),
        ours.CrossModalEvalCallback(ks=(1, 3), max_captions_per_image=1, strict=True, bootstrap_rounds=200),
        ours.ZeroShotEvalCallback(
            class_names=list(CLASS_NAMES), templates=["a {}"], ks=(1, 2), strict=True, bootstrap_rounds=200
        ),
        ours.HierarchyEvalCallback(tree, class_names=list(CLASS_NAMES), strict=True, bootstrap_rounds=200),
        ours.RPrecisionEvalCallback(
            ColourEvaluator(),
            num_prompts=12,
            num_candidates=4,
            top_r=(1, 2),
            every_n_steps=2,
            near_duplicate_threshold=None,
            strict=True,
            bootstrap_rounds=200,
        ),
        ours.ConvergenceMonitor("retrieval/precision@1", window=2, rounds=100),
        lightning_callbacks.ModelCheckpoint(
            dirpath=checkpoint_dir, monitor="retrieval/precision@1", mode="max", save_top_k=1
        ),
        lightning_callbacks.EarlyStopping(monitor="retrieval/precision@1", mode="max", patience=10),
        lightning_callbacks.LearningRateMonitor(logging_interval="step"),
    ]
