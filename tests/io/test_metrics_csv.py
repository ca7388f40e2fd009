"""beyondlabels.io.metrics_csv: the convergence events a CSV log holds are the ones the monitor recorded, and any file
reads as a list of events or a ValueError naming it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from beyondlabels.callbacks import ConvergenceMonitor
from beyondlabels.io.metrics_csv import read_convergence_events

NOISE = np.random.default_rng(0).normal(0, 0.01, size=60)
# rises, then falls: a downturn (and a plateau around the top with min_delta)
CURVE = [0.2 + 0.02 * i + NOISE[i] for i in range(20)] + [0.6 - 0.02 * i + NOISE[20 + i] for i in range(20)]


class CurveModule(pl.LightningModule):
    """Logs val/score = CURVE[epoch] at every validation epoch, and a training loss every step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.log("val/score", float(CURVE[min(self.current_epoch, len(CURVE) - 1)]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(2, 1)), batch_size=2)


def test_the_events_of_a_lightning_csv_log_are_the_monitors_own(tmp_path: Path):
    # independent noise: the curve is 40 evaluations of white noise around a trend, and what is checked here is the
    # reading of the CSV log, not the rule (the AR(1) default needs a longer curve to fit its correlation)
    monitor = ConvergenceMonitor("val/score", window=5, rounds=200, min_delta=0.005, noise_estimate="differences")
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=len(CURVE),
        accelerator="cpu",
        callbacks=[monitor],
        log_every_n_steps=1,
        logger=CSVLogger(tmp_path, name="csv", version=""),
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(CurveModule())
    expected = monitor.events
    assert {e["event"] for e in expected} == {"plateau", "downturn"}, "the curve makes both kinds of event"
    events = read_convergence_events(tmp_path / "csv" / "metrics.csv")
    got = [(e["series"], e["event"], e["step"]) for e in events]
    # the monitor's events carry the global step (as history.jsonl); a logger gets Lightning's own logging step, one
    # less for a validation at the end of a training epoch (Lightning logs it before the step counter moves on)
    assert got == [("convergence/val/score", e["event"], e["step"] - 1) for e in expected]
    for got, want in zip(events, expected):
        assert got["p"] == pytest.approx(want["p"], rel=1e-5)
        assert got["window_mean"] == pytest.approx(want["window_mean"], rel=1e-5)


def test_a_log_without_convergence_columns_has_no_events(tmp_path: Path):
    file = tmp_path / "metrics.csv"
    file.write_text("epoch,step,val/loss,x/plateau\n0,1,2.0,1\n")  # a "plateau" column without its window_mean
    assert read_convergence_events(file) == []
    file.write_text("")
    assert read_convergence_events(file) == []


def test_an_unreadable_log_is_a_value_error_naming_it(tmp_path: Path):
    file = tmp_path / "metrics.csv"
    file.write_bytes(b"step,a/window_mean,a/plateau\n\xff\xfe,1,1\n")
    with pytest.raises(ValueError, match="metrics.csv: not a readable CSV log"):
        read_convergence_events(file)
    with pytest.raises(ValueError, match="not a readable CSV log"):
        read_convergence_events(tmp_path / "missing.csv")


CELLS = ["", "0", "1", "1.0", "nan", "inf", "-3", "x", '"1,1"', "1e400", "7.5"]
COLUMNS = ["step", "epoch", "m/window_mean", "m/plateau", "m/downturn", "m/plateau_p", "m/downturn_p", "q"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.lists(st.lists(st.sampled_from(CELLS), max_size=6), max_size=8),
    header=st.lists(st.sampled_from(COLUMNS), max_size=7),
    raw=st.binary(max_size=64),
)
def test_any_file_reads_as_events_or_a_value_error(tmp_path: Path, body: list, header: list, raw: bytes):
    file = tmp_path / "metrics.csv"
    file.write_bytes((",".join(header) + "\n" + "\n".join(",".join(row) for row in body)).encode() + raw)
    try:
        events = read_convergence_events(file)
    except ValueError as exc:
        assert "metrics.csv" in str(exc)
        return
    for event in events:
        assert event["event"] in ("plateau", "downturn") and (event["step"] is None or isinstance(event["step"], int))
