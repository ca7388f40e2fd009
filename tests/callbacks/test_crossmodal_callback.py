"""CrossModalEvalCallback in a real fit: logged values equal the kernel on the module's own embeddings, several captions
per image, thumbnails and captions of the worst misses, the W&B table under strict mode, and clear errors."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from beyondlabels.callbacks import CrossModalEvalCallback  # noqa: E402
from beyondlabels.functional import crossmodal_retrieval_metrics  # noqa: E402
from beyondlabels.io.run_files import read_history  # noqa: E402
from tests.callbacks.toy import clustered_points

CLASS_NAMES = ("alpha", "beta", "gamma", "delta")


class PairDataset(Dataset):
    """Items ``{"image": 3×2×2 picture, "caption": str or list of str, "label": int, "id": index}``.

    The 12 numbers of a picture are a clustered point; image ``i`` has ``1 + i % max_captions`` captions (or one
    when ``max_captions == 1``), each a string whose text vector is the point plus noise (``text_vectors``).
    """

    def __init__(self, n: int, max_captions: int = 1, seed: int = 0) -> None:
        self.points, self.labels = clustered_points(n, num_classes=len(CLASS_NAMES), dim=12, seed=seed)
        self.max_captions = max_captions
        g = np.random.default_rng(seed + 100)
        self.captions: list[list[str]] = []
        self.text_vectors: dict[str, np.ndarray] = {}
        for i in range(n):
            count = 1 if max_captions == 1 else 1 + i % max_captions
            texts = [f"{CLASS_NAMES[self.labels[i]]} picture {i} take {j}" for j in range(count)]
            for t in texts:
                self.text_vectors[t] = self.points[i] + 1.0 * g.normal(size=12).astype(np.float32)
            self.captions.append(texts)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        caption = self.captions[i][0] if self.max_captions == 1 else list(self.captions[i])
        return {
            "image": torch.from_numpy(self.points[i]).view(3, 2, 2),
            "caption": caption,
            "label": int(self.labels[i]),
            "id": i,
        }


def keep_lists(items: list[dict]) -> dict:
    """A collate_fn that keeps one caption list per image (the default one would transpose them)."""
    return {
        "image": torch.stack([it["image"] for it in items]),
        "caption": [it["caption"] for it in items],
        "label": torch.tensor([it["label"] for it in items]),
        "id": torch.tensor([it["id"] for it in items]),
    }


class PairDataModule(pl.LightningDataModule):
    def __init__(self, n_eval: int = 40, max_captions: int = 1, batch_size: int = 8) -> None:
        super().__init__()
        self.train_set = PairDataset(32, max_captions=1, seed=1)
        self.eval_set = PairDataset(n_eval, max_captions=max_captions, seed=2)
        self.batch_size = batch_size
        self.class_names = CLASS_NAMES

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader:
        collate = keep_lists if self.eval_set.max_captions > 1 else None
        return DataLoader(self.eval_set, batch_size=self.batch_size, collate_fn=collate)


class DualEncoder(pl.LightningModule):
    """Images: a linear map of the picture's numbers. Texts: a linear map of a vector looked up by string (known
    captions) or drawn from a generator seeded by the string (anything else, e.g. zero-shot prompts)."""

    def __init__(self, datamodule: PairDataModule | None = None, lr: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.image_proj = torch.nn.Linear(12, 6)
        self.text_proj = torch.nn.Linear(12, 6)
        self.lr = lr
        self.table: dict[str, np.ndarray] = {}
        if datamodule is not None:
            self.table.update(datamodule.eval_set.text_vectors)
        self.text_calls = 0

    def text_vector(self, text: str) -> torch.Tensor:
        if text in self.table:
            return torch.from_numpy(self.table[text])
        g = torch.Generator().manual_seed(zlib.crc32(text.encode()))
        return torch.randn(12, generator=g)

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        return self.image_proj(images.flatten(1))

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        self.text_calls += 1
        return self.text_proj(torch.stack([self.text_vector(t) for t in texts]).to(self.device))

    def training_step(self, batch, batch_idx):
        img = torch.nn.functional.normalize(self.encode_image(batch["image"]), dim=1)
        txt = torch.nn.functional.normalize(self.encode_text(list(batch["caption"])), dim=1)
        return -(img * txt).sum(dim=1).mean()

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def _trainer(tmp_path: Path, callbacks, **kwargs) -> pl.Trainer:
    options = dict(
        default_root_dir=tmp_path,
        max_epochs=1,
        accelerator="cpu",
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    options.update(kwargs)
    return pl.Trainer(**options)


def expected_metrics(model: DualEncoder, dataset: PairDataset, max_captions: int, ks=(1, 5, 10)) -> dict:
    """The kernel on the module's embeddings of the whole evaluation set, built here from the dataset."""
    with torch.no_grad():
        images = model.encode_image(torch.from_numpy(dataset.points).view(-1, 3, 2, 2))
        texts = [t for caps in dataset.captions for t in caps]
        owner = torch.tensor([i for i, caps in enumerate(dataset.captions) for _ in caps])
        slots = torch.tensor([j for caps in dataset.captions for j in range(len(caps))])
        text_emb = model.encode_text(texts)
    text_ids = owner * max_captions + slots
    return crossmodal_retrieval_metrics(
        images, text_emb, owner, ks=ks, image_ids=torch.arange(len(images)), text_ids=text_ids
    )


