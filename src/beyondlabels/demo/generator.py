"""A tiny text-to-image generator for the demo shapes: captions → 32×32 pictures, trained with a pixel loss.

:class:`ShapeGenerator` is the demo model of the text-to-image R-precision family
(:class:`~beyondlabels.callbacks.RPrecisionEvalCallback`, ``python train.py experiment=t2i_demo``). It is a *regression*
generator: one deterministic picture per caption, fitted to the real picture of that caption with an L1 (or MSE) loss.
Its pictures are blurry — shape outlines average out over random rotations — but a blob of the right colour, size and
position already ranks its own caption high among 99 distractors, which is what the evaluation measures.

Text encoder
    A bag of hashed word unigrams and bigrams (the "hashing trick"): the caption is lower-cased, split into words
    (``[a-z0-9]+``), and each word and each pair of neighbouring words is mapped to one of ``num_buckets`` rows of an
    embedding table by CRC-32; the caption's feature is the mean of its rows. Bigrams keep what word order the demo
    grammar needs (``"right triangle"`` against ``"the right"``, ``"upper left"`` against ``"left"``). Stateless: no
    vocabulary to build or save; an unseen word gets a row like any other (collisions only share rows). A caption
    without any word has the zero feature.

Decoder
    MLP → a ``channels[0]``×4×4 map → per stage: nearest ×2 upsampling, 3×3 convolution, GroupNorm, GELU (4 → 8 → 16
    → 32 px with the default three stages) → 1×1 convolution to RGB → sigmoid, so pictures lie in ``[0, 1]``.
    GroupNorm has no running statistics: training and evaluation modes compute the same function.

Examples:
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> model = ShapeGenerator()
    >>> images = model.generate(["a small red square in the center", "a large blue circle in the upper left"])
    >>> images.shape, bool(images.min() >= 0) and bool(images.max() <= 1)
    (torch.Size([2, 3, 32, 32]), True)
    >>> torch.equal(images, model.generate(["a small red square in the center",
    ...                                      "a large blue circle in the upper left"]))
    True
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn

from beyondlabels._internal.checks import check_choice, check_positive_int
from beyondlabels.demo.optim import module_optimizers

__all__ = ["ShapeGenerator", "caption_grams"]

_WORD = re.compile(r"[a-z0-9]+")
LOSSES = ("l1", "mse")


def caption_grams(text: str) -> list[str]:
    """The words and neighbouring word pairs of ``text`` that the generator's text encoder embeds.

    Examples:
        >>> caption_grams("A red, right triangle")
        ['a', 'red', 'right', 'triangle', 'a red', 'red right', 'right triangle']
    """
    words = _WORD.findall(text.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


def _check_prompts(prompts: Any) -> list[str]:
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or not all(isinstance(p, str) for p in prompts):
        raise ValueError(
            f"`prompts` must be a list of strings (one caption per picture), got {type(prompts).__name__}."
        )
    if not prompts:
        raise ValueError("`prompts` is empty; pass at least one caption.")
    return list(prompts)


class ShapeGenerator(pl.LightningModule):
    """Caption → 3×32×32 picture in ``[0, 1]`` (architecture and text encoder: the module docstring).

    Trained on the demo datamodule's items (dicts with ``image``, ``caption``, ``label``, ``id``): the picture
    generated from ``caption`` is compared with ``image`` by the pixel loss. ``training_step`` logs ``train/loss``,
    ``validation_step`` logs ``val/loss``. :meth:`generate` is what
    :class:`~beyondlabels.callbacks.RPrecisionEvalCallback` calls.

    Args:
        num_buckets: Rows of the hashed word / word-pair embedding table.
        text_dim: Width of the text embedding.
        hidden_dim: Width of the MLP between text feature and the first feature map.
        channels: Channels of the 4×4 map and of each upsampling stage; ``len(channels) - 1`` stages, each doubling
            the side, so the pictures are ``4 · 2^(len(channels) - 1)`` pixels wide (32 for the default).
        loss: Pixel loss, ``"l1"`` (sharper: the per-pixel median) or ``"mse"`` (the per-pixel mean).
        lr, weight_decay, warmup_steps: AdamW with linear warm-up then cosine decay to 0 over the run.

    Raises:
        ValueError: if an argument is out of range or ``loss`` is unknown.
    """

    def __init__(
        self,
        num_buckets: int = 8192,
        text_dim: int = 64,
        hidden_dim: int = 256,
        channels: Sequence[int] = (64, 32, 16, 8),
        loss: str = "l1",
        lr: float = 3e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 20,
    ) -> None:
        super().__init__()
        for name, value in (("num_buckets", num_buckets), ("text_dim", text_dim), ("hidden_dim", hidden_dim)):
            check_positive_int(value, name)
        try:
            channels = [int(c) for c in channels]
        except (TypeError, ValueError):
            channels = []
        if len(channels) < 1 or any(c < 1 for c in channels):
            raise ValueError(
                f"`channels` must list at least one positive width (the 4×4 map, then one per stage), got {channels!r}."
            )
        check_choice(loss, "loss", LOSSES)
        if not lr > 0 or weight_decay < 0 or warmup_steps < 0:
            raise ValueError(
                "`lr` must be > 0, `weight_decay` and `warmup_steps` >= 0; "
                f"got {lr!r}, {weight_decay!r}, {warmup_steps!r}."
            )
        self.save_hyperparameters()
        self.hparams["channels"] = channels
        self.image_size = 4 * 2 ** (len(channels) - 1)
        self.embedding = nn.EmbeddingBag(num_buckets, text_dim, mode="mean")
        self.mlp = nn.Sequential(
            nn.Linear(text_dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, channels[0] * 16),
        )
        stages: list[nn.Module] = []
        for c_in, c_out in zip(channels, channels[1:]):
            stages += [
                nn.Upsample(scale_factor=2, mode="nearest"),
                nn.Conv2d(c_in, c_out, 3, padding=1),
                nn.GroupNorm(math.gcd(8, c_out), c_out),
                nn.GELU(),
            ]
        self.decoder = nn.Sequential(*stages, nn.Conv2d(channels[-1], 3, 1))

    # ---- text -------------------------------------------------------------------------------------------------------
    def _bag(self, prompts: list[str]) -> tuple[Tensor, Tensor]:
        """Flat bucket indices and per-caption offsets for :class:`torch.nn.EmbeddingBag`."""
        buckets = self.hparams.num_buckets
        indices: list[int] = []
        offsets: list[int] = []
        for prompt in prompts:
            offsets.append(len(indices))
            indices.extend(zlib.crc32(g.encode("utf-8")) % buckets for g in caption_grams(prompt))
        device = self.embedding.weight.device
        return torch.tensor(indices, dtype=torch.long, device=device), torch.tensor(
            offsets, dtype=torch.long, device=device
        )

    def forward(self, prompts: Sequence[str]) -> Tensor:
        """Pictures ``[B, 3, S, S]`` in ``[0, 1]`` for ``B`` captions (with gradients; see :meth:`generate`)."""
        prompts = _check_prompts(prompts)
        features = self.embedding(*self._bag(prompts))
        grid = self.mlp(features).view(len(prompts), self.hparams.channels[0], 4, 4)
        return torch.sigmoid(self.decoder(grid))

    @torch.no_grad()
    def generate(self, prompts: Sequence[str]) -> Tensor:
        """One deterministic picture per caption: float ``[B, 3, S, S]`` in ``[0, 1]`` on the module's device.

        Runs in evaluation mode without gradients, then restores the module's mode.

        Raises:
            ValueError: if ``prompts`` is not a non-empty list of strings.
        """
        was_training = self.training
        self.eval()
        try:
            return self(prompts)
        finally:
            self.train(was_training)

    # ---- training ---------------------------------------------------------------------------------------------------
    def _loss(self, batch: dict[str, Any]) -> tuple[Tensor, int]:
        if not isinstance(batch, dict) or "image" not in batch or "caption" not in batch:
            raise ValueError(
                "ShapeGenerator trains on dict batches with `image` [B, 3, S, S] in [0, 1] and `caption` (B strings)."
            )
        target = batch["image"].to(self.dtype)
        generated = self(list(batch["caption"]))
        if target.shape != generated.shape:
            raise ValueError(
                f"batch `image` has shape {tuple(target.shape)} but the generator makes {tuple(generated.shape)}; "
                f"set `channels` so that 4 · 2^(len(channels) - 1) is the picture size."
            )
        if self.hparams.loss == "l1":
            loss = torch.nn.functional.l1_loss(generated, target)
        else:
            loss = torch.nn.functional.mse_loss(generated, target)
        return loss, target.shape[0]

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        loss, bs = self._loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=bs)
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss, bs = self._loss(batch)
        self.log("val/loss", loss, prog_bar=True, batch_size=bs, sync_dist=True)

    def configure_optimizers(self) -> dict[str, Any]:
        return module_optimizers(self)
