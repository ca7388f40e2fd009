"""Periodic image↔text retrieval evaluation of a dual encoder (CLIP-style), as open_clip's training eval reports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from beyondlabels._internal.checks import check_int_at_least
from beyondlabels.callbacks._module_paths import TWO_TOWER_METHODS
from beyondlabels.callbacks.base import EvaluationCore, LightningModule, Trainer, check_method_paths, check_names
from beyondlabels.callbacks.media import EvaluationMedia
from beyondlabels.callbacks.runner import read_batch
from beyondlabels.metrics import CrossModalRetrieval

__all__ = ["CrossModalEvalCore"]


class CrossModalEvalCore(EvaluationCore):
    """Every few epochs or steps, embed an image-caption evaluation set with both towers and log image↔text recall@k.

    Each evaluation walks the evaluation loader, calls ``pl_module.<image_method>(images)`` and
    ``pl_module.<text_method>(captions)`` in eval mode without gradients, and feeds
    :class:`~beyondlabels.metrics.CrossModalRetrieval` (the core's exact search, pair ids as labels). It logs
    ``<prefix>/image_to_text_recall@k``, ``<prefix>/text_to_image_recall@k``, mean and median ranks of the first
    relevant item in both directions and the counts at the trainer's global step; on rank 0 the media (every logger,
    ``media/``) also get a table of the worst text → image misses (the caption, its image and the image retrieved
    first). Schedule, loader sharding, failures, files and resume: :class:`~beyondlabels.callbacks.base.EvaluationCore`.

    Batches are dicts: ``batch[image_key]`` the images ``[B, ...]``, ``batch[id_key]`` their global ids (default: the
    position, or the dataset index under DDP), and ``batch[caption_key]`` one entry per image: a caption string, or a
    list of caption strings (COCO / Flickr: 5 per image; a dataset returning lists needs a ``collate_fn`` that keeps
    one list per image, since PyTorch's default collation transposes them). Caption ``j`` of image ``i`` gets the
    text id ``i * max_captions_per_image + j``. Tuples ``(images, captions)`` or ``(images, captions, ids)`` are read
    the same way.

    Pre-tokenised captions (a CLIP trainer's ``(image, tokens)`` batches): when the captions entry is a tensor (e.g.
    token ids ``[B, L]``) or a mapping of tensors (a Hugging Face tokenizer's output), it goes to ``text_method`` as
    it is (on the module's device; ``tokenizer`` is not used), one caption per image, paired with the images by
    position: text ``i`` is the caption of image ``i``. The worst-miss table then has no caption text, unless the
    evaluation dataset's items hold caption strings. A batch of another shape goes through ``batch_transform`` first
    (:class:`~beyondlabels.callbacks.base.EvaluationCore`).

    Args:
        image_method: LightningModule method mapping images to embeddings ``[B, D]``: its name, or a dotted path to a
            submodule's method or to a submodule (``"model.encode_image"``, ``"clip.visual"``).
        text_method: LightningModule method mapping captions to embeddings ``[M, D]`` in the same space (a name or a
            dotted path); it gets a list of strings, with ``tokenizer`` the tokens, or the batch's pre-tokenised
            captions as they are.
        tokenizer: Optional LightningModule attribute (a name or a dotted path) that maps a list of strings to the
            tokens ``text_method`` takes (e.g. ``"tokenizer"`` for a plain open_clip model); None: ``text_method``
            takes strings.
        image_key: Batch key of the images.
        caption_key: Batch key of the captions.
        id_key: Batch key of the image ids.
        max_captions_per_image: The most captions one image may have (sets the text ids, see above).
        ks: The k of every ``recall@k`` key.
        chunk_size: Passed to the metric (queries per search block).
        precision: Passed to the metric (``"fp32"`` or a fast mode).
        distributed_search: Passed to the metric (split the search between ranks).
        num_misses: Rows of the worst-miss table (0 turns it off).
        kwargs: The schedule, loader, files and failure options of
            :class:`~beyondlabels.callbacks.base.EvaluationCore`.

    Examples:
        >>> from beyondlabels.callbacks import CrossModalEvalCallback
        >>> callback = CrossModalEvalCallback(every_n_epochs=1, prog_bar=["text_to_image_recall@1"])
        >>> callback.schema.mode("image_to_text_recall@5"), callback.schema.mode("text_to_image_median_rank")
        ('max', 'min')
    """

    def __init__(
        self,
        image_method: str = "encode_image",
        text_method: str = "encode_text",
        tokenizer: str | None = None,
        image_key: str = "image",
        caption_key: str = "caption",
        id_key: str = "id",
        max_captions_per_image: int = 5,
        ks: Sequence[int] = (1, 5, 10),
        chunk_size: int = 1024,
        precision: str = "fp32",
        distributed_search: bool = True,
        num_misses: int = 16,
        *,
        every_n_epochs: int | None = None,
        every_n_steps: int | None = None,
        dataloader: str | DataLoader | Callable[[], DataLoader] = "val_dataloader",
        prefix: str = "crossmodal",
        **kwargs: Any,
    ) -> None:
        check_method_paths(
            image_method=image_method, text_method=text_method, tokenizer=tokenizer, optional=("tokenizer",)
        )
        check_names(image_key=image_key, caption_key=caption_key, id_key=id_key)
        check_int_at_least(max_captions_per_image, "max_captions_per_image", 1)
        check_int_at_least(num_misses, "num_misses", 0)
        self.image_method, self.text_method, self.tokenizer = image_method, text_method, tokenizer
        self.image_key, self.caption_key, self.id_key = image_key, caption_key, id_key
        self.max_captions_per_image = max_captions_per_image
        self.ks = tuple(ks) if isinstance(ks, Sequence) and not isinstance(ks, str) else ks
        self.chunk_size, self.precision, self.distributed_search = chunk_size, precision, distributed_search
        self.num_misses = num_misses
        self._captions: dict[int, str] = {}
        super().__init__(
            every_n_epochs=every_n_epochs, every_n_steps=every_n_steps, dataloader=dataloader, prefix=prefix, **kwargs
        )

    def build_metric(self) -> CrossModalRetrieval:
        return CrossModalRetrieval(
            ks=self.ks,
            chunk_size=self.chunk_size,
            precision=self.precision,
            return_neighbors=1 if self.num_misses else 0,
            distributed_search=self.distributed_search,
        )

    @classmethod
    def examples(cls) -> list[dict[str, Any]]:
        return [{}, {"image_method": "embed_image"}, {"text_method": "embed_text"}]

    def state_key_parts(self) -> dict[str, Any]:
        return {"image_method": self.image_method, "text_method": self.text_method}

    def check_module(self, pl_module: LightningModule) -> None:
        self.check_methods(pl_module, **TWO_TOWER_METHODS)

    def on_evaluation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._captions = {}

    def on_evaluation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._captions = {}

    # ---- one batch -----------------------------------------------------------------------------------------------
    def _caption_lists(self, captions: Any, batch_size: int) -> list[list[str]]:
        if isinstance(captions, str) or not isinstance(captions, Sequence) or len(captions) != batch_size:
            size = (
                len(captions)
                if isinstance(captions, Sequence) and not isinstance(captions, str)
                else type(captions).__name__
            )
            raise ValueError(
                f"batch[{self.caption_key!r}] must hold one entry per image ({batch_size}): a caption or a list of "
                f"captions; got {size}. With several captions per image use a collate_fn that keeps one list per image "
                "(PyTorch's default collation transposes lists)."
            )
        out = []
        for entry in captions:
            texts = [entry] if isinstance(entry, str) else list(entry)
            if not all(isinstance(t, str) for t in texts):
                raise ValueError(
                    f"batch[{self.caption_key!r}] entries must be strings or lists of strings, got {entry!r}."
                )
            if len(texts) > self.max_captions_per_image:
                raise ValueError(
                    f"an image has {len(texts)} captions but max_captions_per_image={self.max_captions_per_image}; "
                    "raise it."
                )
            out.append(texts)
        return out

    def _read(self, batch: Any) -> tuple[Any, Any, Any]:
        """``(images, captions, ids or None)`` of a dict batch or an ``(images, captions[, ids])`` tuple."""
        keys = (self.image_key, self.caption_key, self.id_key)
        return read_batch(batch, keys, ("image_key", "caption_key"), ("images", "captions"), "cross-modal ")

    @staticmethod
    def _pretokenised(captions: Any) -> bool:
        """Whether the captions entry holds tokens (a tensor, or a mapping of tensors) rather than strings."""
        if isinstance(captions, torch.Tensor):
            return True
        return (
            isinstance(captions, Mapping)
            and bool(captions)
            and all(isinstance(v, torch.Tensor) for v in captions.values())
        )

    def _feed_tokens(
        self, pl_module: LightningModule, tokens: Any, image_emb: torch.Tensor, image_ids: torch.Tensor
    ) -> None:
        """Pre-tokenised captions, one per image, paired with the images by position (text ``i`` of image ``i``)."""
        text_emb = self.embed(pl_module, self.text_method, self.to_device(tokens, pl_module))
        if text_emb.shape[0] != image_emb.shape[0]:
            raise ValueError(
                f"{self.text_method}() returned {text_emb.shape[0]} embeddings for the pre-tokenised captions of "
                f"{image_emb.shape[0]} images; pre-tokenised captions are paired with the images by position (one "
                "per image). Give caption strings (lists for several per image) to pair them otherwise."
            )
        self.metric.update(image_emb, image_ids, text_emb, image_ids, image_ids * self.max_captions_per_image)

    def feed(self, pl_module: LightningModule, batch: Any) -> None:
        images, captions, given_ids = self._read(batch)
        images = self.to_device(images, pl_module)
        image_emb = self.embed(pl_module, self.image_method, images)
        batch_size = image_emb.shape[0]
        image_ids = self.take_ids(batch_size, given_ids)
        if self._pretokenised(captions):
            self._feed_tokens(pl_module, captions, image_emb, image_ids)
            return
        lists = self._caption_lists(captions, batch_size)
        texts = [t for texts in lists for t in texts]
        owner = torch.tensor(
            [i for i, texts in enumerate(lists) for _ in texts], dtype=torch.long, device=pl_module.device
        )
        slot = torch.tensor(
            [j for texts in lists for j in range(len(texts))], dtype=torch.long, device=pl_module.device
        )
        if not texts:
            self.metric.update(image_embeddings=image_emb, image_ids=image_ids)
            return
        text_emb = self.encode_texts(pl_module, texts, self.text_method, self.tokenizer)
        text_image_ids = image_ids[owner]
        text_ids = text_image_ids * self.max_captions_per_image + slot
        self.metric.update(image_emb, image_ids, text_emb, text_image_ids, text_ids)
        if self.num_misses:
            self._captions.update(zip(text_ids.tolist(), texts))

    # ---- media ---------------------------------------------------------------------------------------------------
    def describe_media(self, trainer: Trainer, results: dict[str, Any], media: EvaluationMedia) -> None:
        if self.num_misses and "neighbors" in results:
            columns = [
                "caption",
                "true_image",
                "retrieved_image",
                "true_image_rank",
                "cosine",
                "text_id",
                "true_image_id",
                "retrieved_image_id",
            ]
            media.table("worst_text_to_image_misses", columns, self.miss_rows(results))

    def miss_rows(self, results: dict[str, Any]) -> list[dict[str, Any]]:
        """The captions whose image ranks worst (largest rank first, then the smaller text id), with thumbnails."""
        per_query, neighbors = results["per_query"], results["neighbors"]
        texts = per_query["direction"] == 1
        ranks = per_query["text_to_image_rank"][texts]
        image_ids = per_query["image_id"][texts]
        order = torch.argsort(-ranks, stable=True)
        order = order[ranks[order] > 1][: self.num_misses]
        rows = []
        for t in order.tolist():
            text_id, true_id = int(neighbors["text_ids"][t]), int(image_ids[t])
            retrieved = int(neighbors["image_ids"][t, 0])
            rows.append(
                {
                    "caption": self._caption(text_id),
                    "true_image": self._thumbnail(true_id),
                    "retrieved_image": self._thumbnail(retrieved),
                    "true_image_rank": int(ranks[t]),
                    "cosine": float(neighbors["scores"][t, 0]),
                    "text_id": text_id,
                    "true_image_id": true_id,
                    "retrieved_image_id": retrieved,
                }
            )
        return rows

    def _caption(self, text_id: int) -> str | None:
        if text_id in self._captions:  # seen on this rank
            return self._captions[text_id]
        item = self.item(text_id // self.max_captions_per_image)
        if isinstance(item, dict):
            captions = item.get(self.caption_key)
        else:  # a tuple item (image, captions, ...)
            captions = item[1] if item is not None and len(item) > 1 else None
        captions = [captions] if isinstance(captions, str) else captions
        if not isinstance(captions, (list, tuple)) or not all(isinstance(c, str) for c in captions):
            return None  # pre-tokenised, or no captions
        slot = text_id % self.max_captions_per_image
        return captions[slot] if slot < len(captions) else None

    def _thumbnail(self, image_id: int) -> torch.Tensor | None:
        return self.thumbnail(image_id, self.image_key)
