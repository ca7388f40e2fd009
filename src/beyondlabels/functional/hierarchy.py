"""Taxonomy-aware metrics: hierarchical precision, recall and F over a class tree, and taxonomy-derived gains.

Pure torch: tensors in, tensors out, on the device of the inputs; no torchmetrics, no Lightning. The tree is a
:class:`~beyondlabels.taxonomy.Taxonomy` (node indices, depth, :meth:`~beyondlabels.taxonomy.Taxonomy.ancestor_table`).

Ancestor sets
    ``anc(v)`` is the set of nodes on the path from ``v`` up to the root, ``v`` included. The root is **excluded** by
    default (``include_root=False``): it is shared by every pair and carries no information. So
    ``|anc(v)| = depth(v)`` (root excluded) or ``depth(v) + 1`` (included), and
    ``|anc(a) ∩ anc(b)| = depth(LCA(a, b))`` (or ``+ 1``): the kernels need only LCA depths, computed for all pairs at
    once (:func:`lca_depth`: an Euler-tour range-minimum query, O(1) per pair) in chunks of ``chunk_size`` pairs.

Per sample (prediction ``pred_n``, ground truth ``gt_n``)
    ``p_n = |anc(pred_n) ∩ anc(gt_n)| / |anc(pred_n)|``, ``r_n = |anc(pred_n) ∩ anc(gt_n)| / |anc(gt_n)|``,
    ``f_n = 2 p_n r_n / (p_n + r_n)`` (0 when both are 0). A ground truth at the root with the root excluded is an
    error (nothing to recall).

Abstentions
    A prediction at the root says nothing beyond "it is in the taxonomy": it is an *abstention*, counted in
    ``abstentions`` (and ``abstention_rate``). Its precision is a stated convention, ``p_n = abstention_precision``:
    by default 0, so an abstention earns nothing and a mapper or model cannot gain hP by saying less (its recall is
    what the sets give: 0 with the root excluded, ``1 / (depth(gt_n) + 1)`` with it included).
    ``abstention_precision=1`` is the other common convention (an empty prediction is "not wrong"), under which
    answering the root whenever unsure lifts hP.

Aggregates
    - ``hP = mean_n p_n``, ``hR = mean_n r_n`` (the instance means of "Taxonomy-Aware Evaluation of Vision-Language
      Models", CVPR 2025; hiclass' ``average="macro"``), ``hF = 2 hP hR / (hP + hR)`` (the paper's hF: harmonic mean
      of the two means; 0 when both are 0).
    - ``hF_sample_mean = mean_n f_n``: the mean of per-sample F (hiclass' macro ``f1``) — a different number from hF.
    - ``micro_hP = Σ p_n |anc(pred_n)| / Σ|anc(pred)|`` (``Σ|∩| / Σ|anc(pred)|`` without abstentions), ``micro_hR =
      Σ|∩| / Σ|anc(gt)|``, ``micro_hF`` their harmonic mean (the pooled form of Kiritchenko et al., hiclass'
      ``average="micro"``); ``micro_hP = abstention_precision`` when every prediction is at the root with the root
      excluded (0 / 0).
    - ``exact_match``: fraction of samples with ``pred_n == gt_n``; an *error* is a sample with ``pred_n != gt_n``.
    - ``error_lca_depth_fraction[d]``: fraction of errors whose LCA has depth ``d`` (``d = 0 .. max_depth``, the root
      at depth 0 whatever ``include_root``; deeper = a nearer miss); ``mean_error_lca_depth`` their mean depth (NaN
      without errors); ``num_errors``, ``abstentions``, ``abstention_rate``, ``num_samples``.
    Every mean is a float64 sum over samples in the given order: results do not depend on ``chunk_size``.

Text-mapping quality (:func:`mapping_quality`)
    The aggregates above of the nodes a :class:`~beyondlabels.taxonomy.TextToNode` maps labelled answers to, against
    their gold nodes, with how often each mapping rule decided.

Graded retrieval credit (:func:`taxonomy_class_gains`)
    ``gain(q, r) = |anc(q) ∩ anc(r)| / max(|anc(q)|, |anc(r)|)`` — the hierarchical F-like overlap normalised by the
    deeper class, symmetric, 1 on the diagonal, 0 between classes whose LCA is the root (root excluded). A sibling at
    depth 3 earns 2/3, a cousin 1/3. Pass the :class:`~beyondlabels.functional.relevance.ClassGains` it returns to
    :func:`~beyondlabels.functional.retrieval.embedding_retrieval_metrics` (``graded=[...]``).

Examples:
    >>> from beyondlabels.taxonomy import Taxonomy
    >>> tax = Taxonomy({"object": "entity", "artifact": "object", "transport": "artifact", "train": "transport",
    ...                 "activity": "entity", "sport": "activity", "pool": "sport", "high_jump": "sport"},
    ...                root="entity")
    >>> out = hierarchical_precision_recall(tax.indices(["transport"]), tax.indices(["train"]), tax)
    >>> round(float(out["hP"]), 2), round(float(out["hR"]), 2)
    (1.0, 0.75)
    >>> out = hierarchical_precision_recall(tax.indices(["high_jump"]), tax.indices(["pool"]), tax)
    >>> round(float(out["hP"]), 2), round(float(out["hR"]), 2), int(out["num_errors"])
    (0.67, 0.67, 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_bool, check_number, check_positive_int, gain_labels
from beyondlabels._internal.shares import share_span
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.schema import KeySpec, OutputSchema
from beyondlabels.taxonomy.text import RULES, TextToNode
from beyondlabels.taxonomy.tree import Taxonomy

__all__ = [
    "aggregate_hierarchy",
    "check_abstention_precision",
    "hierarchical_precision_recall",
    "hierarchy_per_query",
    "hierarchy_output_schema",
    "lca_depth",
    "mapping_quality",
    "mistake_lca_depth",
    "node_indices",
    "per_class_means",
    "taxonomy_class_gains",
]

DEFAULT_CHUNK = 1 << 20


def hierarchy_output_schema() -> OutputSchema:
    """The output schema of :func:`hierarchical_precision_recall` (and of the metric built on it).

    Examples:
        >>> schema = hierarchy_output_schema()
        >>> schema.mode("hF"), schema["num_samples"].count, schema.curve_keys(), schema.headline
        ('max', True, ['error_lca_depth_fraction'], ['hP', 'hR', 'hF'])
    """
    up = KeySpec("scalar", True)
    count = KeySpec("scalar", None, count=True)
    keys = {
        "hP": up,
        "hR": up,
        "hF": up,
        "hF_sample_mean": up,
        "micro_hP": up,
        "micro_hR": up,
        "micro_hF": up,
        "exact_match": up,
        "mean_error_lca_depth": up,
        "num_samples": count,
        "num_errors": count,
        "abstentions": count,
        "abstention_rate": KeySpec("scalar", None),
        "error_lca_depth_fraction": KeySpec("curve", None),
    }
    per_query = {
        "hP": KeySpec("per_query", True),
        "hR": KeySpec("per_query", True),
        "hF_sample_mean": KeySpec("per_query", True),  # per-sample F: its mean is hF_sample_mean, not hF
        "exact_match": KeySpec("per_query", True),
        "lca_depth": KeySpec("per_query", None),
        "pred": KeySpec("per_query", None),
        "gt": KeySpec("per_query", None),
    }
    return OutputSchema(keys, per_query, headline=["hP", "hR", "hF"])


def _check_nodes(x: Any, name: str, size: int) -> Tensor:
    if not isinstance(x, Tensor) or x.dim() != 1:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(
            f"`{name}` must be a 1-D tensor of node indices, got {shape}; map names with Taxonomy.indices()."
        )
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise ValueError(f"`{name}` must hold integer node indices, got dtype {x.dtype}.")
    x = x.long()
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= size):
        bad = x[(x < 0) | (x >= size)].unique()[:5].tolist()
        raise ValueError(f"`{name}` holds indices outside [0, {size}) (the taxonomy's nodes): {bad}.")
    return x


def lca_depth(a: Tensor, b: Tensor, taxonomy: Taxonomy, chunk_size: int = DEFAULT_CHUNK) -> tuple[Tensor, Tensor]:
    """Depth and index of the lowest common ancestor of each pair ``(a[i], b[i])``, in O(1) per pair.

    A range-minimum query on the Euler tour (:meth:`~beyondlabels.taxonomy.Taxonomy.lca_structure`): the LCA is the
    shallowest node the depth-first walk passes between the first visits of ``a`` and ``b``, read from two entries of
    the sparse table. Five gathers per pair, chunked over pairs, on the device of ``a``.

    Args:
        a: int64 ``[N]`` node indices (validated by the callers).
        b: int64 ``[N]`` node indices, on the device of ``a``.
        taxonomy: the tree.
        chunk_size: pairs per block (peak memory ``~ 64 * chunk_size`` bytes).

    Returns:
        ``(depth, index)``: int64 ``[N]`` each.

    Examples:
        >>> from beyondlabels.taxonomy import Taxonomy
        >>> tax = Taxonomy({"b": "a", "c": "a", "d": "b", "e": "b"}, root="a")
        >>> lca_depth(tax.indices(["d", "d", "e"]), tax.indices(["e", "c", "e"]), tax)
        (tensor([1, 0, 2]), tensor([1, 0, 4]))
    """
    first, sparse, log2 = taxonomy.lca_structure(a.device, copy=False)
    size = len(taxonomy)
    width = sparse.shape[1]
    flat = sparse.reshape(-1)
    n = a.numel()
    depth = torch.empty(n, dtype=torch.long, device=a.device)
    index = torch.empty(n, dtype=torch.long, device=a.device)
    for lo in range(0, n, chunk_size):
        fa, fb = first[a[lo : lo + chunk_size]], first[b[lo : lo + chunk_size]]
        left = torch.minimum(fa, fb)
        right = torch.maximum(fa, fb) + 1
        level = log2[right - left]
        row = level * width
        key = torch.minimum(
            flat[row + left], flat[row + right - torch.bitwise_left_shift(torch.ones_like(level), level)]
        )
        depth[lo : lo + chunk_size] = key // size
        index[lo : lo + chunk_size] = key % size
    return depth, index


def _harmonic(p: Tensor, r: Tensor) -> Tensor:
    total = p + r
    return torch.where(
        total > 0, 2 * p * r / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(total)
    )


def hierarchical_precision_recall(
    pred: Tensor,
    gt: Tensor,
    taxonomy: Taxonomy,
    include_root: bool = False,
    chunk_size: int = DEFAULT_CHUNK,
    abstention_precision: float = 0.0,
) -> dict[str, Any]:
    """hP, hR, hF (and micro, sample-mean, abstention and error statistics) of predicted nodes against true nodes.

    Definitions: the module docstring.

    Args:
        pred: int ``[N]`` predicted node indices (:meth:`~beyondlabels.taxonomy.Taxonomy.indices` maps names).
        gt: int ``[N]`` true node indices, same device.
        taxonomy: the tree the indices refer to.
        include_root: count the root in every ancestor set.
        chunk_size: pairs per block of the LCA computation (results do not depend on it).
        abstention_precision: the precision of a prediction at the root (an abstention), in ``[0, 1]``; default 0.

    Returns:
        Scalars (0-d float64 / int64 tensors) for every key of :func:`hierarchy_output_schema`, the curve
        ``error_lca_depth_fraction`` (float64 ``[max_depth + 1]``) and ``per_query``: float64 ``hP``, ``hR``,
        ``hF``, ``exact_match`` and int64 ``lca_depth``, ``pred``, ``gt`` (one entry per sample, in input order).

    Raises:
        ValueError: for non-integer, non-1-D or out-of-range indices, different lengths or devices, no samples, a
            ground truth at the root while the root is excluded (its positions are named), or an
            ``abstention_precision`` outside ``[0, 1]``.
    """
    rows = hierarchy_per_query(
        pred,
        gt,
        taxonomy,
        include_root=include_root,
        chunk_size=chunk_size,
        abstention_precision=abstention_precision,
    )
    return aggregate_hierarchy(rows, taxonomy, include_root=include_root, abstention_precision=abstention_precision)


def hierarchy_per_query(
    pred: Tensor,
    gt: Tensor,
    taxonomy: Taxonomy,
    include_root: bool = False,
    chunk_size: int = DEFAULT_CHUNK,
    abstention_precision: float = 0.0,
    share: tuple[int, int] | None = None,
) -> dict[str, Tensor]:
    """The per-sample values of the samples of ``share``, the input of :func:`aggregate_hierarchy`.

    Arguments are those of :func:`hierarchical_precision_recall`, plus ``share=(i, n)``: only the samples at positions
    ``i·N // n`` to ``(i + 1)·N // n − 1`` (the i-th of n contiguous near-equal runs; every input is checked whole).
    Concatenating the rows of shares ``0, 1, ..., n − 1`` gives the rows of one call.

    Returns:
        The ``per_query`` dict of :func:`hierarchical_precision_recall` for the samples of the share.
    """
    include_root = check_bool(include_root, "include_root")
    abstention_precision = check_abstention_precision(abstention_precision)
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    pred, gt = _check_pair(pred, gt, taxonomy, include_root)
    lo, hi = share_span(pred.numel(), share)
    pred, gt = pred[lo:hi], gt[lo:hi]
    shared_depth, _ = lca_depth(pred, gt, taxonomy, chunk_size)
    n_pred, n_gt, shared = _set_sizes(pred, gt, shared_depth, taxonomy, include_root)
    at_root = pred == 0
    p = torch.where(
        at_root,
        torch.full_like(shared, abstention_precision),
        shared / torch.where(n_pred == 0, torch.ones_like(n_pred), n_pred),
    )
    r = shared / n_gt
    return {
        "hP": p,
        "hR": r,
        "hF_sample_mean": _harmonic(p, r),
        "exact_match": (pred == gt).to(torch.float64),
        "lca_depth": shared_depth,
        "pred": pred,
        "gt": gt,
    }


def _set_sizes(
    pred: Tensor, gt: Tensor, shared_depth: Tensor, taxonomy: Taxonomy, include_root: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """``|anc(pred)|``, ``|anc(gt)|`` and ``|anc(pred) ∩ anc(gt)|`` of each sample, float64."""
    depth = taxonomy.depth.to(pred.device)
    offset = 1 if include_root else 0
    return (
        (depth[pred] + offset).to(torch.float64),
        (depth[gt] + offset).to(torch.float64),
        (shared_depth + offset).to(torch.float64),
    )


def aggregate_hierarchy(
    rows: dict[str, Tensor], taxonomy: Taxonomy, include_root: bool = False, abstention_precision: float = 0.0
) -> dict[str, Any]:
    """The values of :func:`hierarchical_precision_recall` from every sample's rows of :func:`hierarchy_per_query`
    (the shares' rows concatenated in share order), with the settings given to it."""
    include_root = check_bool(include_root, "include_root")
    abstention_precision = check_abstention_precision(abstention_precision)
    pred, gt, shared_depth = rows["pred"], rows["gt"], rows["lca_depth"]
    p, r = rows["hP"], rows["hR"]
    device = pred.device
    n_pred, n_gt, shared = _set_sizes(pred, gt, shared_depth, taxonomy, include_root)
    at_root = pred == 0
    hp, hr = p.mean(), r.mean()
    sum_pred = n_pred.sum()
    abstained = torch.full_like(shared, abstention_precision)
    credited = torch.where(at_root, abstained * n_pred, shared).sum()  # Σ|∩| exactly when nothing abstains
    micro_p = torch.where(sum_pred > 0, credited / sum_pred.clamp_min(1), sum_pred.new_tensor(abstention_precision))
    micro_r = shared.sum() / n_gt.sum()
    errors = pred != gt
    num_errors = errors.sum()
    error_depths = shared_depth[errors]
    counts = torch.bincount(error_depths, minlength=taxonomy.max_depth + 1).to(torch.float64)
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=device)
    fraction = counts / num_errors if int(num_errors) > 0 else torch.zeros_like(counts)
    mean_error_depth = error_depths.to(torch.float64).mean() if int(num_errors) > 0 else nan
    return {
        "hP": hp,
        "hR": hr,
        "hF": _harmonic(hp, hr),
        "hF_sample_mean": rows["hF_sample_mean"].mean(),
        "micro_hP": micro_p,
        "micro_hR": micro_r,
        "micro_hF": _harmonic(micro_p, micro_r),
        "exact_match": rows["exact_match"].mean(),
        "mean_error_lca_depth": mean_error_depth,
        "num_samples": torch.tensor(pred.numel(), device=device),
        "num_errors": num_errors,
        "abstentions": at_root.sum(),
        "abstention_rate": at_root.to(torch.float64).mean(),
        "error_lca_depth_fraction": fraction,
        "per_query": dict(rows),
    }


