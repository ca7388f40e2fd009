"""Hierarchical precision / recall / F of 1,000,000 (prediction, ground truth) pairs on the WordNet 3.0 noun tree
(82,115 nodes), beyondlabels against hiclass' metrics on the same pairs, in one process.

    python benchmarks/bench_hierarchy.py                      # hiclass timed on 20,000 pairs, scaled to the total
    python benchmarks/bench_hierarchy.py --hiclass-pairs 1000000   # hiclass on every pair (about half an hour)

beyondlabels computes every output at once (hP, hR, hF, hF_sample_mean, micro_hP/hR/hF, exact match, LCA-depth
histogram, per-sample values). hiclass is timed for precision, recall and f1 at ``average="micro"`` and
``average="macro"`` (six calls), on its own input format (one row of ancestor names per sample, built beforehand and not
timed). hiclass loops over samples in Python, so its time grows linearly with the pairs: the scaled figure is its time
on the subset times (pairs / subset). Both sides are checked to give the same values on the subset.

Needs Debian's wordnet-base (``apt-get install wordnet-base``) and hiclass (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings

import numpy as np
import torch

from beyondlabels.functional import hierarchical_precision_recall
from beyondlabels.io.taxonomy_files import load_wordnet


def hiclass_rows(table: np.ndarray, names: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """hiclass labels: the ancestors of each node from depth 1 down (root excluded), padded with ''."""
    rows = table[idx][:, 1:]
    return np.where(rows >= 0, names[np.maximum(rows, 0)], "").astype(object)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--hiclass-pairs", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from hiclass import metrics as hm

    start = time.perf_counter()
    tax = load_wordnet()
    print(f"WordNet nouns: {tax} (parsed in {time.perf_counter() - start:.1f} s)")
    g = torch.Generator().manual_seed(args.seed)
    gt = torch.randint(1, len(tax), (args.pairs,), generator=g)
    # predictions: 20% exact, 30% an ancestor of the truth (unspecific), the rest random nodes (never the root: hiclass
    # divides by zero on an empty predicted set)
    roll = torch.rand(args.pairs, generator=g)
    parent = tax.parent_index
    pred = torch.where(roll < 0.2, gt, torch.randint(1, len(tax), (args.pairs,), generator=g))
    up = (roll >= 0.2) & (roll < 0.5) & (parent[gt] > 0)
    pred[up] = parent[gt[up]]
    device = torch.device(args.device)
    pred_d, gt_d = pred.to(device), gt.to(device)
    hierarchical_precision_recall(pred_d[:1000], gt_d[:1000], tax)  # builds and caches the LCA index (not timed)
    times = []
    for _ in range(args.repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        ours = hierarchical_precision_recall(pred_d, gt_d, tax)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    ours_s = min(times)

    n_sub = min(args.hiclass_pairs, args.pairs)
    table = tax.ancestor_table().numpy()
    names = np.array(tax.nodes, dtype=object)
    y_true = hiclass_rows(table, names, gt[:n_sub].numpy())
    y_pred = hiclass_rows(table, names, pred[:n_sub].numpy())
    ref, hiclass_s = {}, 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, fn in (("precision", hm.precision), ("recall", hm.recall), ("f1", hm.f1)):
            for average in ("micro", "macro"):
                start = time.perf_counter()
                ref[(name, average)] = fn(y_true, y_pred, average=average)
                hiclass_s += time.perf_counter() - start
    sub = hierarchical_precision_recall(pred[:n_sub], gt[:n_sub], tax)
    pairs = {
        ("precision", "micro"): "micro_hP",
        ("recall", "micro"): "micro_hR",
        ("f1", "micro"): "micro_hF",
        ("precision", "macro"): "hP",
        ("recall", "macro"): "hR",
        ("f1", "macro"): "hF_sample_mean",
    }
    worst = max(abs(float(sub[ours_key]) - float(ref[key])) for key, ours_key in pairs.items())
    assert worst < 1e-9, f"beyondlabels and hiclass disagree by {worst}"
    scaled = hiclass_s * args.pairs / n_sub

    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} threads, "
        f"device {device}"
    )
    print(
        f"pairs: {args.pairs:,}; hP {float(ours['hP']):.4f}, hR {float(ours['hR']):.4f}, hF {float(ours['hF']):.4f}, "
        f"micro_hF {float(ours['micro_hF']):.4f}"
    )
    print(f"values agree with hiclass on {n_sub:,} pairs (largest difference {worst:.1e})")
    print(f"beyondlabels, every output at once:            {ours_s:8.3f} s (best of {args.repeats})")
    label = "measured" if n_sub == args.pairs else f"{hiclass_s:.2f} s on {n_sub:,} pairs, scaled"
    print(f"hiclass precision/recall/f1, micro + macro:    {scaled:8.1f} s ({label})")
    print(f"ratio: beyondlabels is {scaled / ours_s:,.0f}x faster")


if __name__ == "__main__":
    main()
