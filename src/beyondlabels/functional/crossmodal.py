"""Image↔text retrieval metrics of a paired evaluation set (COCO / Flickr style), from the core's exact search.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning. Both directions are
one call each of :func:`~beyondlabels.functional.retrieval.retrieval_per_query` with a separate query set and pair
ids as labels, so scores, ranking, ties, depth and shares are those of
:func:`~beyondlabels.functional.search.search_neighbors`.

Pairs
    ``text_image_index[t]`` is the row (in ``image_embeddings``) of the image that caption ``t`` describes. An image
    may have any number of captions (COCO: about 5, the demo: 1), also none.

Relevance
    Text → image: the one relevant image of a caption is its own image (gallery: every image). Image → text: the
    relevant captions of an image are all of its captions (gallery: every caption). An image without captions is a
    lone query: it is left out of every image → text value and counted in ``num_images_without_text``; it still is a
    gallery item (a distractor) for text → image.

Ties
    Equal scores rank by ascending gallery row (images in the order of ``image_embeddings``, captions in the order of
    ``text_embeddings``), also across the k-th position; see :mod:`beyondlabels.functional.search`.

Metrics (per query, then averaged over the non-lone queries of a direction)
    - ``image_to_text_recall@k``: 1 if at least one of the image's captions is in its top k, else 0;
      ``text_to_image_recall@k``: 1 if the caption's image is in its top k (open_clip's ``R@k`` in both directions).
    - ``*_mean_rank`` / ``*_median_rank``: mean and median of the 1-based rank of the first relevant item, exact over
      the whole gallery. The median of an even count is the mean of the two middle values (open_clip floors it).
    - ``num_images``, ``num_texts``, ``num_images_without_text``: counts.

Per-query values
    ``per_query`` holds one row per query, images first (``direction`` 0, ``query_id`` the image id), then captions
    (``direction`` 1, ``query_id`` the text id), with ``image_id`` (the image of the row: itself, or the caption's
    image), ``num_relevant`` and, per direction, ``image_to_text_recall@k`` / ``image_to_text_rank`` (NaN on caption
    rows and on lone images) and ``text_to_image_recall@k`` / ``text_to_image_rank`` (NaN on image rows). The NaN-free
    mean of a per-query vector is the scalar of the same name.

Examples:
    >>> images = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> texts = torch.tensor([[0.9, 0.1], [0.1, 0.9], [1.0, 0.9], [0.6, 1.0]])
    >>> m = crossmodal_retrieval_metrics(images, texts, torch.tensor([0, 1, 1, 2]), ks=(1, 2))
    >>> m["text_to_image_recall@1"], m["image_to_text_recall@1"], m["image_to_text_recall@2"]
    (tensor(0.7500, dtype=torch.float64), tensor(0.6667, dtype=torch.float64), tensor(1., dtype=torch.float64))
    >>> m["per_query"]["text_to_image_rank"]  # caption 2 ([1.0, 0.9]) is closer to images 2 and 0 than to its image 1
    tensor([nan, nan, nan, 1., 1., 3., 1.], dtype=torch.float64)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_int_vector, check_ks, check_non_negative_int, check_same_space
from beyondlabels.functional.retrieval import retrieval_per_query
from beyondlabels.functional.search import normalize_rows
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "DIRECTIONS",
    "aggregate_crossmodal",
    "crossmodal_output_schema",
    "crossmodal_per_query",
    "crossmodal_retrieval_metrics",
]

# The two directions, in the order of their rows in `per_query` (the value of per_query["direction"]).
DIRECTIONS = ("image_to_text", "text_to_image")
_KEPT = ("query_index", "num_relevant", "hits", "first_relevant_rank", "neighbor_indices", "neighbor_scores")


def crossmodal_output_schema(ks: Sequence[int]) -> OutputSchema:
    """The output schema of :func:`crossmodal_retrieval_metrics` for cut-offs ``ks``.

    Examples:
        >>> s = crossmodal_output_schema((1, 5))
        >>> s["text_to_image_recall@5"].higher_is_better, s["image_to_text_median_rank"].higher_is_better
        (True, False)
        >>> s["num_texts"].count, s.per_query["direction"].higher_is_better
        (True, None)
        >>> s.headline
        ['image_to_text_recall@1', 'image_to_text_recall@5', 'text_to_image_recall@1', 'text_to_image_recall@5']
    """
    ks = check_ks(ks)
    keys: dict[str, KeySpec] = {}
    per_query: dict[str, KeySpec] = {
        "query_id": KeySpec("per_query", None),
        "direction": KeySpec("per_query", None),
        "image_id": KeySpec("per_query", None),
        "num_relevant": KeySpec("per_query", None, count=True),
    }
    for direction in DIRECTIONS:
        for k in ks:
            keys[f"{direction}_recall@{k}"] = KeySpec("scalar", True)
            per_query[f"{direction}_recall@{k}"] = KeySpec("per_query", True)
    for direction in DIRECTIONS:
        keys[f"{direction}_mean_rank"] = keys[f"{direction}_median_rank"] = KeySpec("scalar", False)
        per_query[f"{direction}_rank"] = KeySpec("per_query", False)
    for name in ("num_images", "num_texts", "num_images_without_text"):
        keys[name] = KeySpec("scalar", None, count=True)
    headline = [f"{direction}_recall@{k}" for direction in DIRECTIONS for k in ks[:2]]  # both ways, two smallest k
    return OutputSchema(keys, per_query, headline=headline)


def _check_pairs(image_embeddings: Tensor, text_embeddings: Tensor, text_image_index: Tensor) -> Tensor:
    # Validated here under their own names (the search would name them `queries` / `embeddings`).
    normalize_rows(image_embeddings, "image_embeddings")
    normalize_rows(text_embeddings, "text_embeddings")
    check_same_space(
        image_embeddings,
        "image_embeddings",
        text_embeddings,
        "text_embeddings",
        width="both must live in one joint space",
        device="use one device",
    )
    index = check_int_vector(text_image_index, "text_image_index", text_embeddings.shape[0], image_embeddings.device)
    n_img = image_embeddings.shape[0]
    bad = (index < 0) | (index >= n_img)
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten()[:5].tolist()
        raise ValueError(
            f"`text_image_index` must hold image rows in [0, {n_img}) (the row of each caption's image); captions "
            f"{rows} point to {index[rows].tolist()}."
        )
    return index


def crossmodal_per_query(
    image_embeddings: Tensor,
    text_embeddings: Tensor,
    text_image_index: Tensor,
    *,
    ks: Sequence[int] = (1, 5, 10),
    chunk_size: int = 1024,
    precision: str = "fp32",
    return_neighbors: int = 0,
    share: tuple[int, int] | None = None,
) -> dict[str, Tensor]:
    """Per-query values of the queries of ``share`` in both directions, the input of :func:`aggregate_crossmodal`.

    Arguments are those of :func:`crossmodal_retrieval_metrics`, plus ``share=(i, n)``: only the i-th of n disjoint
    shares of each direction's queries. Concatenating every share's rows (key by key) and aggregating gives exactly
    the values of one call.

    Returns:
        A flat dict ``"<direction>/<key>"`` of the rows of
        :func:`~beyondlabels.functional.retrieval.retrieval_per_query` (``query_index``, ``num_relevant``, ``hits``,
        ``first_relevant_rank``; with ``return_neighbors`` also ``neighbor_indices`` and ``neighbor_scores``) for
        ``image_to_text`` and ``text_to_image``.
    """
    ks_t = check_ks(ks)
    check_non_negative_int(return_neighbors, "return_neighbors")
    index = _check_pairs(image_embeddings, text_embeddings, text_image_index)
    image_rows = torch.arange(image_embeddings.shape[0], device=index.device)
    common = {"ks": ks_t, "chunk_size": chunk_size, "precision": precision, "share": share}
    i2t = retrieval_per_query(
        text_embeddings, index, query_embeddings=image_embeddings, query_labels=image_rows, **common
    )
    t2i = retrieval_per_query(
        image_embeddings,
        image_rows,
        query_embeddings=text_embeddings,
        query_labels=index,
        return_neighbors=return_neighbors,
        **common,
    )
    out: dict[str, Tensor] = {}
    for direction, rows in zip(DIRECTIONS, (i2t, t2i)):
        for key in _KEPT:
            if key in rows:
                out[f"{direction}/{key}"] = rows[key]
    return out


def aggregate_crossmodal(
    rows: Mapping[str, Tensor],
    text_image_index: Tensor,
    *,
    ks: Sequence[int],
    image_ids: Tensor | None = None,
    text_ids: Tensor | None = None,
) -> dict[str, Tensor | dict[str, Tensor]]:
    """Scalars and ``per_query`` from the (concatenated) rows of :func:`crossmodal_per_query`.

    Args:
        rows: Every query's rows, in any order.
        text_image_index: The ``[N_txt]`` image row of each caption (as given to :func:`crossmodal_per_query`).
        ks: As given to it.
        image_ids: Optional image ids reported as ``per_query["query_id"]`` (default: the rows).
        text_ids: Optional caption ids, likewise.

    Returns:
        The dict described in :func:`crossmodal_retrieval_metrics`.
    """
    ks_t = check_ks(ks)
    device = rows["text_to_image/hits"].device
    text_image_index = text_image_index.to(device=device, dtype=torch.long)
    n_txt = int(rows["text_to_image/query_index"].numel())
    n_img = int(rows["image_to_text/query_index"].numel())
    image_ids = (
        torch.arange(n_img, device=device) if image_ids is None else image_ids.to(device=device, dtype=torch.long)
    )
    text_ids = torch.arange(n_txt, device=device) if text_ids is None else text_ids.to(device=device, dtype=torch.long)
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=device)
    out: dict[str, Tensor | dict[str, Tensor]] = {}
    columns: dict[str, list[Tensor]] = {}
    sizes = {"image_to_text": n_img, "text_to_image": n_txt}
    ranks: dict[str, Tensor] = {}
    for d, direction in enumerate(DIRECTIONS):
        order = torch.argsort(rows[f"{direction}/query_index"])
        hits = rows[f"{direction}/hits"][order]
        r = rows[f"{direction}/num_relevant"][order]
        ok = r > 0
        n_ok = int(ok.sum())
        other_rows = torch.full((sizes[DIRECTIONS[1 - d]],), float("nan"), dtype=torch.float64, device=device)
        for k in ks_t:
            flag = torch.where(ok, (hits[:, k - 1] > 0).to(torch.float64), float("nan"))
            out[f"{direction}_recall@{k}"] = flag[ok].mean() if n_ok else nan
            parts = [flag, other_rows] if d == 0 else [other_rows, flag]
            columns[f"{direction}_recall@{k}"] = parts
        first = torch.where(ok, rows[f"{direction}/first_relevant_rank"][order], float("nan"))
        ranks[direction] = first
        columns[f"{direction}_rank"] = [first, other_rows] if d == 0 else [other_rows, first]
        columns.setdefault("num_relevant", []).append(r)
    for direction in DIRECTIONS:
        first = ranks[direction]
        valid = first[~first.isnan()]
        out[f"{direction}_mean_rank"] = valid.mean() if valid.numel() else nan
        out[f"{direction}_median_rank"] = torch.quantile(valid, 0.5) if valid.numel() else nan
    n_lone = int((rows["image_to_text/num_relevant"] == 0).sum())
    out["num_images"] = torch.tensor(n_img, dtype=torch.long, device=device)
    out["num_texts"] = torch.tensor(n_txt, dtype=torch.long, device=device)
    out["num_images_without_text"] = torch.tensor(n_lone, dtype=torch.long, device=device)
    per_query: dict[str, Tensor] = {
        "query_id": torch.cat([image_ids, text_ids]),
        "direction": torch.cat(
            [torch.zeros(n_img, dtype=torch.long, device=device), torch.ones(n_txt, dtype=torch.long, device=device)]
        ),
        "image_id": torch.cat([image_ids, image_ids[text_image_index]]),
        "num_relevant": torch.cat(columns.pop("num_relevant")),
    }
    for key, parts in columns.items():
        per_query[key] = torch.cat(parts)
    out["per_query"] = per_query
    if "text_to_image/neighbor_indices" in rows:
        order = torch.argsort(rows["text_to_image/query_index"])
        out["neighbors"] = {
            "indices": rows["text_to_image/neighbor_indices"][order],
            "scores": rows["text_to_image/neighbor_scores"][order],
        }
    return out


def crossmodal_retrieval_metrics(
    image_embeddings: Tensor,
    text_embeddings: Tensor,
    text_image_index: Tensor,
    *,
    ks: Sequence[int] = (1, 5, 10),
    chunk_size: int = 1024,
    precision: str = "fp32",
    image_ids: Tensor | None = None,
    text_ids: Tensor | None = None,
    return_neighbors: int = 0,
) -> dict[str, Tensor | dict[str, Tensor]]:
    """Image → text and text → image retrieval metrics (definitions: the module docstring).

    Args:
        image_embeddings: ``[N_img, D]`` image embeddings (finite, non-zero rows).
        text_embeddings: ``[N_txt, D]`` caption embeddings in the same space.
        text_image_index: Int tensor ``[N_txt]``: the row in ``image_embeddings`` of each caption's image.
        ks: Cut-offs of the ``recall@k`` keys; at most ``N_img`` and ``N_txt``.
        chunk_size: Queries scored per block; peak memory is ``O(chunk_size * max(N_img, N_txt))`` scores.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (fast candidate search, identical values).
        image_ids: Optional ``[N_img]`` ids reported in ``per_query["query_id"]``.
        text_ids: Optional ``[N_txt]`` ids, likewise.
        return_neighbors: When ``n > 0`` also return ``neighbors``: the top ``n`` image rows (``indices``) and
            ``scores`` of every caption, ``[N_txt, n]`` (text → image; for tables of misses).

    Returns:
        A dict of 0-d tensors (float64 metrics, int64 counts; keys and directions: :func:`crossmodal_output_schema`)
        and ``per_query`` (one ``[N_img + N_txt]`` vector per key).

    Raises:
        ValueError: on bad embeddings, embeddings of different widths or devices, a ``text_image_index`` that is not
            one integer image row per caption, or bad ``ks`` (larger than either gallery), ``chunk_size``,
            ``precision`` or ``return_neighbors``.

    Examples:
        >>> images = torch.eye(3)
        >>> texts = torch.tensor([[1.0, 0.1, 0.0], [1.0, 0.0, 0.2], [0.0, 1.0, 0.0]])
        >>> m = crossmodal_retrieval_metrics(images, texts, torch.tensor([0, 2, 1]), ks=(1,))
        >>> m["text_to_image_mean_rank"], m["num_images_without_text"]
        (tensor(1.3333, dtype=torch.float64), tensor(0))
    """
    rows = crossmodal_per_query(
        image_embeddings,
        text_embeddings,
        text_image_index,
        ks=ks,
        chunk_size=chunk_size,
        precision=precision,
        return_neighbors=return_neighbors,
    )
    return aggregate_crossmodal(rows, text_image_index, ks=ks, image_ids=image_ids, text_ids=text_ids)
