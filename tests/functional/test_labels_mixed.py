"""A label list that writes one class two ways (1 and "1", "cat" and " cat ") is coded as two classes by the one
coding rule, and says so with a warning; other lists stay silent and every code is unchanged."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from beyondlabels.functional.labels import encode_labels, label_code


@pytest.mark.parametrize(
    "labels, pair",
    [
        ([1, "1", 2], ("1", "'1'")),
        (["cat", " cat", "dog"], ("'cat'", "' cat'")),
        (np.array([3, "3"], dtype=object), ("3", "'3'")),
        ([7, "7 ", 7], ("7", "'7 '")),
    ],
)
def test_one_class_written_two_ways_warns_and_keeps_the_rule(labels, pair):
    with pytest.warns(UserWarning, match=r"`labels`: .*two ways") as caught:
        codes, names = encode_labels(labels, "labels")
    message = str(caught[0].message)
    assert all(p in message for p in pair), message
    assert codes.tolist() == [label_code(v) for v in list(labels)], "the codes follow the rule unchanged"
    assert len(set(codes.tolist())) == len(names)


@pytest.mark.parametrize(
    "labels", [[1, 2, 1], ["cat", "dog", "cat"], ["Cat", "cat"], torch.tensor([1, 1, 2]), np.array(["a", "b"])]
)
def test_a_list_of_one_kind_is_silent(labels):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encode_labels(labels)
