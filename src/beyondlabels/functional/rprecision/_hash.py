"""The splitmix64 hashing every draw and fold shuffle is a function of (seeds, ids)."""

from __future__ import annotations

import torch
from torch import Tensor

_M1 = 0xBF58476D1CE4E5B9 - 2**64
_M2 = 0x94D049BB133111EB - 2**64
_GOLDEN = 0x9E3779B97F4A7C15 - 2**64
_INT64_MAX = torch.iinfo(torch.int64).max


def _shr(x: Tensor, s: int) -> Tensor:
    """Logical right shift of int64 ``x`` by ``s`` bits."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix(x: Tensor) -> Tensor:
    """The splitmix64 finaliser on int64 tensors (wrapping arithmetic): a bijection that scrambles every bit."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


def _base_key(seed: int, repeat: int, device: torch.device) -> Tensor:
    seed_t = torch.tensor(seed, dtype=torch.long, device=device)
    repeat_t = torch.tensor(repeat, dtype=torch.long, device=device)
    return _mix(_mix(seed_t) ^ _mix(repeat_t * _GOLDEN + 1))
