"""Fit a linear encoder with a retrieval callback under Trainer(accelerator=..., devices=N, strategy=...) and record,
for every call of the module's ``encode_image``, which wrapper's ``forward`` it ran inside (hooks on
``trainer.strategy.model``, registered once the strategy has wrapped the module); dump the calls and the history per
rank.

Usage: python ddp_forward_script.py OUT_JSON DEVICES STRATEGY [ACCELERATOR]
STRATEGY: any of Lightning's strategy names ("ddp", "fsdp", "auto"); ACCELERATOR: "cpu" (the default) or "cuda".
FSDP needs CUDA: Lightning refuses ``strategy="fsdp"`` with the CPU accelerator, and torch's
FullyShardedDataParallel itself refuses a CPU-only process ("FSDP needs a non-CPU accelerator device").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch

from beyondlabels.callbacks import RetrievalEvalCallback
from tests.callbacks.toy import LinearEncoder, PointDataModule
from tests.ddp import quiet_trainer_options


class Watched(LinearEncoder):
    """Records, for each ``encode_image`` call, the class of the strategy's wrapper whose forward is running (None
    outside one) and whether gradients were on."""

    def __init__(self) -> None:
        super().__init__(lr=0.0)
        self.wrapper_forward: list[str] = []  # the wrappers whose forward is running now
        self.seen: list[dict] = []
        self.wrapper: str | None = None  # the strategy's wrapper during fit (None: the module itself)

    def on_fit_start(self) -> None:
        wrapper = self.trainer.strategy.model
        if wrapper is not None and wrapper is not self:
            name = self.wrapper = type(wrapper).__name__
            wrapper.register_forward_pre_hook(lambda *_: self.wrapper_forward.append(name))
            wrapper.register_forward_hook(lambda *_: self.wrapper_forward.pop() and None)  # None: output unchanged

    def encode_image(self, x: torch.Tensor) -> torch.Tensor:
        inside = self.wrapper_forward[-1] if self.wrapper_forward else None
        self.seen.append({"wrapper": inside, "grad": torch.is_grad_enabled(), "training": self.training})
        return super().encode_image(x)


def main() -> None:
    out, devices, strategy = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    accelerator = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    torch.set_num_threads(1)
    model = Watched()
    callback = RetrievalEvalCallback(ks=(1, 3), every_n_epochs=1, strict=True, bootstrap_rounds=50, save_dir=False)
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        strategy=strategy,
        max_epochs=1,
        callbacks=[callback],
        num_sanity_val_steps=0,
        **quiet_trainer_options(out.parent),
    )
    trainer.fit(model, PointDataModule())
    result = {
        "world_size": trainer.world_size,
        "wrapper": model.wrapper,
        "calls": model.seen,
        "history": callback.history,
    }
    out.with_name(f"{out.stem}.rank{trainer.global_rank}.json").write_text(json.dumps(result))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()  # before interpreter shutdown (gloo's threads)


if __name__ == "__main__":
    main()
