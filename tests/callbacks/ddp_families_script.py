"""Run the cross-modal, zero-shot, hierarchy and profile (retrieval with mismatch and checkpoint selection) callbacks
in one fit under Trainer(accelerator="cpu", devices=N, strategy="ddp") and dump each callback's history per rank, with
the retrieval callback's checkpoint selection and the selection keys logged on that rank; a second retrieval callback
reads batches whose keys only its ``batch_transform`` gives (strict: a rank that skipped it would fail).

Usage: python ddp_families_script.py OUT_JSON DEVICES
The evaluation set has 37 items: over 2 ranks DistributedSampler pads it to 38 by repeating one item, which every
metric must drop by id so that the numbers equal a single-process run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch

from beyondlabels.callbacks import (  # noqa: E402
    CrossModalEvalCallback,
    HierarchyEvalCallback,
    RetrievalEvalCallback,
    ZeroShotEvalCallback,
)
from beyondlabels.callbacks.selection import CheckpointSelection  # noqa: E402
from beyondlabels.profiles import FeatureProfiles  # noqa: E402
from beyondlabels.taxonomy import Taxonomy  # noqa: E402
from tests.callbacks.test_crossmodal_callback import (
    CLASS_NAMES,
    DualEncoder,
    PairDataModule,
)
from tests.ddp import quiet_trainer_options

TAXONOMY = Taxonomy(
    {"alpha": "first", "beta": "first", "gamma": "second", "delta": "second", "first": "letter", "second": "letter"},
    root="letter",
)
PROFILES = FeatureProfiles(
    {
        "alpha": {"size": 0, "parts": ["x"]},
        "beta": {"size": 1, "parts": ["x", "y"]},
        "gamma": {"size": 2, "parts": ["y"]},
        "delta": {"size": 2, "parts": []},
    },
    ordinal={"size": "0 small .. 2 big"},
    sets={"parts": ["x", "y"]},
)


class Encoder(DualEncoder):
    def predict_labels(self, images: torch.Tensor) -> torch.Tensor:
        """A class index per image: the largest of the first four embedding coordinates."""
        return self.encode_image(images)[:, : len(CLASS_NAMES)].argmax(dim=1)


def renamed(batch: dict) -> dict:
    """The batch under the keys the ``renamed`` callback reads."""
    return {"pixels": batch["image"], "cls": batch["label"], "id": batch["id"]}


def main() -> None:
    out, devices = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    dm = PairDataModule(n_eval=37, batch_size=5)
    model = Encoder(dm, lr=0.0)  # lr 0: the same weights on every rank and world size
    options = dict(every_n_epochs=1, strict=True, bootstrap_rounds=200)
    callbacks = {
        "crossmodal": CrossModalEvalCallback(ks=(1, 3), num_misses=3, **options),
        "zeroshot": ZeroShotEvalCallback(
            templates=["a {}", "a picture of a {}"], ks=(1, 2), confusion_matrix=False, **options
        ),
        "hierarchy": HierarchyEvalCallback(TAXONOMY, num_examples=4, **options),
        "retrieval": RetrievalEvalCallback(
            ks=(1, 3),
            profiles=PROFILES,
            profile_labels="index",
            mismatch_trials=300,
            projection_points=20,
            num_mismatches=3,
            selection=CheckpointSelection("precision@1", rounds=200),
            **options,
        ),
        "renamed": RetrievalEvalCallback(
            ks=(1, 3),
            input_key="pixels",
            label_key="cls",
            batch_transform=renamed,
            distance="euclidean",
            num_mismatches=0,
            prefix="renamed",
            **options,
        ),
    }
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=1,
        callbacks=list(callbacks.values()),
        num_sanity_val_steps=0,
        **quiet_trainer_options(out.parent),
    )
    trainer.fit(model, dm)
    path = out.with_name(f"{out.stem}.rank{trainer.global_rank}.json")
    histories = {name: cb.history for name, cb in callbacks.items()}
    selection = {k: v for k, v in callbacks["retrieval"].selection.last.items() if k != "checkpoints"}
    logged = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("selection/")}
    result = {"histories": histories, "world_size": trainer.world_size, "selection": selection, "logged": logged}
    path.write_text(json.dumps(result))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()  # before interpreter shutdown (gloo's threads)


if __name__ == "__main__":
    main()