def _check_pair(pred: Tensor, gt: Tensor, taxonomy: Taxonomy, include_root: bool) -> tuple[Tensor, Tensor]:
    """``pred`` and ``gt`` as checked node vectors of one length and device, at least one sample, no ground truth at
    the root while the root is excluded."""
    size = len(taxonomy)
    pred = _check_nodes(pred, "pred", size)
    gt = _check_nodes(gt, "gt", size)
    if pred.numel() != gt.numel():
        raise ValueError(
            f"`pred` has {pred.numel()} entries and `gt` {gt.numel()}; give one prediction per ground truth."
        )
    if pred.device != gt.device:
        raise ValueError(f"`pred` is on {pred.device} and `gt` on {gt.device}; put both on one device.")
    if pred.numel() == 0:
        raise ValueError("`pred` and `gt` are empty; hierarchical precision and recall need at least one sample.")
    if not include_root and bool((gt == 0).any()):
        where = torch.nonzero(gt == 0).flatten()[:5].tolist()
        raise ValueError(
            f"`gt` holds the root {taxonomy.root!r} (positions {where}); with the root excluded a ground truth at the "
            "root has no ancestors to recall. Label those samples with a more specific node, drop them, or set "
            "include_root=True."
        )
    return pred, gt


def check_abstention_precision(value: Any) -> float:
    """``value`` as a float in ``[0, 1]``, or a ValueError naming ``abstention_precision``.

    Examples:
        >>> check_abstention_precision(0)
        0.0
    """
    hint = (
        "the precision of a prediction at the root: 0, the default, gives an abstention no credit; "
        "1 counts it as not wrong"
    )
    return check_number(value, "abstention_precision", at_least=0.0, at_most=1.0, hint=hint)


