"""The evaluation forward runs as Lightning runs ``validation_step``: through the strategy's wrapped model.

Under ``strategy="ddp"`` (two gloo processes) every call of the module's ``encode_image`` made by the retrieval
callback runs inside ``DistributedDataParallel.forward``, without gradients and in eval mode, and both ranks log the
numbers of a single-process run; a module that the strategy does not wrap is called directly; the module's own
``forward`` is back in place after each call, also after one that raised. FSDP needs CUDA (Lightning refuses
``strategy="fsdp"`` on the CPU accelerator; torch's FSDP refuses a CPU-only process): the device check runs this
script with ``strategy="fsdp"`` on a GPU (docs/trainer.md, the table of strategies)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from beyondlabels.callbacks.runner import through_strategy
from tests.ddp import child_env

SCRIPT = Path(__file__).with_name("ddp_forward_script.py")


def _run(tmp_path: Path, devices: int, strategy: str) -> list[dict]:
    out = tmp_path / f"{strategy}{devices}" / "result.json"
    out.parent.mkdir(parents=True)
    env = child_env(OMP_NUM_THREADS="1", PL_DISABLE_FORK="1", WANDB_MODE="offline")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), str(devices), strategy],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    return [json.loads(p.read_text()) for p in sorted(out.parent.glob("result.rank*.json"))]


@pytest.mark.slow
def test_under_ddp_the_evaluation_forward_runs_inside_the_ddp_wrapper(tmp_path: Path):
    (single,) = _run(tmp_path, 1, "auto")
    ranks = _run(tmp_path, 2, "ddp")
    assert single["wrapper"] is None and {c["wrapper"] for c in single["calls"]} == {None}
    assert len(ranks) == 2
    for rank in ranks:
        assert rank["world_size"] == 2 and rank["wrapper"] == "DistributedDataParallel"
        # 37 samples, batches of 8, half a shard per rank: 3 batches, each encoded inside the wrapper's forward
        assert rank["calls"] == [{"wrapper": "DistributedDataParallel", "grad": False, "training": False}] * 3
        got = {k: v for k, v in rank["history"][0].items() if k not in ("step", "eval_seconds", "num_duplicates")}
        want = {k: v for k, v in single["history"][0].items() if k not in ("step", "eval_seconds", "num_duplicates")}
        assert got == want


class _Wrapper(torch.nn.Module):
    """Stands for DDP: holds the module as its child and counts the calls of its forward."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module, self.calls = module, 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        return self.module(*args, **kwargs)


class _Module(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(2, 3)

    def forward(self, x):
        return "forward"

    def encode(self, x, scale=1.0):
        return self.proj(x) * scale

    def explode(self, x):
        raise RuntimeError("encoder exploded")


class _Strategy:
    def __init__(self, model) -> None:
        self.model = model


class _Trainer:
    def __init__(self, model) -> None:
        self.strategy = _Strategy(model)


def test_a_wrapped_module_is_called_through_the_wrapper_and_its_forward_restored():
    module = _Module()
    wrapper = _Wrapper(module)
    x = torch.ones(4, 2)
    got = through_strategy(_Trainer(wrapper), module, module.encode, x, scale=2.0)
    assert wrapper.calls == 1 and torch.equal(got, module.proj(x) * 2.0)
    assert "forward" not in vars(module) and module(x) == "forward"
    with pytest.raises(RuntimeError, match="exploded"):
        through_strategy(_Trainer(wrapper), module, module.explode, x)
    assert wrapper.calls == 2 and "forward" not in vars(module) and module(x) == "forward"


def test_a_module_the_strategy_does_not_wrap_is_called_directly():
    module, other = _Module(), _Module()
    x = torch.ones(1, 2)
    for trainer in (None, _Trainer(None), _Trainer(module), _Trainer(_Wrapper(other))):
        assert torch.equal(through_strategy(trainer, module, module.encode, x), module.proj(x))
    assert "forward" not in vars(module)
