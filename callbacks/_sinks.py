"""Where an evaluation's media go: one sink per kind of Lightning logger of the trainer (either package).

- ``WandbLogger``: curves as line series, figures as ``wandb.Image``, tables as ``wandb.Table`` and, for a table
  with pictures, one captioned grid of them as a ``wandb.Image`` under ``<prefix>/<table>_images`` (images logged
  directly are saved in offline runs and survive ``wandb sync``; image cells inside an offline table are not);
- ``TensorBoardLogger``: figures and table grids as images (``add_image``), curves as figures (``add_figure``),
  tables as Markdown text (``add_text``);
- ``MLFlowLogger``: figures and table grids as images (``log_image``), curves as figures (``log_figure``), tables as
  JSON artifacts in the ``{"columns": [...], "data": [...]}`` layout of ``log_table`` (which would need pandas;
  an image cell holds the artifact path of its PNG, ``<prefix>/step_<step>/tables/<table>/r<row>_<column>.png``),
  under ``<prefix>/step_<step>/``; at the end of fit, the files of the callback's ``media/`` folder (the last
  evaluation's) under ``<prefix>/media/``, once;
- any other logger (CSV, a custom one): nothing beyond the scalars.

Every item is logged under ``<prefix>/<name>`` at the step the loggers got the evaluation's scalars
(``media.log_step``: Lightning's logging step); captions and MLflow's folders name the evaluation by
``trainer.global_step`` (``media.step``), as the callback's files do.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from beyondlabels.callbacks.media import EvaluationMedia, MediaTable
from beyondlabels.callbacks.packages import is_lightning_instance
from beyondlabels.io.atomic import atomic_file
from beyondlabels.io.media_files import encode_png, table_image_path
from beyondlabels.schema import OutputSchema

__all__ = [
    "MLflowSink",
    "MediaSink",
    "TensorBoardSink",
    "WandbSink",
    "decode_png",
    "folder_name",
    "markdown_table",
    "media_sinks",
]


def decode_png(png: bytes) -> np.ndarray:
    """PNG bytes as an H×W×3 uint8 array."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("RGB"))


