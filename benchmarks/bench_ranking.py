"""Cost of judging a run against its qrels (functional.ranking.judge_run) and of its metrics, as the run grows.

Time: judge_run and JudgedRun.metrics for 8k to 64k queries (20 ranked documents and 20 judgements each); the
"x per doubling" column is about 2 for linear cost (it was about 4 when judge_run rebuilt the set of qrels queries
for every run query). The quadratic alignment it replaced is timed beside it at the smaller sizes.

Memory: 500 queries of 20 documents and one query that ranks ``--long`` documents, each way in a fresh process (peak
resident memory, VmHWM): the dense table of ranking_metrics (every query padded to the longest ranking) against
JudgedRun.metrics (queries evaluated in groups no larger than their own rankings). The values must be equal.

    .venv/bin/python benchmarks/bench_ranking.py            # about a minute on 2 cores
    .venv/bin/python benchmarks/bench_ranking.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import peak_rss_mb  # noqa: E402

from beyondlabels.functional.ranking import judge_run, ranking_metrics  # noqa: E402

KS = (5, 10, 100)


def make_run(queries: int, docs: int = 20, judged: int = 20, long: int = 0, seed: int = 0) -> tuple[dict, dict]:
    rng = random.Random(seed)
    run, qrels = {}, {}
    for q in range(queries):
        n = long if long and q == queries // 2 else docs
        run[f"q{q}"] = {f"d{d}": rng.random() for d in range(n)}
        qrels[f"q{q}"] = {f"d{d}": rng.choice([0, 0, 1, 2]) for d in range(0, 2 * judged, 2)}
    return run, qrels


def quadratic_alignment(run: dict, qrels: dict) -> list[str]:
    """The query alignment judge_run used before: the set of qrels queries rebuilt for every run query."""
    return [str(q) for q in run if str(q) in {str(k) for k in qrels}]


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def time_table(sizes: list[int], repeats: int, quadratic_up_to: int) -> None:
    print(
        f"{'queries':>8}  {'judge_run s':>11}  {'x per doubling':>14}  {'metrics s':>9}  {'x per doubling':>14}  "
        f"{'old alignment s':>15}"
    )
    previous = None
    for size in sizes:
        run, qrels = make_run(size)
        judge = best_of(lambda run=run, qrels=qrels: judge_run(run, qrels), repeats)
        judged = judge_run(run, qrels)
        metrics = best_of(lambda judged=judged: judged.metrics(ks=KS), repeats)
        old = (
            f"{best_of(lambda run=run, qrels=qrels: quadratic_alignment(run, qrels), 1):15.2f}"
            if size <= quadratic_up_to
            else f"{'-':>15}"
        )
        ratio = (
            (f"{judge / previous[0]:14.2f}", f"{metrics / previous[1]:14.2f}")
            if previous
            else (f"{'':>14}", f"{'':>14}")
        )
        print(f"{size:8d}  {judge:11.3f}  {ratio[0]}  {metrics:9.3f}  {ratio[1]}  {old}")
        previous = (judge, metrics)


def memory_child(method: str, queries: int, long: int) -> None:
    torch.set_num_threads(1)
    run, qrels = make_run(queries, long=long)
    judged = judge_run(run, qrels)
    before = peak_rss_mb()
    if method == "dense":
        out = ranking_metrics(judged.ranked, judged.num_retrieved, judged.pool, ks=KS, query_ids=judged.query_ids)
    else:
        out = judged.metrics(ks=KS)
    values = {k: float(v) for k, v in out.items() if k != "per_query"}
    print(json.dumps({"peak_mb": peak_rss_mb(), "before_mb": before, "values": values}))


def memory_table(queries: int, longs: list[int], dense_max_cells: int) -> None:
    print(
        f"\n{'queries':>8}  {'longest':>8}  {'documents':>9}  {'method':<22}  {'peak MB':>8}  {'before MB':>9}  values"
    )
    for long in longs:
        results = {}
        methods = ("dense", "grouped") if queries * long <= dense_max_cells else ("grouped",)
        for method in methods:
            env = dict(os.environ, OMP_NUM_THREADS="1")
            cmd = [sys.executable, __file__, "--child", method, "--queries", str(queries), "--long", str(long)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
            results[method] = json.loads(out.strip().splitlines()[-1])
        same = results.get("dense", results["grouped"])["values"] == results["grouped"]["values"]
        documents = (queries - 1) * 20 + long
        if "dense" not in results:
            print(
                f"{queries:8d}  {long:8d}  {documents:9d}  {'ranking_metrics (dense)':<22}  "
                f"not run: a {queries} x {long} table "
                f"(over --dense-max-cells {dense_max_cells})"
            )
        for method, label in (("dense", "ranking_metrics (dense)"), ("grouped", "JudgedRun.metrics")):
            if method not in results:
                continue
            r = results[method]
            print(
                f"{queries:8d}  {long:8d}  {documents:9d}  {label:<22}  {r['peak_mb']:8.0f}  {r['before_mb']:9.0f}  "
                f"{'equal' if same else 'DIFFER'} ndcg@10={r['values']['ndcg@10']:.6f} map={r['values']['map']:.6f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--long", type=int, default=0)
    parser.add_argument("--child", choices=("dense", "grouped"))
    parser.add_argument(
        "--dense-max-cells",
        type=int,
        default=20_000_000,
        help="run the dense table only up to this many cells (500 x 100,000 takes about 5 GB)",
    )
    args = parser.parse_args()
    if args.child:
        memory_child(args.child, args.queries, args.long)
        return
    torch.set_num_threads(1)
    if args.quick:
        time_table([2000, 4000, 8000], repeats=1, quadratic_up_to=4000)
        memory_table(200, [5000], args.dense_max_cells)
    else:
        time_table([8000, 16000, 32000, 64000], repeats=2, quadratic_up_to=16000)
        memory_table(args.queries, [10000, 30000, 100000], args.dense_max_cells)


if __name__ == "__main__":
    main()
