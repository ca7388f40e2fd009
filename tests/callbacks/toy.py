"""A small deterministic retrieval problem for callback tests: clustered points and a linear encoder."""

from __future__ import annotations

import importlib

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def clustered_points(
    n: int, num_classes: int = 4, dim: int = 8, noise: float = 0.9, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(num_classes, dim))
    labels = np.arange(n) % num_classes
    points = centres[labels] + noise * rng.normal(size=(n, dim))
    return points.astype(np.float32), labels.astype(np.int64)


class PointDataset(Dataset):
    """Items ``{"image": point, "label": int, "id": index}`` (the callback's default keys)."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.points, self.labels = clustered_points(n, seed=seed)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"image": torch.from_numpy(self.points[i]), "label": int(self.labels[i]), "id": i}


def lightning_classes(package: str = "pytorch_lightning") -> tuple[type, type]:
    """``(PointDataModule, LinearEncoder)`` built on the Lightning package ``package`` (``"pytorch_lightning"`` or
    ``"lightning.pytorch"``); the module-level classes are the ``pytorch_lightning`` ones."""
    if package not in _CLASSES:
        _CLASSES[package] = _define(importlib.import_module(package))
    return _CLASSES[package]


def _define(pl):
    class PointDataModule(pl.LightningDataModule):
        def __init__(self, n_train: int = 64, n_eval: int = 37, batch_size: int = 8) -> None:
            super().__init__()
            self.train_set, self.eval_set, self.batch_size = (
                PointDataset(n_train, seed=1),
                PointDataset(n_eval, seed=2),
                batch_size,
            )

        def train_dataloader(self) -> DataLoader:
            return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=False)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(self.eval_set, batch_size=self.batch_size)

    class LinearEncoder(pl.LightningModule):
        """Embeds points with one linear layer trained by a pull-to-class-centre loss."""

        def __init__(self, dim: int = 8, out: int = 6, lr: float = 0.05, fail_on_call: int | None = None) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.proj = torch.nn.Linear(dim, out)
            self.lr = lr
            self.fail_on_call = fail_on_call
            self.calls = 0

        def encode_image(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            if self.fail_on_call is not None and self.calls == self.fail_on_call:
                raise RuntimeError("encoder exploded")
            return self.proj(x)

        def training_step(self, batch, batch_idx):
            z = torch.nn.functional.normalize(self.proj(batch["image"]), dim=1)
            same = (batch["label"][:, None] == batch["label"][None, :]).float()
            loss = ((z @ z.T - same) ** 2).mean()
            self.log("train/loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            pass

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    return PointDataModule, LinearEncoder


_CLASSES: dict = {}
PointDataModule, LinearEncoder = lightning_classes("pytorch_lightning")


def brute_force_precision_at_1_and_r_precision(embeddings: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Leave-one-out P@1 and R-precision by a full argsort per query (no lone queries expected)."""
    x = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    sims = x @ x.T
    p1, rp = [], []
    for q in range(len(x)):
        others = np.array([j for j in range(len(x)) if j != q])
        order = others[np.argsort(-sims[q, others], kind="stable")]
        relevant = labels[order] == labels[q]
        r = int(relevant.sum())
        p1.append(float(relevant[0]))
        rp.append(relevant[:r].mean())
    return float(np.mean(p1)), float(np.mean(rp))
