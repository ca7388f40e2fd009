"""Zero-shot kernels: prompt ensembling and accuracy against a hand computation with two templates, class embeddings
against open_clip's build_zero_shot_classifier, accuracies against scikit-learn, the tie rule, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from beyondlabels.functional import (
    aggregate_classification,
    class_prompts,
    classification_metrics,
    classification_per_query,
    prompt_ensemble,
    topk_classes,
    zeroshot_output_schema,
    zeroshot_scores,
)
from tests.oracles.outputs import assert_same_outputs


def test_hand_computation_with_two_templates():
    """Three classes, two templates. Prompt embeddings (chosen so the arithmetic is exact by hand):

    cat:  "a {}" -> (2, 0, 0) -> unit (1, 0, 0);   "a photo of a {}" -> (0, 3, 0) -> unit (0, 1, 0)
          mean (0.5, 0.5, 0) -> class embedding (1/√2, 1/√2, 0)
    dog:  (0, 0, 5) -> (0, 0, 1);  (0, 0, 1) -> (0, 0, 1): mean (0, 0, 1) -> (0, 0, 1)
    bird: (1, 0, 0) -> (1, 0, 0);  (0, 0, -4) -> (0, 0, -1): mean (0.5, 0, -0.5) -> (1/√2, 0, -1/√2)

    Images (unit rows) and their cosines with (cat, dog, bird):
      x0 = (1, 0, 0):   (0.707, 0, 0.707)  -> tie cat/bird -> cat (smaller index); true cat  -> top1 hit
      x1 = (0, 0, 1):   (0, 1, -0.707)     -> dog;            true dog  -> hit
      x2 = (0, 1, 0):   (0.707, 0, 0)      -> cat;            true bird -> miss; bird ranks 2nd or 3rd:
                         dog 0 = bird 0 -> order cat, dog, bird: bird is 3rd -> top2 miss
      x3 = (0.6, 0, -0.8): (0.424, -0.8, 0.990) -> bird;      true bird -> hit
    top1 = 3/4, top2 = (1 + 1 + 0 + 1) / 4 = 3/4; per-class top-1 recall: cat 1/1, dog 1/1, bird 1/2 ->
    balanced accuracy = (1 + 1 + 0.5) / 3 = 5/6.
    """
    names, templates = ["cat", "dog", "bird"], ["a {}", "a photo of a {}"]
    prompts = class_prompts(names, templates)
    assert prompts == ["a cat", "a photo of a cat", "a dog", "a photo of a dog", "a bird", "a photo of a bird"]
    table = {
        "a cat": (2, 0, 0),
        "a photo of a cat": (0, 3, 0),
        "a dog": (0, 0, 5),
        "a photo of a dog": (0, 0, 1),
        "a bird": (1, 0, 0),
        "a photo of a bird": (0, 0, -4),
    }
    prompt_emb = torch.tensor([table[p] for p in prompts], dtype=torch.float32)
    classes = prompt_ensemble(prompt_emb, num_classes=3)
    r = 1 / math.sqrt(2)
    torch.testing.assert_close(classes, torch.tensor([[r, r, 0.0], [0.0, 0.0, 1.0], [r, 0.0, -r]]))
    images = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.6, 0.0, -0.8]])
    scores = zeroshot_scores(images, classes)
    assert topk_classes(scores, 3).tolist() == [[0, 2, 1], [1, 0, 2], [0, 1, 2], [2, 0, 1]]
    m = classification_metrics(topk_classes(scores, 2), torch.tensor([0, 1, 2, 2]), num_classes=3, ks=(1, 2))
    assert float(m["top1"]) == 0.75 and float(m["top2"]) == 0.75
    assert float(m["balanced_accuracy"]) == pytest.approx(5 / 6, abs=1e-15)
    assert m["per_query"]["prediction"].tolist() == [0, 1, 0, 2]
    assert m["confusion_matrix"].tolist() == [[1, 0, 0], [0, 1, 0], [1, 0, 1]]
    assert int(m["num_samples"]) == 4 and int(m["num_classes"]) == 3


def test_class_embeddings_match_open_clip_build_zero_shot_classifier():
    import open_clip  # a dependency of the package: missing, the test must fail, not skip

    from beyondlabels.demo import TinyCLIP

    torch.manual_seed(0)
    model = TinyCLIP(
        embed_dim=16, vision_width=32, vision_layers=1, vision_head_width=16, text_width=32, text_heads=2, text_layers=1
    ).eval()
    names = ["square", "circle", "right triangle", "star", "cross"]
    templates = ["a {}", "a small {}", "a photo of a {}."]
    with torch.no_grad():
        ours = prompt_ensemble(model.encode_text(class_prompts(names, templates)), num_classes=len(names))
        reference = open_clip.build_zero_shot_classifier(
            model.clip, model.tokenizer, names, templates, num_classes_per_batch=2
        )
    assert reference.shape == (16, len(names))
    torch.testing.assert_close(ours, reference.T, rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
def test_accuracies_match_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(4)
    n, c = 300, 12
    scores = rng.normal(size=(n, c)).astype(np.float32)  # continuous: no ties
    labels = rng.integers(0, c - 1, size=n)  # class c-1 has no samples: it is left out of the balanced accuracy
    labels[labels == 3] = 4  # and class 3 neither
    m = classification_metrics(
        topk_classes(torch.from_numpy(scores), 5), torch.from_numpy(labels), num_classes=c, ks=(1, 3, 5)
    )
    for k in (1, 3, 5):
        assert float(m[f"top{k}"]) == pytest.approx(
            metrics.top_k_accuracy_score(labels, scores, k=k, labels=np.arange(c)), abs=1e-12
        )
    predicted = scores.argmax(axis=1)
    assert float(m["balanced_accuracy"]) == pytest.approx(metrics.balanced_accuracy_score(labels, predicted), abs=1e-12)
    np.testing.assert_array_equal(
        m["confusion_matrix"].numpy(), metrics.confusion_matrix(labels, predicted, labels=np.arange(c))
    )


def test_shares_of_the_samples_concatenate_to_one_call_bit_for_bit():
    g = torch.Generator().manual_seed(6)
    labels = torch.randint(0, 7, (53,), generator=g)
    predictions = topk_classes(torch.randn(53, 7, generator=g) + torch.nn.functional.one_hot(labels, 7), 3)
    ids = torch.randperm(1000, generator=g)[:53]
    ref = classification_metrics(predictions, labels, num_classes=7, ks=(1, 3), ids=ids)
    assert 0 < float(ref["top1"]) < float(ref["top3"]) < 1
    for count in (2, 3, 60):  # 60 shares: some are empty
        parts = [
            classification_per_query(predictions, labels, num_classes=7, ks=(1, 3), ids=ids, share=(i, count))
            for i in range(count)
        ]
        assert sum(part["label"].numel() for part in parts) == 53 and max(part["label"].numel() for part in parts) <= 27
        rows = {key: torch.cat([part[key] for part in parts]) for key in parts[0]}
        assert_same_outputs(aggregate_classification(rows, num_classes=7, ks=(1, 3)), ref, count)


def test_ties_rank_the_smaller_class_first():
    scores = torch.tensor([[0.5, 0.5, 0.5], [0.1, 0.7, 0.7], [0.3, 0.2, 0.3]])
    assert topk_classes(scores, 3).tolist() == [[0, 1, 2], [1, 2, 0], [0, 2, 1]]


def test_schema_lists_every_key():
    schema = zeroshot_output_schema((1, 5))
    m = classification_metrics(torch.tensor([[0, 1, 2, 3, 4]]), torch.tensor([0]), num_classes=5, ks=(1, 5))
    assert set(schema) == {k for k in m if k not in ("per_query", "confusion_matrix")}
    assert set(schema.per_query) == set(m["per_query"])
    assert schema["top5"].higher_is_better and schema["num_samples"].count


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: class_prompts(["a", "a"], ["{}"]), "class_names"),
        (lambda: class_prompts("cat", ["{}"]), "class_names"),
        (lambda: class_prompts(["cat"], ["a photo"]), "templates"),
        (lambda: class_prompts(["cat"], ["{} and {}"]), "templates"),
        (lambda: class_prompts(["cat"], []), "templates"),
        (lambda: prompt_ensemble(torch.ones(5, 3), num_classes=2), "prompt_embeddings"),
        (lambda: prompt_ensemble(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]), num_classes=1), "mean prompt embedding"),
        (lambda: zeroshot_scores(torch.ones(2, 3), torch.ones(4, 2)), "class_embeddings"),
        (lambda: topk_classes(torch.ones(2, 3), 4), "k"),
        (lambda: topk_classes(torch.tensor([[float("nan"), 1.0]]), 1), "scores"),
        (
            lambda: classification_metrics(torch.tensor([[0], [1]]), torch.tensor([0, 5]), num_classes=3, ks=(1,)),
            "labels",
        ),
        (
            lambda: classification_metrics(torch.tensor([[0], [1]]), torch.tensor([0, 1]), num_classes=3, ks=(1, 2)),
            "ks",
        ),
        (lambda: classification_metrics(torch.tensor([[0, 1]]), torch.tensor([0]), num_classes=1, ks=(1, 2)), "ks"),
    ],
)
def test_bad_input_is_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()
