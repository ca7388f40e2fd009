"""HierarchyEvalCallback on a toy module: class-index and free-text predictions, files, W&B media, clear errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from beyondlabels.callbacks import HierarchyEvalCallback  # noqa: E402
from beyondlabels.functional import hierarchical_precision_recall  # noqa: E402
from beyondlabels.io.run_files import read_history  # noqa: E402
from beyondlabels.taxonomy import Taxonomy  # noqa: E402
from tests.callbacks.toy import LinearEncoder, PointDataModule

TREE = Taxonomy({"A": "root", "B": "root", "a0": "A", "a1": "A", "b0": "B", "b1": "B"}, root="root")
CLASSES = ["a0", "a1", "b0", "b1"]  # node of class index 0..3 (the toy data has 4 classes)


class Classifier(LinearEncoder):
    """The toy encoder plus the two prediction methods the callback calls."""

    def predict_labels(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)[:, :4].argmax(dim=1)

    def generate_text(self, x: torch.Tensor) -> list[str]:
        return [
            f"a picture of {CLASSES[int(i)].replace('0', ' zero').replace('1', ' one')}" for i in self.predict_labels(x)
        ]


def _fit(tmp_path: Path, callback: HierarchyEvalCallback, logger=False, epochs: int = 1):
    model = Classifier()
    trainer = pl.Trainer(
        max_epochs=epochs,
        callbacks=[callback],
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        devices=1,
    )
    dm = PointDataModule()
    trainer.fit(model, datamodule=dm)
    return trainer, model, dm


def _expected(model: Classifier, dm: PointDataModule) -> dict:
    x = torch.from_numpy(dm.eval_set.points)
    with torch.no_grad():
        pred = TREE.indices(CLASSES)[model.predict_labels(x)]
    gt = TREE.indices(CLASSES)[torch.from_numpy(dm.eval_set.labels)]
    return hierarchical_precision_recall(pred, gt, TREE)


def test_class_index_predictions_are_logged_and_saved(tmp_path: Path):
    callback = HierarchyEvalCallback(TREE, class_names=CLASSES, strict=True, prog_bar=["hF"])
    trainer, model, dm = _fit(tmp_path, callback)
    ref = _expected(model, dm)
    history = read_history(tmp_path / "hierarchy" / "history.jsonl")
    last = history[-1]
    for key in ("hP", "hR", "hF", "micro_hF", "exact_match", "num_samples"):
        assert last[key] == pytest.approx(float(ref[key])), key
        assert float(trainer.callback_metrics[f"hierarchy/{key}"]) == pytest.approx(float(ref[key]))
    assert last["error_lca_depth_fraction"] == pytest.approx(ref["error_lca_depth_fraction"].tolist())
    per_query = list((tmp_path / "hierarchy" / "per_query").glob("*.npz"))
    assert per_query and (tmp_path / "hierarchy" / "schema.json").is_file()


def test_free_text_answers_are_mapped_to_nodes(tmp_path: Path):
    # answers like "a picture of a zero": the hashing encoder finds the class nodes
    tree = Taxonomy({"A": "root", "B": "root", "a_zero": "A", "a_one": "A", "b_zero": "B", "b_one": "B"}, root="root")
    classes = ["a_zero", "a_one", "b_zero", "b_one"]
    callback = HierarchyEvalCallback(tree, source="text", class_names=classes, encoder="hashing", strict=True)
    _, model, dm = _fit(tmp_path, callback)
    x = torch.from_numpy(dm.eval_set.points)
    with torch.no_grad():
        pred = tree.indices(classes)[model.predict_labels(x)]
    ref = hierarchical_precision_recall(pred, tree.indices(classes)[torch.from_numpy(dm.eval_set.labels)], tree)
    last = callback.history[-1]
    assert last["hP"] == pytest.approx(float(ref["hP"])) and last["hR"] == pytest.approx(float(ref["hR"]))
    assert last["abstentions"] == int(ref["abstentions"]) == 0


def test_free_text_on_a_wordnet_subtree_with_lemmas_and_a_node_texts_file(tmp_path: Path):
    pytest.importorskip("beyondlabels.io.taxonomy_files").find_wordnet_dir()
    with pytest.warns(UserWarning, match="1 of its 40 hyponyms are left out"):  # minivan.n.01's longest chain
        callback = HierarchyEvalCallback(
            "wordnet",
            taxonomy_root="car.n.01",
            source="text",
            encoder="hashing",
            node_texts="wordnet_lemmas",
            class_names=["cab.n.03"],
        )
    assert callback.taxonomy.root == "car.n.01" and len(callback.taxonomy) == 40
    assert [(m.node, m.rule) for m in callback._mapper.map(["a taxicab", "the automobile"])] == [
        ("cab.n.03", "exact"),
        ("car.n.01", "exact"),
    ]
    texts = tmp_path / "texts.yaml"
    texts.write_text("a_zero: [nought, nil]\n", encoding="utf-8")
    tree = Taxonomy({"A": "root", "B": "root", "a_zero": "A", "a_one": "A", "b_zero": "B", "b_one": "B"}, root="root")
    sub = HierarchyEvalCallback(
        tree,
        taxonomy_root="A",
        source="text",
        encoder="hashing",
        node_texts=str(texts),
        class_names=["a_zero", "a_one"],
    )
    assert sub.taxonomy.nodes == ("A", "a_one", "a_zero") and sub._mapper.map(["nil"])[0].node == "a_zero"
    with pytest.raises(ValueError, match="`taxonomy`: `root`: unknown taxonomy node"):
        HierarchyEvalCallback(tree, taxonomy_root="C")


class TextClassifier(Classifier):
    """A classifier whose free-text answers are mapped with its own text encoder (counting the texts it encodes)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded: list[str] = []

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        from beyondlabels.taxonomy import HashingTextEncoder

        self.encoded.extend(texts)
        return HashingTextEncoder(64)(texts)


