"""Run RetrievalEvalCallback under Trainer(accelerator="cpu", devices=N, strategy="ddp") and dump what rank 0 saw.

Usage: python ddp_trainer_script.py OUT_JSON DEVICES
The evaluation set has 37 items: over 2 ranks DistributedSampler pads it to 38 by repeating one item,
which the metric must drop by id so that the numbers equal a single-process run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).parent))
from toy import LinearEncoder, PointDataModule  # noqa: E402

from beyondlabels.callbacks import RetrievalEvalCallback  # noqa: E402


def main() -> None:
    out, devices = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    dm = PointDataModule(n_train=32, n_eval=37, batch_size=5)
    model = LinearEncoder(lr=0.0)  # lr 0: the embeddings are the initial projection on every rank
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1, 3, 5), num_mismatches=3)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=1,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(out.parent),
    )
    trainer.fit(model, dm)
    logged = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("retrieval/")}
    path = out.with_name(f"{out.stem}.rank{trainer.global_rank}.json")
    path.write_text(json.dumps({"history": callback.history, "logged": logged, "world_size": trainer.world_size}))


if __name__ == "__main__":
    main()
