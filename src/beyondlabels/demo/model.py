"""A tiny open_clip CLIP for 32 px pictures (a small conv net or ViT + a small text transformer) as a
LightningModule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from open_clip.loss import ClipLoss
from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg
from open_clip.tokenizer import SimpleTokenizer
from torch import nn

from beyondlabels._internal.checks import check_choice
from beyondlabels.demo.optim import module_optimizers

VISION_TOWERS = ("conv", "vit")


class ConvTower(nn.Module):
    """Image tower for small pictures: three stages of two 3×3 convolutions (BatchNorm, ReLU) and a 2×2 max-pool,
    with ``width``, ``2 * width`` and ``4 * width`` channels, then global average pooling and a linear map to
    ``embed_dim``. Unlike a ViT with 8 px patches it sees edges and corners at full resolution, which is what tells
    a pentagon from a hexagon at 32 px.

    Examples:
        >>> ConvTower(embed_dim=8, width=4)(torch.zeros(2, 3, 32, 32)).shape
        torch.Size([2, 8])
    """

    def __init__(self, embed_dim: int, width: int = 32, image_size: int = 32) -> None:
        super().__init__()
        self.image_size = image_size  # read by evaluators to resize their input

        def stage(c_in: int, c_out: int) -> list[nn.Module]:
            layers: list[nn.Module] = []
            for c in (c_in, c_out):
                layers += [nn.Conv2d(c, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
            return [*layers, nn.MaxPool2d(2)]

        self.features = nn.Sequential(*stage(3, width), *stage(width, 2 * width), *stage(2 * width, 4 * width))
        self.proj = nn.Linear(4 * width, embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(self.features(images).mean(dim=(2, 3)))


class TinyCLIP(pl.LightningModule):
    """CLIP trained from scratch with open_clip's ``ClipLoss`` on image-caption pairs.

    The module exposes the two methods evaluation callbacks call: :meth:`encode_image` (pictures in
    [0, 1], N×3×H×W → L2-normalised N×``embed_dim``) and :meth:`encode_text` (strings → the same space).

    Validation logs ``val/loss`` (the contrastive loss). Zero-shot classification is evaluated by
    :class:`~beyondlabels.callbacks.ZeroShotEvalCallback` (``zeroshot/top1``, ...) and image↔text
    retrieval by :class:`~beyondlabels.callbacks.CrossModalEvalCallback`. ``class_prompts`` (one per
    class, in label order) come from the argument or, when that is None, from the datamodule.

    Args:
        embed_dim: joint embedding width.
        vision: the image tower: ``"conv"`` (:class:`ConvTower`, the default: it learns shapes at 32 px within the
            demo's budget) or ``"vit"`` (open_clip's VisionTransformer).
        conv_width: channels of the conv tower's first stage.
        image_size, patch_size, vision_width, vision_layers, vision_head_width: the ViT (``image_size`` also the
            conv tower's input size).
        context_length, text_width, text_heads, text_layers: the text transformer.
        lr, weight_decay, warmup_steps: AdamW with linear warm-up then cosine decay to 0 over the run.
        class_prompts: one prompt per class, in label order.
        image_mean, image_std: per-channel normalisation applied inside :meth:`encode_image`.
    """

    def __init__(
        self,
        embed_dim: int = 64,
        vision: str = "conv",
        conv_width: int = 32,
        image_size: int = 32,
        patch_size: int = 8,
        vision_width: int = 128,
        vision_layers: int = 4,
        vision_head_width: int = 32,
        context_length: int = 16,
        text_width: int = 128,
        text_heads: int = 4,
        text_layers: int = 2,
        lr: float = 3e-3,
        weight_decay: float = 0.05,
        warmup_steps: int = 40,
        class_prompts: Sequence[str] | None = None,
        image_mean: Sequence[float] = (0.25, 0.25, 0.25),
        image_std: Sequence[float] = (0.25, 0.25, 0.25),
    ) -> None:
        super().__init__()
        check_choice(vision, "vision", VISION_TOWERS)
        if image_size % patch_size:
            raise ValueError(f"patch_size ({patch_size}) must divide image_size ({image_size})")
        self.save_hyperparameters()
        vision_cfg = CLIPVisionCfg(
            layers=vision_layers if vision == "vit" else 1,  # the conv tower replaces it
            width=vision_width,
            head_width=vision_head_width,
            patch_size=patch_size,
            image_size=image_size,
        )
        text = CLIPTextCfg(context_length=context_length, width=text_width, heads=text_heads, layers=text_layers)
        self.clip = CLIP(embed_dim=embed_dim, vision_cfg=vision_cfg, text_cfg=text)
        if vision == "conv":
            self.clip.visual = ConvTower(embed_dim, conv_width, image_size)
        self.tokenizer = SimpleTokenizer(context_length=context_length)
        self.register_buffer("image_mean", torch.tensor(image_mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("image_std", torch.tensor(image_std).view(1, -1, 1, 1), persistent=False)
        self.class_prompts = list(class_prompts) if class_prompts else None
        self.loss_fn = ClipLoss()

    # ---- the interface evaluation callbacks use -------------------------------------------------
    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised embeddings of pictures with values in [0, 1], shape (N, 3, H, W)."""
        images = (images.to(self.image_mean.dtype) - self.image_mean) / self.image_std
        return self.clip.encode_image(images, normalize=True)

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised embeddings of strings (tokenised with open_clip's tokenizer)."""
        tokens = self.tokenizer(list(texts)).to(self.device)
        return self.clip.encode_text(tokens, normalize=True)

    def predict_labels(self, images: torch.Tensor) -> torch.Tensor:
        """Zero-shot class indices (N,): the most similar class prompt of each picture (ties: the smaller index)."""
        if not self.class_prompts:
            raise ValueError(
                "predict_labels needs class prompts: pass class_prompts=[...] or a datamodule with class_prompts"
            )
        scores = self.encode_image(images) @ self.encode_text(self.class_prompts).T
        return scores.argmax(dim=1)

    # ---- training ---------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        world_size = self.trainer.world_size if self._trainer is not None else 1
        if world_size > 1:
            self.loss_fn = ClipLoss(gather_with_grad=True, rank=self.global_rank, world_size=world_size)
        if self.class_prompts is None and self._trainer is not None:
            prompts = getattr(self.trainer.datamodule, "class_prompts", None)
            self.class_prompts = list(prompts) if prompts else None

    def _contrastive_loss(self, batch: dict[str, Any]) -> torch.Tensor:
        image_features = self.encode_image(batch["image"])
        text_features = self.encode_text(batch["caption"])
        return self.loss_fn(image_features, text_features, self.clip.logit_scale.exp())

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self._contrastive_loss(batch)
        bs = batch["image"].shape[0]
        self.log("train/loss", loss, prog_bar=True, batch_size=bs)
        self.log("train/logit_scale", self.clip.logit_scale.exp().detach(), batch_size=bs)
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        bs = batch["image"].shape[0]
        image_features = self.encode_image(batch["image"])
        text_features = self.encode_text(batch["caption"])
        loss = self.loss_fn(image_features, text_features, self.clip.logit_scale.exp())
        self.log("val/loss", loss, prog_bar=True, batch_size=bs, sync_dist=True)

    def configure_optimizers(self) -> dict[str, Any]:
        return module_optimizers(
            self, betas=(0.9, 0.98), no_decay=lambda name, param: param.ndim < 2 or "logit_scale" in name
        )


ARCHITECTURE_KEYS = (
    "embed_dim",
    "vision",
    "conv_width",
    "image_size",
    "patch_size",
    "vision_width",
    "vision_layers",
    "vision_head_width",
    "context_length",
    "text_width",
    "text_heads",
    "text_layers",
)


def tiny_clip_model(**architecture: Any) -> CLIP:
    """The bare open_clip ``CLIP`` of a :class:`TinyCLIP` with these architecture arguments (:data:`ARCHITECTURE_KEYS`):
    the ``model_factory`` with which :class:`~beyondlabels.io.evaluator.ClipEvaluator` rebuilds a saved TinyCLIP.

    Examples:
        >>> tiny_clip_model(embed_dim=8, conv_width=4, text_width=16, text_heads=2, text_layers=1).encode_text(
        ...     torch.zeros(1, 16, dtype=torch.long)).shape
        torch.Size([1, 8])
    """
    unknown = sorted(set(architecture) - set(ARCHITECTURE_KEYS))
    if unknown:
        raise ValueError(f"tiny_clip_model takes the architecture arguments {ARCHITECTURE_KEYS}; unknown: {unknown}")
    return TinyCLIP(**architecture).clip
