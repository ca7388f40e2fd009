"""An evaluation's media through every logger, read back with each logger's own reader: TensorBoard's
EventAccumulator, MLflow's client on a local SQLite store, the files of an offline W&B run; and the ``media/`` folder
of the callback (``media.json`` and the PNGs it names) with no logger at all.

The reference for the pictures is the evaluation dataset itself: every thumbnail that comes back must equal the
dataset's picture of the id in its row, and every label the dataset's label of that id."""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from beyondlabels.callbacks import RetrievalEvalCallback  # noqa: E402
from beyondlabels.profiles import FeatureProfiles  # noqa: E402
from beyondlabels.utils import close_wandb  # noqa: E402
from tests.callbacks.toy import clustered_points

PROFILES = FeatureProfiles(
    {
        "a": {"size": 0, "parts": ["x"]},
        "b": {"size": 1, "parts": ["x", "y"]},
        "c": {"size": 2, "parts": ["y"]},
        "d": {"size": 2, "parts": []},
    },
    ordinal={"size": "0 small .. 2 big"},
    sets={"parts": ["x", "y"]},
)
CLASS_NAMES = ["a", "b", "c", "d"]
# what every logger must hold after a fit (figures and tables of the callback below; the grid of the table's pictures)
FIGURES = {"confidence_intervals", "embedding_projection", "profile_similarity", "mismatch_null"}
TABLES = {"worst_mismatches", "mismatch_pairs"}


class PictureDataset(Dataset):
    """Items ``{"image": 3x2x2 picture in [0, 1], "label", "id"}`` from clustered 12-d points."""

    def __init__(self, n: int, seed: int) -> None:
        points, self.labels = clustered_points(n, dim=12, seed=seed)
        self.pictures = torch.sigmoid(torch.from_numpy(points)).view(n, 3, 2, 2)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"image": self.pictures[i], "label": int(self.labels[i]), "id": i}

    def uint8(self, i: int) -> np.ndarray:
        """The H x W x 3 uint8 picture of id ``i``, converted here (round to nearest of value * 255)."""
        return np.rint(self.pictures[i].numpy().transpose(1, 2, 0) * 255).astype(np.uint8)


class PictureData(pl.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.train_set, self.eval_set = PictureDataset(48, seed=1), PictureDataset(29, seed=2)
        self.class_names = CLASS_NAMES

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=8)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.eval_set, batch_size=8)


class PictureEncoder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(12, 6)

    def encode_image(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x.flatten(1))

    def training_step(self, batch, batch_idx):
        z = torch.nn.functional.normalize(self.encode_image(batch["image"]), dim=1)
        same = (batch["label"][:, None] == batch["label"][None, :]).float()
        return ((z @ z.T - same) ** 2).mean()

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _callback(**options) -> RetrievalEvalCallback:
    settings = dict(
        every_n_epochs=1,
        ks=(1, 3),
        num_mismatches=4,
        profiles=PROFILES,
        profile_labels="index",
        mismatch_trials=50,
        projection_points=20,
        bootstrap_rounds=100,
        plot_every_n=1,
        strict=True,
    )
    return RetrievalEvalCallback(**{**settings, **options})


def _fit(tmp_path: Path, logger, callback=None, epochs: int = 2):
    callback = callback or _callback()
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    data = PictureData()
    try:
        trainer.fit(PictureEncoder(), data)
    finally:
        close_wandb()
    return callback, trainer, data


def _decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return np.asarray(image)


