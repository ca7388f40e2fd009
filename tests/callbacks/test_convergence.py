"""ConvergenceMonitor inside Lightning: reading callback_metrics and an evaluation callback's history with its
per-query values (the paired test), stopping through the strategy, resuming from a checkpoint (also one of the earlier
monitor), and the confidence intervals every evaluation callback logs. The rule itself is tested in
tests/functional/test_convergence.py; here its numpy reading (tests/oracles/convergence_oracle.py) is the reference."""

from __future__ import annotations

import copy
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from beyondlabels.callbacks import ConvergenceMonitor, RetrievalEvalCallback  # noqa: E402
from beyondlabels.io.run_files import read_history  # noqa: E402
from tests.callbacks.toy import LinearEncoder, PointDataModule
from tests.oracles.bootstrap import numpy_percentile_bootstrap
from tests.oracles.convergence_oracle import paired_p, series_run

RNG = np.random.default_rng(0)
NOISE = RNG.normal(0, 0.01, size=60)
RISING = [0.2 + 0.01 * i + NOISE[i] for i in range(40)]
FALLING = [0.2 + 0.02 * i + NOISE[i] for i in range(20)] + [0.6 - 0.02 * i + NOISE[20 + i] for i in range(20)]
# 40 values are too few to fit correlated noise: the plumbing tests below run the rule of independent noise on them
DIFFERENCES = {"noise_estimate": "differences"}
_AR = np.random.default_rng(1).normal(0, 0.01, size=131)
for _i in range(1, 131):
    _AR[_i] += 0.5 * _AR[_i - 1]
LONG_FALLING = [0.6 + _AR[i] for i in range(100)] + [0.6 - 0.01 * i + _AR[100 + i] for i in range(1, 31)]  # AR(1) 0.5


def reference_events(curve, window, **kwargs):
    """``[(event, index)]`` where the oracle's flags go from 0 to 1 (at one index: plateau first)."""
    looks = series_run(curve, window, **kwargs)
    events, previous = [], {"plateau": 0.0, "downturn": 0.0}
    for i, look in enumerate(looks):
        for event in ("plateau", "downturn"):
            if look[event] == 1.0 and previous[event] == 0.0:
                events.append((event, i + 2 * window - 1))
        previous = look
    return events


def _run(curve, **kwargs):
    monitor = ConvergenceMonitor("val/score", window=5, rounds=200, **{**DIFFERENCES, **kwargs})
    states = [monitor.observe(step, value) for step, value in enumerate(curve)]
    return monitor, states


def test_observe_keeps_working_for_scalar_values():
    monitor, states = _run(FALLING)
    assert [(e["event"], e["step"]) for e in monitor.events] == reference_events(FALLING, 5, **DIFFERENCES)
    assert "downturn" in [e["event"] for e in monitor.events]
    expected = series_run(FALLING, 5, **DIFFERENCES)
    assert [s["downturn_p"] for s in states[9:]] == pytest.approx(
        [look["downturn_p"] for look in expected], rel=1e-9, abs=1e-12
    )
    assert states[-1]["window_mean"] == pytest.approx(np.mean(FALLING[-5:]))
    assert states[-1]["window_ci_low"] <= states[-1]["window_mean"] <= states[-1]["window_ci_high"]
    assert states[-1]["spent"] == pytest.approx(31 * 0.05 / 1000) and states[-1]["paired"] == 0.0
    rising, _ = _run(RISING)
    assert rising.events == []


def test_the_default_rule_reads_correlated_noise_and_logs_it():
    """The AR(1) rule (the default) on 100 flat evaluations of noise of lag-1 correlation 0.5, then a fall: the
    numpy reading's events and p-values, and the noise it measured (correlation, its bound, df, covered)."""
    monitor = ConvergenceMonitor("val/score", window=10, rounds=100)
    states = [monitor.observe(step, value) for step, value in enumerate(LONG_FALLING)]
    expected = series_run(LONG_FALLING, 10)
    assert [(e["event"], e["step"]) for e in monitor.events] == reference_events(LONG_FALLING, 10)
    assert "downturn" in [e["event"] for e in monitor.events] and monitor.events[-1]["step"] > 100
    for state, look in zip(states[19:], expected):
        for name in ("downturn_p", "plateau_p", "noise", "correlation", "correlation_high", "noise_df", "covered"):
            assert state[name] == pytest.approx(look[name], rel=1e-7, abs=1e-12, nan_ok=True), name
    assert 0.2 < states[99]["correlation"] < 0.8 and states[99]["covered"] == 1.0


