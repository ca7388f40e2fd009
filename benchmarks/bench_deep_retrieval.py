"""Deep leave-one-out retrieval (R ~ N / 40) on hard, overlapping classes: beyondlabels against plain torch.

The data of the issue: N rows (default 40,000), D=512, 40 classes, class centres x 0.15 plus unit Gaussian noise,
rows L2-normalised (R ~ 1,000 at N=40,000). Timed in this process, each method in turn, best of ``--repeats``:

- ours: ``embedding_retrieval_metrics`` (leave-one-out, fp32, ks=(1, 5, 10));
- plain torch: 2,048-row chunks, ``X[a:b] @ X.T``, diagonal masked, ``topk(max R + 1)``, the same metrics
  (values must match ours);
- the matrix products alone, full (N x N) and half (the symmetric blocks);
- faiss ``IndexFlatIP.search`` at the same depth, if faiss is installed.

Peak memory (VmHWM) of ours at N=100,000 is measured in a fresh subprocess.

    python benchmarks/bench_deep_retrieval.py              # N=40,000
    python benchmarks/bench_deep_retrieval.py --n 20000    # quicker
    python benchmarks/bench_deep_retrieval.py --memory-n 0 # skip the memory run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from beyondlabels.functional import embedding_retrieval_metrics  # noqa: E402

KS = (1, 5, 10)
KEYS = ("precision@1", "precision@5", "precision@10", "r_precision", "map@r")


def make_data(n: int, d: int = 512, classes: int = 40, scale: float = 0.15, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n)
    centres = rng.normal(size=(classes, d)).astype(np.float32) * scale
    emb = centres[labels] + rng.normal(size=(n, d)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return torch.from_numpy(emb), torch.from_numpy(labels)


def metrics_from_neighbors(nbr: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """P@k, R-precision and MAP@R from neighbour lists (self removed, at least max R deep)."""
    counts = torch.bincount(labels)
    r = counts[labels] - 1
    ok = r > 0
    rel = labels[nbr] == labels[:, None]
    cum = torch.cumsum(rel, dim=1).double()
    out = {f"precision@{k}": float((cum[ok, k - 1] / k).mean()) for k in KS}
    rank = torch.arange(1, nbr.shape[1] + 1, dtype=torch.float64)
    rq = r.clamp(min=1)
    out["r_precision"] = float((cum.gather(1, (rq - 1)[:, None]).squeeze(1) / rq)[ok].mean())
    terms = torch.where(rel & (rank[None, :] <= r[:, None]), cum / rank, 0.0)
    out["map@r"] = float((terms.sum(1) / rq)[ok].mean())
    return out


def run_ours(emb, labels):
    m = embedding_retrieval_metrics(emb, labels, ks=KS)
    return {k: float(m[k]) for k in KEYS}


def depth_of(labels) -> int:
    return int(torch.bincount(labels).max()) - 1


def run_plain(emb, labels, chunk=2048):
    """Plain torch: chunked full products and one topk per chunk (self masked), then the metrics."""
    n = emb.shape[0]
    depth = max(depth_of(labels), max(KS))
    nbr = torch.empty((n, depth), dtype=torch.long)
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        s = emb[a:b] @ emb.T
        s[torch.arange(b - a), torch.arange(a, b)] = float("-inf")
        nbr[a:b] = torch.topk(s, depth, dim=1).indices
    return metrics_from_neighbors(nbr, labels)


def run_products_full(emb, chunk=2048):
    for a in range(0, emb.shape[0], chunk):
        emb[a : a + chunk] @ emb.T


def run_products_half(emb, block=4096):
    n = emb.shape[0]
    for a in range(0, n, block):
        for b in range(a, n, block):
            emb[a : a + block] @ emb[b : b + block].T


def run_faiss(emb, labels):
    import faiss

    x = np.ascontiguousarray(emb.numpy())
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    depth = max(depth_of(labels), max(KS))
    _, idx = index.search(x, depth + 1)
    idx = torch.from_numpy(idx)
    self_pos = idx == torch.arange(len(x))[:, None]
    nbr = torch.stack([row[~m][:depth] for row, m in zip(idx, self_pos)])
    return metrics_from_neighbors(nbr, labels)


def peak_memory_mib(n: int) -> float:
    """VmHWM of a fresh process that builds the data and runs ours at size ``n``."""
    code = (
        "import sys; sys.path.insert(0, %r); sys.argv = ['x']\n"
        "import bench_deep_retrieval as b\n"
        "e, l = b.make_data(%d)\n"
        "b.run_ours(e, l)\n"
        "print([x for x in open('/proc/self/status') if x.startswith('VmHWM')][0].split()[1])\n"
    ) % (str(Path(__file__).resolve().parent), n)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=40_000)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--memory-n", type=int, default=100_000, help="size of the peak-memory run (0: skip)")
    args = p.parse_args()

    emb, labels = make_data(args.n)
    print(f"N={args.n} D=512 classes=40 max R={depth_of(labels)} threads={torch.get_num_threads()}")
    print("load before:", os.getloadavg())
    methods = {
        "ours (embedding_retrieval_metrics)": lambda: run_ours(emb, labels),
        "plain torch chunk(2048) + topk": lambda: run_plain(emb, labels),
        "products alone, full N x N": lambda: run_products_full(emb),
        "products alone, half (symmetric)": lambda: run_products_half(emb),
    }
    try:
        import faiss  # noqa: F401

        methods["faiss IndexFlatIP.search"] = lambda: run_faiss(emb, labels)
    except ImportError:
        print("faiss not installed: skipped")
    best = {name: float("inf") for name in methods}
    values = {}
    for _ in range(args.repeats):  # alternate the methods so that load affects each alike
        for name, fn in methods.items():
            t0 = time.perf_counter()
            out = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
            if out is not None:
                values[name] = out
    print("load after:", os.getloadavg())
    ours = values["ours (embedding_retrieval_metrics)"]
    for name, vals in values.items():
        diff = max(abs(vals[k] - ours[k]) for k in KEYS)
        print(f"  values of {name}: {'equal to ours' if diff <= 1e-12 else 'DIFFER: ' + str(vals)} (max |diff| {diff:.1e})")
    print(f"  ours: {ours}")
    base = best["plain torch chunk(2048) + topk"]
    for name, t in best.items():
        print(f"{name:38s} {t:8.2f} s   plain / this = {base / t:5.2f}x")
    if args.memory_n:
        print(f"peak memory (VmHWM) of ours at N={args.memory_n} leave-one-out: {peak_memory_mib(args.memory_n):.0f} MiB")


if __name__ == "__main__":
    main()
