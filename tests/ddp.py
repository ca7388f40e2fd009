"""Multi-process tests: gloo groups whose ranks meet through a file in the test's temporary folder, so no TCP port is
chosen (a port found free and then closed can be taken by another process before the workers bind it)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist


def gloo_store(tmp_path: Path) -> str:
    """A rendezvous file for one multi-process run; it must not exist yet (a file left by an earlier run would hold
    that run's keys)."""
    path = Path(tmp_path) / "gloo-store"
    assert not path.exists(), f"{path} exists: one store per run"
    return str(path)


def init_gloo(rank: int, world: int, store: str) -> None:
    """Join the gloo group of `world` ranks that meet at the file `store` (from `gloo_store`), one thread a rank."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=Path(store).as_uri(), rank=rank, world_size=world)

