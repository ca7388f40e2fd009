"""Run RetrievalEvalCallback under Trainer(accelerator="cpu", devices=N, strategy="ddp") and dump what each rank saw.

Usage: python ddp_trainer_script.py OUT_JSON DEVICES MODE [PACKAGE]
The evaluation set has 37 items: over 2 ranks DistributedSampler pads it to 38 by repeating one item,
which the metric must drop by id so that the numbers equal a single-process run.

MODE: "dicts" (dict batches with ids), "tuples" ((point, label) batches without ids: the evaluation uses dataset
indices), "strict_file_error" (strict mode and an unwritable save_dir: rank 0 fails writing, every rank must raise),
"empty_rank" (the callback feeds no sample on rank 1, as a filter of a user's might leave it none), "rank0_shard" (one
process evaluating only the items rank 0 holds under two processes: the even indices), "compute_error_last_rank"
(the results fail on the last rank after the metric's compute, before the intervals, whose rounds the ranks share:
the evaluation must fail on every rank, with no rank left waiting, and training go on).
PACKAGE: the Lightning package of the Trainer, module and callback: "pytorch_lightning" (default) or
"lightning.pytorch".
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from tests.callbacks.toy import lightning_classes
from tests.ddp import quiet_trainer_options

CALLBACKS = {"pytorch_lightning": "beyondlabels.callbacks", "lightning.pytorch": "beyondlabels.callbacks.lightning"}


class TupleView(Dataset):
    def __init__(self, base) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        item = self.base[i]
        return item["image"], item["label"]


def main() -> None:
    out, devices, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    package = sys.argv[4] if len(sys.argv) > 4 else "pytorch_lightning"
    pl = importlib.import_module(package)
    PointDataModule, LinearEncoder = lightning_classes(package)
    RetrievalEvalCallback = importlib.import_module(CALLBACKS[package]).RetrievalEvalCallback
    torch.set_num_threads(1)
    dm = PointDataModule(n_train=32, n_eval=37, batch_size=5)
    model = LinearEncoder(lr=0.0)  # lr 0: the embeddings are the initial projection on every rank
    kwargs = {}
    if mode == "tuples":
        kwargs["dataloader"] = lambda: DataLoader(TupleView(dm.eval_set), batch_size=4, pin_memory=False)
    if mode == "rank0_shard":
        kwargs["dataloader"] = lambda: DataLoader(Subset(dm.eval_set, range(0, 37, 2)), batch_size=5)
    if mode == "empty_rank":

        class FedOnRankZero(RetrievalEvalCallback):
            def feed(self, pl_module, batch) -> None:
                if self.eval_trainer.global_rank == 0:
                    super().feed(pl_module, batch)

        RetrievalEvalCallback = FedOnRankZero  # noqa: N806
    if mode == "compute_error_last_rank":

        class FailsOnLastRank(RetrievalEvalCallback):
            def after_compute(self, results):
                trainer = self.eval_trainer
                if trainer.global_rank == trainer.world_size - 1:
                    raise RuntimeError("results refused on the last rank (injected)")
                return super().after_compute(results)

        RetrievalEvalCallback = FailsOnLastRank  # noqa: N806
    if mode == "strict_file_error":
        blocker = out.parent / "not_a_folder"
        blocker.write_text("a file where the evaluation folder should go")
        kwargs.update(strict=True, save_dir=str(blocker / "retrieval"))
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1, 3, 5), num_mismatches=3, chunk_size=8, **kwargs)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=1,
        callbacks=[callback],
        **quiet_trainer_options(out.parent),
    )
    trainer.fit(model, dm)
    logged = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("retrieval/")}
    path = out.with_name(f"{out.stem}.rank{trainer.global_rank}.json")
    path.write_text(
        json.dumps(
            {
                "history": callback.history,
                "logged": logged,
                "world_size": trainer.world_size,
                "package": type(trainer).__module__,
            }
        )
    )
    if torch.distributed.is_initialized():
        # Lightning leaves a gloo group to interpreter shutdown, where gloo's worker threads can abort the process
        # ("terminate called without an active exception", pytorch/pytorch#190489): end it while Python is alive.
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