def taxonomy_class_gains(
    taxonomy: Taxonomy,
    classes: Iterable[str],
    labels: Any = None,
    name: str = "hierarchical",
    include_root: bool = False,
) -> ClassGains:
    """Class-gain matrix ``gain(q, r) = |anc(q) ∩ anc(r)| / max(|anc(q)|, |anc(r)|)`` between the nodes ``classes``.

    Args:
        taxonomy: the tree (:func:`~beyondlabels.io.taxonomy_files.load_taxonomy` reads one from a file or
            ``"wordnet"``).
        classes: node names of the classes, in the order of the matrix rows.
        labels: the label each class carries in the data: None (the node names themselves, for string labels),
            ``"index"`` (class ``i`` is labelled ``i``, as in datasets of class indices), or a sequence of ints or
            strings, one per class.
        name: prefix of the graded keys (``<name>_precision@k``, ``<name>_ndcg@k``, and ``<name>_mistake_lca_depth``:
            the mean depth of the lowest common ancestor of a query's class and its wrong top-1 neighbour's).
        include_root: count the root in the ancestor sets (then unrelated classes earn ``1 / max(depth + 1)``).

    Raises:
        ValueError: for a ``taxonomy`` that is not a Taxonomy, unknown or repeated class names, a class at the root
            with the root excluded, or ``labels`` of the wrong length.

    Examples:
        >>> from beyondlabels.taxonomy import Taxonomy
        >>> tax = Taxonomy({"b": "a", "c": "a", "d": "b", "e": "b"}, root="a")
        >>> gains = taxonomy_class_gains(tax, ["d", "b"])
        >>> gains.gains.tolist(), gains.classes
        ([[1.0, 0.5], [0.5, 1.0]], ['d', 'b'])
    """
    if not isinstance(taxonomy, Taxonomy):
        raise ValueError(
            f"`taxonomy` must be a Taxonomy, got {type(taxonomy).__name__}; read files with "
            "beyondlabels.io.load_taxonomy (in a config: `_target_: beyondlabels.io.load_taxonomy`)."
        )
    if isinstance(classes, str):
        raise ValueError(f"`classes` must be a list of node names, got the string {classes!r}.")
    classes = list(classes)
    if not classes:
        raise ValueError("`classes` is empty; list the node name of every class.")
    if len(set(classes)) != len(classes):
        repeated = sorted({c for c in classes if classes.count(c) > 1})[:5]
        raise ValueError(f"`classes` lists {repeated} more than once; each class needs its own row.")
    idx = taxonomy.indices(classes)
    if not include_root and bool((idx == 0).any()):
        raise ValueError(
            f"`classes` holds the root {taxonomy.root!r}, whose ancestor set is empty once the root is excluded; "
            "drop it or set include_root=True."
        )
    labels = gain_labels(labels, classes)
    offset = 1 if include_root else 0
    a = idx.repeat_interleave(len(classes))
    b = idx.repeat(len(classes))
    shared, _ = lca_depth(a, b, taxonomy)
    depth = taxonomy.depth
    size = (depth[idx] + offset).to(torch.float64)
    denom = torch.maximum(size[:, None], size[None, :])
    gains = (shared.to(torch.float64) + offset).reshape(len(classes), len(classes)) / denom
    # the depth of each pair's lowest common ancestor: retrieval reports its mean over the top-1 mistakes
    lca = shared.to(torch.float64).reshape(len(classes), len(classes))
    return ClassGains(gains, labels, name=name, mistake_stats={"lca_depth": lca})


