"""ConvergenceMonitor on synthetic rising / flat / falling curves, inside Lightning (reading callback_metrics and an
evaluation callback's history, stopping through the strategy, resuming from a checkpoint), and the confidence
intervals every evaluation callback now logs."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).parent))
from toy import LinearEncoder, PointDataModule  # noqa: E402

from beyondlabels.callbacks import ConvergenceMonitor, RetrievalEvalCallback  # noqa: E402
from beyondlabels.io.run_files import read_history  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracles"))
from bootstrap import numpy_percentile_bootstrap  # noqa: E402


RNG = np.random.default_rng(0)
NOISE = RNG.normal(0, 0.01, size=60)
RISING = [0.2 + 0.01 * i + NOISE[i] for i in range(40)]
FLAT = [0.5 + NOISE[i] for i in range(40)]
FALLING = [0.2 + 0.02 * i + NOISE[i] for i in range(20)] + [0.6 - 0.02 * i + NOISE[20 + i] for i in range(20)]


def _run(curve, **kwargs):  # min_delta stays at its default 0.01, the noise of these curves
    monitor = ConvergenceMonitor("val/score", window=5, rounds=500, **kwargs)
    states = [monitor.observe(step, value) for step, value in enumerate(curve)]
    return monitor, states


def test_a_rising_curve_has_no_event():
    monitor, states = _run(RISING)
    assert monitor.events == [] and states[-1]["plateau"] == 0.0 and states[-1]["downturn"] == 0.0
    last = RISING[-5:]
    assert states[-1]["window_mean"] == pytest.approx(np.mean(last))
    assert states[-1]["window_ci_low"] <= np.mean(last) <= states[-1]["window_ci_high"]


def test_a_flat_curve_plateaus_without_a_downturn():
    monitor, states = _run(FLAT)
    assert [e["event"] for e in monitor.events] == ["plateau"] and monitor.events[0]["step"] == 9  # from 2 windows on
    assert all(s["downturn"] == 0.0 for s in states)
    assert all(s["plateau"] == 0.0 for s in states[:9])


def test_a_falling_curve_turns_down_soon_after_its_peak():
    monitor, _ = _run(FALLING)
    downturns = [e for e in monitor.events if e["event"] == "downturn"]
    assert len(downturns) == 1 and 21 <= downturns[0]["step"] <= 27  # the peak is at step 19
    assert downturns[0]["best_window_end_step"] in range(17, 23)


def test_mode_min_mirrors_mode_max():
    monitor, _ = _run([-v for v in FALLING], mode="min")
    reference, _ = _run(FALLING)
    assert [(e["event"], e["step"]) for e in monitor.events] == [(e["event"], e["step"]) for e in reference.events]


def test_min_delta_hides_small_improvements():
    slow = [0.2 + 0.002 * i for i in range(20)]
    assert _run(slow, min_delta=0.0)[1][-1]["plateau"] == 0.0
    assert _run(slow, min_delta=0.05)[1][-1]["plateau"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"monitor": ""}, r"^`monitor` must be a logged metric name .*, got ''\.$"),
        ({"window": 1}, r"^`window` must be an int >= 2 \(values per window\), got 1\.$"),
        ({"window": True}, r"^`window` must be an int >= 2 \(values per window\), got True\.$"),
        ({"mode": "up"}, r"^`mode` must be 'max' \(higher is better\) or 'min', got 'up'\.$"),
        ({"stop_on": ["downturn", "overfit"]}, r"^`stop_on` may hold \['plateau', 'downturn'\], got \['overfit'\]\.$"),
        ({"rounds": 0}, r"^`rounds` must be a positive int \(e\.g\. 2000 bootstrap resamples\), got 0\.$"),
        ({"confidence": 1.0}, r"^`confidence` must be a number strictly between 0 and 1 \(e\.g\. 0\.95\), got 1\.0\.$"),
        ({"min_delta": -1}, r"^`min_delta` must be a number >= 0, got -1\.$"),
        ({"prefix": ""}, r"^`prefix` must be a non-empty name, got ''\.$"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs, match):
    """Each message names the argument, what it must be and the value it got."""
    with pytest.raises(ValueError, match=match):
        ConvergenceMonitor(**{"monitor": "val/score", **kwargs})


# ---- inside Lightning --------------------------------------------------------------------------------------------------


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
        default_root_dir=tmp_path, max_epochs=max_epochs, accelerator="cpu", callbacks=callbacks, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **kwargs,
    )


def test_stops_training_on_a_downturn_through_the_strategy(tmp_path: Path):
    monitor = ConvergenceMonitor("val/score", window=5, rounds=500, stop_on=["downturn"])
    trainer = _trainer(tmp_path, [monitor], max_epochs=40, enable_checkpointing=False)
    trainer.fit(CurveModule(FALLING))
    reference, _ = _run(FALLING)
    first = next(e for e in reference.events if e["event"] == "downturn")
    assert trainer.current_epoch == first["step"] + 1  # one step per epoch: stopped right after that epoch
    assert monitor.stopped_at == first["step"] + 1 and len(monitor.series) == first["step"] + 1
    assert float(trainer.callback_metrics["convergence/val/score/downturn"]) == 1.0


def test_without_stop_on_it_only_reports(tmp_path: Path):
    monitor = ConvergenceMonitor("val/score", window=5, rounds=500)
    trainer = _trainer(tmp_path, [monitor], max_epochs=40, enable_checkpointing=False)
    trainer.fit(CurveModule(FALLING))
    assert trainer.current_epoch == 40 and len(monitor.series) == 40
    assert "downturn" in [e["event"] for e in monitor.events]


def test_resumes_from_a_checkpoint(tmp_path: Path):
    full = ConvergenceMonitor("val/score", window=5, rounds=500)
    _trainer(tmp_path / "full", [full], max_epochs=30, enable_checkpointing=False).fit(CurveModule(FALLING))
    first = ConvergenceMonitor("val/score", window=5, rounds=500)
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    _trainer(tmp_path / "a", [first, ckpt], max_epochs=15).fit(CurveModule(FALLING))
    resumed = ConvergenceMonitor("val/score", window=5, rounds=500)
    _trainer(tmp_path / "b", [resumed], max_epochs=30, enable_checkpointing=False).fit(CurveModule(FALLING), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert resumed.series == full.series and resumed.events == full.events


def test_reads_an_evaluation_callbacks_history_and_intervals_are_logged(tmp_path: Path):
    evaluation = RetrievalEvalCallback(every_n_epochs=None, every_n_steps=2, num_mismatches=0, bootstrap_rounds=500)
    monitor = ConvergenceMonitor("retrieval/r_precision", window=2, rounds=200)
    trainer = _trainer(tmp_path, [evaluation, monitor], max_epochs=1, enable_checkpointing=False)
    trainer.fit(LinearEncoder(), PointDataModule())
    assert [s for s, _ in monitor.series] == [h["step"] for h in evaluation.history]
    assert [v for _, v in monitor.series] == [h["r_precision"] for h in evaluation.history]
    # every evaluation carries its uncertainty: the interval of the per-query values it saved
    folder = tmp_path / "retrieval"
    last = read_history(folder / "history.jsonl")[-1]
    with np.load(folder / last["per_query_file"]) as per_query:
        reference = numpy_percentile_bootstrap(per_query["map@r"], rounds=500, seed=11)
    assert (last["map@r_ci_low"], last["map@r_ci_high"]) == pytest.approx(reference, abs=1e-12)
    assert last["map@r_ci_low"] <= last["map@r"] <= last["map@r_ci_high"]
    assert "mean_first_relevant_rank_ci_low" not in last and "first_relevant_rank_ci_low" not in last  # no vector of that name
    schema = json.loads((folder / "schema.json").read_text())["keys"]
    assert schema["map@r_ci_high"] == {"kind": "scalar", "higher_is_better": True, "count": False}
    assert (folder / "confidence_intervals.png").read_bytes()[:4] == b"\x89PNG"
    assert not math.isnan(float(trainer.callback_metrics["retrieval/precision@1_ci_low"]))


def test_confidence_intervals_can_be_chosen_or_turned_off():
    some = RetrievalEvalCallback(confidence_intervals=["precision@1"])
    assert [k for k in some.schema if k.endswith("_ci_low")] == ["precision@1_ci_low"]
    none = RetrievalEvalCallback(confidence_intervals=False)
    assert not [k for k in none.schema if "_ci_" in k]
    with pytest.raises(ValueError, match="macro_map@r"):
        RetrievalEvalCallback(confidence_intervals=["macro_map@r"])
    with pytest.raises(ValueError, match="bootstrap_rounds"):
        RetrievalEvalCallback(bootstrap_rounds=0)


# ---- an oracle of the documented rule ------------------------------------------------------------------------------


def _resampled_means(generator: torch.Generator, values: np.ndarray, rounds: int) -> np.ndarray:
    """Means of ``rounds`` resamples of ``values`` with replacement, the indices one ``torch.randint(n, (rounds, n))``
    from ``generator`` (the seed rule of the bootstrap), averaged in numpy."""
    index = torch.randint(len(values), (rounds, len(values)), generator=generator).numpy()
    return values[index].mean(axis=1)


def _percentile(means: np.ndarray, confidence: float) -> tuple[float, float]:
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def _window_band(values: np.ndarray, rounds: int, confidence: float, seed: int) -> tuple[float, float, float]:
    """Mean and percentile bootstrap interval of one window (a constant window is its own interval)."""
    mean = float(values.mean())
    if len(values) == 1 or np.all(values == values[0]):
        return mean, mean, mean
    return (mean, *_percentile(_resampled_means(torch.Generator().manual_seed(seed), values, rounds), confidence))


def _difference_band(a: np.ndarray, b: np.ndarray, rounds: int, confidence: float, seed: int) -> tuple[float, float]:
    """Percentile interval of mean(b) - mean(a), each window resampled on its own, `a` drawn first from one generator."""
    generator = torch.Generator().manual_seed(seed)
    means_a = _resampled_means(generator, a, rounds)
    means_b = _resampled_means(generator, b, rounds)
    return _percentile(means_b - means_a, confidence)


def reference_rule(curve, window, mode="max", min_delta=0.01, rounds=500, confidence=0.95, seed=11):
    """The convergence rule of the module docstring, evaluated after every value of `curve` (steps 0, 1, ...).

    Readings pinned where the text leaves room (they are what the monitor does): before ``w`` values the window is
    all values so far; the candidate best windows are every run of ``w`` consecutive earlier values (they may overlap
    each other, not the last window), the first of equal means wins; ``m`` of the Bonferroni level counts the
    non-overlapping windows among them, ``(len(v) - w) // w``; "clears ``min_delta``" is strict (an interval bound
    equal to ``min_delta`` does not clear it); an event is the evaluation at which a flag goes from 0 to 1."""
    sign = 1.0 if mode == "max" else -1.0
    states, events, previous = [], [], {"plateau": 0.0, "downturn": 0.0}
    for n in range(1, len(curve) + 1):
        v = np.asarray(curve[:n], dtype=np.float64)
        last = v[-window:]
        mean, low, high = _window_band(last, rounds, confidence, seed)
        state = {"window_mean": mean, "window_ci_low": low, "window_ci_high": high, "plateau": 0.0, "downturn": 0.0}
        if n >= 2 * window:
            change_low, change_high = _difference_band(v[-2 * window : -window], last, rounds, confidence, seed)
            improved = change_low > min_delta if mode == "max" else change_high < -min_delta
            state["plateau"] = 0.0 if improved else 1.0
            earlier = v[:-window]
            candidates = [float(np.mean(earlier[i : i + window])) for i in range(len(earlier) - window + 1)]
            best = 0
            for i, candidate in enumerate(candidates):
                if sign * candidate > sign * candidates[best]:
                    best = i
            m = len(earlier) // window
            level = 1 - (1 - confidence) / m
            decline_low, decline_high = _difference_band(earlier[best : best + window], last, rounds, level, seed)
            declined = decline_high < -min_delta if mode == "max" else decline_low > min_delta
            state["downturn"] = 1.0 if declined else 0.0
            for event in ("plateau", "downturn"):
                if state[event] == 1.0 and previous[event] == 0.0:
                    events.append({"step": n - 1, "event": event, "window_mean": mean, "best_window_mean": candidates[best],
                                   "best_window_end_step": best + window - 1})  # fmt: skip
        states.append(state)
        previous = state
    return states, events


def _single(curve):
    """The curve as a list of Python floats (what a training loop logs)."""
    return [float(v) for v in curve]


NOISE_ONLY = _single(0.5 + np.random.default_rng(6).normal(0, 0.01, size=40))
RISING_THEN_FLAT = _single([0.2 + 0.02 * min(i, 15) + NOISE[i] for i in range(40)])
RISING_THEN_FALLING = _single(FALLING)
# dyadic levels: window sums and resampled means are exact, so equal window means are exact ties and a change of
# exactly min_delta = 0.25 is an interval bound equal to min_delta
STEPS = [0.25] * 5 + [0.5] * 5 + [0.75] * 10 + [0.5] * 5 + [0.25] * 5 + [0.5] * 5
# two earlier windows share the best mean 0.75, one constant and one spread: which one is picked decides the downturn
TIED_BEST = [0.25] * 5 + [0.75] * 5 + [0.25] * 5 + [0.5, 1.0, 1.0, 0.75, 0.5] + [0.5] * 5


def _approx_states(states):
    return [{k: pytest.approx(v, abs=1e-12, rel=0) for k, v in s.items()} for s in states]


@pytest.mark.parametrize(
    ("curve", "kwargs"),
    [
        (RISING_THEN_FLAT, {}),
        (RISING_THEN_FALLING, {}),
        (RISING_THEN_FALLING, {"window": 3, "confidence": 0.9}),
        ([-v for v in RISING_THEN_FALLING], {"mode": "min"}),
        (NOISE_ONLY, {"min_delta": 0.0}),
        (NOISE_ONLY, {"min_delta": 0.005, "seed": 4}),
        (STEPS, {"min_delta": 0.25}),
        (STEPS, {"min_delta": 0.0}),
        ([1.0 - v for v in STEPS], {"min_delta": 0.25, "mode": "min"}),
        (TIED_BEST, {"min_delta": 0.0}),
        (TIED_BEST, {"min_delta": 0.1}),
    ],
    ids=["rising-flat", "rising-falling", "rising-falling-w3-c90", "rising-falling-min", "noise-d0", "noise-d005",
         "steps-d25", "steps-d0", "steps-d25-min", "tied-best-d0", "tied-best-d01"],  # fmt: skip
)
def test_every_evaluation_matches_the_documented_rule(curve, kwargs):
    settings = {"window": 5, "mode": "max", "min_delta": 0.01, "rounds": 500, "confidence": 0.95, "seed": 11, **kwargs}
    monitor = ConvergenceMonitor("val/score", **settings)
    states = [monitor.observe(step, value) for step, value in enumerate(curve)]
    expected_states, expected_events = reference_rule(curve, **settings)
    assert states == _approx_states(expected_states)
    assert [(e["event"], e["step"]) for e in monitor.events] == [(e["event"], e["step"]) for e in expected_events]
    assert monitor.events == [
        {k: pytest.approx(v, abs=1e-12, rel=0) if isinstance(v, float) else v for k, v in e.items()} for e in expected_events
    ]


def test_the_synthetic_curves_reach_every_branch_of_the_rule():
    """The oracle comparison means something only if the curves show each flag both ways and each event."""
    runs = {
        "rising-flat": reference_rule(RISING_THEN_FLAT, 5),
        "rising-falling": reference_rule(RISING_THEN_FALLING, 5),
        "noise": reference_rule(NOISE_ONLY, 5, min_delta=0.0),
        "steps": reference_rule(STEPS, 5, min_delta=0.25),
        "tied": reference_rule(TIED_BEST, 5, min_delta=0.1),
    }
    flat_events = [(e["event"], e["step"]) for e in runs["rising-flat"][1]]
    assert flat_events and all(event == "plateau" for event, _ in flat_events)
    assert "downturn" in [e["event"] for e in runs["rising-falling"][1]]
    assert "downturn" in [e["event"] for e in runs["noise"][1]]  # min_delta 0: noise reads as a decline
    # a rise of exactly min_delta between constant windows is a plateau; a fall of exactly min_delta is no downturn
    steps = runs["steps"][0]
    assert steps[9]["plateau"] == 1.0 and steps[14]["plateau"] == 1.0
    assert steps[24]["downturn"] == 0.0 and steps[29]["downturn"] == 1.0
    # at step 24 the constant window ending at step 9 and the spread one ending at step 19 tie at 0.75: the first is
    # taken and the fall to 0.5 is a downturn; against the spread window it would not clear min_delta
    tied = runs["tied"][0]
    assert tied[24]["downturn"] == 1.0
    values = np.asarray(TIED_BEST[:25])
    assert values[5:10].mean() == values[15:20].mean() == 0.75
    assert _difference_band(values[15:20], values[20:25], 500, 1 - 0.05 / 4, 11)[1] >= -0.1


def test_window_statistics_keep_double_precision():
    curve = [0.2 + 0.01 * i + float(NOISE[i]) for i in range(5)]
    monitor = ConvergenceMonitor("val/score", window=5, rounds=500)
    states = [monitor.observe(step, value) for step, value in enumerate(curve)]
    expected, _ = reference_rule(curve, 5)
    assert states == _approx_states(expected)
