"""Users' module shapes, as a user of ``lightning.pytorch`` meets them: encoders on a submodule (dotted method names,
checked at setup with a message that names the option, the missing part and the fix), batches of the user's own shape
(``batch_transform``: a callable or a module method, applied before the family reads the batch, never in a
checkpoint), a CLIP trainer's ``(image, tokens)`` batches evaluated by the cross-modal family as they come, and
``distance="euclidean"`` through a fit, equal to pytorch-metric-learning's AccuracyCalculator default."""

from __future__ import annotations

import inspect
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, Dataset, TensorDataset

from beyondlabels.callbacks.lightning import CrossModalEvalCallback, RetrievalEvalCallback
from beyondlabels.families import callback_families
from beyondlabels.functional import crossmodal_retrieval_metrics, embedding_retrieval_metrics
from tests.callbacks.toy import clustered_points

# ---- a CLIP trainer: (image, tokens) batches, encoders on a submodule ------------------------------------------------
VOCAB, TOKENS, CLASSES = 48, 5, 8


def clip_pairs(n: int, seed: int) -> TensorDataset:
    """``(image [3, 2, 2], tokens [5])`` pairs: the image a noisy class centre, the tokens words of its class (6 per
    class) and one random word: no caption strings, no labels, no ids."""
    g = torch.Generator().manual_seed(seed)
    classes = torch.arange(n) % CLASSES
    centres = torch.randn(CLASSES, 12, generator=torch.Generator().manual_seed(99))
    images = (centres[classes] + 0.8 * torch.randn(n, 12, generator=g)).view(n, 3, 2, 2)
    words = classes.unsqueeze(1) * 6 + torch.randint(0, 6, (n, TOKENS - 1), generator=g)
    tokens = torch.cat([words, torch.randint(0, VOCAB, (n, 1), generator=g)], dim=1)
    return TensorDataset(images, tokens)


class TinyClip(torch.nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.visual = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, dim))
        self.token_embedding = torch.nn.EmbeddingBag(VOCAB, dim, mode="mean")

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.token_embedding(tokens)


class ClipTrainer(L.LightningModule):
    """A CLIP trainer: the model on ``self.clip``, the symmetric InfoNCE loss on ``(image, tokens)`` batches."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.clip = TinyClip()

    def training_step(self, batch, batch_idx):
        image, tokens = batch
        img = torch.nn.functional.normalize(self.clip.visual(image), dim=1)
        txt = torch.nn.functional.normalize(self.clip.encode_text(tokens), dim=1)
        logits = 10.0 * img @ txt.T
        target = torch.arange(len(image))
        return (
            torch.nn.functional.cross_entropy(logits, target) + torch.nn.functional.cross_entropy(logits.T, target)
        ) / 2

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.05)


def _trainer(tmp_path: Path, callbacks: list, **kwargs) -> L.Trainer:
    options = dict(
        default_root_dir=tmp_path,
        max_epochs=2,
        accelerator="cpu",
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        num_sanity_val_steps=0,
    )
    return L.Trainer(**{**options, **kwargs})


@pytest.mark.slow
def test_a_clip_trainers_image_token_batches_are_evaluated_as_they_come(tmp_path: Path):
    train, val = clip_pairs(64, seed=1), clip_pairs(40, seed=2)
    model = ClipTrainer()
    callback = CrossModalEvalCallback(
        image_method="clip.visual", text_method="clip.encode_text", ks=(1, 5), num_misses=4, strict=True
    )
    trainer = _trainer(tmp_path, [callback], max_epochs=6)
    trainer.fit(model, DataLoader(train, batch_size=16, shuffle=True), DataLoader(val, batch_size=16))
    record = callback.history[-1]
    images, tokens = val.tensors
    with torch.no_grad():  # the kernel on the final model's own embeddings; caption i is image i's
        want = crossmodal_retrieval_metrics(
            model.clip.visual(images),
            model.clip.encode_text(tokens),
            torch.arange(40),
            ks=(1, 5),
            image_ids=torch.arange(40),
            text_ids=torch.arange(40) * callback.max_captions_per_image,
        )
    for key in ("image_to_text_recall@1", "text_to_image_recall@5", "text_to_image_mean_rank", "num_texts"):
        assert record[key] == pytest.approx(float(want[key]), abs=1e-12), key
    assert record["num_images"] == record["num_texts"] == 40
    assert 0.3 < record["text_to_image_recall@5"] < 1.0, record  # trained: above chance (5 / 40), not trivial
    rows = callback.miss_rows(want | {"neighbors": _clip_neighbors(model, val)})
    assert rows and all(r["caption"] is None and r["true_image"].shape == (3, 2, 2) for r in rows)


def _clip_neighbors(model: ClipTrainer, data: TensorDataset) -> dict:
    with torch.no_grad():
        images, tokens = data.tensors
        found = crossmodal_retrieval_metrics(
            model.clip.visual(images), model.clip.encode_text(tokens), torch.arange(40), ks=(1,), return_neighbors=1
        )
    texts = torch.arange(40) * 5
    return {"text_ids": texts, "image_ids": found["neighbors"]["indices"], "scores": found["neighbors"]["scores"]}


def test_pretokenised_captions_need_one_per_image():
    callback = CrossModalEvalCallback(image_method="clip.visual", text_method="twice")

    class Doubling(ClipTrainer):
        def twice(self, tokens):
            return self.clip.encode_text(tokens).repeat(2, 1)

    callback.metric.reset()
    callback._offset, callback.loaders.positions, callback.eval_trainer = 0, None, None
    images, tokens = clip_pairs(4, seed=0).tensors
    with pytest.raises(ValueError, match="paired with the images by position"):
        callback.feed(Doubling(), (images, tokens))
    with pytest.raises(TypeError, match="batch_transform="):
        callback.feed(Doubling(), (images,))


# ---- batches of the user's own shape, encoders on a submodule, Euclidean distance ------------------------------------
class PointDicts(Dataset):
    """Items ``{"pixels": point, "cls": label}``: keys no family reads by default."""

    def __init__(self, n: int, seed: int) -> None:
        points, labels = clustered_points(n, num_classes=5, seed=seed)
        self.points = torch.from_numpy(points) * torch.linspace(0.3, 3.0, n).unsqueeze(1)  # lengths vary
        self.labels = torch.from_numpy(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"pixels": self.points[i], "cls": self.labels[i]}


class Backbone(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 6)
        self.autocast_seen: list[bool] = []

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        self.autocast_seen.append(torch.is_autocast_enabled("cpu"))
        return self.proj(x)


class Embedder(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = Backbone()

    def training_step(self, batch, batch_idx):
        z = self.backbone.proj(batch["pixels"])
        same = (batch["cls"][:, None] == batch["cls"][None, :]).float()
        return ((torch.cdist(z, z) - 3.0 * (1 - same)) ** 2).mean()

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def pair(self, batch: dict) -> tuple:
        """A module method that makes the family's batch (a ``batch_transform`` by name)."""
        return batch["pixels"], batch["cls"]