def _check_mismatch_rows(columns: list, rows: list, data: PictureData, picture) -> None:
    """Each row of ``worst_mismatches``: its labels are the dataset's labels of its ids, its two pictures (read
    with ``picture(cell)``) the dataset's pictures of those ids, and the pair is a mismatch."""
    assert rows, "the toy model should make mismatches"
    at = {c: i for i, c in enumerate(columns)}
    for row in rows:
        q, r = row[at["query_id"]], row[at["retrieved_id"]]
        labels = data.eval_set.labels
        assert row[at["query_label"]] == CLASS_NAMES[labels[q]] and row[at["retrieved_label"]] == CLASS_NAMES[labels[r]]
        assert labels[q] != labels[r]
        assert np.array_equal(picture(row[at["query_image"]]), data.eval_set.uint8(q))
        assert np.array_equal(picture(row[at["retrieved_image"]]), data.eval_set.uint8(r))


# ---- (d) the media folder, with no logger ----------------------------------------------------------------------------
def test_media_folder_without_a_logger_is_complete_and_replaced(tmp_path: Path):
    callback, trainer, data = _fit(tmp_path, logger=False)
    folder = tmp_path / "retrieval" / "media"
    assert callback.media_folder(trainer) == folder
    manifest = json.loads((folder / "media.json").read_text(encoding="utf-8"))
    last = callback.history[-1]
    assert len(callback.history) == 2
    assert (manifest["format"], manifest["prefix"], manifest["step"], manifest["epoch"]) == (
        1,
        "retrieval",
        last["step"],
        last["epoch"],
    )
    assert {f["name"] for f in manifest["figures"]} == FIGURES and {t["name"] for t in manifest["tables"]} == TABLES
    named = {"media.json"}
    for figure in manifest["figures"]:
        assert figure["file"] == f"{figure['name']}.png" and _decode((folder / figure["file"]).read_bytes()).ndim == 3
        named.add(figure["file"])
    tables = {t["name"]: t for t in manifest["tables"]}
    for table in manifest["tables"]:
        for row in table["rows"]:
            assert len(row) == len(table["columns"])
            named |= {cell["image"] for cell in row if isinstance(cell, dict)}
            assert all(cell is None or isinstance(cell, (str, int, float, dict)) for cell in row)
    mismatches = tables["worst_mismatches"]
    _check_mismatch_rows(
        mismatches["columns"], mismatches["rows"], data, lambda cell: _decode((folder / cell["image"]).read_bytes())
    )
    assert mismatches["rows"][0][0] == {"image": "tables/worst_mismatches/r000_query_image.png"}
    (curve,) = manifest["curves"]
    assert (
        curve["name"] == "precision_curve"
        and curve["x"] == [1, 2, 3]
        and curve["y"] == pytest.approx(last["precision_curve"])
    )
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    assert on_disk == named  # every file it names exists, and no other

    # a second evaluation with fewer rows replaces the first one's files: rows 2 and 3 are gone
    (folder / "tables" / "worst_mismatches" / "r009_query_image.png").write_bytes(b"stale")
    callback.num_mismatches = 2
    callback.evaluate(trainer, trainer.lightning_module)
    again = json.loads((folder / "media.json").read_text(encoding="utf-8"))
    rows = {t["name"]: t for t in again["tables"]}["worst_mismatches"]["rows"]
    assert len(rows) == 2
    left = sorted(p.name for p in (folder / "tables" / "worst_mismatches").iterdir())
    assert left == [
        "r000_query_image.png",
        "r000_retrieved_image.png",
        "r001_query_image.png",
        "r001_retrieved_image.png",
    ]
    assert callback.last_timings["media"] > 0


# ---- (a) TensorBoard -------------------------------------------------------------------------------------------------
def test_the_media_folder_is_written_where_media_folder_says(tmp_path: Path):
    class Elsewhere(RetrievalEvalCallback):
        def media_folder(self, trainer):
            return tmp_path / "elsewhere" / "media"

    settings = dict(
        every_n_epochs=1,
        ks=(1, 3),
        num_mismatches=2,
        profiles=PROFILES,
        profile_labels="index",
        mismatch_trials=10,
        projection_points=20,
        bootstrap_rounds=20,
        plot_every_n=1,
        strict=True,
    )
    callback, trainer, _ = _fit(tmp_path, logger=False, callback=Elsewhere(**settings), epochs=1)
    manifest = json.loads((tmp_path / "elsewhere" / "media" / "media.json").read_text(encoding="utf-8"))
    assert manifest["step"] == callback.history[-1]["step"]
    assert not (tmp_path / "retrieval" / "media").exists()


