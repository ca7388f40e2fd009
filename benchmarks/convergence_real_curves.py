"""Convergence decisions on curves no simulation wrote: the lag-1 correlation of real evaluation curves and what the
monitor flags on them, beside the rule of independent noise (``noise_estimate="differences"``, the earlier default).

    python benchmarks/convergence_real_curves.py digits                  # train, evaluate every 3 steps, 3,000 steps
    python benchmarks/convergence_real_curves.py history RUN/retrieval   # the history of any run (e.g. train.py's)

``digits``: a small embedding net (64 -> 64 -> 16, a linear classification head on top, SGD with momentum 0.9, lr
0.05, batches of 32) on scikit-learn's ``load_digits`` (1,200 training pictures, 597 held out), trained by Lightning
with ``RetrievalEvalCallback`` (leave-one-out retrieval on the held-out pictures) every ``--every`` steps, for far
longer than it takes to converge (about 300 steps). ``history``: reads ``history.jsonl`` of an evaluation folder,
with the per-query values it kept (``save_per_query=all``) for the paired confirmation.

For each key, on the whole curve and on every 5th and 10th evaluation of it (what evaluating less often gives):
the evaluations, the rule's lag-1 correlation at the last look and its 99% bound, the lag-1 autocorrelation of the
residuals from a centred moving average of ``2 window + 1`` evaluations (a model-free cross-check; it is biased low),
the share of looks that were covered, the step from which the monitor measured the noise beyond what it covers (and
warned), and the downturns and plateaus each rule flags (first step), with ``ConvergenceMonitor.observe`` (the paired
confirmation included where per-query values are kept).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from beyondlabels.io.run_files import read_history

WINDOW = 10


def residual_lag1(values: np.ndarray, window: int) -> float:
    """Lag-1 autocorrelation of ``values`` minus their centred moving average of ``2 window + 1`` values."""
    width = 2 * window + 1
    if values.size < 3 * width:
        return math.nan
    smooth = np.convolve(values, np.ones(width) / width, mode="valid")
    residual = values[window:-window] - smooth
    residual = residual - residual.mean()
    return float(np.sum(residual[1:] * residual[:-1]) / np.sum(residual**2))


def monitor_run(steps, values, per_query, noise_estimate: str) -> dict:
    """What a ConvergenceMonitor with ``noise_estimate`` decides on the curve (per-query values where given)."""
    from beyondlabels.callbacks import ConvergenceMonitor

    monitor = ConvergenceMonitor("curve", window=WINDOW, rounds=20, noise_estimate=noise_estimate)
    quiet = logging.getLogger("beyondlabels.callbacks.convergence")
    level, quiet.level = quiet.level, logging.ERROR  # the table says what the warnings would
    try:
        states = [monitor.observe(int(s), float(v), per_query=q) for s, v, q in zip(steps, values, per_query)]
    finally:
        quiet.setLevel(level)
    looks = [s for s in states if not math.isnan(s["downturn_p"])]
    first = {e: next((r["step"] for r in monitor.events if r["event"] == e), None) for e in ("downturn", "plateau")}
    return {
        "correlation": states[-1].get("correlation", math.nan),
        "high": states[-1].get("correlation_high", math.nan),
        "covered": float(np.mean([s["covered"] for s in looks])) if looks else math.nan,
        "downturns": sum(1 for r in monitor.events if r["event"] == "downturn"),
        "first_downturn": first["downturn"],
        "first_plateau": first["plateau"],
        "beyond": monitor.run_state.get("beyond"),
    }


def report(name: str, steps, values, per_query) -> None:
    """One block of rows: the whole curve, then every 5th and 10th evaluation."""
    print(f"\n{name}: {len(values)} evaluations, steps {steps[0]}..{steps[-1]}, window {WINDOW}")
    print(
        f"{'every':>6} {'evals':>6} {'rule':>12} {'rho':>7} {'rho_99%':>8} {'resid lag1':>10} {'covered':>8} "
        f"{'beyond at':>10} {'downturns':>9} {'first downturn':>15} {'first plateau':>14}"
    )
    for every in (1, 5, 10):
        s, v, q = steps[::every], values[::every], per_query[::every]
        if len(v) < 4 * WINDOW:
            continue
        lag1 = residual_lag1(np.asarray(v, dtype=np.float64), WINDOW)
        for rule in ("ar1", "differences"):
            out = monitor_run(s, v, q, rule)
            print(
                f"{every:>6} {len(v):>6} {rule:>12} {out['correlation']:>7.3f} {out['high']:>8.3f} {lag1:>10.3f} "
                f"{out['covered']:>8.2f} {out['beyond']!s:>10} {out['downturns']:>9} {out['first_downturn']!s:>15} "
                f"{out['first_plateau']!s:>14}"
            )


def from_history(folder: Path, keys: list[str]) -> None:
    records = [r for r in read_history(folder / "history.jsonl") if "error" not in r]
    steps = [int(r["step"]) for r in records]
    for key in keys:
        values = [float(r[key]) for r in records]
        per_query = []
        for r in records:
            file = r.get("per_query_file")
            if file and (folder / file).is_file():
                with np.load(folder / file) as data:
                    per_query.append((data["query_id"].copy(), data[key].astype(np.float64)) if key in data else None)
            else:
                per_query.append(None)
        kept = sum(q is not None for q in per_query)
        report(f"{folder} {key} ({kept} evaluations with per-query values)", steps, values, per_query)


def train_digits(folder: Path, steps: int, every: int) -> Path:
    """Fit the digits embedding net with a RetrievalEvalCallback every ``every`` steps; return its evaluation folder."""
    import pytorch_lightning as pl
    from sklearn.datasets import load_digits
    from torch.utils.data import DataLoader, Dataset

    from beyondlabels.callbacks import RetrievalEvalCallback

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    train, held = order[:1200], order[1200:]

    class Digits(Dataset):
        def __init__(self, index):
            self.x, self.y, self.index = (
                torch.tensor(x[index] / 16.0, dtype=torch.float32),
                torch.tensor(y[index]),
                index,
            )

        def __len__(self):
            return len(self.index)

        def __getitem__(self, i):
            return {"image": self.x[i], "label": int(self.y[i]), "id": int(self.index[i])}

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.embed = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
            self.head = torch.nn.Linear(16, 10)

        def encode_image(self, images):
            return self.embed(images)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.cross_entropy(self.head(self.embed(batch["image"])), batch["label"])

        def validation_step(self, batch, batch_idx):
            pass

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

        def train_dataloader(self):
            return DataLoader(Digits(train), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))

        def val_dataloader(self):
            return DataLoader(Digits(held), batch_size=256)

    evaluation = RetrievalEvalCallback(
        every_n_epochs=None,
        every_n_steps=every,
        num_mismatches=0,
        save_per_query="all",
        confidence_intervals=False,
        plot_every_n=10**9,
        save_dir=str(folder / "retrieval"),
    )
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        callbacks=[evaluation],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=10**6,
        default_root_dir=str(folder),
    )
    trainer.fit(Net())
    return folder / "retrieval"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="source", required=True)
    digits = sub.add_parser("digits", help="train the digits embedding net and read its curves")
    digits.add_argument("--steps", type=int, default=3000)
    digits.add_argument("--every", type=int, default=3)
    digits.add_argument("--out", type=Path, default=None, help="folder for the run (default: a temporary one)")
    history = sub.add_parser("history", help="read an evaluation folder's history.jsonl")
    history.add_argument("folder", type=Path)
    parser.add_argument("--keys", nargs="+", default=["precision@1", "map@r"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    if args.source == "digits":
        with tempfile.TemporaryDirectory() as scratch:
            folder = train_digits(args.out or Path(scratch), args.steps, args.every)
            print(f"trained {args.steps} steps in {time.perf_counter() - started:.0f} s")
            from_history(folder, args.keys)
    else:
        if not (args.folder / "history.jsonl").is_file():
            sys.exit(f"{args.folder} holds no history.jsonl (give an evaluation folder, e.g. RUN/retrieval)")
        from_history(args.folder, args.keys)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