def _text(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "(image)"
    if value is None:
        return ""
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: MediaTable) -> str:
    """``table`` as a Markdown table (image cells shown as ``(image)``; the pictures are logged as a grid).

    Examples:
        >>> print(markdown_table(MediaTable("t", ["a", "b"], [[1, 0.123456], ["x|y", None]])))
        | a | b |
        | --- | --- |
        | 1 | 0.1235 |
        | x\\|y |  |
    """
    lines = ["| " + " | ".join(table.columns) + " |", "| " + " | ".join("---" for _ in table.columns) + " |"]
    lines += ["| " + " | ".join(_text(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines)


class MediaSink:
    """Sends an :class:`EvaluationMedia` to one logger."""

    kind = "logger"

    def __init__(self, logger: Any) -> None:
        self.logger = logger

    def log(self, media: EvaluationMedia, folder: Path | None) -> None:
        """Log ``media``; ``folder`` is the ``media/`` folder just written for it (None without one)."""
        raise NotImplementedError

    def finish(self, prefix: str, folder: Path) -> None:
        """At the end of fit: the callback's ``media/`` folder (the last evaluation's media). Nothing by default."""

    @staticmethod
    def curve_figure(media: EvaluationMedia, curve: Any) -> Any:
        from beyondlabels.reporting.media_figures import curves_figure

        return curves_figure(
            curve.x,
            {f"step {media.step}": curve.y},
            curve.xname,
            curve.name,
            title=f"{media.prefix}: {curve.name} (step {media.step})",
        )


class WandbSink(MediaSink):
    """Media through a Lightning ``WandbLogger`` (always ``logger.log_metrics(..., step=...)``, never ``wandb.log``)."""

    kind = "W&B"

    def __init__(self, logger: Any, schema: OutputSchema | None = None, defined: set[str] | None = None) -> None:
        super().__init__(logger)
        self.schema, self.defined = schema, defined if defined is not None else set()

    def define_metrics(self, prefix: str) -> None:
        """Declare every scalar key of the schema not yet declared: x-axis ``trainer/global_step``, summary from the
        schema's direction (``max``, ``min``, or ``last`` for counts)."""
        if self.schema is None:
            return
        experiment = self.logger.experiment
        for name in self.schema.scalar_keys():
            key = f"{prefix}/{name}"
            if key not in self.defined:
                experiment.define_metric(key, step_metric="trainer/global_step", summary=self.schema[name].summary)
                self.defined.add(key)

    def log(self, media: EvaluationMedia, folder: Path | None) -> None:
        import wandb

        self.define_metrics(media.prefix)
        items: dict[str, Any] = {}
        for curve in media.curves:
            items[curve.name] = wandb.plot.line_series(
                xs=list(curve.x),
                ys=[list(curve.y)],
                keys=[f"step {media.step}"],
                xname=curve.xname,
                title=f"{media.prefix}: {curve.name} (step {media.step})",
            )
        for figure in media.figures:
            if figure.to_loggers:
                items[figure.name] = wandb.Image(decode_png(figure.png), caption=figure.caption or None)
        for table in media.tables:
            data = [[wandb.Image(c) if isinstance(c, np.ndarray) else c for c in row] for row in table.rows]
            items[table.name] = wandb.Table(columns=list(table.columns), data=data)
            if table.image_columns and table.rows:
                caption = (
                    f"{table.name}: {', '.join(table.image_columns)} of {len(table.rows)} rows (step {media.step})"
                )
                items[f"{table.name}_images"] = wandb.Image(media.table_grid(table), caption=caption)
        if items:
            self.logger.log_metrics({f"{media.prefix}/{k}": v for k, v in items.items()}, step=media.log_step)


class TensorBoardSink(MediaSink):
    """Media through a Lightning ``TensorBoardLogger`` (its ``SummaryWriter``)."""

    kind = "TensorBoard"

    def log(self, media: EvaluationMedia, folder: Path | None) -> None:
        writer, step, prefix = self.logger.experiment, media.log_step, media.prefix
        for figure in media.figures:
            if figure.to_loggers:
                writer.add_image(f"{prefix}/{figure.name}", decode_png(figure.png), global_step=step, dataformats="HWC")
        for curve in media.curves:
            writer.add_figure(f"{prefix}/{curve.name}", self.curve_figure(media, curve), global_step=step, close=False)
        for table in media.tables:
            writer.add_text(f"{prefix}/{table.name}", markdown_table(table), global_step=step)
            if table.image_columns and table.rows:
                grid = media.table_grid(table)
                writer.add_image(f"{prefix}/{table.name}_images", grid, global_step=step, dataformats="HWC")
        writer.flush()


class MLflowSink(MediaSink):
    """Media through a Lightning ``MLFlowLogger`` (its ``MlflowClient`` and run)."""

    kind = "MLflow"

    def log(self, media: EvaluationMedia, folder: Path | None) -> None:
        client, run_id = self.logger.experiment, self.logger.run_id
        base = f"{media.prefix}/step_{media.step:09d}"
        for figure in media.figures:
            if figure.to_loggers:
                client.log_image(run_id, decode_png(figure.png), artifact_file=f"{base}/{figure.name}.png")
        for curve in media.curves:
            client.log_figure(run_id, self.curve_figure(media, curve), artifact_file=f"{base}/{curve.name}.png")
        for table in media.tables:
            # an image cell names its PNG among this step's artifacts
            cells: dict[str, np.ndarray] = {}
            data = []
            for r, row in enumerate(table.rows):
                out = []
                for column, value in zip(table.columns, row):
                    if isinstance(value, np.ndarray):
                        relative = table_image_path(table.name, r, column)
                        cells[relative] = value
                        out.append(f"{base}/{relative}")
                    else:
                        out.append(value)
                data.append(out)
            if cells:
                with tempfile.TemporaryDirectory() as staging:
                    for relative, value in cells.items():
                        with atomic_file(Path(staging) / relative) as handle:
                            handle.write(encode_png(value))
                    client.log_artifacts(run_id, staging, artifact_path=base)
            client.log_dict(
                run_id, {"columns": list(table.columns), "data": data}, artifact_file=f"{base}/{table.name}.json"
            )
            if table.image_columns and table.rows:
                grid = media.table_grid(table)
                client.log_image(run_id, grid, artifact_file=f"{base}/{table.name}_images.png")

    def finish(self, prefix: str, folder: Path) -> None:
        if folder.is_dir():
            self.logger.experiment.log_artifacts(self.logger.run_id, str(folder), artifact_path=folder_name(prefix))


def folder_name(prefix: str) -> str:
    """Where a callback's ``media/`` folder goes in an MLflow run's artifacts: ``<prefix>/media``."""
    return f"{prefix}/media"


def media_sinks(trainer: Any, schema: OutputSchema | None = None, defined: set[str] | None = None) -> list[MediaSink]:
    """One sink per media-capable logger of ``trainer`` (W&B, TensorBoard, MLflow; either Lightning package), in the
    trainer's order; ``schema`` and ``defined`` (the keys already declared) let the W&B sink declare the scalars."""
    sinks: list[MediaSink] = []
    for logger in trainer.loggers:
        if is_lightning_instance(logger, "WandbLogger"):
            sinks.append(WandbSink(logger, schema, defined))
        elif is_lightning_instance(logger, "TensorBoardLogger"):
            sinks.append(TensorBoardSink(logger))
        elif is_lightning_instance(logger, "MLFlowLogger"):
            sinks.append(MLflowSink(logger))
    return sinks