def _tensorboard(log_dir: str):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator", reason="needs the `tensorboard` extra"
    )
    accumulator = event_accumulator.EventAccumulator(log_dir, size_guidance={"images": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def test_tensorboard_gets_figures_curves_and_tables(tmp_path: Path):
    pytest.importorskip("tensorboard", reason="needs the `tensorboard` extra: pip install 'beyondlabels[tensorboard]'")
    from pytorch_lightning.loggers import TensorBoardLogger

    logger = TensorBoardLogger(save_dir=str(tmp_path), name="tb")
    callback, trainer, data = _fit(tmp_path, logger)
    # at the step Lightning logs the evaluations' scalars: the validation's, that of the epoch's last batch
    steps = [h["step"] - 1 for h in callback.history]
    events = _tensorboard(logger.log_dir)
    tags = events.Tags()
    images = {t for t in tags["images"] if t.startswith("retrieval/")}
    expected = {f"retrieval/{n}" for n in FIGURES | {"precision_curve", "worst_mismatches_images"}}
    assert images == expected
    for tag in expected - {"retrieval/profile_similarity"}:  # the heatmap is the same at every evaluation: sent once
        got = events.Images(tag)
        assert [e.step for e in got] == steps, tag
        for event in got:
            picture = _decode(event.encoded_image_string)
            assert picture.shape[:2] == (event.height, event.width) and picture.std() > 0, tag
    assert [e.step for e in events.Images("retrieval/profile_similarity")] == steps[:1]
    scalars = events.Scalars("retrieval/precision@1")
    assert [e.step for e in scalars] == steps
    # the tables as Markdown text: a header, a rule, then one line per row with the dataset's labels of its ids
    texts = {t for t in tags["tensors"] if t.startswith("retrieval/")}
    assert texts == {f"retrieval/{n}/text_summary" for n in TABLES}
    (*_, last) = events.Tensors("retrieval/worst_mismatches/text_summary")
    assert last.step == steps[-1]
    lines = last.tensor_proto.string_val[0].decode("utf-8").splitlines()
    columns = [c.strip() for c in lines[0].strip("|").split("|")]
    assert columns[:4] == ["query_image", "query_label", "retrieved_image", "retrieved_label"] and lines[1].startswith(
        "| ---"
    )
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    for row in rows:
        q, r = int(row[columns.index("query_id")]), int(row[columns.index("retrieved_id")])
        assert row[1] == CLASS_NAMES[data.eval_set.labels[q]] and row[3] == CLASS_NAMES[data.eval_set.labels[r]]
        assert row[0] == row[2] == "(image)"
    assert 1 <= len(rows) <= 4


# ---- (b) MLflow ------------------------------------------------------------------------------------------------------
def _artifacts(client, run_id: str, path: str | None = None) -> list[str]:
    out = []
    for item in client.list_artifacts(run_id, path):
        out += _artifacts(client, run_id, item.path) if item.is_dir else [item.path]
    return out


def test_mlflow_store_holds_figures_tables_and_the_media_folder(tmp_path: Path, monkeypatch):
    pytest.importorskip("mlflow", reason="needs the `mlflow` extra: pip install 'beyondlabels[mlflow]'")
    from mlflow.tracking import MlflowClient
    from pytorch_lightning.loggers import MLFlowLogger

    uploads = []  # the artifact folders uploaded, in order
    real = MlflowClient.log_artifacts

    def log_artifacts(self, run_id, local_dir, artifact_path=None):
        uploads.append(artifact_path)
        return real(self, run_id, local_dir, artifact_path)

    monkeypatch.setattr(MlflowClient, "log_artifacts", log_artifacts)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    logger = MLFlowLogger(
        experiment_name="media-test", tracking_uri=uri, artifact_location=(tmp_path / "artifacts").as_uri()
    )
    callback, trainer, data = _fit(tmp_path, logger, epochs=3)
    assert uploads.count("retrieval/media") == 1 and uploads[-1] == "retrieval/media"  # once, at the end of fit
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("media-test").experiment_id])
    # Lightning's MLFlowLogger drops the characters MLflow refuses in metric names ("@")
    assert run.data.metrics["retrieval/precision1"] == pytest.approx(callback.history[-1]["precision@1"])
    paths = set(_artifacts(client, run.info.run_id))
    for h in callback.history:
        base = f"retrieval/step_{h['step']:09d}"
        expected = {f"{base}/{n}.png" for n in FIGURES - {"profile_similarity"}} | {
            f"{base}/precision_curve.png",
            f"{base}/worst_mismatches_images.png",
        }
        expected |= {f"{base}/{n}.json" for n in TABLES}
        assert expected <= paths, expected - paths
    first = f"retrieval/step_{callback.history[0]['step']:09d}"
    assert f"{first}/profile_similarity.png" in paths  # sent once per fit
    assert {"retrieval/media/media.json", "retrieval/media/embedding_projection.png"} <= paths
    local = Path(client.download_artifacts(run.info.run_id, "retrieval", str(tmp_path / "download")))
    last = local / f"step_{callback.history[-1]['step']:09d}"
    assert _decode((last / "embedding_projection.png").read_bytes()).std() > 0
    table = json.loads((last / "worst_mismatches.json").read_text())
    manifest = json.loads((local / "media" / "media.json").read_text())
    assert manifest["step"] == callback.history[-1]["step"]
    # every step's image cells name PNGs of that step in the artifacts; they hold the dataset's pictures of its rows
    for h in callback.history:
        base = f"retrieval/step_{h['step']:09d}"
        table = json.loads((local.parent / base / "worst_mismatches.json").read_text())
        cells = [c for row in table["data"] for c in row if isinstance(c, str) and c.endswith(".png")]
        assert cells and all(c.startswith(f"{base}/tables/worst_mismatches/") for c in cells)
        _check_mismatch_rows(
            table["columns"], table["data"], data, lambda cell: _decode((local.parent / cell).read_bytes())
        )
    rows = [
        json.loads((local.parent / f"retrieval/step_{h['step']:09d}/worst_mismatches.json").read_text())["data"]
        for h in callback.history
    ]
    assert any(a != b for a, b in zip(rows, rows[1:])), "the evaluations should differ for this check to mean something"