@pytest.mark.slow
def test_user_batches_dotted_encoder_and_euclidean_equal_pml_and_resume(tmp_path: Path):
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    train, val = PointDicts(48, seed=1), PointDicts(45, seed=2)
    loaders = DataLoader(train, batch_size=8), DataLoader(val, batch_size=9)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    callback = RetrievalEvalCallback(
        encode_method="backbone.embed",
        batch_transform=lambda batch: (batch["pixels"], batch["cls"]),  # a lambda: checkpoints must not pickle it
        distance="euclidean",
        ks=(1, 5),
        num_mismatches=3,
        strict=True,
    )
    model = Embedder()
    _trainer(tmp_path, [callback, checkpoint]).fit(model, *loaders)
    with torch.no_grad():
        emb = model.backbone.proj(val.points)
    calc = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"), device=torch.device("cpu")
    )
    pml = calc.get_accuracy(emb, val.labels)  # its default: faiss IndexFlatL2 on the raw embeddings
    last = callback.history[-1]
    assert last["precision@1"] == pytest.approx(pml["precision_at_1"], abs=1e-12)
    assert last["r_precision"] == pytest.approx(pml["r_precision"], abs=1e-12)
    assert last["map@r"] == pytest.approx(pml["mean_average_precision_at_r"], abs=1e-12)
    cosine = embedding_retrieval_metrics(emb, val.labels, ks=(1,))
    assert float(cosine["map@r"]) != pytest.approx(last["map@r"], abs=1e-3)  # the distance was used
    saved = torch.load(checkpoint.last_model_path, weights_only=False)
    (state,) = [v for k, v in saved["callbacks"].items() if k.startswith("RetrievalEvalCallback")]
    assert "distance': 'euclidean'" in next(k for k in saved["callbacks"] if k.startswith("RetrievalEvalCallback"))
    assert set(state) == {"history", "last_step_evaluated"}
    # resume with the transform given by name (a module method) this time
    again = RetrievalEvalCallback(
        encode_method="backbone.embed", batch_transform="pair", distance="euclidean", ks=(1, 5), strict=True
    )
    trainer = _trainer(tmp_path, [again, ModelCheckpoint(dirpath=tmp_path / "ckpt2")], max_epochs=3)
    trainer.fit(Embedder(), *loaders, ckpt_path=checkpoint.last_model_path)
    assert [h["epoch"] for h in again.history] == [0, 1, 2]


