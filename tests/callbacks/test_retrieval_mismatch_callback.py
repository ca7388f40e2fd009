"""RetrievalEvalCallback(profiles=...): graded credit and mismatch scalars logged from the same search, checked
against a numpy oracle on the final model; W&B media (heatmap, null histogram, pair table) in an offline run."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger, WandbLogger

sys.path.insert(0, str(Path(__file__).parent))
from toy import LinearEncoder, PointDataModule  # noqa: E402

from beyondlabels.callbacks import RetrievalEvalCallback  # noqa: E402
from beyondlabels.io import read_offline_run  # noqa: E402
from beyondlabels.profiles import FeatureProfiles  # noqa: E402

PROFILES = FeatureProfiles(
    {"a": {"size": 0, "parts": ["x"]}, "b": {"size": 1, "parts": ["x", "y"]}, "c": {"size": 2, "parts": ["y"]}, "d": {"size": 2, "parts": []}},
    ordinal={"size": "0 small .. 2 big"},
    sets={"parts": ["x", "y"]},
)


def _trainer(tmp_path: Path, callback, logger) -> pl.Trainer:
    return pl.Trainer(default_root_dir=tmp_path, max_epochs=1, accelerator="cpu", devices=1, callbacks=[callback], logger=logger,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, log_every_n_steps=1)


def test_profile_keys_match_a_numpy_oracle_on_the_final_model(tmp_path):
    dm, model = PointDataModule(), LinearEncoder()
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1, 5), num_mismatches=0, profiles=PROFILES, profile_labels="index",
                                     mismatch_trials=500, mismatch_seed=3)
    trainer = _trainer(tmp_path, callback, CSVLogger(tmp_path))
    trainer.fit(model, dm)
    with torch.no_grad():
        emb = model.proj(torch.from_numpy(dm.eval_set.points)).double().numpy()
    labels = dm.eval_set.labels
    u = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    s = u @ u.T
    np.fill_diagonal(s, -np.inf)
    nn = labels[s.argmax(axis=1)]
    m = PROFILES.similarity_matrix().numpy()
    last = callback.history[-1]
    assert last["profile_precision@1"] == pytest.approx(m[labels, nn].mean(), abs=1e-6)
    wrong = labels != nn
    assert last["mismatch_num_mismatches"] == wrong.sum()
    if wrong.any():
        assert last["mismatch_mean_similarity"] == pytest.approx(m[labels[wrong], nn[wrong]].mean(), abs=1e-6)
        assert 0 < last["mismatch_p_value"] <= 1
    assert "retrieval/mismatch_p_value" in (Path(trainer.logger.log_dir) / "metrics.csv").read_text()
    assert callback.schema["mismatch_p_value"].higher_is_better is False


def test_profile_options_are_validated():
    with pytest.raises(ValueError, match="`profile_labels` needs `profiles`"):
        RetrievalEvalCallback(profile_labels="index")
    with pytest.raises(ValueError, match="`labels` has 2 entries for 4 classes"):
        RetrievalEvalCallback(profiles=PROFILES, profile_labels=[0, 1])
    with pytest.raises(ValueError, match="`num_trials`"):
        RetrievalEvalCallback(profiles=PROFILES, profile_labels="index", mismatch_trials=0)


@pytest.mark.slow
def test_profile_media_reach_the_offline_wandb_run(tmp_path):
    logger = WandbLogger(save_dir=str(tmp_path), offline=True, project="beyondlabels-test")
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1, 3), num_mismatches=2, profiles=PROFILES, profile_labels="index",
                                     mismatch_trials=200, strict=True)
    try:
        _trainer(tmp_path, callback, logger).fit(LinearEncoder(), PointDataModule())
    finally:
        import wandb

        wandb.finish()
    keys = set(read_offline_run(tmp_path).keys())
    assert {"retrieval/profile_similarity", "retrieval/mismatch_pairs", "retrieval/mismatch_p_value"} <= keys