def mistake_lca_depth(
    query_nodes: Tensor, retrieved_nodes: Tensor, taxonomy: Taxonomy, chunk_size: int = DEFAULT_CHUNK
) -> dict[str, Tensor]:
    """Depth of the LCA between each query's class and its (top-1) retrieved class, over the mistakes only.

    A mistake is a pair of different nodes; a deeper LCA is a nearer miss (a sibling class shares its parent).

    Args:
        query_nodes: int ``[N]`` node indices of the queries' classes.
        retrieved_nodes: int ``[N]`` node indices of what was retrieved.
        taxonomy: the tree.

    Returns:
        ``mean_mistake_lca_depth`` (float64, NaN without mistakes), ``num_mistakes`` and ``lca_depth`` (int64 ``[N]``,
        every pair, mistakes or not).

    Examples:
        >>> from beyondlabels.taxonomy import Taxonomy
        >>> tax = Taxonomy({"b": "a", "c": "a", "d": "b", "e": "b"}, root="a")
        >>> out = mistake_lca_depth(tax.indices(["d", "d", "d"]), tax.indices(["e", "c", "d"]), tax)
        >>> float(out["mean_mistake_lca_depth"]), int(out["num_mistakes"])
        (0.5, 2)
    """
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    q = _check_nodes(query_nodes, "query_nodes", len(taxonomy))
    r = _check_nodes(retrieved_nodes, "retrieved_nodes", len(taxonomy))
    if q.shape != r.shape or q.device != r.device:
        raise ValueError("`query_nodes` and `retrieved_nodes` must have one length and one device.")
    depth, _ = lca_depth(q, r, taxonomy, chunk_size)
    wrong = q != r
    n = wrong.sum()
    mean = (
        depth[wrong].to(torch.float64).mean()
        if int(n)
        else torch.tensor(float("nan"), dtype=torch.float64, device=q.device)
    )
    return {"mean_mistake_lca_depth": mean, "num_mistakes": n, "lca_depth": depth}


