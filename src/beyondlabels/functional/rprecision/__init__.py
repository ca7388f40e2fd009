"""Text-to-image R-precision: each generated image against its own prompt and R−1 distractor captions.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning. Definitions (stated
once here; the metric, the callback and ``evaluate.py task=rprecision`` refer to them); their properties and the
comparison with published protocols are in ``docs/rprecision.md``:

Samples
    Row ``i`` of ``image_embeddings`` is the image generated from the prompt whose embedding is row ``i`` of
    ``text_embeddings``; ``ids[i]`` is the sample's global id (unique). Every computation first orders the samples by
    id (the *pool*, positions ``0..N−1``), so results never depend on the order or the batches in which samples
    arrive.

Scores
    ``s(i, t)``, the score of image ``i`` and text ``t``, is the core's Score (:mod:`beyondlabels.functional.search`):
    the fp32 product of the L2-normalised rows, image on the left; a pair gets the same bits whatever the blocking,
    the candidate set, the direction or the chunk size. Text-to-text scores (near-duplicates, hard negatives) are the
    Score of ``(text_q, text_j)``, query ``q`` on the left.

Candidates
    ``R = num_candidates`` (default 100: 1 ground truth + 99 distractors, as AttnGAN / DM-GAN / CLIP-R-precision).
    A sample ``j`` is an *eligible* distractor of sample ``q`` unless

    - ``j`` is ``q`` itself,
    - ``j`` has ``q``'s class when ``class_ids`` are given (CUB-style),
    - ``j`` has ``q``'s caption string (``caption_codes`` equal, see
      :func:`~beyondlabels.functional.labels.encode_labels`),
    - with ``near_duplicate_threshold=t`` (default 0.8; None: off) the text score of ``(q, j)`` is ``>= t`` (a
      near-duplicate would leak the answer).

    Seeded draw: the *space* of ``q`` is the ``M_q`` samples of other classes (all ``N`` samples without
    ``class_ids``) in ascending id order. For ``j = 0, 1, 2, ...`` the draw takes the sample at position
    ``u_j = (h_j mod 2**63) mod M_q`` of the space, where ``h_j = mix(mix(base ^ q) + (j + 1)·γ)`` is the ``j``-th
    output of splitmix64 seeded with ``mix(base ^ q)`` (``mix``: splitmix64's finaliser, ``γ = 0x9E3779B97F4A7C15``,
    ``base = mix(mix(seed) ^ mix(repeat·γ + 1))``, all modulo ``2**64``, ``q`` the query's id); it keeps the sample
    when it is eligible and not kept before, and stops at ``R − 1`` kept: the distractors in the order drawn. The sets
    are a pure function of ``(seed, repeat, the ids [and class ids, caption codes, text embeddings] of the pool)``;
    :class:`CandidateSets` pin them (files: :mod:`beyondlabels.io.candidate_sets`).
    Hard negatives (``hard_negatives=True``): the ``R − 1`` eligible samples of highest text score with ``q``, equal
    scores ordered by smaller id, also across the ``(R − 1)``-th place; reported under their own key
    ``hard_r_precision``.
    Fewer than ``R − 1`` eligible samples for some query raises a ``ValueError`` naming one such query (the same
    one whatever the chunk size) and its exact count.

The tie rule
    The rank of the ground truth is ``1 + #{distractors d : s_d >= s_gt}``: a hit at ``r`` (``rank <= r``) needs the
    ground truth **strictly** above all but ``r − 1`` distractors, so a tie counts as a miss. The top-r curve
    ``r_precision_curve[r − 1] = mean(rank <= r)``, ``r = 1..R``, comes from the same scores.

Directions
    Image → text (the standard, ``r_precision``): image ``q`` against caption ``q`` and the captions of its
    distractor samples. Text → image (``text_to_image_r_precision``): prompt ``q`` against image ``q`` and the
    generated images of the same distractor samples. Both read the one similarity ``s``.

Aggregation
    ``protocol="folds"`` (DM-GAN / Comp-T2I): one draw (``repeat = 0``); the value is the mean hit over all samples
    and ``*_std`` the standard deviation (ddof = 0) of the fold means, the hits shuffled with the seed (order of a hash
    of ``(seed, id)``) and split into ``min(repeats, N)`` near-equal folds (:func:`fold_assignment`).
    ``protocol="resample"`` (DALL-Eval): ``repeats`` draws (``repeat = 0..repeats − 1``); value and std over the
    draws' means. ``r_precision@r`` and the text → image value aggregate the same way; the curve and per-sample
    values average over the draws.

Per-sample values
    ``per_query`` holds, in ascending id order, ``query_id``, ``r_precision`` (the sample's hit, averaged over the
    draws), ``rank`` (its caption's rank in the first draw), ``text_to_image_r_precision``, ``hard_r_precision`` (when
    on) and ``clip_score``; the mean of each is the scalar of the same name.

Other keys
    ``chance = r / R`` (the expected value of random embeddings), ``clip_score = 100 · mean(max(s(i, i), 0))``
    (torchmetrics' CLIPScore scale) and ``clip_score_w2.5 = 2.5 · mean(max(s(i, i), 0))`` (Hessel et al.'s CLIP-S
    with w = 2.5), ``num_samples``, ``num_candidates``.

Modules (every name importable from this package): :mod:`~beyondlabels.functional.rprecision.settings` the
checks of the settings; :mod:`~beyondlabels.functional.rprecision.candidates` the candidate draw;
:mod:`~beyondlabels.functional.rprecision.scores` the candidates' scores;
:mod:`~beyondlabels.functional.rprecision.r_precision` the metric and its folds, as one call or as per-query rows of
a share of the queries (:func:`rprecision_per_query`, what each process computes under DDP) and their aggregation
(:func:`aggregate_rprecision`); the output keys are declared here
(:func:`rprecision_output_schema`).

Examples:
    >>> import torch
    >>> texts = torch.eye(4)
    >>> out = text_image_r_precision(texts.clone(), texts, torch.arange(4), num_candidates=3, top_r=(1, 2), repeats=2)
    >>> out["r_precision"].item(), out["chance"].item(), out["clip_score"].item()
    (1.0, 0.3333333333333333, 100.0)
    >>> text_image_r_precision(torch.ones(2, 2), torch.ones(2, 2), num_candidates=2, top_r=(1,),
    ...                        repeats=1, near_duplicate_threshold=None)["r_precision"].item()  # a tie is a miss
    0.0
"""

