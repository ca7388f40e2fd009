"""What an evaluation callback costs a training run, and whether that cost grows with the run.

Two measurements, in this process, of :class:`~beyondlabels.callbacks.RetrievalEvalCallback` with its defaults
(confidence intervals, per-query files under the retention policy, plots every 10 evaluations, a CSV logger and an
offline W&B logger attached):

1. **One evaluation, split** (the demo's TinyCLIP and shapes, ``--n`` evaluation pictures, default 1,856 in 16
   classes): the bare forward pass over the same loader (``encode_image`` in eval mode without gradients, nothing
   else), then the callback's phases as it records them (``last_timings``): forward (the loader, ``encode_image``
   and ``metric.update``), compute (gather, search, metrics), intervals (bootstrap), files (history line, per-query
   file, plots when due), media (W&B), and within compute the search alone (``search_neighbors`` to the same depth
   on the same embeddings, timed separately). Median over ``--repeats`` evaluations, so that plot redraws (every 10th
   evaluation) show as their amortised share: ``files`` is also given as a mean.
2. **Evaluation 300 against evaluation 20**: ``--evaluations`` evaluations in a row (default 300, at ``--series-n``
   pictures, default 512, where a cost that grows with the run shows most), each timed from outside; the mean of
   evaluations 11-30 against the mean of the last 20 (both windows hold two plot redraws), and the disk the callback
   folder takes.

    python benchmarks/bench_callback_overhead.py             # about 3 minutes on 2 cores
    python benchmarks/bench_callback_overhead.py --quick     # small sizes, a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from beyondlabels.callbacks import RetrievalEvalCallback  # noqa: E402
from beyondlabels.demo import ShapesDataModule, TinyCLIP  # noqa: E402
from beyondlabels.functional import search_neighbors  # noqa: E402

PHASES = ("forward", "compute", "intervals", "files", "media")


class _Timed(RetrievalEvalCallback):
    """The callback with each evaluation timed from outside, and its phases kept."""

    def evaluate(self, trainer, pl_module, final=False):
        started = time.perf_counter()
        try:
            return super().evaluate(trainer, pl_module, final)
        finally:
            self.wall.append(time.perf_counter() - started)
            self.phases.append(dict(self.last_timings))


def _fit(n: int, steps: int, root: Path) -> tuple[_Timed, TinyCLIP, ShapesDataModule]:
    """Train the demo TinyCLIP for ``steps`` steps (16 pictures a step), evaluating after every step on ``n``
    pictures, with a CSV and an offline W&B logger."""
    import wandb

    data = ShapesDataModule(train_per_class=1, val_per_class=max(2, n // 16), batch_size=256)
    model = TinyCLIP()
    callback = _Timed(every_n_steps=1, prog_bar=["precision@1"], evaluate_at_fit_end=False)
    callback.wall, callback.phases = [], []
    loggers = [
        pl.loggers.CSVLogger(str(root), name="csv", version=""),
        pl.loggers.WandbLogger(save_dir=str(root), offline=True, project="bench"),
    ]
    trainer = pl.Trainer(
        default_root_dir=str(root),
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        callbacks=[callback],
        logger=loggers,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    try:
        trainer.fit(model, datamodule=data)
    finally:
        wandb.finish()
    return callback, model, data


def _bare_forward(model: TinyCLIP, data: ShapesDataModule) -> tuple[float, torch.Tensor, torch.Tensor]:
    model.eval()
    started = time.perf_counter()
    embeddings, labels = [], []
    with torch.no_grad():
        for batch in data.val_dataloader():
            embeddings.append(model.encode_image(batch["image"]))
            labels.append(torch.as_tensor(batch["label"]))
    seconds = time.perf_counter() - started
    model.train()
    return seconds, torch.cat(embeddings).float(), torch.cat(labels)


def split(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        callback, model, data = _fit(args.n, args.repeats, Path(tmp))
    bare, search = [], []
    for _ in range(5):
        seconds, embeddings, labels = _bare_forward(model, data)
        bare.append(seconds)
        depth = int(torch.bincount(labels).max()) - 1  # R of the largest class: how deep the search goes
        started = time.perf_counter()
        for _ in search_neighbors(embeddings, max(depth, 10)):
            pass
        search.append(time.perf_counter() - started)
    n = int(callback.history[-1]["num_queries"])
    timings = callback.phases
    med = {p: statistics.median(t.get(p, 0.0) for t in timings) for p in (*PHASES, "total")}
    files_mean = statistics.fmean(t.get("files", 0.0) for t in timings)
    total, forward = med["total"], statistics.median(bare)
    print(
        f"# one evaluation: N={n} queries (demo TinyCLIP, 32 px shapes), median of {len(timings)} evaluations "
        f"during training; threads={torch.get_num_threads()}"
    )
    print(f"{'phase':36s} {'seconds':>8s} {'share':>7s}")
    print(f"{'bare forward pass (same loader)':36s} {forward:8.3f} {forward / total:7.1%}")
    for phase in PHASES:
        print(f"{phase:36s} {med[phase]:8.3f} {med[phase] / total:7.1%}")
        if phase == "compute":
            s = statistics.median(search)
            print(f"{'  of which the search alone':36s} {s:8.3f} {s / total:7.1%}")
            print(f"{'  of which gather + metrics':36s} {med['compute'] - s:8.3f} {(med['compute'] - s) / total:7.1%}")
    print(f"{'total (eval_seconds)':36s} {total:8.3f} {1:7.1%}")
    print(
        f"files: mean {files_mean:.3f} s (the plots are redrawn every 10th evaluation); "
        f"files + media: {(files_mean + med['media']) / total:.1%} "
        f"of an evaluation (goal <= 10%); evaluation / bare forward pass: {total / forward:.2f}x"
    )


def series(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        callback, _, _ = _fit(args.series_n, args.evaluations, Path(tmp))
        folder = Path(tmp) / "retrieval"
        disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        per_query = sorted((folder / "per_query").glob("*.npz"))
        pq_bytes = statistics.fmean(p.stat().st_size for p in per_query) if per_query else 0.0
    seconds = callback.wall
    n = int(callback.history[-1]["num_queries"])
    early, late = seconds[10:30], seconds[-20:]
    ratio = statistics.fmean(late) / statistics.fmean(early)
    print(f"# {len(seconds)} evaluations in a row, one after every training step, at N={n} (CSV + offline W&B loggers)")
    print(
        f"evaluations 11-30: mean {statistics.fmean(early):.3f} s; last 20: mean {statistics.fmean(late):.3f} s; "
        f"ratio {ratio:.3f} (goal <= 1.10)"
    )
    print(
        f"callback folder after {len(seconds)} evaluations: {disk / 1e6:.2f} MB; "
        f"{len(per_query)} per-query files kept, "
        f"{pq_bytes / 1024:.1f} KB each = {pq_bytes / n * 1000 / 1024:.1f} KB per 1,000 queries"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1856, help="evaluation pictures of the split (16 classes)")
    p.add_argument("--repeats", type=int, default=20, help="evaluations (training steps) of the split")
    p.add_argument("--series-n", type=int, default=512, help="evaluation pictures of the 300-evaluation series")
    p.add_argument("--evaluations", type=int, default=300)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    args = p.parse_args()
    if args.quick:
        args.n, args.repeats, args.series_n, args.evaluations = 256, 3, 128, 40
    torch.set_num_threads(args.threads)  # a benchmark's own setting (library code never changes it)
    pl.seed_everything(0, verbose=False)
    split(args)
    series(args)


if __name__ == "__main__":
    main()
