"""Time the retrieval kernel of this tree against the one of another commit, in one process on the same data.

    python benchmarks/compare_versions.py e41dd99          # leave-one-out, N=20,000, D=512, 100 classes

The other commit's `functional/retrieval.py` is imported from `git show` when it is self-contained (as it was before
the search moved to `functional/search.py`); the ratio is printed with both metric values, which must agree.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_retrieval import KEYS, KS, make_data  # noqa: E402

from beyondlabels.functional import embedding_retrieval_metrics  # noqa: E402


def load_old(commit: str):
    source = subprocess.run(
        ["git", "show", f"{commit}:src/beyondlabels/functional/retrieval.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_retrieval.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_retrieval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("commit")
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--noise", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    old = load_old(args.commit)
    emb, labels = make_data(args.n, args.d, args.classes, args.noise)
    fns = {"this tree": embedding_retrieval_metrics, args.commit: old.embedding_retrieval_metrics}
    best = {name: float("inf") for name in fns}
    values = {}
    for _ in range(args.repeats):  # alternate, so load changes hit both alike
        for name, fn in fns.items():
            t = time.perf_counter()
            out = fn(emb, labels, ks=KS)
            best[name] = min(best[name], time.perf_counter() - t)
            values[name] = {k: float(out[k]) for k in KEYS}
    for name in fns:
        print(f"{name:<12} {best[name]:7.2f} s  " + " ".join(f"{k}={v:.6f}" for k, v in values[name].items()))
    print(f"ratio this tree / {args.commit}: {best['this tree'] / best[args.commit]:.3f}")


if __name__ == "__main__":
    main()