from __future__ import annotations

from collections.abc import Sequence

from beyondlabels.functional.rprecision.candidates import CandidateSets, draw_candidate_sets
from beyondlabels.functional.rprecision.r_precision import (
    aggregate_rprecision,
    fold_assignment,
    rprecision_per_query,
    text_image_r_precision,
)
from beyondlabels.functional.rprecision.scores import candidate_scores
from beyondlabels.functional.rprecision.settings import PROTOCOLS, check_rprecision_settings
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "PROTOCOLS",
    "CandidateSets",
    "aggregate_rprecision",
    "check_rprecision_settings",
    "draw_candidate_sets",
    "fold_assignment",
    "candidate_scores",
    "rprecision_output_schema",
    "rprecision_per_query",
    "text_image_r_precision",
]


def rprecision_output_schema(top_r: Sequence[int] = (1, 5, 10), hard_negatives: bool = False) -> OutputSchema:
    """The output schema of :func:`text_image_r_precision`.

    Examples:
        >>> s = rprecision_output_schema((1, 5), hard_negatives=True)
        >>> s["r_precision@5"].higher_is_better, s["chance"].higher_is_better, s["num_samples"].count
        (True, None, True)
        >>> s["r_precision_curve"].kind, sorted(s.per_query)
        ('curve', ['clip_score', 'hard_r_precision', 'query_id', 'r_precision', 'rank', 'text_to_image_r_precision'])
    """
    up, none = KeySpec("scalar", True), KeySpec("scalar", None)
    keys = {"r_precision": up, "r_precision_std": none}
    keys.update({f"r_precision@{r}": up for r in sorted(set(top_r))})
    keys["text_to_image_r_precision"] = up
    keys["text_to_image_r_precision_std"] = none
    if hard_negatives:
        keys["hard_r_precision"] = up
    keys.update({"clip_score": up, "clip_score_w2.5": up, "chance": none})
    keys.update(
        {"num_samples": KeySpec("scalar", None, count=True), "num_candidates": KeySpec("scalar", None, count=True)}
    )
    keys["r_precision_curve"] = KeySpec("curve", True)
    per_query = {
        "query_id": KeySpec("per_query", None),
        "r_precision": KeySpec("per_query", True),
        "rank": KeySpec("per_query", False),
        "text_to_image_r_precision": KeySpec("per_query", True),
        "clip_score": KeySpec("per_query", True),
    }
    if hard_negatives:
        per_query["hard_r_precision"] = KeySpec("per_query", True)
    return OutputSchema(keys, per_query, headline=["r_precision", "text_to_image_r_precision"])  # both directions
