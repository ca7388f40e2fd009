"""torchmetrics class for image↔text retrieval over a paired evaluation set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_index_vector
from beyondlabels.functional.crossmodal import aggregate_crossmodal, crossmodal_output_schema, crossmodal_per_query
from beyondlabels.metrics._shares import shared_rows
from beyondlabels.metrics.base import PerSampleMetric
from beyondlabels.schema import OutputSchema

__all__ = ["CrossModalRetrieval"]

# Images and captions share the base's one id state: an image id i is stored as 2 i, a text id t as 2 t + 1.
_MAX_ID = 2**62


class CrossModalRetrieval(PerSampleMetric):
    """Image → text and text → image recall@k and ranks (open_clip's training eval) over all seen images and captions.

    Images and captions arrive separately or together in :meth:`update`, each with a global id; a caption also carries
    the id of its image (the pair id: its one relevant image, and the image's relevant captions). :meth:`compute`
    gathers and deduplicates both by id (:class:`~beyondlabels.metrics.base.PerSampleMetric`), orders images by image
    id and captions by text id (so equal scores rank by the smaller id), and runs the core's exact search once per
    direction (definitions: :mod:`beyondlabels.functional.crossmodal`).

    Distributed use: ids are required; with ``distributed_search=True`` (default) each process searches its share of
    both directions' queries (about 1/W of each) against the whole gallery and the per-query values are gathered, so
    world sizes 1 and W give identical numbers, bit for bit; an error in any process's share is raised on every
    process. ``distributed_search=False``: every process searches every query.

    Args:
        ks: Cut-offs of ``image_to_text_recall@k`` and ``text_to_image_recall@k``.
        chunk_size: Passed to the search (queries per block).
        precision: Passed to the search (``"fp32"`` or an identical fast mode).
        return_neighbors: When ``n > 0`` :meth:`compute` also returns ``neighbors``: every caption's top ``n`` images
            as ``image_ids`` and ``scores`` (``[N_txt, n]``, captions in text-id order), for tables of misses.
        distributed_search: Split the search between processes (see above).
        validate_args: Check embeddings for NaN/Inf in every update (a host sync per batch).
        kwargs: Passed to :class:`torchmetrics.Metric`.

    Inputs of :meth:`update` (all keyword-friendly; pass the images, the captions, or both):
        ``image_embeddings`` ``[B, D]`` with ``image_ids`` ``[B]``; ``text_embeddings`` ``[M, D]`` with
        ``text_image_ids`` ``[M]`` (the id of each caption's image) and ``text_ids`` ``[M]``. Ids are integers in
        ``[0, 2**62)``; images and captions have separate id spaces. Without ``text_ids`` each caption's id is its
        image's id, which is right only when every image has one caption.

    Examples:
        >>> metric = CrossModalRetrieval(ks=(1,))
        >>> metric.update(
        ...     torch.eye(2), torch.tensor([7, 9]), torch.tensor([[1.0, 0.2], [0.1, 1.0]]), torch.tensor([9, 7])
        ... )
        >>> out = metric.compute()
        >>> out["text_to_image_recall@1"], out["image_to_text_mean_rank"]
        (tensor(0., dtype=torch.float64), tensor(2., dtype=torch.float64))
        >>> out["per_query"]["query_id"].tolist(), out["per_query"]["image_id"].tolist()
        ([7, 9, 7, 9], [7, 9, 7, 9])
    """

    embeddings: list[Tensor]
    image_ids: list[Tensor]
    item_state = "image_ids"  # a sampler repeats an image with its captions: one item

    def __init__(
        self,
        ks: Sequence[int] = (1, 5, 10),
        chunk_size: int = 1024,
        precision: str = "fp32",
        return_neighbors: int = 0,
        distributed_search: bool = True,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(validate_args=validate_args, **kwargs)
        self.keep_search_settings(ks, chunk_size, precision, return_neighbors, distributed_search)
        self.add_sample_state("embeddings")
        self.add_sample_state("image_ids", agree=True)  # an image's own id; a caption's image

    @classmethod
    def example(cls) -> CrossModalRetrieval:
        """12 seeded images with two captions each, ``ks=(1, 3)`` (see :meth:`PerSampleMetric.example`)."""
        g = torch.Generator().manual_seed(3)
        metric = cls(ks=(1, 3))
        images = torch.randn(12, 6, generator=g)
        texts = images.repeat_interleave(2, dim=0) + 0.8 * torch.randn(24, 6, generator=g)
        metric.update(images, torch.arange(12), texts, torch.arange(24) // 2, torch.arange(24))
        return metric

    def output_schema(self) -> OutputSchema:
        return crossmodal_output_schema(self.ks).merged(OutputSchema({"num_duplicates": self.count_spec()}))

    # ---- update --------------------------------------------------------------------------------------------------
    def _check_embeddings(self, value: Any, name: str) -> Tensor:
        return self.check_embedding_batch(
            value,
            name,
            "embeddings",
            same_width="images and captions must be embedded into one space of one width.",
            finite="check the model outputs.",
        )

    def _check_id_vector(self, value: Any, name: str, length: int, device: torch.device) -> Tensor:
        if value is None:
            raise ValueError(f"`{name}` is required: images and captions are matched and deduplicated by id.")
        value = check_index_vector(
            value,
            name,
            length,
            device,
            items="integer ids",
            vector="a 1-D integer tensor",
            rows=f"{length} embeddings",
        )
        if self.validate_args and value.numel() and bool(((value < 0) | (value >= _MAX_ID)).any()):
            raise ValueError(
                f"`{name}` must lie in [0, 2**62), got {value[(value < 0) | (value >= _MAX_ID)][:5].tolist()}."
            )
        return value

    def update(
        self,
        image_embeddings: Tensor | None = None,
        image_ids: Any = None,
        text_embeddings: Tensor | None = None,
        text_image_ids: Any = None,
        text_ids: Any = None,
    ) -> None:
        """Add images, captions or both (see the class docstring for the inputs)."""
        if image_embeddings is None and text_embeddings is None:
            raise ValueError(
                "pass `image_embeddings` (with `image_ids`), `text_embeddings` (with `text_image_ids`), or both."
            )
        if image_embeddings is not None:
            emb = self._check_embeddings(image_embeddings, "image_embeddings")
            ids = self._check_id_vector(image_ids, "image_ids", emb.shape[0], emb.device)
            self.append_samples(2 * ids, embeddings=emb, image_ids=ids)
        elif image_ids is not None:
            raise ValueError("`image_ids` was given without `image_embeddings`.")
        if text_embeddings is not None:
            emb = self._check_embeddings(text_embeddings, "text_embeddings")
            pairs = self._check_id_vector(text_image_ids, "text_image_ids", emb.shape[0], emb.device)
            ids = pairs if text_ids is None else self._check_id_vector(text_ids, "text_ids", emb.shape[0], emb.device)
            self.append_samples(2 * ids + 1, embeddings=emb, image_ids=pairs)
        elif text_image_ids is not None or text_ids is not None:
            raise ValueError("`text_image_ids` / `text_ids` were given without `text_embeddings`.")

    # ---- compute -------------------------------------------------------------------------------------------------
    def compute(self) -> dict[str, Any]:
        """Deduplicate images and captions by id and return both directions' metrics from the core's search."""
        samples = self.gathered_samples()
        ids, emb, pair = samples.ids, samples.values["embeddings"], samples.values["image_ids"]
        is_text = (ids % 2) == 1
        image_ids, text_ids = ids[~is_text] // 2, ids[is_text] // 2  # ascending: gathered samples are in id order
        if image_ids.numel() == 0 or text_ids.numel() == 0:
            raise ValueError(
                f"{type(self).__name__} saw {image_ids.numel()} images and {text_ids.numel()} captions; cross-modal "
                "retrieval needs both (pass image and text embeddings to `update`)."
            )
        text_pairs = pair[is_text]
        row = torch.searchsorted(image_ids, text_pairs).clamp_(max=image_ids.numel() - 1)
        unknown = image_ids[row] != text_pairs
        if bool(unknown.any()):
            raise ValueError(
                f"captions {text_ids[unknown][:5].tolist()} belong to images {text_pairs[unknown][:5].tolist()} "
                "that were never passed as images; every caption's image must be in the evaluation set."
            )
        images, texts = emb[~is_text], emb[is_text]

        def rows_of(share: tuple[int, int] | None) -> dict[str, Tensor]:
            return crossmodal_per_query(
                images,
                texts,
                row,
                ks=self.ks,
                chunk_size=self.chunk_size,
                precision=self.precision,
                return_neighbors=self.return_neighbors,
                share=share,
            )

        rows = shared_rows(self, rows_of, split=self.distributed_search)
        out = aggregate_crossmodal(rows, row, ks=self.ks, image_ids=image_ids, text_ids=text_ids)
        out["num_duplicates"] = torch.tensor(samples.num_duplicates, dtype=torch.long, device=emb.device)
        if "neighbors" in out:
            out["neighbors"] = {
                "text_ids": text_ids,
                "image_ids": image_ids[out["neighbors"]["indices"]],
                "scores": out["neighbors"]["scores"],
            }
        return out