def test_the_module_encoder_embeds_node_texts_again_at_every_step(tmp_path: Path):
    tree = Taxonomy({"A": "root", "B": "root", "a_zero": "A", "a_one": "A", "b_zero": "B", "b_one": "B"}, root="root")
    classes = ["a_zero", "a_one", "b_zero", "b_one"]
    callback = HierarchyEvalCallback(tree, source="text", class_names=classes, encoder="module", strict=True)
    model = TextClassifier()
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        devices=1,
        num_sanity_val_steps=0,
    )
    dm = PointDataModule()
    trainer.fit(model, datamodule=dm)
    evaluations = len(callback.history)
    assert evaluations >= 2 and callback._mapper is not None and callback._mapper.encode == model.encode_text
    encoded = Counter(model.encoded)
    node_texts = callback._mapper.embedded_texts
    assert all(encoded[t] == evaluations for t in node_texts)  # node texts embedded once per evaluation step
    answers = set(encoded) - set(node_texts)  # each distinct answer embedded at most once per evaluation step
    assert answers and all(encoded[a] <= evaluations for a in answers)
    assert len(model.encoded) < evaluations * (len(node_texts) + len(dm.eval_set.labels))
    x = torch.from_numpy(dm.eval_set.points)
    with torch.no_grad():
        pred = tree.indices(classes)[model.predict_labels(x)]
    ref = hierarchical_precision_recall(pred, tree.indices(classes)[torch.from_numpy(dm.eval_set.labels)], tree)
    assert callback.history[-1]["hP"] == pytest.approx(float(ref["hP"]))


PARENT = {"a0": "A", "a1": "A", "b0": "B", "b1": "B"}


def _own_precision_recall(pred: str, truth: str) -> tuple[float, float]:
    """Per-sample hP and hR written out for the two-level TREE: node plus parent against node plus parent."""
    p, g = {pred, PARENT[pred]}, {truth, PARENT[truth]}
    return len(p & g) / len(p), len(p & g) / len(g)


