"""Time the retrieval kernel of this tree against the one of another commit, in one process on the same data.

    python benchmarks/compare_versions.py b2148ae                 # leave-one-out, N=20,000, D=512, 100 classes
    python benchmarks/compare_versions.py b2148ae --deep          # N=40,000, 40 hard classes (R ~ 1,000)
    python benchmarks/compare_versions.py b2148ae --deep --shallow   # the same, deep_metrics=False

The other commit's whole ``src/beyondlabels`` package is extracted (``git archive``) into a temporary folder under
the name ``beyondlabels_<commit>``, its absolute imports rewritten to that name, and imported beside this tree's
package, so both kernels run in this process on the same tensors. Runs alternate between the two (the order flips
every round), so drifts of the machine's speed hit both alike; the best time of each, the ratio, and both sets of
metric values (which must agree) are printed, with the CPU time of each run (less sensitive to other jobs on a
shared machine than the wall time).
"""

from __future__ import annotations

import argparse
import importlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_retrieval import KEYS, KS, make_data  # noqa: E402

from beyondlabels.functional import embedding_retrieval_metrics  # noqa: E402


def load_commit(commit: str):
    """The ``beyondlabels.functional`` package of ``commit``, imported as ``beyondlabels_<commit>.functional``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "src/beyondlabels"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    name = "beyondlabels_" + re.sub(r"\W", "_", commit)
    folder = Path(tempfile.mkdtemp())
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(folder, filter="data")
        else:  # Pythons without extraction filters (the archive is this repository's own)
            tar.extractall(folder)
    package = folder / "src" / "beyondlabels"
    imports = re.compile(r"\bbeyondlabels(?=[. ])")
    for path in package.rglob("*.py"):
        path.write_text(imports.sub(name, path.read_text()))
    package.rename(package.with_name(name))
    sys.path.insert(0, str(folder / "src"))
    return importlib.import_module(f"{name}.functional")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("commit")
    p.add_argument("--n", type=int, default=None, help="gallery size (default 20,000; 40,000 with --deep)")
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--noise", type=float, default=3.0)
    p.add_argument("--deep", action="store_true", help="the deep data of bench_retrieval.py --deep")
    p.add_argument("--shallow", action="store_true", help="deep_metrics=False (P@k family only, depth max(k))")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    old = load_commit(args.commit)
    centre_scale = 1.0
    if args.deep:
        args.classes, args.noise, centre_scale = 40, 1.0, 0.15
    n = args.n or (40_000 if args.deep else 20_000)
    emb, labels = make_data(n, args.d, args.classes, args.noise, centre_scale=centre_scale)
    options = {"ks": KS}
    if args.shallow:
        options["deep_metrics"] = False
    fns = {"this tree": embedding_retrieval_metrics, args.commit: old.embedding_retrieval_metrics}
    for fn in fns.values():  # warm-up on a slice, not timed
        fn(emb[:2000], labels[:2000], **options)
    best = dict.fromkeys(fns, float("inf"))
    cpu = dict.fromkeys(fns, float("inf"))
    values: dict[str, dict[str, float]] = {}
    for round_ in range(args.repeats):
        for name in list(fns) if round_ % 2 == 0 else list(fns)[::-1]:
            wall, used = time.perf_counter(), time.process_time()
            out = fns[name](emb, labels, **options)
            best[name] = min(best[name], time.perf_counter() - wall)
            cpu[name] = min(cpu[name], time.process_time() - used)
            values[name] = {k: float(out[k]) for k in KEYS if k in out}
    print(
        f"# N={n} D={args.d} C={args.classes}{' (deep data)' if args.deep else ''}"
        f"{' deep_metrics=False' if args.shallow else ''}; best of {args.repeats}, alternating; threads={args.threads}"
    )
    for name in fns:
        shown = " ".join(f"{k}={v:.6f}" for k, v in values[name].items())
        print(f"{name:<12} {best[name]:7.2f} s (cpu {cpu[name]:6.2f} s)  {shown}")
    print(
        f"ratio this tree / {args.commit}: {best['this tree'] / best[args.commit]:.3f} "
        f"(cpu {cpu['this tree'] / cpu[args.commit]:.3f})"
    )
    if values["this tree"] != values[args.commit]:
        print("metric values differ between the two versions")


if __name__ == "__main__":
    main()
