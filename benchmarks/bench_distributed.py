"""Evaluation under W processes: per-rank CPU time and added memory of every family's ``compute()`` at W = 1, 2, 4,
beside the ideal 1/W, the values checked equal across W, and on paper the projection to 1M and 10M x 512 on 8 GPUs.

Each W is one gloo group of W fresh processes (one thread each; they meet through a file in a temporary folder).
Every rank builds the same seeded set (N items, D dims, C classes) and feeds its metric the share that
``torch.utils.data.DistributedSampler(shuffle=False)`` gives it (strided, padded with repeats of the first items), in
batches of 1,024, through the metric classes' public API. After a barrier, ``compute()`` is called ``--repeats`` times
per family (default 3; the least CPU seconds of each rank are shown, memory is the first call's), and the worlds are
run ``--rounds`` times in turn (default 3, each time in fresh processes; the least over the rounds is shown, and each
round's ratio on a line of its own: on a shared machine a slow spell lasts longer than one world's calls, and turns
alternate so that it does not fall on one W alone):

- CPU seconds of this rank (``time.process_time()``, every thread of the process) around ``compute()`` alone;
- the peak memory the rank adds in ``compute()``: the kernel's high-water mark (VmHWM) reset before the call (writing
  5 to ``/proc/self/clear_refs``) minus the resident size before it; where the reset is not allowed, the peak of
  ``/proc/self/statm`` sampled every millisecond by a thread (the ``memory by`` line says which).

Families (defaults of each class): retrieval (``EmbeddingRetrieval``: leave-one-out, deep metrics), cross-modal
(``CrossModalRetrieval``: N images and N captions, one each), R-precision (``TextImageRPrecision``: N generated
images and their prompts, R = 100, 10 folds), hierarchy (``HierarchicalPrecisionRecall`` on a 3-level tree of C
leaves), zero-shot (``ZeroShotClassification``: N x C class scores) and ``intervals``: the bootstrap intervals of
retrieval's results (``add_confidence_intervals`` over every headline key, 2,000 rounds, rounds shared by the ranks).

The table: each rank's CPU seconds; the busiest rank's against W = 1 (``vs W=1``) and against the ideal
(``/ideal`` = (busiest / W=1) / (1/W): 1.00 is a perfect split, W would mean every rank does the whole work); the
peak added by the busiest rank (in memory) and its ratio to W = 1; ``equal``: every scalar of ``compute()`` (and
every interval bound) equal to W = 1's bit for bit, on every rank (NaN equal to NaN), but ``num_duplicates`` (the
sampler's padding copies, which depend on W).

``--memory`` runs retrieval alone at N = 200,000, D = 256 (the memory criterion: the peak a rank adds in retrieval's
``compute()`` at W = 4 against W = 1). The projection (:func:`projection`) uses the rate measured at W = 1.

    python benchmarks/bench_distributed.py                 # N = 20,000, D = 128, W = 1, 2, 4: a few minutes
    python benchmarks/bench_distributed.py --quick         # N = 4,000, smoke run
    python benchmarks/bench_distributed.py --memory        # retrieval at N = 200,000, D = 256 (long on 2 cores)
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_retrieval import make_clusters  # noqa: E402

from beyondlabels.metrics import (  # noqa: E402
    CrossModalRetrieval,
    EmbeddingRetrieval,
    HierarchicalPrecisionRecall,
    TextImageRPrecision,
    ZeroShotClassification,
)
from beyondlabels.metrics.intervals import add_confidence_intervals  # noqa: E402
from beyondlabels.taxonomy import Taxonomy  # noqa: E402

FAMILIES = ("retrieval", "intervals", "crossmodal", "rprecision", "hierarchy", "zeroshot")
BATCH = 1024
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 4096 / 2**20


# ---- memory ---------------------------------------------------------------------------------------------------------
def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise OSError(f"no {field} in /proc/self/status")


def _reset_hwm() -> bool:
    """Reset this process's VmHWM to its current resident size; whether the kernel allowed it (and it took)."""
    try:
        block = np.ones(64 * 2**20 // 8)  # 64 MB touched, then freed: the mark must fall back after the reset
        del block
        Path("/proc/self/clear_refs").write_text("5")
        return _status_mb("VmHWM") < _status_mb("VmRSS") + 32
    except OSError:
        return False


class PeakMeter:
    """The peak resident memory a block of code adds (MB): VmHWM reset before it, or statm sampled every ms."""

    def __init__(self) -> None:
        self.method = "VmHWM reset (/proc/self/clear_refs)" if _reset_hwm() else "statm sampled every 1 ms"
        self._stop = threading.Event()
        self._peak = 0.0

    def _sample(self) -> None:
        with open("/proc/self/statm") as statm:
            while not self._stop.is_set():
                statm.seek(0)
                self._peak = max(self._peak, int(statm.read().split()[1]) * PAGE_MB)
                time.sleep(0.001)

    def __enter__(self) -> PeakMeter:
        gc.collect()
        self.before = _status_mb("VmRSS")
        self._peak, self._thread = self.before, None
        if self.method.startswith("VmHWM"):
            _reset_hwm()
        else:
            self._stop.clear()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.added = self._peak - self.before
        else:
            self.added = _status_mb("VmHWM") - self.before


# ---- data and feeding ---------------------------------------------------------------------------------------------
def clustered(n: int, d: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unit embeddings ``[n, d]`` (class centre + noise 1.5: `bench_retrieval.make_clusters`), labels ``[n]``, the
    unit centres ``[classes, d]``."""
    emb, labels, centres = make_clusters(n, d, classes, noise=1.5, seed=seed)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    return emb, labels, torch.from_numpy(centres)


def tree(classes: int) -> Taxonomy:
    """root -> ceil(C / 10) groups -> C leaves (leaf ``c<i>`` under group ``g<i // 10>``)."""
    parent = {f"g{g}": "root" for g in range(math.ceil(classes / 10))}
    parent.update({f"c{c}": f"g{c // 10}" for c in range(classes)})
    return Taxonomy(parent, root="root")


def family_inputs(family: str, args: argparse.Namespace) -> tuple[Any, dict[str, torch.Tensor]]:
    """The family's metric and its whole seeded data set (one row per item)."""
    n, d, c = args.n, args.dim, args.classes
    emb, labels, centres = clustered(n, d, c, seed=0)
    if family in ("retrieval", "intervals"):
        return EmbeddingRetrieval(), {"embeddings": emb, "labels": labels}
    g = torch.Generator().manual_seed(1)
    if family == "crossmodal":
        texts = torch.nn.functional.normalize(emb + 0.05 * torch.randn(n, d, generator=g), dim=1)
        return CrossModalRetrieval(), {"images": emb, "texts": texts}
    if family == "rprecision":
        prompts = torch.nn.functional.normalize(emb + 0.05 * torch.randn(n, d, generator=g), dim=1)
        return TextImageRPrecision(), {"images": emb, "texts": prompts}
    if family == "zeroshot":
        return ZeroShotClassification(num_classes=c), {"scores": emb @ centres.T, "labels": labels}
    taxonomy = tree(c)
    leaf = torch.tensor([taxonomy.index(f"c{i}") for i in range(c)])
    group = taxonomy.parent_index[leaf]
    draw = torch.rand(n, generator=g)
    other = leaf[torch.randint(0, c, (n,), generator=g)]
    sibling = leaf[((labels // 10) * 10 + torch.randint(0, 10, (n,), generator=g)).clamp(max=c - 1)]
    pred = torch.where(draw < 0.6, leaf[labels], torch.where(draw < 0.75, sibling, group[labels]))
    pred = torch.where(draw > 0.9, other, torch.where(draw > 0.85, torch.zeros_like(pred), pred))
    return HierarchicalPrecisionRecall(taxonomy), {"pred": pred, "gt": leaf[labels]}


def feed(family: str, metric: Any, data: dict[str, torch.Tensor], rows: torch.Tensor) -> None:
    """``update`` with this rank's rows, ``BATCH`` at a time (ids = row numbers)."""
    for start in range(0, rows.numel(), BATCH):
        ids = rows[start : start + BATCH]
        part = {key: value[ids] for key, value in data.items()}
        if family in ("retrieval", "intervals"):
            metric.update(part["embeddings"], part["labels"], ids)
        elif family == "crossmodal":
            metric.update(part["images"], ids, part["texts"], ids, ids)
        elif family == "rprecision":
            metric.update(part["images"], part["texts"], ids)
        elif family == "zeroshot":
            metric.update(part["scores"], part["labels"], ids)
        else:
            metric.update(part["pred"], part["gt"], ids)


def sampler_rows(n: int, rank: int, world: int) -> torch.Tensor:
    """The rows ``DistributedSampler(shuffle=False)`` gives ``rank`` of ``world`` (Lightning's evaluation sampler)."""
    return torch.tensor(list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False)))


def scalar_values(metric: Any, out: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Every scalar of ``out`` but ``num_duplicates`` (the copies the sampler pads with: it depends on W by design,
    0 wherever W divides N)."""
    keys = [k for k in metric.output_schema().scalar_keys() if k in out and k != "num_duplicates"]
    return {key: torch.as_tensor(out[key]).cpu() for key in keys}


# ---- one rank -------------------------------------------------------------------------------------------------------
def timed_compute(call: Any, repeats: int = 1) -> tuple[Any, dict[str, float | str]]:
    """``call()`` after a barrier, ``repeats`` times: its result, this rank's least CPU s and wall s over the calls
    (the others' processes share the cores: the least is the one least disturbed) and the MB the first call added."""
    cpus, walls = [], []
    for attempt in range(repeats):
        dist.barrier()
        with PeakMeter() as meter:
            cpu, wall = time.process_time(), time.perf_counter()
            out = call()
            cpus.append(time.process_time() - cpu)
            walls.append(time.perf_counter() - wall)
        if attempt == 0:
            added, method = meter.added, meter.method
        dist.barrier()
    return out, {"cpu": min(cpus), "wall": min(walls), "added_mb": added, "memory_by": method}


def rank_main(rank: int, world: int, store: str, args: argparse.Namespace, out_dir: str) -> None:
    """Every family's ``compute()`` on this rank's share, measured (``intervals``: ``add_confidence_intervals`` of
    retrieval's results, every headline key, the rounds shared by the ranks)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=Path(store).as_uri(), rank=rank, world_size=world)
    rows: dict[str, Any] = {}
    try:
        for family in [f for f in args.families if f != "intervals"] or ["retrieval"]:
            metric, data = family_inputs(family, args)
            feed(family, metric, data, sampler_rows(next(iter(data.values())).shape[0], rank, world))
            del data
            metric.compute_with_cache = False  # every call computes again
            out, row = timed_compute(metric.compute, args.repeats)
            if family in args.families:
                rows[family] = {**row, "values": scalar_values(metric, out)}
            if family == "retrieval" and "intervals" in args.families:
                call = functools.partial(add_confidence_intervals, out, metric.output_schema(), True, distributed=True)
                (bounds, _), row = timed_compute(call, args.repeats)
                values = {k: torch.tensor(v) for k, v in bounds.items() if k.endswith(("_ci_low", "_ci_high"))}
                rows["intervals"] = {**row, "values": values}
            del metric, out
        torch.save(rows, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_world(world: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every rank's measurements at ``world`` processes (fresh processes, one gloo group)."""
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "gloo-store")
        mp.start_processes(rank_main, args=(world, store, args, folder), nprocs=world, join=True, start_method="spawn")
        return [torch.load(Path(folder) / f"rank{rank}.pt") for rank in range(world)]


# ---- report ---------------------------------------------------------------------------------------------------------
def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (NaN equal to NaN), dtype and shape included."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)


def unequal_keys(reference: dict[str, torch.Tensor], ranks: list[dict[str, Any]], family: str) -> list[str]:
    """The keys whose value differs from ``reference`` on any rank, in any round."""
    bad = set()
    for rank in ranks:
        for values in rank[family]["every_values"]:
            bad |= {k for k in reference if k not in values or not same(reference[k], values[k])}
            bad |= set(values) - set(reference)
    return sorted(bad)


def merge_rounds(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each rank's measurements over the rounds of one W: the least CPU and wall seconds (the round least disturbed
    by the machine's other work, as ``--repeats`` does within a round), the first round's memory, and the values of
    every round (all checked against W = 1)."""
    merged = []
    for rank, first in enumerate(rounds[0]):
        merged.append(
            {
                family: {
                    **row,
                    "cpu": min(r[rank][family]["cpu"] for r in rounds),
                    "wall": min(r[rank][family]["wall"] for r in rounds),
                    "every_values": [r[rank][family]["values"] for r in rounds],
                }
                for family, row in first.items()
            }
        )
    return merged


def round_lines(by_round: dict[int, list[list[dict[str, Any]]]], families: list[str]) -> list[str]:
    """Per family and W > 1: the busiest rank's CPU against W = 1's in each round (the spread the least hides)."""
    base = min(by_round)
    lines = []
    for family in families:
        for world in sorted(by_round):
            if world == base:
                continue
            ratios = [
                max(r[family]["cpu"] for r in ranks) / max(r[family]["cpu"] for r in base_ranks)
                for ranks, base_ranks in zip(by_round[world], by_round[base])
            ]
            lines.append(f"# {family} W={world} vs W={base}, round by round: " + " ".join(f"{x:.2f}x" for x in ratios))
    return lines


def report(by_world: dict[int, list[dict[str, Any]]], families: list[str]) -> list[str]:
    """The table (one row per family and W) and the keys that differ from W = 1 (if any)."""
    lines = [
        f"{'family':<11} {'W':>2}  {'CPU s of each rank':<28} {'busiest':>7} {'vs W=1':>7} {'ideal':>6} "
        f"{'/ideal':>6}  {'MB added':>8} {'vs W=1':>7}  {'wall s':>6}  equal"
    ]
    problems = []
    for family in families:
        base = by_world[min(by_world)]
        base_cpu = max(r[family]["cpu"] for r in base)
        base_mb = max(r[family]["added_mb"] for r in base)
        reference = base[0][family]["values"]
        for world, ranks in sorted(by_world.items()):
            cpus = [r[family]["cpu"] for r in ranks]
            busiest = max(cpus)
            added = max(r[family]["added_mb"] for r in ranks)
            ratio, ideal = busiest / base_cpu, 1.0 / world
            bad = unequal_keys(reference, ranks, family)
            if bad:
                problems.append(f"{family} W={world}: {len(bad)} keys differ from W={min(by_world)}: {bad[:8]}")
            each = " ".join(f"{c:.2f}" for c in cpus)
            mb_ratio = f"{added / base_mb:>6.2f}x" if base_mb >= 5 else f"{'-':>7}"  # no ratio to a few pages
            lines.append(
                f"{family:<11} {world:>2}  {each:<28} {busiest:>7.2f} {ratio:>6.2f}x {ideal:>6.2f} "
                f"{ratio / ideal:>5.2f}x  {added:>8.0f} {mb_ratio}  "
                f"{max(r[family]['wall'] for r in ranks):>6.2f}  {'yes' if not bad else 'NO'} ({len(reference)} keys)"
            )
    return lines + problems


# ---- on paper -------------------------------------------------------------------------------------------------------
def projection(
    n: int, d: int, world: int, rate: float, depth: int, design: str, chunk: int = 1024, metrics: int = 8
) -> dict[str, float]:
    """Bytes each rank receives, memory each rank holds and time each rank computes for leave-one-out retrieval of
    ``n`` embeddings of width ``d`` on ``world`` ranks, at ``rate`` multiply-adds per second per rank.

    Assumptions: fp32 embeddings (4 bytes a value) plus an int64 id and an int64 label per item; the search keeps,
    per query of the rank's share, a running top list of ``depth`` (``max(k, R)`` with deep metrics) fp32 scores
    and int64 indices (12 bytes an entry) and scores ``chunk`` queries against the gallery at a time (fp32);
    ``metrics`` per-query float64 values are gathered at the end (every rank ends with all of them). The torch
    runtime, the model and the allocator's slack are left out.

    - ``design="gathered"`` (today): every rank all-gathers every item (it receives ``(W-1)/W`` of the set; the
      gather holds the shards and their concatenation at once, so 2x the set), then searches with one copy (cosine:
      the unit rows replace the deduplicated samples) its ``1/W`` of the symmetric half of the products
      (``n (n-1) / 2 d / W`` multiply-adds: the ideal split). Its peak is the larger of the two phases.
    - ``design="sharded"``: each rank keeps its shard ``n/W`` and passes gallery shards round a ring (``W - 1``
      steps, two shard buffers: the one scored and the one arriving); its queries meet every shard, so it computes
      ``n/W x n x d`` multiply-adds (the symmetry is not used: twice the gathered design's share). The top lists
      are merged as the shards pass (no extra exchange).
    """
    item = 4 * d + 16
    shard = math.ceil(n / world)
    per_query = (world - 1) / world * n * metrics * 8
    tops = shard * depth * 12
    if design == "gathered":
        received = (world - 1) / world * n * item + per_query
        memory = max(2 * n * item, n * item + chunk * n * 4 + tops) + n * metrics * 8
        products = n * (n - 1) / 2 * d / world
    elif design == "sharded":
        received = (world - 1) * shard * item + per_query
        memory = 3 * shard * item + chunk * shard * 4 + tops + n * metrics * 8
        products = shard * n * d
    else:
        raise ValueError(f"`design` must be 'gathered' or 'sharded', got {design!r}")
    return {"received_gb": received / 1e9, "memory_gb": memory / 1e9, "seconds": products / rate}


def paper_lines(rate: float, args: argparse.Namespace) -> list[str]:
    lines = [
        f"# on paper: leave-one-out retrieval on {args.proj_world} ranks at {rate / 1e9:.2f} G multiply-adds/s per "
        f"rank (retrieval's compute() at W=1 here: N(N-1)/2 x D / CPU s, selection included; a GPU is faster by "
        f"orders of magnitude: read the time column as relative); depth R = N / {args.proj_classes} classes "
        f"(deep metrics) or 10 (deep_metrics=False)",
        f"{'N':>10} {'D':>4} {'design':<9} {'depth':>6} {'received GB/rank':>16} {'memory GB/rank':>14} "
        f"{'CPU-hours/rank':>14}",
    ]
    for n in (1_000_000, 10_000_000):
        for design in ("gathered", "sharded"):
            for depth in (n // args.proj_classes, 10):
                got = projection(n, 512, args.proj_world, rate, depth, design)
                lines.append(
                    f"{n:>10,} {512:>4} {design:<9} {depth:>6} {got['received_gb']:>16.2f} "
                    f"{got['memory_gb']:>14.2f} {got['seconds'] / 3600:>14.1f}"
                )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=None, help="items (default 20,000; 200,000 with --memory)")
    parser.add_argument("--dim", type=int, default=None, help="embedding width (default 128; 256 with --memory)")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--memory", action="store_true", help="retrieval alone at N=200,000, D=256")
    parser.add_argument("--quick", action="store_true", help="N=4,000: a smoke run")
    parser.add_argument(
        "--repeats", type=int, default=3, help="compute() calls per family and rank; the least CPU s is shown"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of every W in turn, each in fresh processes (default 3; 1 with --memory): each rank's least CPU s "
        "over the rounds is shown, memory is round 1's, values are checked in every round",
    )
    parser.add_argument("--proj-world", type=int, default=8)
    parser.add_argument("--proj-classes", type=int, default=1000)
    args = parser.parse_args()
    if args.memory:
        args.families = ["retrieval"]
    args.n = args.n or (4_000 if args.quick else 200_000 if args.memory else 20_000)
    args.dim = args.dim or (256 if args.memory else 128)
    args.worlds = sorted(set(args.worlds))
    args.rounds = args.rounds or (1 if args.memory or args.quick else 3)
    print(
        f"# N={args.n} D={args.dim} C={args.classes}; gloo, one thread a rank, DistributedSampler shares; "
        f"worlds {args.worlds}; cores {len(os.sched_getaffinity(0))}; load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
        flush=True,
    )
    by_round: dict[int, list[list[dict[str, Any]]]] = {world: [] for world in args.worlds}
    for round_ in range(args.rounds):
        for world in args.worlds:
            started = time.perf_counter()
            by_round[world].append(run_world(world, args))
            print(f"# round {round_ + 1}, W={world}: {time.perf_counter() - started:.0f} s", flush=True)
    by_world = {world: merge_rounds(rounds) for world, rounds in by_round.items()}
    first = by_world[args.worlds[0]][0]
    print(
        f"# memory by {next(iter(first.values()))['memory_by']}; 'MB added' is the busiest rank's in round 1; CPU "
        f"and wall s: each rank's least over {args.rounds} round(s) x {args.repeats} call(s)"
    )
    print("\n".join(report(by_world, args.families)))
    if args.rounds > 1:
        print("\n".join(round_lines(by_round, args.families)))
    if "retrieval" in args.families and args.worlds[0] == 1:
        cpu = first["retrieval"]["cpu"]
        print("\n".join(paper_lines(args.n * (args.n - 1) / 2 * args.dim / cpu, args)))


if __name__ == "__main__":
    main()