def mapping_quality(
    mapper: TextToNode,
    texts: Sequence[str],
    gold: Sequence[str],
    include_root: bool = False,
    abstention_precision: float = 0.0,
) -> dict[str, Any]:
    """How well ``mapper`` (a :class:`~beyondlabels.taxonomy.TextToNode`) maps labelled answers: hP / hR / hF of the
    mapped nodes against the gold nodes (as Table 2 of "Taxonomy-Aware Evaluation of Vision-Language Models"; answers
    mapped to the root are abstentions worth ``abstention_precision``), the exact-match rate, and how often each rule
    decided.

    Returns:
        ``hP``, ``hR``, ``hF``, ``hF_sample_mean``, ``micro_hP``, ``micro_hR``, ``micro_hF``, ``exact_match``,
        ``abstention_rate`` (floats), ``num_samples``, ``abstentions``, ``rules`` (``{rule: count}``) and ``matches``
        (the :class:`~beyondlabels.taxonomy.text.NodeMatch` of every answer).

    Examples:
        >>> from beyondlabels.taxonomy import Taxonomy, TextToNode
        >>> tax = Taxonomy({"conifer": "tree", "spruce": "conifer", "oak": "tree"}, root="tree")
        >>> q = mapping_quality(TextToNode(tax), ["a spruce", "conifer"], ["spruce", "spruce"])
        >>> q["exact_match"], q["hP"], q["hR"], q["rules"]["exact"]
        (0.5, 1.0, 0.75, 2)
    """
    if len(texts) != len(gold):
        raise ValueError(f"`texts` has {len(texts)} entries and `gold` {len(gold)}; give one gold node per text.")
    matches = mapper.map(list(texts))
    pred = torch.tensor([m.index for m in matches], dtype=torch.long)
    try:
        truth = mapper.taxonomy.indices(list(gold))
    except ValueError as err:
        raise ValueError(f"`gold`: {err}") from None
    out = hierarchical_precision_recall(
        pred, truth, mapper.taxonomy, include_root=include_root, abstention_precision=abstention_precision
    )
    keys = ("hP", "hR", "hF", "hF_sample_mean", "micro_hP", "micro_hR", "micro_hF", "exact_match", "abstention_rate")
    result: dict[str, Any] = {k: float(out[k]) for k in keys}
    result["num_samples"] = len(matches)
    result["abstentions"] = int(out["abstentions"])
    rules = dict.fromkeys(RULES, 0)
    for match in matches:
        rules[match.rule] = rules.get(match.rule, 0) + 1
    result["rules"] = rules
    result["matches"] = matches
    return result


