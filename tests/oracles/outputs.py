"""Exact comparison of metric outputs (dicts of tensors with nested ``per_query`` / ``neighbors`` dicts)."""

from __future__ import annotations

from collections.abc import Mapping

import torch


def flat(out: Mapping, prefix: str = "") -> dict:
    """Nested output dicts as one flat dict ``{"per_query/r_precision": ...}``."""
    items = {}
    for key, value in out.items():
        if isinstance(value, Mapping):
            items.update(flat(value, f"{prefix}{key}/"))
        else:
            items[f"{prefix}{key}"] = value
    return items


def assert_same_outputs(a: dict, b: dict, context=None, ignore=()) -> None:
    """The same keys (but ``ignore``: flat keys, or top-level keys with everything under them), dtypes and shapes;
    bitwise-equal values, NaN exactly where the other has NaN."""
    skip = lambda k: k in ignore or k.split("/")[0] in ignore  # noqa: E731
    fa = {k: v for k, v in flat(a).items() if not skip(k)}
    fb = {k: v for k, v in flat(b).items() if not skip(k)}
    assert fa.keys() == fb.keys(), (context, sorted(fa.keys() ^ fb.keys()))
    for key in fa:
        x, y = fa[key], fb[key]
        assert x.dtype == y.dtype and x.shape == y.shape, (context, key)
        assert torch.equal(x.isnan(), y.isnan()), (context, key)
        assert torch.equal(x.nan_to_num(0.0), y.nan_to_num(0.0)), (context, key)
