"""RetrievalEvalCallback(audit=...): a short fit on an evaluation set with planted cross-label duplicates and flipped
labels; the logged counts and the suspects table against the numpy oracle (tests/oracles/audit_oracle.py) on the
final model; stability and its resume."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger

from beyondlabels.callbacks import RetrievalEvalCallback  # noqa: E402
from tests.callbacks.toy import LinearEncoder, PointDataModule
from tests.oracles.audit_oracle import audit_oracle, brute_neighbors

K = 5


class NoisyPoints(PointDataModule):
    """The toy evaluation set with two cross-label duplicate pairs and three flipped labels."""

    def __init__(self) -> None:
        super().__init__(n_eval=40)
        points, labels = self.eval_set.points, self.eval_set.labels
        points[5] = points[20]  # labels 1 and 0
        points[7] = points[30]  # labels 3 and 2
        for i in (2, 13, 26):
            labels[i] = (labels[i] + 2) % 4


def _fit(tmp_path: Path, epochs: int = 2, **audit) -> tuple[RetrievalEvalCallback, NoisyPoints, LinearEncoder]:
    dm, model = NoisyPoints(), LinearEncoder()
    callback = RetrievalEvalCallback(every_n_epochs=1, ks=(1, 5), num_mismatches=0, audit={"k": K, "top": 6, **audit})
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=CSVLogger(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        log_every_n_steps=1,
    )
    trainer.fit(model, dm)
    return callback, dm, model


def test_counts_and_suspects_table_match_the_oracle(tmp_path: Path) -> None:
    callback, dm, model = _fit(tmp_path, exclude_suspects=True)
    with torch.no_grad():
        emb = model.proj(torch.from_numpy(dm.eval_set.points)).numpy()
    labels = dm.eval_set.labels
    idx, sc = brute_neighbors(emb, K)
    want = audit_oracle(idx, sc, labels)
    last = callback.history[-1]
    assert last["audit_num_suspects"] == len(want["suspects"]) > 0
    assert last["audit_num_outliers"] == int(want["is_outlier"].sum())
    assert last["audit_num_cross_label_duplicates"] == sum(want["cross_label"]) == 2
    assert last["audit_num_same_label_duplicates"] == len(want["pairs"]) - 2
    assert last["audit_num_excluded"] == 4 and "clean/precision@1" in last
    assert {(5, 20), (7, 30)} == {p for p, c in zip(want["pairs"], want["cross_label"]) if c}
    assert math.isnan(callback.history[0]["audit_suspect_overlap"]) and 0 <= last["audit_suspect_overlap"] <= 1
    (table,) = [t for t in callback.outputs.last_media.tables if t.name == "audit_suspects"]
    col = {c: j for j, c in enumerate(table.columns)}
    top = want["suspects"][:6]
    assert [row[col["id"]] for row in table.rows] == top
    assert [row[col["given_label"]] for row in table.rows] == [str(labels[i]) for i in top]
    assert [row[col["suggested_label"]] for row in table.rows] == [str(want["suggested_label"][i]) for i in top]
    np.testing.assert_allclose([row[col["share"]] for row in table.rows], want["suggested_share"][top], atol=1e-6)
    np.testing.assert_allclose([row[col["label_quality"]] for row in table.rows], want["label_quality"][top], atol=1e-6)
    (pairs,) = [t for t in callback.outputs.last_media.tables if t.name == "audit_duplicates"]
    assert sorted((row[2], row[3]) for row in pairs.rows) == [(5, 20), (7, 30)]
    logged = (Path(callback_log_dir(tmp_path)) / "metrics.csv").read_text()
    assert "retrieval/audit_num_suspects" in logged and "retrieval/audit_suspect_overlap" in logged


def callback_log_dir(tmp_path: Path) -> Path:
    (folder,) = sorted((tmp_path / "lightning_logs").iterdir())
    return folder


def test_per_query_file_holds_the_audit_values(tmp_path: Path) -> None:
    callback, _, _ = _fit(tmp_path, epochs=1)
    files = sorted(Path(tmp_path).rglob("per_query/step_*.npz"))
    assert files
    data = np.load(files[-1])
    assert {"audit_label_quality", "audit_suggested_label", "audit_is_suspect", "audit_outlier_score"} <= set(
        data.files
    )
    assert int(data["audit_is_suspect"].sum()) == callback.history[-1]["audit_num_suspects"]


def test_previous_suspects_survive_a_resume() -> None:
    callback = RetrievalEvalCallback(audit={"k": 3})
    callback.previous_suspects = torch.tensor([4, 1, 9])
    state = callback.state_dict()
    assert state["audit_previous_suspects"] == [4, 1, 9]
    other = RetrievalEvalCallback(audit={"k": 3})
    other.load_state_dict(state)
    assert other.previous_suspects.tolist() == [4, 1, 9]
    assert "audit_previous_suspects" not in RetrievalEvalCallback().state_dict()


def test_audit_options_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown settings"):
        RetrievalEvalCallback(audit={"depth": 3})
    with pytest.raises(ValueError, match="`audit` needs every sample as a query"):
        RetrievalEvalCallback(audit={"k": 3}, max_queries=10)


def test_the_callback_fills_in_the_overlap_with_the_previous_evaluation() -> None:
    """``audit_suspect_overlap``: the share of the previous evaluation's top suspects among this one's (worked
    example: top 4, one of four in common is 0.25), NaN the first time; the metric's own value is NaN."""
    callback = RetrievalEvalCallback(audit={"k": 3, "top": 4})

    def results(ids):
        return {
            "audit": {"suspects": {"ids": torch.tensor(ids)}},
            "audit_k": torch.tensor(3),
            "audit_suspect_overlap": torch.tensor(float("nan"), dtype=torch.float64),
        }

    assert math.isnan(float(callback.after_compute(results([7, 3, 5, 2, 8]))["audit_suspect_overlap"]))
    assert callback.previous_suspects.tolist() == [7, 3, 5, 2]
    assert float(callback.after_compute(results([5, 2, 7, 3]))["audit_suspect_overlap"]) == 1.0
    callback.previous_suspects = torch.tensor([5, -5, -6, -7])
    assert float(callback.after_compute(results([5, 2, 7, 3]))["audit_suspect_overlap"]) == 0.25
    assert float(RetrievalEvalCallback().after_compute({"x": 1})["x"]) == 1  # without the audit: unchanged