@pytest.mark.parametrize("max_captions", [1, 3])
def test_logged_values_equal_the_kernel(tmp_path: Path, max_captions: int):
    dm = PairDataModule(max_captions=max_captions)
    model = DualEncoder(dm)
    callback = CrossModalEvalCallback(
        max_captions_per_image=max_captions, prog_bar=["text_to_image_recall@1"], strict=True
    )
    _trainer(tmp_path, [callback]).fit(model, dm)
    assert [h["step"] for h in callback.history] == [4]  # the one validation epoch (32 / 8 steps)
    record = callback.history[-1]
    expected = expected_metrics(model, dm.eval_set, max_captions)
    for key in callback.metric.output_schema().scalar_keys():
        if key == "num_duplicates":
            continue
        assert record[key] == pytest.approx(float(expected[key]), abs=1e-12), key
    assert record["num_images"] == 40 and record["num_texts"] == sum(len(c) for c in dm.eval_set.captions)
    assert 0.0 < record["text_to_image_recall@10"] < 1.0, "the toy problem should be neither trivial nor hopeless"
    # files: history, schema and one per-query file whose rows are images then captions
    folder = tmp_path / "crossmodal"
    assert read_history(folder / "history.jsonl")[-1]["image_to_text_recall@1"] == record["image_to_text_recall@1"]
    with np.load(folder / record["per_query_file"]) as pq:
        assert pq["direction"].tolist() == [0] * 40 + [1] * record["num_texts"]
        assert np.nanmean(pq["text_to_image_recall@5"]) == pytest.approx(record["text_to_image_recall@5"])
    # miss table: the caption, both thumbnails, worst rank first
    rows = callback.miss_rows(expected | {"neighbors": _neighbors(model, dm.eval_set, max_captions)})
    assert rows and all(r["true_image_rank"] > 1 for r in rows)
    assert [r["true_image_rank"] for r in rows] == sorted((r["true_image_rank"] for r in rows), reverse=True)
    callback.eval_dataset = dm.eval_set
    row = rows[0]
    image_id, slot = divmod(row["text_id"], max_captions)
    assert (
        row["true_image_id"] == image_id and callback._caption(row["text_id"]) == dm.eval_set.captions[image_id][slot]
    )
    assert torch.equal(callback._thumbnail(row["retrieved_image_id"]), dm.eval_set[row["retrieved_image_id"]]["image"])


def _neighbors(model: DualEncoder, dataset: PairDataset, max_captions: int) -> dict:
    expected = expected_metrics(model, dataset, max_captions)
    with torch.no_grad():
        images = model.encode_image(torch.from_numpy(dataset.points).view(-1, 3, 2, 2))
        texts = [t for caps in dataset.captions for t in caps]
        owner = torch.tensor([i for i, caps in enumerate(dataset.captions) for _ in caps])
        full = crossmodal_retrieval_metrics(images, model.encode_text(texts), owner, ks=(1,), return_neighbors=1)
    text_ids = expected["per_query"]["query_id"][len(images) :]
    return {"text_ids": text_ids, "image_ids": full["neighbors"]["indices"], "scores": full["neighbors"]["scores"]}