# ---- (c) W&B offline -------------------------------------------------------------------------------------------------
def test_offline_wandb_run_keeps_the_pictures_of_its_tables(tmp_path: Path):
    from pytorch_lightning.loggers import WandbLogger

    from beyondlabels.io import read_offline_run

    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="beyondlabels-test")
    callback, trainer, data = _fit(tmp_path, logger)
    (run_dir,) = tmp_path.glob("wandb/offline-run-*/")
    run = read_offline_run(tmp_path)
    steps = [h["step"] - 1 for h in callback.history]  # the step Lightning logs the evaluations' scalars at
    tables_with_images = 0
    for key in run.keys():
        for step, value in run.series(key):
            if not (isinstance(value, dict) and value.get("_type") == "table-file"):
                continue
            table = json.loads((run_dir / "files" / value["path"]).read_text())
            if not any(c.endswith("_image") for c in table["columns"]):
                continue
            tables_with_images += 1
            # wandb keeps no picture inside an offline table; the grid of them is an image file of the same step
            (grid,) = [v for s, v in run.series(f"{key}_images") if s == step]
            assert grid["_type"] == "image-file"
            picture = _decode((run_dir / "files" / grid["path"]).read_bytes())
            assert picture.shape[0] > 100 and picture.std() > 0
    assert tables_with_images == len(steps)  # worst_mismatches at every evaluation
    global_step = dict(run.series("trainer/global_step"))  # W&B's own step -> the trainer's step it was logged at
    assert [global_step[s] for s, _ in run.series("retrieval/precision@1")] == steps  # the media beside the scalars
    for name in FIGURES - {"profile_similarity"}:
        assert [global_step[s] for s, _ in run.series(f"retrieval/{name}")] == steps, name
        for _, value in run.series(f"retrieval/{name}"):
            assert (run_dir / "files" / value["path"]).is_file()


