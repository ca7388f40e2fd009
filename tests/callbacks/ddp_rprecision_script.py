"""Run RPrecisionEvalCallback under Trainer(accelerator="cpu", devices=N, strategy="ddp") and dump what each rank saw.

Usage: python ddp_rprecision_script.py OUT_JSON DEVICES

A toy generator paints each prompt's picture from a hash of the prompt (so an image does not depend on the rank that
generates it), a tiny random open_clip evaluator embeds pictures and prompts. The evaluation takes 37 of the 42 prompts
of the pool: over 2 ranks DistributedSampler pads the 37 to 38 by repeating one prompt, which the metric must drop by
id. Each rank writes ``<OUT stem>.rank<r>.json`` (history, logged scalars, world size, rank, its save_dir). The
callback of each rank is given its own ``save_dir`` (``files.rank<r>``) so that the test can see which rank wrote
files: only rank 0 may.

The constants and :func:`prompt_image` are imported by the test, which recomputes the same numbers in one process.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.ddp import quiet_trainer_options

COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "black")
SHAPES = ("square", "circle", "triangle", "star", "cross", "ring")
POOL = [f"a {c} {s}" for c in COLOURS for s in SHAPES]  # 42 distinct prompts
NUM_PROMPTS = 37  # odd: two ranks need one padding copy
PROMPT_SEED = 5
BATCH_SIZE = 5
SETTINGS = dict(
    num_candidates=10,
    r=1,
    top_r=(1, 3),
    protocol="folds",
    repeats=4,
    seed=3,
    near_duplicate_threshold=None,
    hard_negatives=True,
)
# The tiny random CLIP puts most prompts at text cosine > 0.8 of each other: the default near-duplicate filter would
# leave too few distractors, hence near_duplicate_threshold=None.


def prompt_image(prompt: str, size: int = 32) -> torch.Tensor:
    """A picture ``[3, size, size]`` in [0, 1] that is a pure function of the prompt's text (a colour and a pattern
    seeded by its SHA-256)."""
    g = torch.Generator().manual_seed(int(hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:12], 16))
    colour = torch.rand(3, 1, 1, generator=g)
    pattern = torch.rand(1, size // 8, size // 8, generator=g).repeat_interleave(8, dim=1).repeat_interleave(8, dim=2)
    return (0.6 * colour + 0.4 * pattern).clamp(0, 1)


def make_evaluator():
    from beyondlabels.io.evaluator import TINY_CONFIG, ClipEvaluator

    return ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=0)


class ToyGenerator(pl.LightningModule):
    """A module with ``generate(prompts)``; its training step only moves a parameter the pictures do not use."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def generate(self, prompts: list[str]) -> torch.Tensor:
        return torch.stack([prompt_image(p) for p in prompts]).to(self.device)

    def training_step(self, batch, batch_idx):
        return (self.w - batch[0].mean()) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    from beyondlabels.callbacks import RPrecisionEvalCallback

    out, devices = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    # Lightning's DDP launcher re-runs this script for rank 1 with LOCAL_RANK set; the first process is rank 0.
    launch_rank = int(os.environ.get("LOCAL_RANK", "0"))
    callback = RPrecisionEvalCallback(
        make_evaluator(),
        prompts=POOL,
        num_prompts=NUM_PROMPTS,
        prompt_seed=PROMPT_SEED,
        batch_size=BATCH_SIZE,
        every_n_epochs=1,
        strict=True,
        bootstrap_rounds=200,
        save_dir=str(out.parent / f"files.rank{launch_rank}"),
        **SETTINGS,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=1,
        callbacks=[callback],
        **quiet_trainer_options(out.parent),
    )
    trainer.fit(
        ToyGenerator(),
        DataLoader(TensorDataset(torch.randn(16, 2, generator=torch.Generator().manual_seed(0))), batch_size=4),
    )
    logged = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("rprecision/")}
    result = {
        "history": callback.history,
        "logged": logged,
        "world_size": trainer.world_size,
        "global_rank": trainer.global_rank,
        "launch_rank": launch_rank,
        "save_dir": str(callback.output_folder(trainer)),
    }
    out.with_name(f"{out.stem}.rank{trainer.global_rank}.json").write_text(json.dumps(result))
    if torch.distributed.is_initialized():
        # Lightning leaves a gloo group to interpreter shutdown, where gloo's worker threads can abort the process
        # ("terminate called without an active exception", pytorch/pytorch#190489): end it while Python is alive.
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
