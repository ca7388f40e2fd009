"""ZeroShotEvalCallback in a real fit: logged values equal a computation from the module's own text and image towers,
class embeddings rebuilt once per evaluation (the text tower trains) and reused within it, class names from the
datamodule, string labels, the W&B confusion matrix under strict mode, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from beyondlabels.callbacks import ZeroShotEvalCallback  # noqa: E402
from tests.callbacks.test_crossmodal_callback import (
    CLASS_NAMES,
    DualEncoder,
    PairDataModule,
    _trainer,
    offline_run_table,
)

TEMPLATES = ["a {}", "a picture of a {}"]


def expected_top(model: DualEncoder, dm: PairDataModule, k: int) -> tuple[float, list[int]]:
    """Top-k accuracy and top-1 predictions computed here without the library: prompts by hand, CLIP's ensemble."""
    with torch.no_grad():
        classes = []
        for name in CLASS_NAMES:
            emb = model.encode_text([t.replace("{}", name) for t in TEMPLATES])
            mean = torch.nn.functional.normalize(emb, dim=1).mean(dim=0)
            classes.append(mean / mean.norm())
        images = torch.nn.functional.normalize(
            model.encode_image(torch.from_numpy(dm.eval_set.points).view(-1, 3, 2, 2)), dim=1
        )
        scores = images @ torch.stack(classes).T
    order = torch.argsort(scores, dim=1, descending=True, stable=True)
    labels = torch.from_numpy(dm.eval_set.labels)
    hits = (order[:, :k] == labels.unsqueeze(1)).any(dim=1).double()
    return float(hits.mean()), order[:, 0].tolist()


def test_logged_values_equal_a_direct_computation(tmp_path: Path):
    dm = PairDataModule()
    model = DualEncoder(dm, lr=0.0)
    callback = ZeroShotEvalCallback(templates=TEMPLATES, ks=(1, 2), every_n_steps=2, text_batch_size=3, strict=True)
    _trainer(tmp_path, [callback]).fit(model, dm)
    record = callback.history[-1]
    top1, predictions = expected_top(model, dm, 1)
    top2, _ = expected_top(model, dm, 2)
    assert record["top1"] == pytest.approx(top1, abs=1e-12) and record["top2"] == pytest.approx(top2, abs=1e-12)
    assert record["num_samples"] == 40 and record["num_classes"] == 4
    import numpy as np

    with np.load(tmp_path / "zeroshot" / record["per_query_file"]) as pq:
        assert pq["prediction"].tolist() == predictions  # what label-based families read
        assert pq["label"].tolist() == dm.eval_set.labels.tolist()


def test_class_embeddings_are_rebuilt_per_evaluation_and_cached_within_one(tmp_path: Path):
    dm = PairDataModule(batch_size=8)  # 5 evaluation batches
    model = DualEncoder(dm, lr=0.5)  # the text tower trains between evaluations
    seen: list[torch.Tensor] = []

    calls_before = []

    class Spy(ZeroShotEvalCallback):
        def on_evaluation_start(self, trainer, pl_module):
            calls_before.append(pl_module.text_calls)
            super().on_evaluation_start(trainer, pl_module)

        def feed(self, pl_module, batch):
            super().feed(pl_module, batch)
            seen.append(self._classifier.clone())

    callback = Spy(templates=TEMPLATES, ks=(1,), every_n_steps=2, text_batch_size=5, strict=True)
    trainer = _trainer(tmp_path, [callback], limit_val_batches=0)
    trainer.fit(model, dm)
    assert [h["step"] for h in callback.history] == [2, 4]
    # one evaluation = 8 prompts in chunks of 5 -> 2 text calls, whatever the 5 image batches
    assert (
        len(seen) == 10
        and all(torch.equal(seen[0], s) for s in seen[:5])
        and all(torch.equal(seen[5], s) for s in seen[5:])
    )
    assert not torch.equal(seen[0], seen[5]), "the text tower changed between evaluations, so must the class embeddings"
    train_calls_between = 2  # steps 3 and 4 each encode one caption batch
    assert calls_before[1] - calls_before[0] == 2 + train_calls_between
    assert callback._classifier is None, "the cache does not outlive an evaluation"


def test_string_labels_tuple_batches_and_explicit_class_names(tmp_path: Path):
    dm = PairDataModule()
    model = DualEncoder(dm)
    names = ["alpha", "beta", "gamma", "delta"]
    callback = ZeroShotEvalCallback(class_names=names, templates=TEMPLATES, ks=(1,))
    callback.eval_trainer = None
    callback._offset = 0
    batch_ids = torch.arange(4)
    images = torch.from_numpy(dm.eval_set.points[:4]).view(-1, 3, 2, 2)
    callback.metric.reset()
    callback._classifier = None
    with torch.no_grad():
        callback.feed(model, (images, [names[i] for i in dm.eval_set.labels[:4]], batch_ids))
        by_string = callback.metric.compute()
        callback.metric.reset()
        callback.feed(model, {"image": images, "label": torch.from_numpy(dm.eval_set.labels[:4]), "id": batch_ids})
        by_index = callback.metric.compute()
    assert torch.equal(by_string["per_query"]["prediction"], by_index["per_query"]["prediction"])
    assert torch.equal(by_string["per_query"]["label"], by_index["per_query"]["label"])
    with pytest.raises(ValueError, match="not among the class names"):
        callback.feed(model, (images, ["alpha", "omega", "beta", "beta"], batch_ids))


