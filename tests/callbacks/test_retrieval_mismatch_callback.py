"""RetrievalEvalCallback(profiles=...): graded credit and mismatch scalars logged from the same search, checked
against a numpy oracle on the final model; W&B media (heatmap, null histogram, pair table) in an offline run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from PIL import Image
from pytorch_lightning.loggers import CSVLogger, WandbLogger
from scipy.stats import spearmanr

from beyondlabels.callbacks import RetrievalEvalCallback  # noqa: E402
from beyondlabels.functional import feature_similarity  # noqa: E402
from beyondlabels.io import read_offline_run  # noqa: E402
from beyondlabels.profiles import FeatureProfiles  # noqa: E402
from tests.callbacks.toy import LinearEncoder, PointDataModule

PROFILES = FeatureProfiles(
    {
        "a": {"size": 0, "parts": ["x"]},
        "b": {"size": 1, "parts": ["x", "y"]},
        "c": {"size": 2, "parts": ["y"]},
        "d": {"size": 2, "parts": []},
    },
    ordinal={"size": "0 small .. 2 big"},
    sets={"parts": ["x", "y"]},
)


def _trainer(tmp_path: Path, callback, logger) -> pl.Trainer:
    return pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        log_every_n_steps=1,
    )


def _numpy_frequency_null(query: np.ndarray, m: np.ndarray, counts: np.ndarray, trials: int, seed: int) -> np.ndarray:
    """The frequency-aware null as documented, in numpy: per query class in ascending order, ``[trials, size]``
    uniforms from a CPU torch generator seeded with ``seed``; each picks an alternative class ``c != q`` by inverse
    CDF with probability ``f_c / sum_{c' != q} f_c'``; a trial's statistic is the mean of ``m[q, c]``."""
    generator = torch.Generator().manual_seed(seed)
    sums = np.zeros(trials)
    for q in np.unique(query):
        size = int((query == q).sum())
        alternatives = np.array([c for c in range(len(counts)) if c != q and counts[c] > 0])
        cdf = np.cumsum(counts[alternatives] / counts[alternatives].sum())
        u = torch.rand((trials, size), generator=generator, dtype=torch.float64).numpy()
        drawn = np.minimum(np.searchsorted(cdf, u, side="right"), len(alternatives) - 1)
        sums += m[q, alternatives[drawn]].sum(axis=1)
    return sums / len(query)


def test_profile_keys_match_a_numpy_oracle_on_the_final_model(tmp_path):
    dm, model = PointDataModule(), LinearEncoder()
    callback = RetrievalEvalCallback(
        every_n_epochs=1,
        ks=(1, 5),
        num_mismatches=0,
        profiles=PROFILES,
        profile_labels="index",
        mismatch_trials=500,
        mismatch_seed=3,
    )
    trainer = _trainer(tmp_path, callback, CSVLogger(tmp_path))
    trainer.fit(model, dm)
    with torch.no_grad():
        emb = model.proj(torch.from_numpy(dm.eval_set.points)).double().numpy()
    labels = dm.eval_set.labels
    u = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    s = u @ u.T
    np.fill_diagonal(s, -np.inf)
    nn = labels[s.argmax(axis=1)]
    m = feature_similarity(PROFILES).numpy()
    last = callback.history[-1]
    assert last["profile_precision@1"] == pytest.approx(m[labels, nn].mean(), abs=1e-6)
    wrong = labels != nn
    assert wrong.sum() >= 5, "the toy problem must leave mismatches for the mismatch keys to be checked"
    assert last["mismatch_num_mismatches"] == wrong.sum()
    observed = m[labels[wrong], nn[wrong]].mean()
    assert last["mismatch_mean_similarity"] == pytest.approx(observed, abs=1e-12)
    null = _numpy_frequency_null(labels[wrong], m, np.bincount(labels, minlength=4), trials=500, seed=3)
    assert last["mismatch_p_value"] == ((null >= observed - 1e-12).sum() + 1) / 501
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
    callback = RetrievalEvalCallback(
        every_n_epochs=1,
        ks=(1, 3),
        num_mismatches=2,
        profiles=PROFILES,
        profile_labels="index",
        mismatch_trials=200,
        strict=True,
    )
    try:
        _trainer(tmp_path, callback, logger).fit(LinearEncoder(), PointDataModule())
    finally:
        import wandb

        wandb.finish()
    keys = set(read_offline_run(tmp_path).keys())
    assert {"retrieval/profile_similarity", "retrieval/mismatch_pairs", "retrieval/mismatch_p_value"} <= keys
    assert {"retrieval/embedding_projection", "retrieval/mismatch_spearman_rho"} <= keys


def _fit_capturing_media(tmp_path: Path, **options):
    """One fit (one evaluation, at the end of epoch 0) whose rank-0 media description is kept."""
    callback = RetrievalEvalCallback(
        every_n_epochs=1,
        ks=(1,),
        num_mismatches=0,
        profiles=PROFILES,
        profile_labels="index",
        mismatch_trials=50,
        strict=True,
        confidence_intervals=False,
        **options,
    )
    captured = []
    describe = callback.describe_media

    def spy(trainer_, results, media):  # the family's own hook, recorded
        describe(trainer_, results, media)
        media.results = results  # the evaluation's output, as the media saw it
        captured.append(media)

    callback.describe_media = spy
    dm, model = PointDataModule(), LinearEncoder()
    trainer = _trainer(tmp_path, callback, CSVLogger(tmp_path))
    trainer.fit(model, dm)
    assert len(captured) == 1 and len(callback.history) == 1
    return callback, trainer, dm, model, captured[0]


def _figures(media) -> dict:
    return {f.name: f for f in media.figures}


def test_spearman_and_embedding_projection_are_logged(tmp_path):
    from sklearn.decomposition import PCA

    callback, trainer, dm, model, media = _fit_capturing_media(
        tmp_path, projection_points=30, save_dir=tmp_path / "eval"
    )
    # Spearman: scipy on each class pair's mean of the N x N pairwise cosines of the final model's embeddings
    with torch.no_grad():
        emb = model.proj(torch.from_numpy(dm.eval_set.points)).double().numpy()
    labels = dm.eval_set.labels
    u = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    cos = u @ u.T
    pairs = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    m = feature_similarity(PROFILES).numpy()
    ref = spearmanr([m[a, b] for a, b in pairs], [cos[np.ix_(labels == a, labels == b)].mean() for a, b in pairs])
    last = callback.history[-1]
    assert last["mismatch_spearman_pairs"] == 6
    assert last["mismatch_spearman_rho"] == pytest.approx(ref.statistic, abs=1e-6)
    assert last["mismatch_spearman_p"] == pytest.approx(ref.pvalue, rel=1e-4, abs=1e-9)
    assert "retrieval/mismatch_spearman_rho" in (Path(trainer.logger.log_dir) / "metrics.csv").read_text()
    # the projection: a PNG beside the other evaluation files, and the same picture as a media figure of that step
    step = last["step"]
    png = tmp_path / "eval" / "embedding_projection" / f"step_{step:09d}.png"
    assert png.is_file() and (tmp_path / "eval" / "history.jsonl").is_file()
    figures = _figures(media)
    assert media.step == step and figures["embedding_projection"].png == png.read_bytes()
    assert "profile_similarity" in figures and [t.name for t in media.tables] == ["mismatch_pairs"]
    assert ("mismatch_null" in figures) == (last["mismatch_num_mismatches"] > 0)
    sample = media.results["projection_sample"]["embeddings"].double().numpy()
    assert sample.shape == (30, 6)
    ratio = PCA(n_components=2).fit(sample).explained_variance_ratio_
    title = Image.open(png).text["Title"]
    assert f"PC1 {100 * ratio[0]:.1f}%, PC2 {100 * ratio[1]:.1f}%" in title and f"step {step}" in title


def test_projection_without_save_dir_and_turned_off(tmp_path):
    callback, *_, media = _fit_capturing_media(tmp_path / "a", save_dir=False)
    assert _figures(media)["embedding_projection"].png.startswith(b"\x89PNG")  # drawn in a temporary folder
    callback, *_, media = _fit_capturing_media(tmp_path / "b", projection_points=0, save_dir=tmp_path / "b" / "eval")
    assert "embedding_projection" not in _figures(media) and "profile_similarity" in _figures(media)
    assert (
        not (tmp_path / "b" / "eval" / "embedding_projection").exists() and media.results["projection_sample"] is None
    )
    with pytest.raises(ValueError, match="`projection_points`"):
        RetrievalEvalCallback(profiles=PROFILES, profile_labels="index", projection_points=-1)
