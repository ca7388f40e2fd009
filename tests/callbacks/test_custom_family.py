"""A new metric family built from the three bases alone (kernel, PerSampleMetric, EvaluationCallback), as
docs/adding_a_metric_family.md describes: the bases must carry schedule, dedup, logging, files and media for it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from beyondlabels.callbacks import EvaluationCallback  # noqa: E402
from beyondlabels.io.run_files import read_history  # noqa: E402
from beyondlabels.metrics import PerSampleMetric  # noqa: E402
from beyondlabels.schema import KeySpec, OutputSchema  # noqa: E402
from tests.callbacks.toy import LinearEncoder, PointDataModule


def nearest_centre_accuracy(predictions: torch.Tensor, labels: torch.Tensor) -> dict:
    """Kernel: per-sample correctness and its mean."""
    correct = (predictions == labels).to(torch.float64)
    return {"accuracy": correct.mean(), "num_samples": torch.tensor(labels.numel()), "per_query": {"accuracy": correct}}


class NearestCentreAccuracy(PerSampleMetric):
    batch_value = True  # a batch has a meaningful accuracy of its own

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_sample_state("predictions")
        self.add_sample_state("labels", agree=True)

    def output_schema(self) -> OutputSchema:
        return OutputSchema(
            {"accuracy": KeySpec("scalar", True), "num_samples": KeySpec("scalar", None, count=True)},
            {"accuracy": KeySpec("per_query", True)},
        )

    def update(self, predictions, labels, ids=None):
        ids = self.check_ids(ids, len(labels), predictions.device)
        self.append_samples(ids, predictions=predictions.long(), labels=labels.long())

    def compute(self):
        samples = self.gathered_samples()
        out = nearest_centre_accuracy(samples.values["predictions"], samples.values["labels"])
        out["per_query"]["query_id"] = samples.ids
        return out


class NearestCentreCallback(EvaluationCallback):
    def __init__(self, **kwargs):
        super().__init__(prefix="centre", **kwargs)

    def build_metric(self):
        return NearestCentreAccuracy()

    def feed(self, pl_module, batch):
        x = batch["image"].to(pl_module.device)
        predictions = pl_module.encode_image(x)[:, :4].argmax(dim=1)  # "class" = the largest of the first 4 outputs
        self.metric.update(predictions, torch.as_tensor(batch["label"]), self.take_ids(len(x), batch.get("id")))

    def describe_media(self, trainer, results, media):
        from matplotlib.figure import Figure

        per_query = results["per_query"]
        wrong = [[i] for i, a in zip(per_query["query_id"].tolist(), per_query["accuracy"].tolist()) if a == 0]
        media.table("wrong_ids", ["id"], wrong[:5])
        figure = Figure(figsize=(2, 2))
        figure.add_subplot().bar([0, 1], [len(wrong), len(per_query["accuracy"]) - len(wrong)])
        media.figure("right_and_wrong", figure, caption="wrong, right")


def test_a_family_built_on_the_bases_logs_files_and_history(tmp_path: Path):
    dm = PointDataModule()
    callback = NearestCentreCallback(every_n_steps=4, prog_bar=["accuracy"])
    model = LinearEncoder(lr=0.0)
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=1,
        accelerator="cpu",
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, dm)
    with torch.no_grad():
        predictions = model.proj(torch.from_numpy(dm.eval_set.points))[:, :4].argmax(dim=1).numpy()
    expected = float(np.mean(predictions == dm.eval_set.labels))
    assert [h["step"] for h in callback.history] == [4, 8]
    assert callback.history[-1]["accuracy"] == pytest.approx(expected) and callback.history[-1]["num_samples"] == 37
    assert float(trainer.callback_metrics["centre/accuracy"]) == pytest.approx(expected)
    saved = read_history(tmp_path / "centre" / "history.jsonl")
    assert saved[-1]["per_query_file"] == "per_query/step_000000008.npz"
    with np.load(tmp_path / "centre" / saved[-1]["per_query_file"]) as per_query:
        assert per_query["query_id"].tolist() == list(range(37))
        assert per_query["accuracy"].tolist() == (predictions == dm.eval_set.labels).astype(float).tolist()
    # the family's media of the last evaluation, in its media/ folder
    manifest = json.loads((tmp_path / "centre" / "media" / "media.json").read_text())
    assert manifest["step"] == 8 and manifest["prefix"] == "centre"
    (table,) = manifest["tables"]
    assert table["name"] == "wrong_ids" and table["rows"] == [
        [int(i)] for i in np.flatnonzero(predictions != dm.eval_set.labels)[:5]
    ]
    assert [f["name"] for f in manifest["figures"]] == ["confidence_intervals", "right_and_wrong"]
    assert (tmp_path / "centre" / "media" / "right_and_wrong.png").read_bytes().startswith(b"\x89PNG")


def test_batch_value_families_keep_torchmetrics_forward():
    metric = NearestCentreAccuracy()
    first = metric(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 0]))
    assert float(first["accuracy"]) == pytest.approx(2 / 3)  # the batch's own value
    metric(torch.tensor([0]), torch.tensor([0]))
    assert float(metric.compute()["accuracy"]) == pytest.approx(3 / 4)  # accumulated, ids never collide