def test_a_correlation_beyond_what_the_rule_covers_warns_once(caplog):
    """Evaluations so close together that the curve is nearly a random walk between them: the monitor says so once,
    with the measured correlation and what would bring it in range, and flags nothing at those looks."""
    walk = 0.5 + np.cumsum(np.random.default_rng(2).normal(0, 0.003, size=150))
    monitor = ConvergenceMonitor("val/score", window=10, rounds=50)
    with caplog.at_level(logging.WARNING):
        states = [monitor.observe(step, float(v)) for step, v in enumerate(walk)]
    assert caplog.text.count("correlated from one evaluation to the next beyond what the rule covers") == 1
    beyond = monitor.run_state["beyond"]
    rho = states[beyond]["correlation"]
    assert (
        rho > 0.905
        and f"(lag-1 correlation {rho:.3f}; covered up to 0.905, a correlation time of one window of 10" in caplog.text
    )
    span = -1 / math.log(rho)
    assert f"from step {beyond} on its looks decide nothing" in caplog.text
    assert (
        f"(were the noise AR(1): every {math.ceil(span / 10)}-th of these evaluations, or window >= {math.ceil(span)};"
        in caplog.text
    )
    assert all(s["covered"] == 0.0 and s["downturn"] == 0.0 and s["plateau"] == 0.0 for s in states[beyond:])


def test_the_level_is_spent_after_max_looks_with_one_warning(caplog):
    monitor = ConvergenceMonitor("val/score", window=2, rounds=50, max_looks=3)
    with caplog.at_level(logging.WARNING):
        states = [monitor.observe(step, 0.5 + 0.01 * (-1) ** step) for step in range(10)]
    assert caplog.text.count("has spent its false-alarm level 0.05 over max_looks=3") == 1
    assert [math.isnan(s["downturn_p"]) for s in states] == [True] * 3 + [False] * 3 + [True] * 4
    assert [s["spent"] for s in states] == pytest.approx([0.0] * 3 + [0.05 / 3, 0.1 / 3, 0.05] + [0.05] * 4)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"monitor": ""}, r"^`monitor` must be a logged metric name .*, got ''\.$"),
        ({"window": 1}, r"^`window` must be an int >= 2 \(values per window\), got 1\.$"),
        ({"window": True}, r"^`window` must be an int >= 2 \(values per window\), got True\.$"),
        ({"mode": "up"}, r"^`mode` must be 'max' \(higher is better\) or 'min', got 'up'\.$"),
        ({"stop_on": ["downturn", "overfit"]}, r"^`stop_on` may hold \['plateau', 'downturn'\], got \['overfit'\]\.$"),
        ({"stop_on": ["plateau"]}, r"^`stop_on` holds 'plateau' with `min_delta` 0: .* got min_delta=0\.0\.$"),
        ({"rounds": 0}, r"^`rounds` must be a positive int \(e\.g\. 2000 bootstrap resamples\), got 0\.$"),
        ({"confidence": 1.0}, r"^`confidence` must be a number strictly between 0 and 1 \(e\.g\. 0\.95\), got 1\.0\.$"),
        ({"min_delta": -1}, r"^`min_delta` must be a number >= 0, got -1\.$"),
        ({"prefix": ""}, r"^`prefix` must be a non-empty name, got ''\.$"),
        ({"alpha": 2}, r"^`alpha` must be a false-alarm rate strictly between 0 and 1 \(e\.g\. 0\.05\), got 2\.$"),
        (
            {"max_looks": 0},
            r"^`max_looks` must be a positive int \(the most evaluations a run tests, e\.g\. 1000\), got 0\.$",
        ),
        (
            {"noise": -0.1},
            r"^`noise` must be None \(estimated from the series\) or the noise sd, a number > 0, got -0\.1\.$",
        ),
        (
            {"noise_estimate": "mad"},
            r"^`noise_estimate` must be one of \['ar1', 'differences', 'windows'\], got 'mad'\.$",
        ),
        (
            {"synced": "yes"},
            r"^`synced` must be None, True or False \(None: the evaluation callbacks' keys; True: the same on every "
            r"rank\), got 'yes'\.$",
        ),
        (
            {"paired": "yes"},
            r"^`paired` must be True or False \(True: per-query values when the evaluation keeps them\), got 'yes'\.$",
        ),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, match):
    """Each message names the argument, what it must be and the value it got."""
    with pytest.raises(ValueError, match=match):
        ConvergenceMonitor(**{"monitor": "val/score", **kwargs})