# ---- (e) the same media everywhere ----------------------------------------------------------------------------------
def test_every_logger_gets_the_same_figures_and_tables(tmp_path: Path):
    pytest.importorskip("tensorboard", reason="needs the `tensorboard` extra")
    pytest.importorskip("mlflow", reason="needs the `mlflow` extra")
    from mlflow.tracking import MlflowClient
    from pytorch_lightning.loggers import (
        CSVLogger,
        MLFlowLogger,
        TensorBoardLogger,
        WandbLogger,
    )

    from beyondlabels.io import read_offline_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    loggers = [
        WandbLogger(save_dir=str(tmp_path), offline=True, project="beyondlabels-test"),
        TensorBoardLogger(str(tmp_path), name="tb"),
        MLFlowLogger(experiment_name="same", tracking_uri=uri, artifact_location=(tmp_path / "artifacts").as_uri()),
        CSVLogger(str(tmp_path)),
    ]
    callback, trainer, data = _fit(tmp_path, loggers, epochs=1)
    (step,) = [h["step"] for h in callback.history]
    manifest = json.loads((tmp_path / "retrieval" / "media" / "media.json").read_text())
    figures = (
        {f["name"] for f in manifest["figures"]} | {c["name"] for c in manifest["curves"]} | {"worst_mismatches_images"}
    )
    tables = {t["name"] for t in manifest["tables"]}
    assert manifest["step"] == step and tables == TABLES

    wandb_keys = {k.split("/", 1)[1] for k in read_offline_run(tmp_path).keys() if k.startswith("retrieval/")}
    curves = {c["name"] for c in manifest["curves"]}
    assert (figures - curves) | tables | {
        f"{c}_table" for c in curves
    } <= wandb_keys  # a W&B chart is stored as "<key>_table"
    events = _tensorboard(loggers[1].log_dir)
    assert {t.split("/", 1)[1] for t in events.Tags()["images"] if t.startswith("retrieval/")} == figures
    assert {t.split("/")[1] for t in events.Tags()["tensors"] if t.startswith("retrieval/")} == tables
    client = MlflowClient(tracking_uri=uri)
    base = f"retrieval/step_{step:09d}"
    stored = {
        Path(p).stem: Path(p).suffix
        for p in _artifacts(client, loggers[2].run_id, base)
        if not p.startswith(f"{base}/tables/")
    }
    assert stored == {**{n: ".png" for n in figures}, **{n: ".json" for n in tables}}


# ---- a failing logger ------------------------------------------------------------------------------------------------
def test_a_failing_logger_does_not_stop_the_run_or_the_others(tmp_path: Path, monkeypatch, caplog):
    pytest.importorskip("tensorboard", reason="needs the `tensorboard` extra")
    from pytorch_lightning.loggers import TensorBoardLogger

    from beyondlabels.callbacks import _sinks

    def broken(self, media, folder):
        raise OSError("disk full")

    monkeypatch.setattr(_sinks.TensorBoardSink, "log", broken)
    callback = _callback(strict=False)
    with caplog.at_level(logging.ERROR):
        callback, *_ = _fit(tmp_path, TensorBoardLogger(str(tmp_path), name="tb"), callback=callback, epochs=1)
    assert len(callback.history) == 1 and "error" not in callback.history[0]
    assert "to the TensorBoard (TensorBoardLogger) logger failed (OSError: disk full)" in caplog.text
    assert (tmp_path / "retrieval" / "media" / "media.json").is_file()  # the folder is written all the same
    with pytest.raises(OSError, match="disk full"):
        _fit(
            tmp_path / "strict", TensorBoardLogger(str(tmp_path / "strict"), name="tb"), callback=_callback(), epochs=1
        )