@pytest.mark.slow
def test_a_dotted_method_runs_in_the_precision_plugins_forward_context(tmp_path: Path):
    model = Embedder()
    callback = RetrievalEvalCallback(encode_method="backbone.embed", batch_transform="pair", ks=(1,), strict=True)
    trainer = _trainer(tmp_path, [callback], precision="bf16-mixed")
    (result,) = trainer.validate(model, DataLoader(PointDicts(20, seed=3), batch_size=10))
    assert model.backbone.autocast_seen == [True, True] and "retrieval/precision@1" in result


# ---- every family: dotted names, checks at setup, the batch hook -----------------------------------------------------
FAMILIES = callback_families()


def _method_options(core: type) -> list[str]:
    """The options of a family's callback that name a module method."""
    names = inspect.signature(core.__init__).parameters
    return [n for n in names if n.endswith("_method") or n == "tokenizer"]


class Inner(torch.nn.Module):
    def __getattr__(self, name: str):
        if name.endswith("_fn"):
            return lambda *args: None
        return super().__getattr__(name)


class Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.scale = 2.0


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_every_method_option_takes_a_dotted_path_checked_at_setup(family):
    core = family.load("core")
    options = _method_options(core)
    assert options, f"{family.name}: no option names a module method"
    plain = core.examples()[0]
    dotted = {**plain, **{option: f"inner.{option}_fn" for option in options}}
    core(**dotted).check_module(Outer())  # every path resolves to a callable
    raised = []
    for option in options:
        callback = core(**{**dotted, option: "inner.missing.encode"})
        try:
            callback.check_module(Outer())
        except AttributeError as err:
            raised.append(option)
            assert f"({option}=...)" in str(err) and "'missing'" in str(err) and "Inner" in str(err), str(err)
    assert raised, f"{family.name}: check_module checks none of {options}"
    with pytest.raises(ValueError, match=f"`{options[0]}` must be a method name or a dotted path"):
        core(**{**plain, options[0]: "inner..embed"})


def test_the_setup_error_names_the_option_the_missing_part_and_where_the_method_is():
    callback = RetrievalEvalCallback(encode_method="encode_image")
    with pytest.raises(AttributeError) as err:
        callback.check_module(Embedder())
    message = str(err.value)
    assert "Embedder has no method 'encode_image'; set RetrievalEvalCallback(encode_method=...)" in message
    callback = RetrievalEvalCallback(encode_method="backbone.embedd")
    with pytest.raises(AttributeError, match="Embedder.backbone is a Backbone without an attribute 'embedd'"):
        callback.check_module(Embedder())
    callback = RetrievalEvalCallback(encode_method="embed")
    with pytest.raises(AttributeError, match="Embedder has 'backbone.embed'"):  # where a method of that name is
        callback.check_module(Embedder())
    with pytest.raises(AttributeError, match="Outer.scale is a float, not a method or a module"):
        RetrievalEvalCallback(encode_method="scale").check_module(Outer())


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_every_family_takes_a_batch_transform_and_keeps_it_out_of_checkpoints(family):
    core = family.load("core")
    callback = core(**core.examples()[0], batch_transform=lambda batch: ("seen", batch))
    assert callback.transform_batch(None, 7) == ("seen", 7)
    state = callback.state_dict()
    assert not any(callable(v) for v in state.values())
    by_name = core(**core.examples()[0], batch_transform="pair")
    assert by_name.transform_batch(Embedder(), {"pixels": 1, "cls": 2}) == (1, 2)
    with pytest.raises(AttributeError, match=r"set \w+\(batch_transform=...\)"):
        core(**core.examples()[0], batch_transform="prepare").check_methods(Embedder(), batch_transform="x")
    with pytest.raises(ValueError, match="`batch_transform` must be a callable"):
        core(**core.examples()[0], batch_transform=3)


def to_pairs(batch: dict, key: str) -> tuple:
    """A user's batch function with an argument of its own (bound by Hydra's ``_partial_``)."""
    return batch[key], batch["cls"]


def test_hydra_gives_a_batch_transform_with_partial():
    from hydra.utils import instantiate

    callback = instantiate(
        {
            "_target_": "beyondlabels.callbacks.lightning.RetrievalEvalCallback",
            "encode_method": "model.encode_image",
            "batch_transform": {"_target_": f"{__name__}.to_pairs", "_partial_": True, "key": "pixels"},
        }
    )
    assert callback.transform_batch(None, {"pixels": 1, "cls": 2}) == (1, 2)
