"""One of two trainings that write into one run folder at once (tests/callbacks/test_two_writers.py).

Usage: python two_writers_script.py RUN_FOLDER NAME [HOLD_UNTIL_FILE]
Fits the toy encoder with a retrieval evaluation every epoch into RUN_FOLDER (the Trainer's default_root_dir); with
HOLD_UNTIL_FILE it writes RUN_FOLDER/<NAME>.started once its first evaluation is on disk and waits for that file
before it goes on, so that the other training starts while this one writes. Prints "refused: <message>" and exits 3
when the folder is another's.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytorch_lightning as pl
import torch

from beyondlabels.callbacks import RetrievalEvalCallback
from beyondlabels.io.run_lock import RunFolderInUseError
from tests.callbacks.toy import LinearEncoder, PointDataModule


class Pause(pl.Callback):
    def __init__(self, started: Path, until: Path) -> None:
        self.started, self.until = started, until

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.current_epoch == 0:
            self.started.write_text("started")
            deadline = time.monotonic() + 120
            while not self.until.exists() and time.monotonic() < deadline:
                time.sleep(0.05)


def main() -> None:
    folder, name = Path(sys.argv[1]), sys.argv[2]
    hold = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    torch.set_num_threads(1)
    torch.manual_seed(0 if name == "a" else 1)
    callbacks = [RetrievalEvalCallback(every_n_epochs=1, ks=(1,), prefix="retrieval", confidence_intervals=False)]
    if hold is not None:
        callbacks.append(Pause(folder / f"{name}.started", hold))
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=3,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(folder),
    )
    try:
        trainer.fit(
            LinearEncoder(lr=0.05 if name == "a" else 0.2), PointDataModule(n_train=32, n_eval=24, batch_size=8)
        )
    except RunFolderInUseError as exc:
        print(f"refused: {exc}", flush=True)
        sys.exit(3)
    print("steps", [r["step"] for r in callbacks[0].history], flush=True)


if __name__ == "__main__":
    main()