def offline_run_table(tmp_path: Path, key: str) -> dict:
    """The one W&B table logged under ``key`` in the offline run below ``tmp_path``, as wandb wrote it (columns,
    data)."""
    from beyondlabels.io import read_offline_run

    (entry,) = [value for _, value in read_offline_run(tmp_path).series(key)]
    (run_dir,) = tmp_path.glob("wandb/offline-run-*/")
    return json.loads((run_dir / "files" / entry["path"]).read_text())


def test_wandb_table_is_logged_under_strict_mode(tmp_path: Path):
    """The worst text-to-image misses reach the offline run: the rows equal a numpy ranking of the module's own
    embeddings (worst rank first, then the smaller text id), and so does the logged recall@1."""
    from pytorch_lightning.loggers import WandbLogger

    from beyondlabels.io import read_offline_run
    from beyondlabels.utils import close_wandb

    dm = PairDataModule(max_captions=2)
    model = DualEncoder(dm)  # lr 0: the evaluated weights are the initial ones
    logger = WandbLogger(project="beyondlabels-test", save_dir=str(tmp_path), offline=True)
    callback = CrossModalEvalCallback(max_captions_per_image=2, num_misses=4, strict=True)  # a media error would raise
    try:
        _trainer(tmp_path, [callback], logger=logger, log_every_n_steps=1).fit(model, dm)
    finally:
        close_wandb()
    assert "error" not in callback.history[-1] and callback.history[-1]["num_texts"] > 40
    data = dm.eval_set
    with torch.no_grad():
        images = model.encode_image(torch.from_numpy(data.points).view(-1, 3, 2, 2)).double().numpy()
        captions = [(i, j, t) for i, caps in enumerate(data.captions) for j, t in enumerate(caps)]
        texts = model.encode_text([t for *_, t in captions]).double().numpy()
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    s = texts @ images.T
    misses = []
    for row, (owner, slot, caption) in enumerate(captions):
        own = s[row, owner]
        assert np.abs(np.delete(s[row], owner) - own).min() > 1e-5, "a near tie could flip under fp32 rounding"
        rank = 1 + int((s[row] > own).sum())
        best = int(np.argmax(s[row]))
        misses.append((-rank, owner * 2 + slot, [caption, rank, s[row, best], owner * 2 + slot, owner, best]))
    run = read_offline_run(tmp_path)
    ranks = [m[2][1] for m in misses]
    assert run.series("crossmodal/text_to_image_recall@1")[-1][1] == pytest.approx(
        np.mean([r == 1 for r in ranks]), abs=1e-12
    )
    assert run.series("crossmodal/text_to_image_mean_rank")[-1][1] == pytest.approx(np.mean(ranks), abs=1e-12)
    expected = [m[2] for m in sorted(m for m in misses if m[2][1] > 1)[:4]]
    table = offline_run_table(tmp_path, "crossmodal/worst_text_to_image_misses")
    assert table["columns"] == [
        "caption",
        "true_image",
        "retrieved_image",
        "true_image_rank",
        "cosine",
        "text_id",
        "true_image_id",
        "retrieved_image_id",
    ]
    assert len(table["data"]) == 4
    for got, want in zip(table["data"], expected, strict=True):
        assert [got[0], got[3], *got[5:]] == [want[0], want[1], *want[3:]]
        assert got[4] == pytest.approx(want[2], abs=1e-6)  # the kernel's fp32 score


def test_bad_batches_and_options_are_named(tmp_path: Path):
    dm = PairDataModule(max_captions=3)
    callback = CrossModalEvalCallback(max_captions_per_image=2, strict=True)
    with pytest.raises(ValueError, match="max_captions_per_image=2"):
        _trainer(tmp_path, [callback]).fit(DualEncoder(dm), dm)
    with pytest.raises(AttributeError, match="encode_words"):
        _trainer(tmp_path, [CrossModalEvalCallback(text_method="encode_words")]).fit(DualEncoder(dm), dm)
    for kwargs, name in (
        ({"max_captions_per_image": 0}, "max_captions_per_image"),
        ({"caption_key": ""}, "caption_key"),
        ({"num_misses": -1}, "num_misses"),
    ):
        with pytest.raises(ValueError, match=name):
            CrossModalEvalCallback(**kwargs)
    # a dataset whose captions were transposed by the default collate_fn: one entry per caption slot, not per image
    callback = CrossModalEvalCallback()
    with pytest.raises(ValueError, match="one entry per image"):
        callback._caption_lists([("a", "b", "c")], batch_size=3)