def test_wandb_confusion_matrix_under_strict_mode(tmp_path: Path):
    """The confusion matrix and top-k accuracies that reach the offline run equal the direct computation."""
    from pytorch_lightning.loggers import WandbLogger

    from beyondlabels.io import read_offline_run
    from beyondlabels.utils import close_wandb

    dm = PairDataModule()
    model = DualEncoder(dm)  # lr 0: the evaluated weights are the initial ones
    logger = WandbLogger(project="beyondlabels-test", save_dir=str(tmp_path), offline=True)
    callback = ZeroShotEvalCallback(templates=TEMPLATES, ks=(1, 2), strict=True)  # a media error would raise
    try:
        _trainer(tmp_path, [callback], logger=logger).fit(model, dm)
    finally:
        close_wandb()
    assert "error" not in callback.history[-1] and callback.history[-1]["num_classes"] == 4
    top1, predictions = expected_top(model, dm, 1)
    top2, _ = expected_top(model, dm, 2)
    run = read_offline_run(tmp_path)
    assert run.series("zeroshot/top1")[-1][1] == pytest.approx(top1, abs=1e-12)
    assert run.series("zeroshot/top2")[-1][1] == pytest.approx(top2, abs=1e-12)
    labels = dm.eval_set.labels.tolist()
    counts = {(a, p): 0 for a in CLASS_NAMES for p in CLASS_NAMES}
    for label, prediction in zip(labels, predictions, strict=True):
        counts[CLASS_NAMES[label], CLASS_NAMES[prediction]] += 1
    assert len(set(predictions)) > 1 and 0 < top1 < 1, "the toy problem should be neither trivial nor hopeless"
    table = offline_run_table(tmp_path, "zeroshot/confusion_counts")
    assert table["columns"] == ["Actual", "Predicted", "nPredictions"]
    nonzero = {pair: n for pair, n in counts.items() if n}
    assert {(a, p): n for a, p, n in table["data"]} == nonzero and len(table["data"]) == len(nonzero)
    (figure,) = [value for _, value in run.series("zeroshot/confusion_matrix")]
    assert figure["_type"] == "image-file"


def test_errors_are_named(tmp_path: Path):
    dm = PairDataModule()
    with pytest.raises(ValueError, match="ks"):  # 4 classes from the datamodule, top-5 asked for
        _trainer(tmp_path, [ZeroShotEvalCallback(templates=TEMPLATES, ks=(1, 5))]).fit(DualEncoder(dm), dm)
    with pytest.raises(AttributeError, match="class_phrases"):
        _trainer(tmp_path, [ZeroShotEvalCallback(class_names_from="class_phrases")]).fit(DualEncoder(dm), dm)
    for kwargs, name in (
        ({"templates": ["no placeholder"]}, "templates"),
        ({"class_names": ["a", "a"]}, "class_names"),
        ({"class_names": ["a", "b"], "ks": (1, 5)}, "ks"),
        ({"text_batch_size": 0}, "text_batch_size"),
        ({"tokenizer": ""}, "tokenizer"),
    ):
        with pytest.raises(ValueError, match=name):
            ZeroShotEvalCallback(**kwargs)


def test_the_default_ks_are_cut_to_the_number_of_classes():
    """The README's snippet: two class names and the default ks log top-1 only (top-5 of 2 classes is 1 always)."""
    templates = ["a {}", "a photo of a {}"]
    two = ZeroShotEvalCallback(class_names=["square", "circle"], templates=templates, text_method="encode_text")
    assert two.ks == (1,) and "top5" not in two.schema and "top5" not in two.schema.per_query
    assert "top1_ci_low" in two.schema and "top5_ci_low" not in two.schema
    five = ZeroShotEvalCallback(class_names=["a", "b", "c", "d", "e"])
    assert five.ks == (1, 5) and {"top1", "top5", "top5_ci_high"} <= set(five.schema)
    with pytest.raises(ValueError, match="ks"):  # given explicitly, a k above the classes is still an error
        ZeroShotEvalCallback(class_names=["square", "circle"], ks=(1, 5))


def test_default_ks_of_datamodule_class_names_are_cut_at_setup(tmp_path: Path):
    dm = PairDataModule()  # 4 classes: top-1 only
    model = DualEncoder(dm, lr=0.0)
    callback = ZeroShotEvalCallback(templates=TEMPLATES, strict=True)
    assert "top5" in callback.schema  # unknown until setup
    _trainer(tmp_path, [callback]).fit(model, dm)
    record = callback.history[-1]
    top1, _ = expected_top(model, dm, 1)
    assert record["top1"] == pytest.approx(top1, abs=1e-12) and "top5" not in record and "top5_ci_low" not in record
    assert callback.ks == (1,) and "top5" not in callback.schema
    import json

    assert "top5" not in json.loads((tmp_path / "zeroshot" / "schema.json").read_text())["keys"]
    with pytest.raises(ValueError, match="ks"):  # a progress-bar key the cut removed is named at setup
        _trainer(tmp_path, [ZeroShotEvalCallback(templates=TEMPLATES, prog_bar=["top5"])]).fit(DualEncoder(dm), dm)
