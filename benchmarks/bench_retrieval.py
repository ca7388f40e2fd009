"""Leave-one-out embedding retrieval: beyondlabels against faiss, pytorch-metric-learning and torchmetrics.

Every method sees the same clustered data (class centres + Gaussian noise, L2-normalised float32) and must produce
the same metric values; times are measured in this process (best of ``--repeats``), peak memory (ru_maxrss) in a
fresh subprocess per method. Threads are pinned with torch.set_num_threads / faiss.omp_set_num_threads.

    python benchmarks/bench_retrieval.py            # N=20,000 D=512 C=100, memory at N=100,000
    python benchmarks/bench_retrieval.py --quick    # small sizes, a smoke test
    python benchmarks/bench_retrieval.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from beyondlabels.functional import embedding_retrieval_metrics, retrieval_per_query  # noqa: E402

KS = (1, 5, 10)
KEYS = ("precision@1", "precision@5", "precision@10", "r_precision", "map@r")


def make_data(n: int, d: int, classes: int, noise: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n)
    centres = rng.normal(size=(classes, d)).astype(np.float32)
    emb = centres[labels] + noise * rng.normal(size=(n, d)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return torch.from_numpy(emb), torch.from_numpy(labels)


def metrics_from_neighbors(nbr: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """P@k, R-precision and MAP@R from neighbour lists (self removed, at least max R deep), vectorised."""
    counts = torch.bincount(labels)
    r = counts[labels] - 1
    ok = r > 0
    rel = labels[nbr] == labels[:, None]
    cum = torch.cumsum(rel, dim=1)
    out = {f"precision@{k}": float((cum[ok, k - 1] / k).double().mean()) for k in KS}
    rank = torch.arange(1, nbr.shape[1] + 1, dtype=torch.float64)
    within = rank[None, :] <= r[:, None]
    rq = r.clamp(min=1)
    out["r_precision"] = float((cum.gather(1, (rq - 1)[:, None]).squeeze(1) / rq)[ok].double().mean())
    terms = torch.where(rel & within, cum.double() / rank, 0.0)
    out["map@r"] = float((terms.sum(1) / rq)[ok].mean())
    return out


# ---------------------------------------------------------------------------------------------------------------------
# methods: each returns {metric: value}
# ---------------------------------------------------------------------------------------------------------------------


def run_ours(emb, labels, precision="fp32", device="cpu", chunk_size=1024, query_subset=None):
    emb, labels = emb.to(device), labels.to(device)
    if query_subset is None:
        m = embedding_retrieval_metrics(emb, labels, ks=KS, precision=precision, chunk_size=chunk_size)
    else:  # leave-one-out for the first queries only, against the whole gallery (same chunks, same peak memory)
        ids = torch.arange(len(labels), device=device)
        q = slice(0, query_subset)
        m = embedding_retrieval_metrics(
            emb, labels, ids, ks=KS, precision=precision, chunk_size=chunk_size,
            query_embeddings=emb[q], query_labels=labels[q], query_ids=ids[q],
        )
    if device == "cuda":
        torch.cuda.synchronize()
    return {k: float(m[k]) for k in KEYS}


def run_faiss(emb, labels):
    import faiss

    depth = int(torch.bincount(labels).max())  # max R + 1 (self)
    index = faiss.IndexFlatIP(emb.shape[1])
    x = emb.numpy()
    index.add(x)
    _, nbr = index.search(x, depth)
    nbr = torch.from_numpy(nbr)
    # drop self (equal-score duplicates aside, self comes first; remove it wherever it is, else the last column)
    is_self = nbr == torch.arange(len(nbr))[:, None]
    is_self[~is_self.any(1), -1] = True
    nbr = nbr[~is_self].view(len(nbr), depth - 1)
    return metrics_from_neighbors(nbr, labels)


def run_pml(emb, labels):
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    calc = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k="max_bin_count",
        device=torch.device("cpu"),
    )
    res = calc.get_accuracy(emb, labels)
    return {
        "precision@1": res["precision_at_1"],
        "r_precision": res["r_precision"],
        "map@r": res["mean_average_precision_at_r"],
    }


def run_torchmetrics(emb, labels):
    from torchmetrics.retrieval import RetrievalPrecision

    n = len(labels)
    s = emb @ emb.T
    s = s + 2.0  # torchmetrics >= 1.8 drops candidates scoring <= 0; a shift keeps the ranking
    off = ~torch.eye(n, dtype=torch.bool)
    preds = s[off]
    target = (labels[:, None] == labels[None, :])[off]
    indexes = torch.arange(n)[:, None].expand(n, n)[off]
    out = {}
    for k in KS:
        metric = RetrievalPrecision(top_k=k, empty_target_action="skip")
        out[f"precision@{k}"] = float(metric(preds, target, indexes=indexes))
    return out


METHODS = {
    "ours fp32": lambda e, l, a: run_ours(e, l, "fp32", a.device),
    "ours bf16": lambda e, l, a: run_ours(e, l, "bf16", a.device),
    "faiss IndexFlatIP": lambda e, l, a: run_faiss(e, l),
    "pml AccuracyCalculator": lambda e, l, a: run_pml(e, l),
    "torchmetrics RetrievalPrecision": lambda e, l, a: run_torchmetrics(e, l),
}


def per_rank_times(emb, labels, world_sizes=(1, 2, 4, 8), repeats=1) -> list[tuple[int, float, float]]:
    """Distributed evaluation splits the queries into W shares (one per rank); each rank searches its share against
    the whole gallery. Every share is timed here in turn, so the slowest share is the per-rank wall time W ranks
    would need, and the sum is the total work. Returns (W, slowest share, sum of shares)."""
    out = []
    for world in world_sizes:
        times = []
        for rank in range(world):
            t, _ = timed(lambda: retrieval_per_query(emb, labels, ks=KS, share=(rank, world)), repeats)
            times.append(t)
        out.append((world, max(times), sum(times)))
    return out


def set_threads(n: int) -> None:
    torch.set_num_threads(n)
    try:
        import faiss

        faiss.omp_set_num_threads(n)
    except ImportError:
        pass


def timed(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def peak_rss_mb() -> float:
    """Peak resident memory of this process (VmHWM; unlike ru_maxrss it does not carry the parent's peak across exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(args) -> None:
    """Run one method once in this fresh process and print its peak RSS."""
    set_threads(args.threads)
    emb, labels = make_data(args.n, args.d, args.classes, args.noise)
    base = peak_rss_mb()
    t = time.perf_counter()
    if args.child == "ours-subset":
        vals = run_ours(emb, labels, args.precision, args.device, query_subset=args.mem_queries)
    else:
        vals = METHODS[args.child](emb, labels, args)
    dt = time.perf_counter() - t
    print(json.dumps({"peak_mb": peak_rss_mb(), "data_mb": base, "seconds": dt, "values": vals}))


def measure_in_subprocess(method: str, n: int, args, extra=()) -> dict:
    cmd = [
        sys.executable, __file__, "--child", method, "--n", str(n), "--d", str(args.d), "--classes",
        str(args.classes), "--noise", str(args.noise), "--threads", str(args.threads), "--device", args.device,
        *extra,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=20_000, help="gallery size for the timing comparison")
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--noise", type=float, default=3.0, help="noise / centre scale; 3.0 gives P@1 about 0.7 at D=512")
    p.add_argument("--tm-n", type=int, default=4_000, help="size at which torchmetrics (N x N pairs) is compared")
    p.add_argument("--mem-n", type=int, default=100_000, help="size at which our peak memory is measured")
    p.add_argument("--mem-queries", type=int, default=8_192,
                   help="queries searched in the memory run (0 = all); peak memory is set by the gallery and one chunk")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run in seconds")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.n, args.tm_n, args.mem_n, args.mem_queries, args.repeats = 3_000, 1_500, 20_000, 2_048, 1
    set_threads(args.threads)

    rows = []

    # warm-up: BLAS/OpenMP pools, faiss, allocator (not timed)
    w_emb, w_labels = make_data(500, args.d, 10, args.noise, seed=1)
    for name in ("ours fp32", "ours bf16", "faiss IndexFlatIP", "pml AccuracyCalculator"):
        METHODS[name](w_emb, w_labels, args)

    def compare(n: int, methods: list[str]) -> None:
        emb, labels = make_data(n, args.d, args.classes, args.noise)
        results = {}
        for name in methods:
            results[name] = timed(lambda: METHODS[name](emb, labels, args), args.repeats)
        ref_t, ref_v = results["ours fp32"]
        for name, (t, vals) in results.items():
            diff = max(abs(vals[k] - ref_v[k]) for k in vals)
            rows.append((n, name, t, ref_t, diff, vals))

    print(f"# data: D={args.d}, C={args.classes}, noise={args.noise}, threads={args.threads}, device={args.device}")
    compare(args.n, ["ours fp32", "ours bf16", "faiss IndexFlatIP", "pml AccuracyCalculator"])
    compare(args.tm_n, ["ours fp32", "ours bf16", "torchmetrics RetrievalPrecision"])

    print()
    print(f"{'N':>7}  {'method':<32} {'seconds':>8} {'vs ours fp32':>13} {'max |delta| vs ours':>20}  values")
    for n, name, t, ref_t, diff, vals in rows:
        shown = " ".join(f"{k}={v:.4f}" for k, v in vals.items())
        print(f"{n:>7}  {name:<32} {t:>8.2f} {t / ref_t:>12.2f}x {diff:>20.1e}  {shown}")
    fast = {n: t for n, name, t, *_ in rows if name == "ours bf16"}
    for n, name, t, ref_t, *_ in rows:
        if not name.startswith("ours"):
            print(f"N={n}: speed-up of ours fp32 over {name}: {t / ref_t:.2f}x; of ours bf16: {t / fast[n]:.2f}x")

    print()
    print(f"# distributed work split at N={args.n}: per-rank time of W ranks (each searches 1/W of the queries)")
    emb, labels = make_data(args.n, args.d, args.classes, args.noise)
    shares = per_rank_times(emb, labels)
    single = shares[0][1]
    print(f"{'W':>3} {'per-rank s':>11} {'vs W=1':>8} {'total work s':>13}")
    for world, slowest, total in shares:
        print(f"{world:>3} {slowest:>11.2f} {single / slowest:>7.2f}x {total:>13.2f}")

    print()
    print("# peak memory (ru_maxrss of a fresh process per method; includes the data and the torch runtime)")
    for name in ["ours fp32", "faiss IndexFlatIP", "pml AccuracyCalculator"]:
        r = measure_in_subprocess(name, args.n, args)
        print(f"N={args.n:>7}  {name:<32} peak {r['peak_mb']:8.0f} MB  (after data: {r['data_mb']:.0f} MB)")
    r = measure_in_subprocess("torchmetrics RetrievalPrecision", args.tm_n, args)
    print(f"N={args.tm_n:>7}  {'torchmetrics RetrievalPrecision':<32} peak {r['peak_mb']:8.0f} MB  (after data: {r['data_mb']:.0f} MB)")
    sub = args.mem_queries or args.mem_n
    for precision in ("fp32",):
        r = measure_in_subprocess("ours-subset", args.mem_n, args, ["--mem-queries", str(sub), "--precision", precision])
        print(
            f"N={args.mem_n:>7}  ours {precision} ({sub} queries x {args.mem_n} gallery) peak {r['peak_mb']:8.0f} MB"
            f"  (after data: {r['data_mb']:.0f} MB), {r['seconds']:.1f} s"
        )


if __name__ == "__main__":
    main()