def node_indices(taxonomy: Taxonomy, nodes: Any, name: str) -> Tensor:
    """Node indices from names (a list of strings) or from an integer tensor / sequence of indices.

    Examples:
        >>> from beyondlabels.taxonomy import Taxonomy
        >>> node_indices(Taxonomy({"b": "a"}, root="a"), ["b", "a"], "pred")
        tensor([1, 0])
    """
    if isinstance(nodes, Tensor):
        return _check_nodes(nodes, name, len(taxonomy))
    if isinstance(nodes, str) or not isinstance(nodes, Sequence):
        raise ValueError(
            f"`{name}` must be a list of node names or a 1-D tensor of node indices, got {type(nodes).__name__}."
        )
    if all(isinstance(v, str) for v in nodes):
        try:
            return taxonomy.indices(nodes)
        except ValueError as err:
            raise ValueError(f"`{name}`: {err}") from None
    try:
        values = torch.as_tensor(list(nodes))
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"`{name}` must hold only node names or only node indices: {err}") from None
    return _check_nodes(values, name, len(taxonomy))


def per_class_means(per_query: dict[str, Tensor], keys: Sequence[str] = ("hP", "hR")) -> dict[str, Tensor]:
    """Mean of per-sample values within each ground-truth node (for an hP-hR scatter per class).

    Returns:
        ``node`` (int64 ``[C]``, ascending), ``count`` (int64 ``[C]``) and one float64 ``[C]`` mean per key.

    Examples:
        >>> pq = {"gt": torch.tensor([3, 1, 3]), "hP": torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)}
        >>> out = per_class_means(pq, ["hP"])
        >>> out["node"].tolist(), out["count"].tolist(), out["hP"].tolist()
        ([1, 3], [1, 2], [0.5, 0.5])
    """
    nodes, inverse, counts = torch.unique(per_query["gt"], return_inverse=True, return_counts=True)
    out = {"node": nodes, "count": counts}
    for key in keys:
        sums = torch.zeros(nodes.numel(), dtype=torch.float64, device=nodes.device)
        sums.index_add_(0, inverse, per_query[key].to(torch.float64))
        out[key] = sums / counts
    return out