def test_a_logger_failing_at_every_evaluation_logs_its_traceback_once(tmp_path: Path, monkeypatch, caplog):
    pytest.importorskip("tensorboard", reason="needs the `tensorboard` extra")
    from pytorch_lightning.loggers import TensorBoardLogger

    from beyondlabels.callbacks import _sinks

    def broken(self, media, folder):
        raise OSError("disk full")

    monkeypatch.setattr(_sinks.TensorBoardSink, "log", broken)
    with caplog.at_level(logging.ERROR):
        callback, *_ = _fit(
            tmp_path, TensorBoardLogger(str(tmp_path), name="tb"), callback=_callback(strict=False), epochs=3
        )
    steps = [h["step"] for h in callback.history]
    lines = [r.getMessage() for r in caplog.records if "TensorBoard (TensorBoardLogger)" in r.getMessage()]
    assert len(steps) == 3 and len(lines) >= 3
    assert lines[0].startswith(f"retrieval: logging the media of step {steps[0]} (") and "worst_mismatches" in lines[0]
    assert "Traceback" in lines[0] and not any("Traceback" in line for line in lines[1:])
    assert lines[2].endswith("failed again (OSError: disk full); 3 failures of this logger in this fit")
    assert "nothing on disk was damaged" not in caplog.text  # a logger is not the disk


# ---- optional packages -----------------------------------------------------------------------------------------------
def test_the_media_need_neither_tensorboard_nor_mlflow(tmp_path: Path):
    """In a process where importing tensorboard or mlflow fails, the callbacks import, a fit with a CSV logger writes
    its media folder, and only loggers that need the packages would fail."""
    import subprocess

    script = f"""
import sys
for name in ("tensorboard", "tensorboardX", "mlflow"):
    sys.modules[name] = None  # import raises ImportError
import pytorch_lightning as pl
from pytorch_lightning.loggers import CSVLogger
from tests.callbacks.test_media_loggers import PictureData, PictureEncoder, _callback
callback = _callback()
trainer = pl.Trainer(default_root_dir={str(tmp_path)!r}, max_epochs=1, accelerator="cpu", devices=1,
                     callbacks=[callback], logger=CSVLogger({str(tmp_path)!r}), enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False)
trainer.fit(PictureEncoder(), PictureData())
assert "error" not in callback.history[-1]
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
    assert (tmp_path / "retrieval" / "media" / "media.json").is_file()


@pytest.mark.parametrize("package", ["pytorch_lightning", "lightning.pytorch"])
def test_one_sink_per_media_logger_of_either_package(tmp_path: Path, package: str):
    import importlib
    from types import SimpleNamespace

    from beyondlabels.callbacks._sinks import (
        MLflowSink,
        TensorBoardSink,
        WandbSink,
        media_sinks,
    )

    loggers = importlib.import_module(f"{package}.loggers")
    made = [loggers.CSVLogger(str(tmp_path)), loggers.WandbLogger(save_dir=str(tmp_path), offline=True)]
    kinds = [WandbSink]
    optional = [
        (lambda: loggers.TensorBoardLogger(str(tmp_path)), TensorBoardSink),
        (lambda: loggers.MLFlowLogger(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}"), MLflowSink),
    ]
    for make, kind in optional:
        try:
            made.append(make())
        except ModuleNotFoundError:  # the logger's optional package is not installed
            continue
        kinds.append(kind)
    sinks = media_sinks(SimpleNamespace(loggers=made))
    assert [type(s) for s in sinks] == kinds and [s.logger for s in sinks] == made[1:]
