"""W&B media for evaluation callbacks: curves and sample tables, logged through the Lightning logger."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import WandbLogger


def find_wandb_logger(trainer: pl.Trainer) -> WandbLogger | None:
    """The trainer's first WandbLogger, or None."""
    return next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)


def to_uint8_image(image: torch.Tensor) -> Any:
    """A C×H×W tensor (floats in [0, 1] or uint8) as an H×W×C uint8 numpy array for ``wandb.Image``."""
    image = image.detach().cpu()
    if image.dtype != torch.uint8:
        image = (image.float().clamp(0, 1) * 255).round().to(torch.uint8)
    return image.permute(1, 2, 0).numpy()


class WandbMedia:
    """Logs media of one evaluation at ``step`` under ``prefix/`` through a Lightning WandbLogger.

    Everything goes through ``logger.log_metrics(..., step=trainer.global_step)`` so W&B steps and
    Lightning steps agree (never ``wandb.log(step=...)``).
    """

    def __init__(self, logger: WandbLogger, step: int, prefix: str) -> None:
        self.logger, self.step, self.prefix = logger, step, prefix

    def define_metrics(self, names: Sequence[str], done: set[str]) -> None:
        """Declare exact scalar keys not yet in ``done``: x-axis ``trainer/global_step``, summary max (min for ranks)."""
        experiment = self.logger.experiment
        for name in names:
            key = f"{self.prefix}/{name}"
            if key in done:
                continue
            summary = "min" if "rank" in name else "max"
            experiment.define_metric(key, step_metric="trainer/global_step", summary=summary)
            done.add(key)

    def precision_curve(self, curve: Sequence[float]) -> None:
        """precision@k against k for k = 1..len(curve), one line series per evaluation."""
        import wandb

        ks = list(range(1, len(curve) + 1))
        plot = wandb.plot.line_series(
            xs=ks, ys=[list(curve)], keys=[f"step {self.step}"], title=f"{self.prefix}: precision@k (step {self.step})", xname="k"
        )
        self.logger.log_metrics({f"{self.prefix}/precision_at_k_curve": plot}, step=self.step)

    def mismatch_table(self, rows: Sequence[dict[str, Any]]) -> None:
        """Table of (query, retrieved) pairs with thumbnails; image cells are None when unavailable."""
        import wandb

        columns = ["query_image", "query_label", "retrieved_image", "retrieved_label", "cosine", "query_id", "retrieved_id"]
        data = []
        for row in rows:
            cells = []
            for column in columns:
                value = row.get(column)
                if column.endswith("_image"):
                    value = wandb.Image(to_uint8_image(value)) if value is not None else None
                cells.append(value)
            data.append(cells)
        table = wandb.Table(columns=columns, data=data)
        self.logger.log_metrics({f"{self.prefix}/worst_mismatches": table}, step=self.step)
