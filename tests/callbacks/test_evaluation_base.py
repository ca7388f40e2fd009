"""The evaluation base through the retrieval callback: batch formats, labels, ids, thumbnails, progress bar,
monitors, and the DDP loader rebuild."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler

from beyondlabels.callbacks import RetrievalEvalCallback, shard_loader  # noqa: E402
from beyondlabels.callbacks.media import thumbnail  # noqa: E402
from tests.callbacks.toy import (
    LinearEncoder,
    PointDataModule,
    brute_force_precision_at_1_and_r_precision,
)


def _fit(tmp_path: Path, callback, model=None, dm=None, **kwargs) -> pl.Trainer:
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=kwargs.pop("max_epochs", 1),
        accelerator="cpu",
        devices=1,
        callbacks=[callback, *kwargs.pop("callbacks", [])],
        logger=False,
        enable_progress_bar=kwargs.pop("enable_progress_bar", False),
        enable_model_summary=False,
        enable_checkpointing=kwargs.pop("enable_checkpointing", False),
        **kwargs,
    )
    trainer.fit(model or LinearEncoder(lr=0.0), dm or PointDataModule())
    return trainer


def _oracle(dm: PointDataModule) -> tuple[float, float]:
    with torch.no_grad():
        emb = LinearEncoder(lr=0.0).proj(torch.from_numpy(dm.eval_set.points)).numpy()
    return brute_force_precision_at_1_and_r_precision(emb, dm.eval_set.labels)


class Converted(Dataset):
    """The evaluation points in another batch format."""

    def __init__(self, base, form: str) -> None:
        self.base, self.form = base, form

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        item = self.base[i]
        if self.form == "pair":
            return item["image"], item["label"]
        if self.form == "string":
            return {"image": item["image"], "label": f"class-{item['label']}"}
        raise ValueError(self.form)


def _collate_numpy_labels(items):
    return {
        "image": torch.stack([i["image"] for i in items]),
        "label": np.array([i["label"] for i in items]),
        "id": [i["id"] for i in items],
    }


@pytest.mark.parametrize("form", ["pair", "string", "numpy"])
def test_batch_formats_without_ids_and_label_types_give_the_oracle_values(tmp_path: Path, form: str):
    dm = PointDataModule()
    if form == "numpy":

        def loader():
            return DataLoader(dm.eval_set, batch_size=6, collate_fn=_collate_numpy_labels)

    else:

        def loader():
            return DataLoader(
                Converted(dm.eval_set, form),
                batch_size=6,
                collate_fn=None
                if form == "pair"
                else lambda b: {"image": torch.stack([x["image"] for x in b]), "label": [x["label"] for x in b]},
            )

    callback = RetrievalEvalCallback(dataloader=loader, num_mismatches=2)
    _fit(tmp_path, callback, dm=dm)
    p1, rp = _oracle(dm)
    assert callback.history[-1]["precision@1"] == pytest.approx(p1, abs=1e-12)
    assert callback.history[-1]["r_precision"] == pytest.approx(rp, abs=1e-12)
    assert callback.history[-1]["num_duplicates"] == 0


def test_unknown_batch_format_is_reported_with_what_was_received(tmp_path: Path):
    loader = DataLoader([torch.zeros(8)] * 6, batch_size=3)
    callback = RetrievalEvalCallback(dataloader=loader, strict=True, num_mismatches=0)
    with pytest.raises(TypeError, match="got a Tensor"):
        _fit(tmp_path, callback)


def test_repeated_ids_are_counted_and_warned(tmp_path: Path):
    dm = PointDataModule()
    twice = torch.utils.data.ConcatDataset([dm.eval_set, torch.utils.data.Subset(dm.eval_set, range(5))])
    callback = RetrievalEvalCallback(dataloader=lambda: DataLoader(twice, batch_size=8), num_mismatches=0)
    with pytest.warns(UserWarning, match="5 samples repeated an id"):
        _fit(tmp_path, callback, dm=dm)
    assert callback.history[-1]["num_duplicates"] == 5
    assert callback.history[-1]["num_queries"] == 37


def test_thumbnails_are_looked_up_with_id_key():
    dataset = [{"pic": torch.ones(3, 4, 4) * i, "sample": i} for i in range(5)]
    assert torch.equal(thumbnail(dataset, 3, "pic", "sample"), torch.ones(3, 4, 4) * 3)
    assert thumbnail(dataset, 3, "pic", "id") is None  # items without that key are never guessed
    shuffled = [{"pic": torch.zeros(3, 4, 4), "sample": 4 - i} for i in range(5)]
    assert thumbnail(shuffled, 1, "pic", "sample") is None  # item 1 is not sample 1
    assert thumbnail([(torch.ones(3, 2, 2), 0)], 0, "pic", "sample").shape == (3, 2, 2)


def test_prog_bar_keys_reach_the_progress_bar(tmp_path: Path):
    callback = RetrievalEvalCallback(num_mismatches=0, prog_bar=["precision@1"])
    trainer = _fit(tmp_path, callback)
    assert trainer.progress_bar_metrics["retrieval/precision@1"] == pytest.approx(callback.history[-1]["precision@1"])
    assert "retrieval/r_precision" not in trainer.progress_bar_metrics


def test_a_checkpoint_monitoring_a_rank_with_mode_max_is_refused_in_strict_mode(tmp_path: Path, caplog):
    wrong = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="retrieval/mean_first_relevant_rank", mode="max")
    with pytest.raises(ValueError, match="mode='min'"):
        _fit(
            tmp_path, RetrievalEvalCallback(num_mismatches=0, strict=True), callbacks=[wrong], enable_checkpointing=True
        )
    wrong = ModelCheckpoint(dirpath=tmp_path / "ck2", monitor="retrieval/mean_first_relevant_rank", mode="max")
    _fit(tmp_path, RetrievalEvalCallback(num_mismatches=0), callbacks=[wrong], enable_checkpointing=True)
    assert "set mode='min'" in caplog.text


class _EvenBatches(BatchSampler):
    pass


def _init_worker(worker_id: int) -> None:  # pragma: no cover - runs in workers
    torch.manual_seed(worker_id)


def test_shard_loader_keeps_the_loader_options():
    data = list(range(11))
    loader = DataLoader(
        data,
        batch_size=4,
        num_workers=2,
        pin_memory=True,
        worker_init_fn=_init_worker,
        persistent_workers=True,
        collate_fn=lambda b: torch.tensor(b) * 10,
        timeout=5,
        prefetch_factor=3,
    )
    shards = [shard_loader(loader, 2, r) for r in range(2)]
    for shard in shards:
        assert shard.batch_size == 4 and shard.num_workers == 2 and shard.pin_memory is True
        assert shard.worker_init_fn is _init_worker and shard.persistent_workers is True
        assert shard.collate_fn is loader.collate_fn and shard.timeout == 5 and shard.prefetch_factor == 3
    seen = sorted(int(v) for shard in shards for batch in shard for v in batch)
    assert seen == sorted([10 * v for v in data] + [0])  # 11 items over 2 ranks: one padding copy (item 0)
    with_sampler = DataLoader(data, batch_sampler=_EvenBatches(SequentialSampler(data), batch_size=3, drop_last=False))
    assert shard_loader(with_sampler, 2, 0).batch_size == 3


class _Dropout(LinearEncoder):
    """Training that draws from the global torch random state (dropout)."""

    def training_step(self, batch, batch_idx):
        z = torch.nn.functional.dropout(self.proj(batch["image"]), p=0.5, training=True)
        return z.pow(2).mean()


def test_evaluation_does_not_change_the_training_that_follows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Iterating the evaluation loader draws a seed from the global random state; the base restores it, so a run
    trains identically with or without evaluation callbacks."""
    # seed_everything exports its seed to this process's environment (and so to every later test's children)
    monkeypatch.setenv("PL_GLOBAL_SEED", "7")
    monkeypatch.setenv("PL_SEED_WORKERS", "0")

    def final_weights(callbacks) -> torch.Tensor:
        pl.seed_everything(7)
        model = _Dropout(lr=0.1)
        trainer = pl.Trainer(
            default_root_dir=tmp_path,
            max_epochs=2,
            accelerator="cpu",
            callbacks=callbacks,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
        )
        dm = PointDataModule()
        dm.train_dataloader = lambda: DataLoader(dm.train_set, batch_size=8, shuffle=True)  # shuffling draws too
        trainer.fit(model, dm)
        return model.proj.weight.detach().clone()

    plain = final_weights([])
    evaluated = final_weights(
        [
            RetrievalEvalCallback(every_n_steps=3, num_mismatches=0),
            RetrievalEvalCallback(prefix="again", num_mismatches=0),
        ]
    )
    assert torch.equal(plain, evaluated)


def test_a_single_cut_off_gives_a_one_point_curve(tmp_path: Path):
    """torchmetrics squeezes one-element outputs: precision_curve for ks=(1,) arrives 0-d and must still be a curve."""
    callback = RetrievalEvalCallback(ks=(1,), num_mismatches=0)
    _fit(tmp_path, callback)
    assert callback.history[-1]["precision_curve"] == [pytest.approx(callback.history[-1]["precision@1"])]