# ---- inside Lightning ------------------------------------------------------------------------------------------------


class CurveModule(pl.LightningModule):
    """Logs val/score = curve[epoch] at every validation epoch; trains nothing of consequence."""

    def __init__(self, curve):
        super().__init__()
        self.curve = list(curve)
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.log("val/score", float(self.curve[min(self.current_epoch, len(self.curve) - 1)]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(2, 1)), batch_size=2)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.zeros(2, 1)), batch_size=2)


def _trainer(tmp_path, callbacks, max_epochs, **kwargs):
    return pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=max_epochs,
        accelerator="cpu",
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )


def test_stops_training_on_a_downturn_through_the_strategy(tmp_path: Path):
    monitor = ConvergenceMonitor("val/score", window=5, rounds=200, stop_on=["downturn"], **DIFFERENCES)
    trainer = _trainer(tmp_path, [monitor], max_epochs=40, enable_checkpointing=False)
    trainer.fit(CurveModule(FALLING))
    first = next(i for event, i in reference_events(FALLING, 5, **DIFFERENCES) if event == "downturn")
    assert trainer.current_epoch == first + 1  # one step per epoch: stopped right after that epoch
    assert monitor.stopped_at == first + 1 and len(monitor.series) == first + 1
    assert float(trainer.callback_metrics["convergence/val/score/downturn"]) == 1.0
    p = float(trainer.callback_metrics["convergence/val/score/downturn_p"])
    seen = [v for _, v in monitor.series]  # what self.log kept of the values (float32)
    assert p == pytest.approx(series_run(seen, 5, **DIFFERENCES)[-1]["downturn_p"], rel=1e-6) and p <= 0.05
    assert float(trainer.callback_metrics["convergence/val/score/spent"]) == pytest.approx(
        (first + 1 - 9) * 0.05 / 1000
    )


def test_the_default_rule_stops_on_a_downturn_of_correlated_noise(tmp_path: Path):
    """Inside Lightning with the default rule: the stop comes at the numpy reading's first downturn."""
    monitor = ConvergenceMonitor("val/score", window=10, rounds=100, stop_on=["downturn"])
    trainer = _trainer(tmp_path, [monitor], max_epochs=len(LONG_FALLING), enable_checkpointing=False)
    trainer.fit(CurveModule(LONG_FALLING))
    seen = [v for _, v in monitor.series]  # what self.log kept of the values (float32)
    first = next(i for event, i in reference_events(seen, 10) if event == "downturn")
    assert trainer.current_epoch == first + 1 == monitor.stopped_at and first > 100
    assert float(trainer.callback_metrics["convergence/val/score/covered"]) == 1.0
    assert 0.0 < float(trainer.callback_metrics["convergence/val/score/correlation"]) < 1.0


def test_without_stop_on_it_only_reports(tmp_path: Path):
    monitor = ConvergenceMonitor("val/score", window=5, rounds=200, **DIFFERENCES)
    trainer = _trainer(tmp_path, [monitor], max_epochs=40, enable_checkpointing=False)
    trainer.fit(CurveModule(FALLING))
    assert trainer.current_epoch == 40 and len(monitor.series) == 40
    assert "downturn" in [e["event"] for e in monitor.events]


