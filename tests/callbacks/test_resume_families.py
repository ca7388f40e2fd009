"""Callbacks of several families in one run resume from one checkpoint: each gets back its own history (under a state
key of its own: the family, prefix and ``state_key_parts``), the resumed fit appends to it, and the numbers a resumed
run logs equal those of a run that never stopped."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from beyondlabels.callbacks import (  # noqa: E402
    CrossModalEvalCallback,
    RetrievalEvalCallback,
    ZeroShotEvalCallback,
)
from beyondlabels.io.run_files import read_history  # noqa: E402
from tests.callbacks.test_crossmodal_callback import (
    DualEncoder,
    PairDataModule,
    _trainer,
)

TEMPLATES = ["a {}", "a picture of a {}"]


def _callbacks(root: Path) -> list:
    options = dict(every_n_epochs=1, confidence_intervals=False, strict=True)
    return [
        RetrievalEvalCallback(
            ks=(1, 3), num_mismatches=0, prefix="retrieval", save_dir=root / "retrieval", **{**options, "strict": False}
        ),
        # the same family twice, told apart by the encode method alone (their logged keys clash: said, and fatal in
        # strict mode, so this one is not strict)
        RetrievalEvalCallback(
            encode_method="encode_text_of_image",
            ks=(1,),
            num_mismatches=0,
            prefix="retrieval",
            save_dir=root / "retrieval_text",
            **{**options, "strict": False},
        ),
        CrossModalEvalCallback(ks=(1, 3), num_misses=0, save_dir=root / "crossmodal", **options),
        ZeroShotEvalCallback(
            templates=TEMPLATES, ks=(1, 2), confusion_matrix=False, save_dir=root / "zeroshot", **options
        ),
    ]


class Encoder(DualEncoder):
    def encode_text_of_image(self, images: torch.Tensor) -> torch.Tensor:
        """A second image embedding (the text tower on the picture's numbers): another retrieval callback's input."""
        return self.text_proj(images.flatten(1))


def _fit(root: Path, callbacks: list, max_epochs: int, ckpt_path: str | None = None) -> None:
    checkpoint = ModelCheckpoint(dirpath=root / "ckpt", save_last=True, save_top_k=-1, every_n_epochs=1)
    trainer = _trainer(root, [*callbacks, checkpoint], max_epochs=max_epochs, enable_checkpointing=True)
    torch.manual_seed(0)
    trainer.fit(Encoder(lr=0.5), PairDataModule(), ckpt_path=ckpt_path)


def _numbers(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in record.items() if k != "eval_seconds"} for record in history]


@pytest.mark.slow
def test_four_callbacks_of_three_families_resume_from_one_checkpoint(tmp_path: Path):
    whole = _callbacks(tmp_path / "whole")
    _fit(tmp_path / "whole", whole, max_epochs=3)
    assert len({cb.state_key for cb in whole}) == len(whole), "every callback has a state key of its own"

    first = _callbacks(tmp_path / "resumed")
    _fit(tmp_path / "resumed", first, max_epochs=2)
    checkpoint = torch.load(tmp_path / "resumed" / "ckpt" / "epoch=1-step=8.ckpt", weights_only=False)
    assert {cb.state_key for cb in first} <= set(checkpoint["callbacks"])

    resumed = _callbacks(tmp_path / "resumed")
    _fit(
        tmp_path / "resumed",
        resumed,
        max_epochs=3,
        ckpt_path=str(tmp_path / "resumed" / "ckpt" / "epoch=1-step=8.ckpt"),
    )
    for before, after, reference in zip(first, resumed, whole):
        assert [r["step"] for r in after.history] == [4, 8, 12], after.state_key
        assert _numbers(after.history[:2]) == _numbers(before.history), "the checkpointed history came back"
        assert _numbers(after.history) == _numbers(reference.history), "a resumed run logs what an unbroken one does"
        on_disk = read_history(Path(after.save_dir) / "history.jsonl")
        assert _numbers(on_disk) == _numbers(after.history)
    # the families kept their own keys: no callback got another's history
    assert "top1" in resumed[3].history[0] and "precision@1" not in resumed[3].history[0]
    assert "image_to_text_recall@1" in resumed[2].history[0]
    assert resumed[0].history[0]["precision@1"] != resumed[1].history[0]["precision@1"] or (
        resumed[0].history[0]["r_precision"] != resumed[1].history[0]["r_precision"]
    )
