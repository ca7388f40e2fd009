"""Run ConvergenceMonitor(stop_on=["downturn"]) under Trainer(accelerator="cpu", devices=N, strategy="ddp") on a
logged curve and dump what each rank saw.

Usage: python ddp_convergence_script.py OUT_JSON DEVICES MODE
MODE: "paired" (a RetrievalEvalCallback evaluates every 2 steps an encoder that climbs its loss; the monitor reads
its history and gathered per-query values, the same on every rank, and stops on the downturn of precision@1),
"synced" (every rank logs ``val/score = FALLING[epoch]`` with ``sync_dist=True``; the monitor is told ``synced=True``),
"rank_local" (no sync: rank 0 logs FALLING, every other rank RISING, so only rank 0 sees a downturn; each rank tests
at ``alpha / 2``), "rank_nan" (no sync: FALLING on every rank, but from epoch NAN_FROM on rank 1 logs NaN, a value the
monitor skips, while rank 0 goes on reading values). The curves are 40 values: the rule of independent noise
(``noise_estimate="differences"``) decides on them; what is tested is the plumbing between ranks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from beyondlabels.callbacks import ConvergenceMonitor, RetrievalEvalCallback  # noqa: E402
from tests.callbacks.toy import LinearEncoder, PointDataModule
from tests.ddp import quiet_trainer_options

MAX_EPOCHS = 40
WINDOW, ROUNDS = 5, 500
NAN_FROM = 12
_NOISE = np.random.default_rng(0).normal(0, 0.01, size=60)
# float32 values: what self.log keeps of them, so a single-process reading of the curve sees the same numbers
FALLING = [
    float(np.float32(v))
    for v in [0.2 + 0.02 * i + _NOISE[i] for i in range(20)] + [0.6 - 0.02 * i + _NOISE[20 + i] for i in range(20)]
]
RISING = [float(np.float32(0.2 + 0.01 * i + _NOISE[i])) for i in range(MAX_EPOCHS)]


class AscentEncoder(LinearEncoder):
    """Climbs its pull-to-class-centre loss: its retrieval gets worse step by step (a real downturn)."""

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5, maximize=True)


class CurveModule(pl.LightningModule):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self):
        if self.trainer.sanity_checking:
            return
        epoch, rank = self.current_epoch, self.global_rank
        if self.mode == "synced":
            self.log("val/score", FALLING[epoch], sync_dist=True)
        elif self.mode == "rank_local":
            self.log("val/score", (FALLING if rank == 0 else RISING)[epoch])
        else:
            self.log("val/score", float("nan") if rank == 1 and epoch >= NAN_FROM else FALLING[epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)


def main() -> None:
    out, devices, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    if mode == "paired":
        evaluation = RetrievalEvalCallback(
            every_n_epochs=None, every_n_steps=2, num_mismatches=0, confidence_intervals=False
        )
        # mode="min" on a rising precision@1: the training itself is the "decline"; max_looks=2 lets 64 queries show it
        monitor = ConvergenceMonitor(
            "retrieval/precision@1",
            window=WINDOW,
            rounds=ROUNDS,
            stop_on=["downturn"],
            max_looks=10,
            alpha=0.5,
            noise_estimate="differences",
        )
        callbacks, module, data = [evaluation, monitor], AscentEncoder(), PointDataModule(n_eval=64)
    else:
        synced = True if mode == "synced" else None
        monitor = ConvergenceMonitor(
            "val/score", window=WINDOW, rounds=ROUNDS, stop_on=["downturn"], noise_estimate="differences", synced=synced
        )
        callbacks, module, data = [monitor], CurveModule(mode), None
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=MAX_EPOCHS,
        callbacks=callbacks,
        num_sanity_val_steps=0,
        **quiet_trainer_options(out.parent),
    )
    trainer.fit(module, datamodule=data)
    path = out.with_name(f"{out.stem}.rank{trainer.global_rank}.json")
    path.write_text(
        json.dumps(
            {
                "world_size": trainer.world_size,
                "current_epoch": trainer.current_epoch,
                "global_step": trainer.global_step,
                "stopped_at": monitor.stopped_at,
                "series": monitor.series,
                "events": monitor.events,
                "state": monitor.state,
                "run_state": monitor.run_state,
                "alpha": monitor.rule.alpha,
            }
        )
    )
    if torch.distributed.is_initialized():
        # Lightning leaves a gloo group to interpreter shutdown, where gloo's worker threads can abort the process
        # ("terminate called without an active exception", pytorch/pytorch#190489): end it while Python is alive.
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
