"""The label-mismatch analysis at the paper's scale (23 classes, 2,465 mismatches, 10,000 null trials) against the
straightforward peers, in one process.

    python benchmarks/bench_mismatch.py                 # numpy peer timed on 500 trials, scaled to the total
    python benchmarks/bench_mismatch.py --peer-trials 10000

Timed:
- the frequency-aware Monte Carlo null: beyondlabels (:func:`~beyondlabels.functional.frequency_null`, inverse CDF per
  query class, chunked) against numpy drawing each trial with ``Generator.choice(C, size=n_q, p=...)`` per query class
  (the vectorised form of the study's loop); the numpy time on ``--peer-trials`` trials is scaled linearly to the total;
- percentile ranks of every mismatch: :func:`~beyondlabels.functional.percentile_ranks` against
  ``scipy.stats.percentileofscore(kind="weak")`` called with all scores at once;
- the whole :func:`~beyondlabels.functional.mismatch_analysis` (all statistics plus the null), for reference.

Both nulls are checked to agree in mean and spread (different random streams, so within Monte Carlo error).
Class frequencies: ../shared/data/architecture_style_counts.json when present, else random counts.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sps

from beyondlabels.functional import frequency_null, mismatch_analysis, percentile_ranks

COUNTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "architecture_style_counts.json"


def numpy_null(q: np.ndarray, m: np.ndarray, f: np.ndarray, trials: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    classes, sizes = np.unique(q, return_counts=True)
    out = np.zeros(trials)
    for t in range(trials):
        total = 0.0
        for cls, size in zip(classes, sizes, strict=True):
            w = f.copy()
            w[cls] = 0
            total += m[cls, rng.choice(len(f), size=size, p=w / w.sum())].sum()
        out[t] = total / len(q)
    return out


def best_of(fn, repeats: int) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mismatches", type=int, default=2465)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--peer-trials", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    if COUNTS.exists():
        f = np.array(list(json.loads(COUNTS.read_text())["kept_counts"].values()), dtype=float)
        source = "architecture_style_counts.json"
    else:
        f = rng.integers(250, 650, size=23).astype(float)
        source = "random counts"
    c = len(f)
    m = rng.random((c, c))
    m = (m + m.T) / 2
    np.fill_diagonal(m, 1.0)
    q = rng.choice(c, size=args.mismatches, p=f / f.sum())
    r = (q + rng.integers(1, c, size=q.size)) % c
    qt, rt, mt, ft = torch.tensor(q), torch.tensor(r), torch.tensor(m), torch.tensor(f)
    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} threads; "
        f"{c} classes ({source}), {args.mismatches} mismatches, {args.trials} trials"
    )

    ours_t, ours = best_of(lambda: frequency_null(qt, mt, ft, args.trials, args.seed), args.repeats)
    peer_t, peer = best_of(lambda: numpy_null(q, m, f, args.peer_trials, args.seed), 1)
    peer_scaled = peer_t * args.trials / args.peer_trials
    ours_np = ours.numpy()
    assert abs(ours_np.mean() - peer.mean()) < 5 * peer.std() / np.sqrt(len(peer)) + 1e-12, "null means disagree"
    assert abs(ours_np.std() / peer.std() - 1) < 0.2, "null spreads disagree"
    print(
        f"null:        beyondlabels {ours_t:8.3f} s | numpy choice {peer_scaled:8.3f} s (scaled from "
        f"{args.peer_trials} trials) "
        f"| ratio {peer_scaled / ours_t:6.1f}x"
    )

    pairs = m[np.triu_indices(c, 1)]
    sims = m[q, r]
    ours_t, ranks = best_of(lambda: percentile_ranks(sims, pairs), args.repeats)
    peer_t, ref = best_of(lambda: sps.percentileofscore(pairs, sims, kind="weak"), args.repeats)
    assert np.allclose(ranks.numpy(), ref, atol=1e-10)
    print(
        f"percentiles: beyondlabels {ours_t * 1e3:8.3f} ms | scipy {peer_t * 1e3:8.3f} ms | ratio "
        f"{peer_t / ours_t:6.1f}x"
    )

    full_t, out = best_of(
        lambda: mismatch_analysis(qt, rt, mt, counts=ft, num_trials=args.trials, seed=args.seed), args.repeats
    )
    print(
        f"whole analysis: {full_t:.3f} s (mean {out['mean_similarity']:.3f}, null {out['null_mean']:.4f} ± "
        f"{out['null_std']:.4f}, "
        f"p = {out['p_value']:.3g})"
    )


if __name__ == "__main__":
    main()
