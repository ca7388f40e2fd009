"""Zero-shot classification with a dual encoder: class embeddings from prompt templates, top-k and balanced accuracy.

Pure torch: tensors in, tensors out, on the device of the inputs. No torchmetrics, no Lightning.

Prompts
    Each class name is put into every template with ``template.format(name)`` (a template holds one ``{}``), class
    by class: prompt ``c * T + t`` is template ``t`` of class ``c`` (:func:`class_prompts`).

Class embeddings (prompt ensembling, CLIP's recipe)
    The ``T`` prompt embeddings of a class are L2-normalised, averaged and the mean is L2-normalised again
    (:func:`prompt_ensemble`); open_clip's ``build_zero_shot_classifier`` computes the same.

Scores and predictions
    The score of an image for a class is the cosine of their embeddings (:func:`zeroshot_scores`). Classes are
    ranked by descending score; equal scores rank by ascending class index (:func:`topk_classes`).

Metrics (:func:`classification_metrics`, over the samples given)
    - ``top{k}``: the fraction of samples whose class is among the k best-ranked classes;
    - ``balanced_accuracy``: top-1 recall of each class that has samples, averaged over those classes
      (scikit-learn's ``balanced_accuracy_score``);
    - ``num_samples``, ``num_classes`` (counts); outside the schema ``confusion_matrix`` (int64 ``[C, C]``, rows the
      true class, columns the top-1 prediction) and ``per_query`` (``query_id``, ``label``, ``prediction`` (the top-1
      class) and 0/1 ``top{k}`` per sample; the mean of a ``top{k}`` vector is the scalar).

Examples:
    >>> prompts = class_prompts(["cat", "dog"], ["a {}", "a photo of a {}"])
    >>> prompts
    ['a cat', 'a photo of a cat', 'a dog', 'a photo of a dog']
    >>> emb = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.0, 2.0]])   # one row per prompt
    >>> classes = prompt_ensemble(emb, num_classes=2)
    >>> classes
    tensor([[0.8944, 0.4472],
            [0.0000, 1.0000]])
    >>> scores = zeroshot_scores(torch.tensor([[1.0, 0.1], [0.3, 1.0], [1.0, 1.0]]), classes)
    >>> m = classification_metrics(topk_classes(scores, 2), torch.tensor([0, 1, 1]), num_classes=2, ks=(1, 2))
    >>> m["top1"], m["balanced_accuracy"], m["per_query"]["prediction"]
    (tensor(0.6667, dtype=torch.float64), tensor(0.7500, dtype=torch.float64), tensor([0, 1, 0]))
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_embeddings, check_ks, check_positive_int, check_same_space
from beyondlabels._internal.shares import share_span
from beyondlabels.functional.search import normalize_rows
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "aggregate_classification",
    "class_prompts",
    "classification_metrics",
    "classification_per_query",
    "prompt_ensemble",
    "topk_classes",
    "zeroshot_output_schema",
    "zeroshot_scores",
]


def check_templates(templates: object) -> tuple[str, ...]:
    """Validate prompt templates: a non-empty sequence of strings with exactly one ``{}`` each."""
    if isinstance(templates, str) or not isinstance(templates, Sequence) or len(templates) == 0:
        raise ValueError(
            f"`templates` must be a non-empty list of strings such as 'a photo of a {{}}.', got {templates!r}."
        )
    for template in templates:
        if (
            not isinstance(template, str)
            or template.count("{}") != 1
            or template.replace("{}", "").count("{")
            or template.replace("{}", "").count("}")
        ):
            raise ValueError(
                "`templates` must be strings with exactly one '{}' where the class name goes (and no other braces), "
                f"got {template!r}."
            )
    return tuple(templates)


def check_class_names(class_names: object) -> tuple[str, ...]:
    """Validate class names: a non-empty sequence of distinct, non-empty strings (in label order)."""
    if isinstance(class_names, str) or not isinstance(class_names, Sequence) or len(class_names) == 0:
        raise ValueError(f"`class_names` must be a non-empty list of strings in label order, got {class_names!r}.")
    names = tuple(class_names)
    if not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"`class_names` must hold non-empty strings, got {list(names)[:5]}...")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[:5]
        raise ValueError(f"`class_names` must be distinct; {dup} appear more than once.")
    return names


def class_prompts(class_names: Sequence[str], templates: Sequence[str]) -> list[str]:
    """Every template filled with every class name, class by class (prompt ``c * T + t``).

    Raises:
        ValueError: on empty or duplicated class names, or templates without exactly one ``{}``.

    Examples:
        >>> class_prompts(["red square"], ["a {}", "{} on a plain background"])
        ['a red square', 'red square on a plain background']
    """
    names = check_class_names(class_names)
    temps = check_templates(templates)
    return [template.format(name) for name in names for template in temps]


def prompt_ensemble(prompt_embeddings: Tensor, num_classes: int) -> Tensor:
    """Class embeddings ``[C, D]`` from the embeddings of :func:`class_prompts` (``[C * T, D]``, class by class).

    Each prompt embedding is L2-normalised, the ``T`` of a class are averaged, and the mean is L2-normalised.

    Raises:
        ValueError: if the rows are not ``num_classes`` times a whole number of templates, are not finite or are zero;
            or if a class's prompt embeddings cancel out (their mean is zero).

    Examples:
        >>> prompt_ensemble(torch.tensor([[3.0, 0.0], [0.0, 5.0]]), num_classes=1)
        tensor([[0.7071, 0.7071]])
    """
    check_positive_int(num_classes, "num_classes")
    check_embeddings(prompt_embeddings, "prompt_embeddings")
    n, d = prompt_embeddings.shape
    if n % num_classes:
        raise ValueError(
            f"`prompt_embeddings` has {n} rows, not a multiple of num_classes={num_classes}; pass one row per "
            "(class, template), class by class."
        )
    unit = normalize_rows(prompt_embeddings, "prompt_embeddings").view(num_classes, n // num_classes, d)
    mean = unit.mean(dim=1)
    return normalize_rows(mean, "the mean prompt embedding of a class")


def zeroshot_scores(image_embeddings: Tensor, class_embeddings: Tensor) -> Tensor:
    """Cosine of every image with every class: fp32 ``[N, C]``.

    Raises:
        ValueError: on non-finite or zero rows, different widths or devices.

    Examples:
        >>> zeroshot_scores(torch.tensor([[2.0, 0.0]]), torch.tensor([[1.0, 0.0], [0.0, 3.0]]))
        tensor([[1., 0.]])
    """
    images = normalize_rows(image_embeddings, "image_embeddings")
    classes = normalize_rows(class_embeddings, "class_embeddings")
    check_same_space(
        images, "image_embeddings", classes, "class_embeddings", width="they must match", device="use one device"
    )
    return images @ classes.T


def topk_classes(scores: Tensor, k: int) -> Tensor:
    """The ``k`` best-ranked classes of each row of ``scores`` ``[N, C]`` (descending score, then ascending class).

    Raises:
        ValueError: if ``scores`` is not a 2-D float tensor, holds NaN, or ``k`` is not in ``[1, C]``.

    Examples:
        >>> topk_classes(torch.tensor([[0.2, 0.5, 0.5], [0.9, 0.1, 0.3]]), 2)
        tensor([[1, 2],
                [0, 2]])
    """
    if not isinstance(scores, Tensor) or scores.dim() != 2 or not scores.is_floating_point():
        shape = tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise ValueError(f"`scores` must be a 2-D float tensor [N, C] of class scores, got {shape}.")
    check_positive_int(k, "k")
    if k > scores.shape[1]:
        raise ValueError(f"`k`={k} exceeds the {scores.shape[1]} classes; lower k (top-k needs at least k classes).")
    if bool(scores.isnan().any()):
        raise ValueError("`scores` contains NaN; check the embeddings.")
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k].contiguous()


def zeroshot_output_schema(ks: Sequence[int]) -> OutputSchema:
    """The output schema of :func:`classification_metrics` for cut-offs ``ks``.

    Examples:
        >>> s = zeroshot_output_schema((1, 5))
        >>> s.scalar_keys(), s.headline
        (['top1', 'top5', 'balanced_accuracy', 'num_samples', 'num_classes'], ['top1', 'balanced_accuracy'])
    """
    ks = check_ks(ks)
    keys = {f"top{k}": KeySpec("scalar", True) for k in ks}
    keys["balanced_accuracy"] = KeySpec("scalar", True)
    keys["num_samples"] = keys["num_classes"] = KeySpec("scalar", None, count=True)
    per_query = {
        "query_id": KeySpec("per_query", None),
        "label": KeySpec("per_query", None),
        "prediction": KeySpec("per_query", None),
    }
    per_query.update({f"top{k}": KeySpec("per_query", True) for k in ks})
    return OutputSchema(keys, per_query, headline=[f"top{ks[0]}", "balanced_accuracy"])


def classification_metrics(
    predictions: Tensor, labels: Tensor, *, num_classes: int, ks: Sequence[int] = (1, 5), ids: Tensor | None = None
) -> dict[str, Tensor | dict[str, Tensor]]:
    """Top-k and balanced accuracy and the confusion matrix (definitions: the module docstring).

    Args:
        predictions: Int tensor ``[N, K]``: each sample's best-ranked classes, best first (:func:`topk_classes`),
            ``K >= max(ks)``.
        labels: Int tensor ``[N]`` of true classes in ``[0, num_classes)``.
        num_classes: The number of classes ``C``.
        ks: The k of every ``top{k}`` key.
        ids: Optional ``[N]`` sample ids reported as ``per_query["query_id"]`` (default: positions).

    Raises:
        ValueError: on shapes that do not match, ``max(ks)`` larger than ``K`` or ``num_classes``, or labels or
            predictions outside ``[0, num_classes)``.

    Examples:
        >>> m = classification_metrics(torch.tensor([[0, 1], [0, 2], [2, 1]]), torch.tensor([0, 1, 2]),
        ...                            num_classes=3, ks=(1, 2))
        >>> m["top1"], m["top2"], m["confusion_matrix"][1].tolist()
        (tensor(0.6667, dtype=torch.float64), tensor(0.6667, dtype=torch.float64), [1, 0, 0])
    """
    rows = classification_per_query(predictions, labels, num_classes=num_classes, ks=ks, ids=ids)
    return aggregate_classification(rows, num_classes=num_classes, ks=ks)


def classification_per_query(
    predictions: Tensor,
    labels: Tensor,
    *,
    num_classes: int,
    ks: Sequence[int] = (1, 5),
    ids: Tensor | None = None,
    share: tuple[int, int] | None = None,
) -> dict[str, Tensor]:
    """The ``per_query`` rows of :func:`classification_metrics` for the samples of ``share``, the input of
    :func:`aggregate_classification`.

    Arguments are those of :func:`classification_metrics`, plus ``share=(i, n)``: only the samples at positions
    ``i·N // n`` to ``(i + 1)·N // n − 1`` (the i-th of n contiguous near-equal runs; every input is checked whole).
    Concatenating the rows of shares ``0, 1, ..., n − 1`` gives the rows of one call.
    """
    ks_t = check_ks(ks)
    check_positive_int(num_classes, "num_classes")
    if (
        not isinstance(predictions, Tensor)
        or predictions.dim() != 2
        or predictions.is_floating_point()
        or predictions.dtype == torch.bool
    ):
        raise ValueError("`predictions` must be an integer tensor [N, K] of ranked classes (see topk_classes).")
    n, width = predictions.shape
    if ks_t[-1] > num_classes:
        raise ValueError(f"`ks` contains {ks_t[-1]} but there are only {num_classes} classes; lower it.")
    if ks_t[-1] > width:
        raise ValueError(f"`ks` contains {ks_t[-1]} but `predictions` holds only the top {width} classes; rank deeper.")
    if (
        not isinstance(labels, Tensor)
        or labels.dim() != 1
        or labels.is_floating_point()
        or labels.dtype == torch.bool
        or labels.shape[0] != n
    ):
        raise ValueError(f"`labels` must be an integer tensor [N] with one class per prediction row ({n}).")
    device = predictions.device
    labels = labels.to(device=device, dtype=torch.long)
    predictions = predictions.long()
    for name, value in (("labels", labels), ("predictions", predictions)):
        bad = (value < 0) | (value >= num_classes)
        if bool(bad.any()):
            raise ValueError(f"`{name}` must be class indices in [0, {num_classes}); got {value[bad][:5].tolist()}.")
    lo, hi = share_span(n, share)
    ids = torch.arange(n, device=device) if ids is None else ids.to(device=device, dtype=torch.long)
    labels, predictions = labels[lo:hi], predictions[lo:hi]
    correct = torch.cumsum((predictions[:, : ks_t[-1]] == labels.unsqueeze(1)).to(torch.float64), dim=1)
    rows = {"query_id": ids[lo:hi], "label": labels, "prediction": predictions[:, 0].clone()}
    rows.update({f"top{k}": correct[:, k - 1].contiguous() for k in ks_t})
    return rows


def aggregate_classification(
    rows: dict[str, Tensor], *, num_classes: int, ks: Sequence[int] = (1, 5)
) -> dict[str, Tensor | dict[str, Tensor]]:
    """The values of :func:`classification_metrics` from every sample's rows of :func:`classification_per_query` (the
    shares' rows concatenated in share order)."""
    ks_t = check_ks(ks)
    check_positive_int(num_classes, "num_classes")
    labels, prediction = rows["label"], rows["prediction"]
    n, device = labels.shape[0], labels.device
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=device)
    out: dict[str, Tensor | dict[str, Tensor]] = {f"top{k}": rows[f"top{k}"].mean() if n else nan for k in ks_t}
    confusion = torch.zeros(num_classes * num_classes, dtype=torch.long, device=device)
    confusion.index_add_(0, labels * num_classes + prediction, torch.ones_like(labels))
    confusion = confusion.view(num_classes, num_classes)
    support = confusion.sum(dim=1)
    present = support > 0
    recall = confusion.diagonal().to(torch.float64)[present] / support[present].to(torch.float64)
    # Summed in ascending order of value: the result does not depend on the order of the classes.
    out["balanced_accuracy"] = torch.sort(recall).values.sum() / recall.numel() if recall.numel() else nan
    out["num_samples"] = torch.tensor(n, dtype=torch.long, device=device)
    out["num_classes"] = torch.tensor(num_classes, dtype=torch.long, device=device)
    out["confusion_matrix"] = confusion
    out["per_query"] = dict(rows)
    return out