def test_resumes_from_a_checkpoint_with_the_same_decisions(tmp_path: Path):
    """Fit, checkpoint before the downturn, resume: the same values, looks spent, events and stop as one whole run."""
    full = ConvergenceMonitor("val/score", window=5, rounds=200, stop_on=["downturn"], **DIFFERENCES)
    whole = _trainer(tmp_path / "full", [full], max_epochs=40, enable_checkpointing=False)
    whole.fit(CurveModule(FALLING))
    first = ConvergenceMonitor("val/score", window=5, rounds=200, stop_on=["downturn"], **DIFFERENCES)
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    _trainer(tmp_path / "a", [first, ckpt], max_epochs=15).fit(CurveModule(FALLING))
    assert first.run_state["looks"] == 15 - 9 and first.stopped_at is None
    resumed = ConvergenceMonitor("val/score", window=5, rounds=200, stop_on=["downturn"], **DIFFERENCES)
    again = _trainer(tmp_path / "b", [resumed], max_epochs=40, enable_checkpointing=False)
    again.fit(CurveModule(FALLING), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert full.stopped_at is not None and resumed.stopped_at == full.stopped_at
    assert again.current_epoch == whole.current_epoch
    assert resumed.series == full.series and resumed.events == full.events
    assert resumed.run_state == full.run_state and resumed.state == pytest.approx(full.state, nan_ok=True)


def test_a_resume_under_other_rule_settings_warns_and_carries_the_spent_level(tmp_path: Path, caplog):
    """Checkpoint under window 5, mode max, max_looks 1000 (6 looks spent: 0.0003); resume under window 4, mode min,
    max_looks 500 (0.0001 a look): the change is named, the rule restarts with ceil(0.0003 / 0.0001) = 3 looks spent
    and every later evaluation is a look of the new rule."""
    first = ConvergenceMonitor("val/score", window=5, rounds=200)
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    _trainer(tmp_path / "a", [first, ckpt], max_epochs=15).fit(CurveModule(FALLING))
    assert first.run_state["looks"] == 6
    resumed = ConvergenceMonitor("val/score", window=4, mode="min", max_looks=500, rounds=200)
    with caplog.at_level(logging.WARNING):
        _trainer(tmp_path / "b", [resumed], max_epochs=40, enable_checkpointing=False).fit(
            CurveModule(FALLING), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt")
        )
    assert "other rule settings (window 5 -> 4, mode 'max' -> 'min', max_looks 1000 -> 500)" in caplog.text
    assert "counting the level already spent (0.0003) as 3 of its 500 looks" in caplog.text
    assert resumed.series[:15] == first.series and len(resumed.series) == 40
    assert resumed.run_state["looks"] == 3 + 25 and resumed.events[: len(first.events)] == first.events


def test_a_state_under_other_settings_restarts_the_rule():
    """Same key (only alpha and min_delta differ): load_state_dict itself restarts; unchanged settings resume as
    saved."""
    saved = ConvergenceMonitor("val/score", window=5, rounds=200, max_looks=100)
    for step, value in enumerate(FALLING[:30]):
        saved.observe(step, value)
    state = saved.state_dict()
    same = ConvergenceMonitor("val/score", window=5, rounds=200, max_looks=100)
    same.load_state_dict(copy.deepcopy(state))
    assert same.run_state == saved.run_state and same.state == saved.state
    other = ConvergenceMonitor("val/score", window=5, rounds=200, max_looks=100, alpha=0.01, min_delta=0.01)
    other.load_state_dict(copy.deepcopy(state))
    looks = saved.run_state["looks"]  # 21 looks at 0.0005: 0.0105, at 0.0001 a look 105 > 100
    assert looks == 21 and other.run_state["looks"] == 100 and other.run_state["best"] is None
    assert other.run_state["flags"] == {"plateau": 0.0, "downturn": 0.0} and other.series == saved.series
    assert other.observe(30, 0.0)["downturn"] == 0.0  # the level is spent: nothing more is flagged
    assert other.run_state["events"] == saved.run_state["events"]


def test_reads_an_evaluation_callbacks_history_and_intervals_are_logged(tmp_path: Path):
    evaluation = RetrievalEvalCallback(every_n_epochs=None, every_n_steps=2, num_mismatches=0, bootstrap_rounds=500)
    monitor = ConvergenceMonitor("retrieval/r_precision", window=2, rounds=200, paired=False)
    trainer = _trainer(tmp_path, [evaluation, monitor], max_epochs=1, enable_checkpointing=False)
    trainer.fit(LinearEncoder(), PointDataModule())
    assert [s for s, _ in monitor.series] == [h["step"] for h in evaluation.history]
    assert [v for _, v in monitor.series] == [h["r_precision"] for h in evaluation.history]
    assert monitor.run_state["best"] is None and monitor.state["paired"] == 0.0  # paired=False: the series rule
    # every evaluation carries its uncertainty: the interval of the per-query values it saved
    folder = tmp_path / "retrieval"
    last = read_history(folder / "history.jsonl")[-1]
    with np.load(folder / last["per_query_file"]) as per_query:
        reference = numpy_percentile_bootstrap(per_query["map@r"], rounds=500, seed=11)
    assert (last["map@r_ci_low"], last["map@r_ci_high"]) == pytest.approx(reference, abs=1e-12)
    assert last["map@r_ci_low"] <= last["map@r"] <= last["map@r_ci_high"]
    assert (
        "mean_first_relevant_rank_ci_low" not in last and "first_relevant_rank_ci_low" not in last
    )  # no vector of that name
    schema = json.loads((folder / "schema.json").read_text())["keys"]
    assert schema["map@r_ci_high"] == {"kind": "scalar", "higher_is_better": True, "count": False}
    assert (folder / "confidence_intervals.png").read_bytes()[:4] == b"\x89PNG"
    assert not math.isnan(float(trainer.callback_metrics["retrieval/precision@1_ci_low"]))


class RecordingMonitor(ConvergenceMonitor):
    """Keeps what every observe() returned."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def observe(self, step, value, per_query=None):
        self.seen.append(super().observe(step, value, per_query=per_query))
        return self.seen[-1]


def test_per_query_values_confirm_the_downturn_by_the_paired_test(tmp_path: Path):
    """Each evaluation's per-query values (in memory, no file read) pair with the best earlier evaluation's: the
    paired p-value is the sign-flip bound on the per-query files the evaluation wrote, and the look's p-value the
    larger of it and the series rule's. One look (``max_looks=1``, at the fourth evaluation for ``window=2``); the
    running best is kept for every evaluation."""
    evaluation = RetrievalEvalCallback(
        every_n_epochs=None, every_n_steps=2, num_mismatches=0, save_per_query="all", confidence_intervals=False
    )
    monitor = RecordingMonitor("retrieval/precision@1", window=2, rounds=200, max_looks=1)
    trainer = _trainer(tmp_path, [evaluation, monitor], max_epochs=2, enable_checkpointing=False)
    trainer.fit(LinearEncoder(), PointDataModule(n_eval=400))
    history = read_history(tmp_path / "retrieval" / "history.jsonl")
    assert [s for s, _ in monitor.series] == [h["step"] for h in history] and len(history) >= 5
    files = []
    for record in history:
        with np.load(tmp_path / "retrieval" / record["per_query_file"]) as per_query:
            files.append((per_query["query_id"].copy(), per_query["precision@1"].astype(np.float64)))
    means = [np.nanmean(values) for _, values in files]
    assert monitor.run_state["looks"] == 1
    for i in range(1, len(files)):
        best = int(np.argmax(means[:i]))
        want = paired_p(*files[best], *files[i])
        assert monitor.seen[i]["paired_p"] == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert any(0.0 < s["paired_p"] < 1.0 for s in monitor.seen[1:])  # a comparison that can tell a wrong pairing
    assert all(math.isnan(s["downturn_p"]) for s in monitor.seen[:3] + monitor.seen[4:])  # the one look: the fourth
    series = series_run([float(h["precision@1"]) for h in history[:4]], 2, max_looks=1)[-1]["downturn_p"]
    look = monitor.seen[3]
    assert look["downturn_p"] == pytest.approx(max(series, look["paired_p"]), rel=1e-9, abs=1e-15)
    kept, best = monitor.run_state["best"], int(np.argmax(means))
    assert kept["step"] == history[best]["step"]
    assert kept["ids"] == files[best][0].tolist() and kept["values"] == pytest.approx(files[best][1].tolist())


def test_per_query_values_that_cannot_be_paired_leave_the_series_rule_and_the_run(tmp_path: Path, caplog):
    evaluation = RetrievalEvalCallback(
        every_n_epochs=None, every_n_steps=2, num_mismatches=0, confidence_intervals=False
    )
    evaluation.per_query_values = lambda key, step: (torch.zeros(37, dtype=torch.long), torch.ones(37))  # duplicate ids
    monitor = ConvergenceMonitor("retrieval/precision@1", window=2, rounds=200)
    trainer = _trainer(tmp_path, [evaluation, monitor], max_epochs=1, enable_checkpointing=False)
    with caplog.at_level(logging.ERROR):
        trainer.fit(LinearEncoder(), PointDataModule())
    assert "cannot be paired" in caplog.text and "one distinct query id per value" in caplog.text
    assert len(monitor.series) == len(evaluation.history) and monitor.run_state["best"] is None
    expected = series_run([v for _, v in monitor.series], 2)[-1]["downturn_p"]
    assert monitor.state["downturn_p"] == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_confidence_intervals_can_be_chosen_or_turned_off():
    some = RetrievalEvalCallback(confidence_intervals=["precision@1"])
    assert [k for k in some.schema if k.endswith("_ci_low")] == ["precision@1_ci_low"]
    none = RetrievalEvalCallback(confidence_intervals=False)
    assert not [k for k in none.schema if "_ci_" in k]
    with pytest.raises(ValueError, match="macro_map@r"):
        RetrievalEvalCallback(confidence_intervals=["macro_map@r"])
    with pytest.raises(ValueError, match="bootstrap_rounds"):
        RetrievalEvalCallback(bootstrap_rounds=0)


def test_an_earlier_monitors_checkpoint_loads_with_a_warning(caplog):
    """The earlier monitor saved a series and events only: both are kept, the looks the rule would have made on that
    series count as spent, and the run goes on as if it had been watched by the rule from the start."""
    old = {
        "series": [[i, v] for i, v in enumerate(FALLING[:20])],
        "events": [{"step": 9, "event": "plateau"}],
        "stopped_at": None,
    }
    monitor = ConvergenceMonitor("val/score", window=5, rounds=200)
    with caplog.at_level(logging.WARNING):
        monitor.load_state_dict(old)
    assert "earlier rule" in caplog.text and "20 values and 1 events are kept, 11 looks" in caplog.text
    assert monitor.series == [(i, v) for i, v in enumerate(FALLING[:20])] and monitor.events == old["events"]
    states = [monitor.observe(step, v) for step, v in enumerate(FALLING[20:], start=20)]
    reference, expected = _run(FALLING, noise_estimate="ar1")
    assert states == [{k: pytest.approx(v, nan_ok=True) for k, v in s.items()} for s in expected[20:]]
    assert monitor.events[1:] == reference.events


@pytest.mark.parametrize("state", [{"version": 2, "series": "garbage"}, {"series": [["a", "b"]]}, {"version": 2}])
def test_a_damaged_checkpoint_state_starts_afresh_with_a_warning(state, caplog):
    monitor = ConvergenceMonitor("val/score", window=5, rounds=200)
    with caplog.at_level(logging.WARNING):
        monitor.load_state_dict(state)
    assert "unexpected form" in caplog.text and monitor.series == [] and monitor.run_state["looks"] == 0
    monitor.observe(0, 0.5)


def test_an_unsynced_key_spends_alpha_over_the_ranks(caplog):
    """Under N ranks a key that may differ between them (not an evaluation callback's, not declared synced) is tested
    at alpha / N on each rank; an evaluation callback's key or synced=True keeps alpha. A resume on another number of
    ranks is a change of alpha: it warns and carries the level spent."""
    monitor = ConvergenceMonitor("val/score", window=5, rounds=50, alpha=0.06, **DIFFERENCES)
    with caplog.at_level(logging.INFO):
        monitor._spend_per_rank(2, synced=False)
    assert monitor.rule.alpha == 0.03 and monitor.alpha == 0.06
    assert "each of the 2 ranks tests it at alpha 0.03, keeping 0.06 for the job" in caplog.text
    for step, value in enumerate(FALLING[:15]):
        monitor.observe(step, value)
    state = monitor.state_dict()
    assert state["rule"]["alpha"] == 0.03 and state["looks"] == 6
    monitor._spend_per_rank(2, synced=True)
    assert monitor.rule.alpha == 0.06
    resumed = ConvergenceMonitor("val/score", window=5, rounds=50, alpha=0.06, **DIFFERENCES)  # one rank now
    with caplog.at_level(logging.WARNING):
        resumed.load_state_dict(copy.deepcopy(state))
    assert "alpha 0.03 -> 0.06" in caplog.text and resumed.run_state["looks"] == 3  # 6 * 0.03 / 0.06


@pytest.mark.parametrize("schedule", [{"every_n_epochs": 1}, {"every_n_epochs": None, "every_n_steps": 2}])
def test_the_monitors_keys_reach_the_loggers_at_the_step_of_the_evaluation_they_read(tmp_path: Path, schedule):
    """Read back from Lightning's CSV log: every step with a monitor key carries the evaluation's own key, the step
    the evaluation callbacks log at (Lightning's logging step, one row per validation with the module's keys)."""
    import csv

    from pytorch_lightning.loggers import CSVLogger

    evaluation = RetrievalEvalCallback(num_mismatches=0, bootstrap_rounds=50, **schedule)
    monitor = ConvergenceMonitor("retrieval/r_precision", window=2, rounds=50, paired=False, **DIFFERENCES)
    logger = CSVLogger(tmp_path, name="csv", version=0)
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_epochs=3,
        accelerator="cpu",
        callbacks=[evaluation, monitor],
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
    )
    trainer.fit(LinearEncoder(), PointDataModule())
    with open(Path(logger.log_dir) / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    evaluated = {int(r["step"]) for r in rows if r.get("retrieval/r_precision")}
    watched = {int(r["step"]) for r in rows if r.get("convergence/retrieval/r_precision/window_mean")}
    assert len(evaluated) == len(evaluation.history) >= 3 and watched
    assert watched <= evaluated, (sorted(watched), sorted(evaluated))
