"""torchmetrics class for text-to-image R-precision over generated images and their prompts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels.functional.labels import label_code
from beyondlabels.functional.rprecision import (
    CandidateSets,
    aggregate_rprecision,
    check_rprecision_settings,
    rprecision_output_schema,
    rprecision_per_query,
)
from beyondlabels.functional.rprecision.settings import check_candidate_sets
from beyondlabels.metrics._shares import shared_rows
from beyondlabels.metrics.base import PerSampleMetric
from beyondlabels.schema import OutputSchema

__all__ = ["TextImageRPrecision"]

# Stored for samples updated without class ids / captions (a real code never equals it: codes are >= 0 or user ints).
_MISSING = torch.iinfo(torch.int64).min


class TextImageRPrecision(PerSampleMetric):
    """R-precision of generated images against their prompts (definitions: :mod:`beyondlabels.functional.rprecision`).

    Each update adds generated images with the embeddings of their prompts and global sample ids; :meth:`compute`
    gathers and deduplicates the samples by id (:class:`~beyondlabels.metrics.base.PerSampleMetric`) and runs the
    kernel once. Candidate sets are a pure function of ``(seed, sample ids)``, so any batch size and world size give
    identical numbers. Under DDP each process draws, scores and ranks only its share of the queries (a contiguous
    run of the id-ordered samples, :func:`~beyondlabels.functional.rprecision.rprecision_per_query`) against the whole
    pool, and the per-query rows are gathered before the values are aggregated: every process returns the same
    numbers, bit for bit those of one process; an error in any process's share is raised on every process.

    Args:
        num_candidates: ``R`` (1 ground truth + ``R − 1`` distractors).
        r: A hit is ``rank <= r`` for ``r_precision``; ``chance = r / R``.
        top_r: Cut-offs of ``r_precision@r``.
        protocol: ``"folds"`` (one draw, ``repeats`` folds) or ``"resample"`` (``repeats`` draws).
        repeats: Folds or draws.
        seed: Seed of the draws and the fold shuffle.
        near_duplicate_threshold: Text cosine at or above which a caption is no distractor (None: off).
        hard_negatives: Also compute ``hard_r_precision`` (nearest eligible captions as distractors).
        candidate_sets: Pinned :class:`~beyondlabels.functional.rprecision.CandidateSets` (``protocol="folds"``).
        chunk_size: Queries per block of the kernel.
        validate_args: Check embeddings for NaN/Inf in every update (a host sync per batch).
        kwargs: Passed to :class:`torchmetrics.Metric`.

    Inputs of :meth:`update`: ``image_embeddings`` ``[B, D]``, ``text_embeddings`` ``[B, D]`` (row i: the prompt of
    image i), ``ids`` ``[B]`` (required under DDP), optional ``class_ids`` ``[B]`` and ``captions`` (``B`` strings or
    int codes: equal captions are never distractors of each other). Pass class ids / captions in every update or none.

    Examples:
        >>> metric = TextImageRPrecision(num_candidates=3, top_r=(1,), repeats=2)
        >>> emb = torch.eye(4)
        >>> metric.update(emb[:2], emb[:2], torch.tensor([0, 1]))
        >>> metric.update(emb[2:], emb[2:], torch.tensor([2, 3]))
        >>> out = metric.compute()
        >>> out["r_precision"].item(), out["num_samples"].item(), out["per_query"]["r_precision"].tolist()
        (1.0, 4, [1.0, 1.0, 1.0, 1.0])
    """

    is_differentiable = False
    higher_is_better = None  # outputs mix directions (ranks are better low): read `output_schema()` per key
    full_state_update = False

    images: list[Tensor]
    texts: list[Tensor]
    class_ids: list[Tensor]
    caption_codes: list[Tensor]

    def __init__(
        self,
        num_candidates: int = 100,
        r: int = 1,
        top_r: Sequence[int] = (1, 5, 10),
        protocol: str = "folds",
        repeats: int = 10,
        seed: int = 0,
        near_duplicate_threshold: float | None = 0.8,
        hard_negatives: bool = False,
        candidate_sets: CandidateSets | None = None,
        chunk_size: int = 256,
        validate_args: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(validate_args=validate_args, **kwargs)
        self.top_r, self.near_duplicate_threshold = check_rprecision_settings(
            num_candidates, r, top_r, protocol, repeats, seed, near_duplicate_threshold, chunk_size
        )
        check_candidate_sets(candidate_sets, protocol)
        self.num_candidates = num_candidates
        self.r = r
        self.protocol = protocol
        self.repeats = repeats
        self.seed = seed
        self.hard_negatives = bool(hard_negatives)
        self.candidate_sets = candidate_sets
        self.chunk_size = chunk_size
        self.add_sample_state("images")
        self.add_sample_state("texts")
        self.add_sample_state("class_ids", agree=True)
        self.add_sample_state("caption_codes", agree=True)

    @classmethod
    def example(cls) -> TextImageRPrecision:
        """24 seeded image and prompt embeddings, ``R = 4`` (see :meth:`PerSampleMetric.example`)."""
        g = torch.Generator().manual_seed(0)
        images = torch.randn(24, 6, generator=g)
        metric = cls(num_candidates=4, top_r=(1, 2), repeats=2)
        metric.update(images, images + 0.5 * torch.randn(24, 6, generator=g), torch.arange(24))
        return metric

    def output_schema(self) -> OutputSchema:
        return rprecision_output_schema(self.top_r, self.hard_negatives).merged(
            OutputSchema({"num_duplicates": self.count_spec()})
        )

    def settings(self) -> dict[str, Any]:
        """The protocol as a plain dict (for reports and run configs)."""
        return {
            "num_candidates": self.num_candidates,
            "r": self.r,
            "top_r": list(self.top_r),
            "protocol": self.protocol,
            "repeats": self.repeats,
            "seed": self.seed,
            "near_duplicate_threshold": self.near_duplicate_threshold,
            "hard_negatives": self.hard_negatives,
            "pinned_candidate_sets": self.candidate_sets is not None,
        }

    # ---- update --------------------------------------------------------------------------------------------------
    def _embeddings(self, value: Any, name: str, rows: int | None) -> Tensor:
        value = self.check_embedding_batch(
            value,
            name,
            "images",
            same_width="use one evaluator.",
            finite="check the generated images and the evaluator.",
        )
        if rows is not None and value.shape[0] != rows:
            raise ValueError(
                f"`{name}` has {value.shape[0]} rows but `image_embeddings` has {rows}; row i of both is one sample."
            )
        return value

    def _codes(self, value: Any, name: str, n: int, device: torch.device) -> Tensor:
        if value is None:
            return torch.full((n,), _MISSING, dtype=torch.long, device=device)
        if isinstance(value, Tensor):
            if value.dim() != 1 or value.is_floating_point() or value.dtype == torch.bool:
                raise ValueError(
                    f"`{name}` must be a 1-D integer tensor or a list of strings, "
                    f"got {tuple(value.shape)} {value.dtype}."
                )
            codes = value.to(device=device, dtype=torch.long)
        else:
            if isinstance(value, str) or not isinstance(value, Sequence):
                raise ValueError(f"`{name}` must be a list with one entry per sample, got {type(value).__name__}.")
            try:
                codes = torch.tensor([label_code(v) for v in value], dtype=torch.long, device=device)
            except ValueError as exc:
                raise ValueError(f"`{name}`: {exc}") from exc
        if codes.shape[0] != n:
            raise ValueError(f"`{name}` has {codes.shape[0]} entries for {n} images; they must match.")
        if bool((codes == _MISSING).any()):
            raise ValueError(f"`{name}` may not hold {_MISSING} (reserved for samples without {name}).")
        return codes

    def update(
        self,
        image_embeddings: Tensor,
        text_embeddings: Tensor,
        ids: Any = None,
        class_ids: Any = None,
        captions: Any = None,
    ) -> None:
        """Add generated images and their prompts (see the class docstring for the inputs)."""
        img = self._embeddings(image_embeddings, "image_embeddings", None)
        txt = self._embeddings(text_embeddings, "text_embeddings", img.shape[0])
        if txt.shape[1] != img.shape[1]:
            raise ValueError(
                f"`text_embeddings` has dimension {txt.shape[1]} but `image_embeddings` {img.shape[1]}; "
                "embed both with one evaluator."
            )
        n = img.shape[0]
        ids = self.check_ids(ids, n, img.device)
        self.append_samples(
            ids,
            images=img,
            texts=txt,
            class_ids=self._codes(class_ids, "class_ids", n, img.device),
            caption_codes=self._codes(captions, "captions", n, img.device),
        )

    # ---- compute -------------------------------------------------------------------------------------------------
    @staticmethod
    def _optional(codes: Tensor, name: str) -> Tensor | None:
        missing = codes == _MISSING
        if bool(missing.all()):
            return None
        if bool(missing.any()):
            raise ValueError(
                f"some updates passed `{name}` and others did not; pass `{name}` in every update or in none."
            )
        return codes

    def compute(self) -> dict[str, Any]:
        """Deduplicate the samples by id and return the kernel's outputs (plus ``num_duplicates``); under DDP each
        process draws, scores and ranks its share of the queries and the per-query rows are gathered."""
        samples = self.gathered_samples()
        class_ids = self._optional(samples.values["class_ids"], "class_ids")
        caption_codes = self._optional(samples.values["caption_codes"], "captions")

        def rows_of(share: tuple[int, int] | None) -> dict[str, Tensor]:
            return rprecision_per_query(
                samples.values["images"],
                samples.values["texts"],
                samples.ids,
                class_ids=class_ids,
                caption_codes=caption_codes,
                num_candidates=self.num_candidates,
                protocol=self.protocol,
                repeats=self.repeats,
                seed=self.seed,
                near_duplicate_threshold=self.near_duplicate_threshold,
                hard_negatives=self.hard_negatives,
                candidate_sets=self.candidate_sets,
                chunk_size=self.chunk_size,
                share=share,
            )

        out = aggregate_rprecision(
            shared_rows(self, rows_of),
            num_candidates=self.num_candidates,
            r=self.r,
            top_r=self.top_r,
            protocol=self.protocol,
            repeats=self.repeats,
            seed=self.seed,
        )
        out["num_duplicates"] = torch.tensor(samples.num_duplicates, dtype=torch.long, device=samples.ids.device)
        return out
