"""W&B media for evaluation callbacks: curves and sample tables, logged through the Lightning logger."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from beyondlabels.callbacks.packages import is_lightning_instance
from beyondlabels.schema import OutputSchema


def find_wandb_logger(trainer: Any) -> Any | None:
    """The trainer's first ``WandbLogger`` (of either Lightning package), or None."""
    return next((lg for lg in trainer.loggers if is_lightning_instance(lg, "WandbLogger")), None)


def dataset_item(dataset: Any, sample_id: int, id_key: str) -> Any | None:
    """The evaluation dataset's item of ``sample_id`` when the dataset is indexed by id (item ``i`` has id ``i``),
    else None. Dict items must carry ``id_key`` equal to the id (so a dataset whose ids are not its indices is never
    misread); tuple items are taken as they are at index ``sample_id``."""
    if dataset is None or not hasattr(dataset, "__getitem__"):
        return None
    try:
        item = dataset[sample_id]
    except Exception:  # noqa: BLE001 - no item is not an error: the table cell stays empty
        return None
    if isinstance(item, dict):
        return item if id_key in item and int(item[id_key]) == sample_id else None
    return item if isinstance(item, (list, tuple)) and item else None


def thumbnail(dataset: Any, sample_id: int, image_key: str, id_key: str) -> torch.Tensor | None:
    """The C×H×W image of ``sample_id`` (:func:`dataset_item`; ``image_key`` of a dict item, the first entry of a
    tuple item), or None.

    Example:
        >>> data = [{"id": 0, "image": torch.zeros(3, 2, 2)}, {"id": 5, "image": torch.ones(3, 2, 2)}]
        >>> thumbnail(data, 0, "image", "id").shape, thumbnail(data, 1, "image", "id")  # item 1 carries id 5
        (torch.Size([3, 2, 2]), None)
    """
    item = dataset_item(dataset, sample_id, id_key)
    image = item.get(image_key) if isinstance(item, dict) else item[0] if item is not None else None
    return image if isinstance(image, torch.Tensor) and image.ndim == 3 else None


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

    def __init__(self, logger: Any, step: int, prefix: str) -> None:
        self.logger, self.step, self.prefix = logger, step, prefix

    def define_metrics(self, schema: OutputSchema, done: set[str]) -> None:
        """Declare every scalar key of ``schema`` not yet in ``done``: x-axis ``trainer/global_step``, summary from
        the schema's direction (``max``, ``min``, or ``last`` for counts)."""
        experiment = self.logger.experiment
        for name in schema.scalar_keys():
            key = f"{self.prefix}/{name}"
            if key in done:
                continue
            experiment.define_metric(key, step_metric="trainer/global_step", summary=schema[name].summary)
            done.add(key)

    def curve(self, name: str, values: Sequence[float], xname: str = "k") -> None:
        """One curve (``values[i]`` at x = i + 1) as a W&B line series under ``<prefix>/<name>``."""
        import wandb

        xs = list(range(1, len(values) + 1))
        plot = wandb.plot.line_series(
            xs=xs, ys=[list(values)], keys=[f"step {self.step}"], title=f"{self.prefix}: {name} (step {self.step})", xname=xname
        )
        self.logger.log_metrics({f"{self.prefix}/{name}": plot}, step=self.step)

    def mismatch_table(self, rows: Sequence[dict[str, Any]]) -> None:
        """Table of (query, retrieved) pairs with thumbnails; image cells are None when unavailable."""
        columns = ["query_image", "query_label", "retrieved_image", "retrieved_label", "cosine", "query_id", "retrieved_id"]
        self.table("worst_mismatches", columns, rows)

    def table(self, name: str, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
        """A W&B table under ``<prefix>/<name>``; cells of columns ending in ``_image`` become ``wandb.Image``."""
        import wandb

        data = []
        for row in rows:
            cells = []
            for column in columns:
                value = row.get(column)
                if column.endswith("_image"):
                    value = wandb.Image(to_uint8_image(value)) if value is not None else None
                cells.append(value)
            data.append(cells)
        self.logger.log_metrics({f"{self.prefix}/{name}": wandb.Table(columns=list(columns), data=data)}, step=self.step)
