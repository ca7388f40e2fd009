"""The audit kernel against a numpy loop oracle (tests/oracles/audit_oracle.py) and on hand-made edge cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from beyondlabels.functional.audit import (
    audit_label_shares,
    audit_neighbors,
    join_neighbors,
    suspect_overlap,
)
from beyondlabels.functional.search import Neighbors, search_neighbors
from tests.oracles.audit_oracle import audit_oracle, brute_neighbors


def _clustered(seed: int, n_classes: int = 5, per_class: int = 30, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_classes, dim))
    labels = np.repeat(np.arange(n_classes), per_class)
    x = centres[labels] + 0.6 * rng.normal(size=(len(labels), dim))
    flip = rng.choice(len(labels), size=8, replace=False)
    labels = labels.copy()
    labels[flip] = (labels[flip] + 1 + rng.integers(0, n_classes - 1, size=8)) % n_classes
    x[3] = x[40]  # a cross-label duplicate
    x[5] = x[6]  # a same-label exact duplicate
    x[7] = 6.0 * rng.normal(size=dim)  # far from everything
    return x.astype(np.float32), labels


def _neighbors(x: np.ndarray, k: int) -> Neighbors:
    return join_neighbors(search_neighbors(torch.from_numpy(x), k, chunk_size=37), len(x))


@pytest.mark.parametrize("seed,k", [(0, 5), (1, 10), (2, 1)])
def test_audit_matches_numpy_oracle(seed: int, k: int) -> None:
    x, labels = _clustered(seed)
    nb = _neighbors(x, k)
    idx, sc = brute_neighbors(x, k)
    assert np.array_equal(nb.indices.numpy(), idx)  # the search and the oracle's brute force agree on this data
    got = audit_neighbors(nb, torch.from_numpy(labels))
    want = audit_oracle(idx, nb.scores.double().numpy(), labels)
    for key in ("own_share", "suggested_share", "class_rate", "label_quality", "kth_distance", "outlier_score"):
        np.testing.assert_allclose(getattr(got, key).numpy(), want[key], rtol=1e-9, atol=1e-12, err_msg=key)
    for key in ("suggested_label", "is_suspect", "is_outlier"):
        np.testing.assert_array_equal(getattr(got, key).numpy(), want[key], err_msg=key)
    assert got.suspects.tolist() == want["suspects"]
    assert [tuple(p) for p in got.duplicate_pairs.tolist()] == want["pairs"]
    assert got.cross_label.tolist() == want["cross_label"]
    np.testing.assert_allclose(got.duplicate_scores.numpy(), want["pair_scores"], rtol=0, atol=1e-7)
    classes = sorted(set(labels.tolist()))
    assert got.classes.tolist() == classes
    assert got.class_items.tolist() == [int((labels == c).sum()) for c in classes]
    assert got.class_suspects.tolist() == [int(want["is_suspect"][labels == c].sum()) for c in classes]
    assert got.class_outliers.tolist() == [int(want["is_outlier"][labels == c].sum()) for c in classes]


@pytest.mark.parametrize("count", [1, 2, 3, 7, 200])
def test_label_shares_computed_share_by_share_match_the_oracle(count: int) -> None:
    """The per-item part of the audit, computed share by share (as the processes of a distributed evaluation do) and
    joined in share order, is the oracle's; the audit built from it equals the oracle's (more shares than items:
    some shares are empty)."""
    x, labels = _clustered(4)
    nb = _neighbors(x, 6)
    y = torch.from_numpy(labels)
    parts = [audit_label_shares(nb, y, share=(i, count)) for i in range(count)]
    joined = {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
    want = audit_oracle(nb.indices.numpy(), nb.scores.double().numpy(), labels)
    for key in ("own_share", "suggested_share"):
        np.testing.assert_allclose(joined[key].numpy(), want[key], rtol=1e-9, atol=1e-12, err_msg=key)
    np.testing.assert_array_equal(joined["suggested_label"].numpy(), want["suggested_label"])
    got = audit_neighbors(nb, y, label_shares=joined)
    assert got.suspects.tolist() == want["suspects"]
    np.testing.assert_allclose(got.label_quality.numpy(), want["label_quality"], rtol=1e-9, atol=1e-12)


def test_label_shares_of_the_wrong_length_are_refused() -> None:
    x, labels = _clustered(4)
    nb, y = _neighbors(x, 6), torch.from_numpy(labels)
    half = audit_label_shares(nb, y, share=(0, 2))
    with pytest.raises(ValueError, match="label_shares"):
        audit_neighbors(nb, y, label_shares=half)


def test_planted_cases_are_found() -> None:
    x, labels = _clustered(0)
    got = audit_neighbors(_neighbors(x, 5), torch.from_numpy(labels))
    pairs = {tuple(p): c for p, c in zip(got.duplicate_pairs.tolist(), got.cross_label.tolist())}
    assert labels[3] != labels[40] and pairs[(3, 40)] is True
    assert pairs[(5, 6)] is False
    assert bool(got.is_outlier[7])


def test_worked_example_by_hand() -> None:
    # Labels 0, 1, 1, 0. Item 0: neighbours 1 (0.8) and 2 (0.2), both label 1: own share 0, suggested 1 (share 1).
    # Item 3: 0 (0.5, label 0) and 1 (0.1): own share 5/6. Class 0's rate is (0 + 5/6) / 2 = 5/12, so q_0 = 0 and
    # q_3 = 2. Item 1: 0 (0.8, label 0) and 2 (0.5, label 1): own share 5/13; item 2: own share 5/7; class 1's rate
    # is their mean, q_1 = (5/13) / rate. Only item 0 has another suggested label and q < 0.5.
    nb = Neighbors(
        torch.arange(4),
        torch.tensor([[0.8, 0.2], [0.8, 0.5], [0.5, 0.2], [0.5, 0.1]]),
        torch.tensor([[1, 2], [0, 2], [1, 0], [0, 1]]),
    )
    a = audit_neighbors(nb, torch.tensor([0, 1, 1, 0]), duplicate_threshold=0.8)
    assert a.own_share.tolist() == pytest.approx([0.0, 5 / 13, 5 / 7, 5 / 6])
    assert a.suggested_label.tolist() == [1, 0, 1, 0]
    assert a.suggested_share.tolist() == pytest.approx([1.0, 8 / 13, 5 / 7, 5 / 6])
    rate1 = (5 / 13 + 5 / 7) / 2
    assert a.class_rate.tolist() == pytest.approx([5 / 12, rate1, rate1, 5 / 12])
    assert a.label_quality.tolist() == pytest.approx([0.0, (5 / 13) / rate1, (5 / 7) / rate1, 2.0])
    assert a.suspects.tolist() == [0]
    assert a.duplicate_pairs.tolist() == [[0, 1]] and a.cross_label.tolist() == [True]
    assert a.duplicate_scores.tolist() == pytest.approx([0.8])


def test_ties_choose_the_smaller_label_and_index() -> None:
    # Equal weights for labels 3 and 1: the suggestion is 1. Equal qualities rank by index.
    nb = Neighbors(
        torch.arange(3), torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]), torch.tensor([[1, 2], [0, 2], [0, 1]])
    )
    a = audit_neighbors(nb, torch.tensor([0, 3, 1]))
    assert a.suggested_label[0].item() == 1
    assert a.suggested_share[0].item() == 0.5
    # Every item is alone in its class: rates 0, quality 1, no suspects.
    assert a.label_quality.tolist() == [1.0, 1.0, 1.0] and a.suspects.numel() == 0


def test_class_of_one_item_and_all_labels_equal() -> None:
    x, labels = _clustered(3)
    labels = labels.copy()
    labels[10] = 99  # a class of one item
    a = audit_neighbors(_neighbors(x, 4), torch.from_numpy(labels))
    assert a.label_quality[10].item() == 1.0 and not bool(a.is_suspect[10])
    assert a.outlier_score[10].item() == 0.0
    same = audit_neighbors(_neighbors(x, 4), torch.zeros(len(x), dtype=torch.long))
    assert (
        same.suspects.numel() == 0
        and torch.allclose(same.own_share, torch.ones(len(x), dtype=torch.float64))
        and same.cross_label.sum() == 0
    )


def test_zero_weights_fall_back_to_equal_weights() -> None:
    nb = Neighbors(
        torch.arange(3), torch.tensor([[-0.5, -0.2], [-0.5, 0.0], [-0.2, 0.0]]), torch.tensor([[1, 2], [0, 2], [0, 1]])
    )
    a = audit_neighbors(nb, torch.tensor([0, 0, 1]))
    assert a.own_share.tolist() == pytest.approx([0.5, 0.5, 0.0])


def test_errors_name_the_argument() -> None:
    x, labels = _clustered(0)
    nb = _neighbors(x, 3)
    with pytest.raises(ValueError, match="`k`=4 exceeds the 3 neighbours"):
        audit_neighbors(nb, torch.from_numpy(labels), k=4)
    with pytest.raises(ValueError, match="`labels` must be a 1-D integer"):
        audit_neighbors(nb, torch.from_numpy(labels).float())
    with pytest.raises(ValueError, match="one row per item"):
        audit_neighbors(nb, torch.from_numpy(labels[:-1]))
    with pytest.raises(ValueError, match="`duplicate_threshold` must be a finite number"):
        audit_neighbors(nb, torch.from_numpy(labels), duplicate_threshold=float("nan"))
    with pytest.raises(ValueError, match="exactly once"):
        join_neighbors([Neighbors(torch.tensor([0, 0]), nb.scores[:2], nb.indices[:2])], 2)
    with pytest.raises(ValueError, match="`k` must be a positive int"):
        audit_neighbors(nb, torch.from_numpy(labels), k=0)


def test_suspect_overlap() -> None:
    assert suspect_overlap(torch.tensor([1, 2, 3, 4]), torch.tensor([3, 1, 9]), 3) == pytest.approx(2 / 3)
    assert suspect_overlap(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long), 5) == 1.0
    assert suspect_overlap(torch.tensor([1]), torch.tensor([], dtype=torch.long), 5) == 0.0
    with pytest.raises(ValueError, match="`m` must be a positive int"):
        suspect_overlap(torch.tensor([1]), torch.tensor([1]), 0)


def test_quality_threshold_is_strict() -> None:
    # Class 0 (items 0-3) has own shares 1/4, 3/4, 1/2, 1/2: rate 1/2, so item 0 has q = 1/2 exactly.
    others = {4: [5, 6, 7, 0], 5: [4, 6, 7, 0], 6: [4, 5, 7, 0], 7: [4, 5, 6, 0]}
    idx = torch.tensor([[1, 4, 5, 6], [0, 2, 3, 4], [0, 1, 4, 5], [0, 1, 4, 5], *others.values()])
    nb = Neighbors(torch.arange(8), torch.full((8, 4), 0.5), idx)
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    assert audit_neighbors(nb, labels).label_quality[0].item() == 0.5
    assert audit_neighbors(nb, labels).suspects.tolist() == []
    assert audit_neighbors(nb, labels, quality_threshold=0.51).suspects.tolist() == [0]
