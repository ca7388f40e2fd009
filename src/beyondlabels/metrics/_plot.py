"""Drawing of metric results for ``Metric.plot`` (internal: :meth:`PerSampleMetric.plot` is the public entry)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from beyondlabels.schema import OutputSchema


def _scalar(value: Any) -> float | None:
    """A result entry as a float, or None when it is not one number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return None


def default_keys(result: Mapping[str, Any], schema: OutputSchema) -> list[str]:
    """The scalar keys of ``result`` whose better direction is higher, in schema order."""
    return [k for k in schema.scalar_keys() if schema.mode(k) == "max" and _scalar(result.get(k)) is not None]


def plot_results(
    val: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    schema: OutputSchema,
    title: str,
    ax: Any = None,
    keys: Sequence[str] | None = None,
) -> tuple[Any, Any]:
    """``(figure, axes)`` of one result (bars, or a curve key as a line) or of several results (a line per key).

    Raises:
        ValueError: for an empty sequence of results, an unknown key, or a mix of curve and scalar keys.
    """
    if ax is None:
        import matplotlib.pyplot as plt  # the user's backend (without a display matplotlib picks Agg itself)

        fig, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    else:
        fig = ax.get_figure()
    results = [val] if isinstance(val, Mapping) else list(val)
    if not results or not all(isinstance(r, Mapping) for r in results):
        raise ValueError("`val` must be one result of compute() (a dict) or a non-empty sequence of them.")
    names = list(keys) if keys is not None else default_keys(results[-1], schema)
    unknown = [k for k in names if k not in schema]
    if unknown:
        raise ValueError(f"`keys` names {unknown}, which this metric does not return; choose from {list(schema)}.")
    curves = [k for k in names if k in schema.curve_keys()]
    if curves:
        if len(curves) != len(names) or len(results) != 1:
            raise ValueError("a curve key is drawn alone, for one result: pass keys=[<curve key>] and one result.")
        for key in curves:
            ys = torch.atleast_1d(torch.as_tensor(results[0][key], dtype=torch.float64)).tolist()
            ax.plot(range(1, len(ys) + 1), ys, marker="o", label=key)
        ax.set_xlabel("k")
        ax.legend()
    elif len(results) == 1:
        values = [_scalar(results[0].get(k)) for k in names]
        ax.barh(range(len(names)), [v if v is not None else float("nan") for v in values])
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        for row, v in enumerate(values):
            if v is not None:
                ax.annotate(f"{v:.4g}", (v, row), xytext=(3, 0), textcoords="offset points", va="center")
    else:
        for key in names:
            ys = [_scalar(r.get(key)) for r in results]
            ax.plot(range(len(results)), [y if y is not None else float("nan") for y in ys], marker="o", label=key)
        ax.set_xlabel("evaluation")
        ax.legend()
    ax.set_title(title)
    return fig, ax
