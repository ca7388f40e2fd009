"""The device of the GPU tests, and their comparison of an accelerator result with the CPU result of the same inputs.

A GPU test takes its device from :func:`accelerator_device` and is skipped by :data:`needs_accelerator` (or
:func:`needs_devices`) when there is no CUDA device. With ``BEYONDLABELS_GPU_DRY_RUN=1`` the same tests run on the
CPU instead (Lightning ``accelerator="cpu"``, DDP over gloo): the comparison then holds exactly, and a test whose own
logic is broken fails without a GPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest
import torch

from tests.oracles.outputs import flat

DRY_RUN_ENV = "BEYONDLABELS_GPU_DRY_RUN"

# Rounding unit of fp32.
FP32_UNIT = 2.0**-24


def dry_run() -> bool:
    """True when the GPU tests run their logic on the CPU (``BEYONDLABELS_GPU_DRY_RUN=1``)."""
    return os.environ.get(DRY_RUN_ENV) == "1"


def accelerator_device(index: int = 0) -> torch.device:
    """``cuda:index``, or the CPU in a dry run."""
    return torch.device("cpu") if dry_run() else torch.device("cuda", index)


def lightning_accelerator() -> str:
    """The Lightning ``accelerator`` of the GPU tests: ``"gpu"``, or ``"cpu"`` in a dry run."""
    return "cpu" if dry_run() else "gpu"


def process_group_backend() -> str:
    """``"nccl"``, or ``"gloo"`` in a dry run."""
    return "gloo" if dry_run() else "nccl"


def needs_devices(count: int) -> pytest.MarkDecorator:
    """Skip unless ``count`` CUDA devices are visible (never skipped in a dry run)."""
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return pytest.mark.skipif(
        not dry_run() and have < count,
        reason=f"needs {count} CUDA device(s), found {have} (set {DRY_RUN_ENV}=1 to run the test's logic on the CPU)",
    )


needs_accelerator = needs_devices(1)


def cosine_tolerance(dim: int) -> float:
    """Bound on the difference of one fp32 cosine of unit ``dim``-vectors computed on two devices: each side's dot
    product is within ``gamma_dim = dim u / (1 - dim u)`` of the exact one, plus a few units for the normalisation."""
    gamma = dim * FP32_UNIT / (1.0 - dim * FP32_UNIT)
    return 2.0 * gamma + 8.0 * FP32_UNIT


def assert_matches_cpu(
    got: Mapping,
    cpu: Mapping,
    device: torch.device,
    *,
    rtol: float = 1e-12,
    atol: float = 1e-12,
    tolerances: Mapping[str, float] | None = None,
) -> None:
    """``got`` (computed on ``device``) holds the keys, dtypes and shapes of ``cpu``, every tensor on ``device``;
    integer and bool tensors equal, float ones within ``rtol`` / ``atol`` (the float64 reductions of the two devices
    may sum in another order) or the absolute tolerance ``tolerances[flat_key]``, NaN exactly where the CPU has NaN.
    Values that are not tensors are equal."""
    fg, fc = flat(got), flat(cpu)
    assert fg.keys() == fc.keys(), sorted(fg.keys() ^ fc.keys())
    assert fc, "nothing to compare"
    for key, ref in fc.items():
        value = fg[key]
        if not isinstance(ref, torch.Tensor):
            assert value == ref, key
            continue
        assert isinstance(value, torch.Tensor), key
        assert value.device == device, (key, value.device)
        assert value.dtype == ref.dtype and value.shape == ref.shape, (
            key,
            value.dtype,
            ref.dtype,
            value.shape,
            ref.shape,
        )
        value = value.cpu()
        if ref.is_floating_point():
            tol = (tolerances or {}).get(key)
            r, a = (0.0, tol) if tol is not None else (rtol, atol)
            torch.testing.assert_close(value, ref, rtol=r, atol=a, equal_nan=True, msg=lambda m, key=key: f"{key}: {m}")
        else:
            assert torch.equal(value, ref), key