def test_wandb_table_and_scatter_are_logged(tmp_path: Path):
    """What reaches the offline W&B run: the scalars, the example table (the first samples: answer, mapped node, rule,
    ground truth, per-sample hP / hR) and the per-class hP-hR table (with its scatter figure), against the model's
    predictions."""
    from pytorch_lightning.loggers import WandbLogger

    from beyondlabels.io import read_offline_run

    logger = WandbLogger(offline=True, save_dir=str(tmp_path), project="test")
    callback = HierarchyEvalCallback(TREE, class_names=CLASSES, strict=True, num_examples=5)
    try:
        _, model, dm = _fit(tmp_path, callback, logger=logger)
    finally:
        import wandb

        wandb.finish()
    with torch.no_grad():
        predicted = [CLASSES[int(i)] for i in model.predict_labels(torch.from_numpy(dm.eval_set.points))]
    truth = [CLASSES[int(i)] for i in dm.eval_set.labels]
    own = [_own_precision_recall(p, t) for p, t in zip(predicted, truth)]
    assert 0 < sum(p == t for p, t in zip(predicted, truth)) < len(truth), (
        "the toy model should be right on some samples only"
    )
    run = read_offline_run(tmp_path)
    (run_dir,) = tmp_path.glob("wandb/offline-run-*/")

    def table(key: str) -> dict:
        (entry,) = [value for _, value in run.series(key)]
        return json.loads((run_dir / "files" / entry["path"]).read_text())

    assert run.series("hierarchy/hP")[-1][1] == pytest.approx(sum(p for p, _ in own) / len(own), abs=1e-12)
    assert run.series("hierarchy/num_samples")[-1][1] == len(truth)
    examples = table("hierarchy/examples")
    assert examples["columns"] == ["input_image", "answer", "mapped_node", "rule", "ground_truth", "p_n", "r_n", "id"]
    expected_rows = [[None, predicted[i], predicted[i], "class", truth[i], *own[i], i] for i in range(5)]
    assert examples["data"] == expected_rows
    (figure,) = [value for _, value in run.series("hierarchy/hp_hr_per_class")]
    assert figure["_type"] == "image-file" and (run_dir / "files" / figure["path"]).is_file()
    scatter = table("hierarchy/per_class_hp_hr")
    assert scatter["columns"] == ["class", "hP", "hR", "count"]
    per_class = []
    for name in CLASSES:
        mine = [own[i] for i, t in enumerate(truth) if t == name]
        per_class.append([name, sum(p for p, _ in mine) / len(mine), sum(r for _, r in mine) / len(mine), len(mine)])
    assert [row[0] for row in scatter["data"]] == CLASSES and [row[3] for row in scatter["data"]] == [
        row[3] for row in per_class
    ]
    for got, want in zip(scatter["data"], per_class):
        assert got[1:3] == pytest.approx(want[1:3], abs=1e-12), got[0]


def test_errors_are_clear(tmp_path: Path):
    with pytest.raises(ValueError, match="`source` must be one of"):
        HierarchyEvalCallback(TREE, source="images")
    with pytest.raises(ValueError, match=r"unknown taxonomy node\(s\) 'zz'"):
        HierarchyEvalCallback(TREE, class_names=["zz"])
    with pytest.raises(ValueError, match="`taxonomy`:"):
        HierarchyEvalCallback(5)
    callback = HierarchyEvalCallback(TREE, class_names=CLASSES, predict_method="classify", strict=True)
    with pytest.raises(
        AttributeError, match="has no method 'classify'; set HierarchyEvalCallback\\(predict_method=...\\)"
    ):
        _fit(tmp_path, callback)
    no_names = HierarchyEvalCallback(TREE, strict=True)  # toy datamodule has no class_names
    with pytest.raises(ValueError, match="no class names are known"):
        _fit(tmp_path, no_names)


def test_example_table_carries_pictures_as_images():
    """The example table's picture column holds the thumbnails as images; the per-class hP/hR come as a table and
    its scatter figure."""
    from beyondlabels.callbacks.media import EvaluationMedia

    callback = HierarchyEvalCallback(TREE, class_names=CLASSES, num_examples=2)
    pictures = [torch.rand(3, 8, 8) for _ in range(2)]
    callback.eval_dataset = [{"image": pictures[i], "id": i} for i in range(2)]
    callback._examples = {
        i: {"answer": "a0", "mapped_node": "a0", "rule": "class", "ground_truth": "a1"} for i in range(2)
    }
    pred, gt = TREE.indices(["a0", "a0"]), TREE.indices(["a1", "a1"])
    results = hierarchical_precision_recall(pred, gt, TREE)
    results["per_query"]["query_id"] = torch.tensor([0, 1])
    media = EvaluationMedia("hierarchy", step=3, epoch=0)
    callback.describe_media(None, results, media)
    tables = {t.name: t for t in media.tables}
    examples = tables["examples"]
    assert examples.image_columns == ["input_image"]
    column = examples.columns.index("input_image")
    for row, picture in zip(examples.rows, pictures):  # H x W x C uint8 of the same picture
        assert np.array_equal(row[column], (picture.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))
    row = dict(zip(examples.columns, examples.rows[0]))
    assert row["p_n"] == 0.5 and row["r_n"] == 0.5
    assert tables["per_class_hp_hr"].rows == [["a1", 0.5, 0.5, 2]]  # both samples: true a1, predicted its sibling a0
    assert [f.name for f in media.figures] == ["hp_hr_per_class"]
