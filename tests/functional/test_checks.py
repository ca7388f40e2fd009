"""The shared argument checks: one message style ("`name` must be WHAT (hint), got VALUE."), bools never numbers,
numpy integers taken as ints and returned as Python ints, and kernels that give numpy settings the values of Python
ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from beyondlabels._internal.checks import (
    check_bool,
    check_choice,
    check_confidence,
    check_int,
    check_number,
    check_positive_int,
    check_rounds,
    check_seed,
)
from beyondlabels.functional import bootstrap_ci, embedding_retrieval_metrics
from beyondlabels.functional.retrieval import sample_queries
from beyondlabels.functional.rprecision import check_rprecision_settings


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: check_int(1, "window", minimum=2, hint="values per window"),
            "`window` must be an int >= 2 (values per window), got 1.",
        ),
        (lambda: check_int(9, "n", minimum=1, maximum=8), "`n` must be an int in [1, 8], got 9."),
        (lambda: check_int(9, "n", maximum=8), "`n` must be an int <= 8, got 9."),
        (lambda: check_positive_int(True, "k"), "`k` must be a positive int, got True."),
        (lambda: check_positive_int(2.0, "k"), "`k` must be a positive int, got 2.0."),
        (lambda: check_seed("1"), "`seed` must be an int, got '1'."),
        (lambda: check_rounds(0), "`rounds` must be a positive int (e.g. 2000 bootstrap resamples), got 0."),
        (lambda: check_confidence(1), "`confidence` must be a number strictly between 0 and 1 (e.g. 0.95), got 1."),
        (lambda: check_number(math.nan, "x"), "`x` must be a finite number, got nan."),
        (lambda: check_number(False, "x", at_least=0), "`x` must be a number >= 0, got False."),
        (lambda: check_number(1.5, "p", at_least=0, at_most=1), "`p` must be a number in [0, 1], got 1.5."),
        (lambda: check_number(0, "eps", above=0, below=1), "`eps` must be a number in (0, 1), got 0."),
        (lambda: check_bool(1, "flag"), "`flag` must be True or False, got 1."),
        (lambda: check_choice(True, "k", (1, 2)), "`k` must be one of [1, 2], got True."),
        (lambda: check_choice(np.arange(2), "mode", ("a",)), "`mode` must be one of ['a'], got array([0, 1])."),
    ],
)
def test_every_check_names_the_argument_what_it_must_be_and_what_it_got(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == message


def test_numpy_integers_are_ints_and_come_back_as_python_ints():
    for value in (np.int64(5), np.int32(5), np.uint8(5)):
        out = check_positive_int(value, "k")
        assert out == 5 and type(out) is int
    assert type(check_number(np.float32(0.5), "x")) is float
    assert check_number(math.inf, "wait_s", at_least=0, finite=False) == math.inf
    with pytest.raises(ValueError, match=r"^`x` must be a number >= 0, got nan\.$"):
        check_number(math.nan, "x", at_least=0, finite=False)  # never NaN, even where infinities are allowed


def test_kernels_give_numpy_settings_the_values_of_python_ones():
    ids = torch.arange(100, 140)
    assert torch.equal(sample_queries(ids, np.int64(7), seed=np.int64(3)), sample_queries(ids, 7, seed=3))
    values = [0.1, 0.4, 0.35, 0.8, 0.65]
    a, b = bootstrap_ci(values, rounds=np.int64(300), seed=np.int64(2)), bootstrap_ci(values, rounds=300, seed=2)
    assert (a.low, a.high) == (b.low, b.high)
    emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = torch.tensor([0, 0, 1, 1])
    m = embedding_retrieval_metrics(emb, labels, ks=(np.int64(1), 2), max_queries=np.int64(3), query_seed=np.int64(1))
    assert float(m["precision@1"]) == 1.0 and "precision@1_se" in m and int(m["num_queries"]) == 3


def test_rprecision_settings_are_checked_in_their_family_package():
    assert check_rprecision_settings(100, 1, (10, 1, 5), "folds", 10, 0, 0.8, 256) == ((1, 5, 10), 0.8)
    with pytest.raises(ValueError, match=r"^`protocol` must be one of \['folds', 'resample'\], got 'fold'\.$"):
        check_rprecision_settings(100, 1, (1,), "fold", 10, 0, 0.8, 256)
    with pytest.raises(
        ValueError, match=r"^`near_duplicate_threshold` must be a cosine in \[-1, 1\] or None \(off\), got 2\.$"
    ):
        check_rprecision_settings(100, 1, (1,), "folds", 10, 0, 2, 256)
