"""Text-to-image R-precision: beyondlabels' kernel against torchmetrics RetrievalHitRate and a plain numpy loop fed the
same candidate groups.

Data: N prompt embeddings (Gaussian, D=512) and "generated image" embeddings = prompt + noise, continuous, so no two
scores tie (torchmetrics and the numpy loop then agree with the strict tie rule; the number of tied groups is printed).
Settings are the kernel's defaults: R = 100 candidates, protocol "folds" (10 folds), near-duplicate filter at 0.8
(checked on the drawn candidates only; random data has no near-duplicates).

No peer draws candidate sets, so every peer is fed the groups drawn by ``draw_candidate_sets`` (timed once, reported
as its own row) and their scores from ``candidate_scores`` (image -> text, timed, part of the peer's pipeline).
Rows per N:

- ``ours`` — ``text_image_r_precision`` end to end: the draw, scores and ranks in both directions, folds, curve,
  CLIP score, per-sample values;
- ``ours, pinned sets`` — the same with ``candidate_sets=`` given (no draw): scores and ranks of both directions;
- ``torchmetrics RetrievalHitRate(top_k=1)`` — on the given image -> text scores only (one direction, no draw, no
  scoring), and its pipeline ``draw + candidate_scores + RetrievalHitRate`` against ``ours``;
- ``numpy loop`` — per query in float64 on the given groups (N <= ``--numpy-max-n``);
- with ``--hard`` (default on): ``ours`` with ``hard_negatives=True`` (its time includes the random draw as well) and
  the peer pipeline on the hard groups (``draw_candidate_sets(hard_negatives=True)`` + scores + torchmetrics).

Times are single runs by default (``--repeats``), in this process; peak memory (VmHWM) of ``ours`` at ``--mem-n`` is
measured in a fresh process (it includes the data and the torch runtime; "after data" is the level before the call).

    python benchmarks/bench_rprecision.py            # N = 1,000 and 10,000, memory at N = 30,000 (~2 min on 2 cores)
    python benchmarks/bench_rprecision.py --quick    # smoke run
    python benchmarks/bench_rprecision.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _memory import peak_rss_mb  # noqa: E402 (this folder is on the path when a script runs)

from beyondlabels.functional.rprecision import candidate_scores, draw_candidate_sets, text_image_r_precision  # noqa: E402

TOP_R = (1, 5, 10)


def make_data(n: int, d: int, noise: float, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    txt = torch.randn(n, d, generator=g)
    img = txt + noise * torch.randn(n, d, generator=g)
    return img.to(device), txt.to(device)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int, device: str):
    best, out = float("inf"), None
    for _ in range(repeats):
        sync(device)
        t = time.perf_counter()
        out = fn()
        sync(device)
        best = min(best, time.perf_counter() - t)
    return best, out


def torchmetrics_hit_rate(scores: torch.Tensor) -> float:
    """RetrievalHitRate(top_k=1) over the groups: one query per row, column 0 the relevant caption."""
    from torchmetrics.retrieval import RetrievalHitRate

    target = torch.zeros_like(scores, dtype=torch.bool)
    target[:, 0] = True
    indexes = torch.arange(scores.shape[0], device=scores.device).unsqueeze(1).expand_as(scores)
    # torchmetrics >= 1.8 drops candidates scoring <= 0: shift by 2 in float64 (exact for fp32 cosines; order kept)
    metric = RetrievalHitRate(top_k=1).to(scores.device)
    metric.update(scores.double().flatten() + 2.0, target.flatten(), indexes=indexes.flatten())
    return float(metric.compute())


def numpy_loop_hit_rate(img: torch.Tensor, txt: torch.Tensor, distractors: torch.Tensor) -> float:
    """Image -> text hit@1 per query in float64 (ties against the ground truth), ids = rows."""
    a = img.double().cpu().numpy()
    b = txt.double().cpu().numpy()
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    rows = distractors.cpu().numpy()
    hits = 0
    for q in range(a.shape[0]):
        gt = a[q] @ b[q]
        hits += bool(np.all(b[rows[q]] @ a[q] < gt))
    return hits / a.shape[0]


def tied_groups(scores: torch.Tensor) -> int:
    """Groups where some distractor scores exactly the ground truth's value (torchmetrics' order is then arbitrary)."""
    return int((scores[:, 1:] == scores[:, :1]).any(dim=1).sum())


def child(args) -> None:
    """One call of the kernel at --n in this fresh process; prints its peak memory and time as JSON."""
    torch.set_num_threads(args.threads)
    img, txt = make_data(args.n, args.d, args.noise, args.device)
    base = peak_rss_mb()
    t = time.perf_counter()
    out = text_image_r_precision(img, txt, top_r=TOP_R, hard_negatives=args.child == "hard")
    sync(args.device)
    seconds = time.perf_counter() - t
    extra = {}
    if args.device == "cuda":
        extra["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    print(
        json.dumps(
            {
                "peak_mb": peak_rss_mb(),
                "data_mb": base,
                "seconds": seconds,
                "r_precision": float(out["r_precision"]),
                **extra,
            }
        )
    )


def compare(n: int, args, rows: list[tuple]) -> None:
    img, txt = make_data(n, args.d, args.noise, args.device)
    t_ours, ours = timed(lambda: text_image_r_precision(img, txt, top_r=TOP_R), args.repeats, args.device)
    t_draw, sets = timed(lambda: draw_candidate_sets(txt), args.repeats, args.device)
    t_pinned, pinned = timed(
        lambda: text_image_r_precision(img, txt, top_r=TOP_R, candidate_sets=sets), args.repeats, args.device
    )
    t_scores, scores = timed(lambda: candidate_scores(img, txt, sets.distractor_ids), args.repeats, args.device)
    t_tm, tm = timed(lambda: torchmetrics_hit_rate(scores), args.repeats, args.device)
    ref = float(ours["r_precision"])
    ties = tied_groups(scores)
    rows.append(
        (n, "ours text_image_r_precision", t_ours, t_ours, 0.0, ref, f"std={float(ours['r_precision_std']):.4f}")
    )
    rows.append((n, "  its candidate draw alone", t_draw, t_ours, None, None, "draw_candidate_sets"))
    rows.append(
        (
            n,
            "ours, pinned sets (no draw)",
            t_pinned,
            t_ours,
            abs(float(pinned["r_precision"]) - ref),
            float(pinned["r_precision"]),
            "",
        )
    )
    rows.append(
        (n, "torchmetrics HitRate, scores given", t_tm, t_pinned, abs(tm - ref), tm, f"vs pinned; tied groups={ties}")
    )
    rows.append(
        (
            n,
            "draw + scores + torchmetrics",
            t_draw + t_scores + t_tm,
            t_ours,
            abs(tm - ref),
            tm,
            f"scores {t_scores:.2f} s",
        )
    )
    if n <= args.numpy_max_n:
        t_np, np_value = timed(lambda: numpy_loop_hit_rate(img, txt, sets.distractor_ids), 1, args.device)
        rows.append((n, "numpy loop, groups given", t_np, t_pinned, abs(np_value - ref), np_value, "vs pinned"))
    if args.hard:
        t_hard, hard = timed(
            lambda: text_image_r_precision(img, txt, top_r=TOP_R, hard_negatives=True), args.repeats, args.device
        )
        t_hdraw, hsets = timed(lambda: draw_candidate_sets(txt, hard_negatives=True), args.repeats, args.device)
        t_hscores, hscores = timed(lambda: candidate_scores(img, txt, hsets.distractor_ids), args.repeats, args.device)
        t_htm, htm = timed(lambda: torchmetrics_hit_rate(hscores), args.repeats, args.device)
        href = float(hard["hard_r_precision"])
        rows.append((n, "ours, hard_negatives=True", t_hard, t_hard, 0.0, href, f"hard part ~{t_hard - t_ours:.2f} s"))
        rows.append((n, "  its hard draw alone", t_hdraw, t_hard, None, None, "draw_candidate_sets(hard)"))
        rows.append(
            (
                n,
                "hard draw + scores + torchmetrics",
                t_hdraw + t_hscores + t_htm,
                t_hard,
                abs(htm - href),
                htm,
                f"tm alone {t_htm:.2f} s; tied groups={tied_groups(hscores)}",
            )
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000], help="N compared with the peers")
    p.add_argument("--d", type=int, default=512)
    p.add_argument(
        "--noise", type=float, default=8.0, help="image = prompt + noise * N(0, 1); 8.0 gives R-precision about 0.6"
    )
    p.add_argument("--mem-n", type=int, default=30_000, help="N of the peak-memory run (0: skip)")
    p.add_argument("--mem-hard", action="store_true", help="also measure hard negatives at --mem-n (slow on CPU)")
    p.add_argument("--numpy-max-n", type=int, default=10_000)
    p.add_argument("--no-hard", dest="hard", action="store_false", help="skip the hard-negative rows")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.sizes, args.mem_n = [500, 2_000], 4_000
    torch.set_num_threads(args.threads)

    warm_img, warm_txt = make_data(300, args.d, args.noise, args.device, seed=1)  # warm-up (not timed)
    torchmetrics_hit_rate(candidate_scores(warm_img, warm_txt, draw_candidate_sets(warm_txt).distractor_ids))
    text_image_r_precision(warm_img, warm_txt, top_r=TOP_R, hard_negatives=True)

    print(
        f"# R=100, folds (10), near-duplicate filter 0.8; D={args.d}, noise={args.noise}, threads={args.threads}, "
        f"device={args.device}, best of {args.repeats}"
    )
    rows: list[tuple] = []
    for n in args.sizes:
        compare(n, args, rows)
    print(f"{'N':>7}  {'method':<36} {'seconds':>8} {'ratio':>8} {'max |delta|':>12} {'value':>8}  note")
    for n, name, t, ref_t, diff, value, note in rows:
        ratio = f"{t / ref_t:7.2f}x" if diff is not None else ""
        shown = f"{diff:12.1e} {value:8.4f}" if diff is not None else f"{'':12} {'':8}"
        print(f"{n:>7}  {name:<36} {t:8.2f} {ratio:>8} {shown}  {note}")
    print("ratio: this row's time over ours end to end (pinned rows and 'scores given' rows: over ours, pinned sets)")

    if args.mem_n:
        print()
        print("# peak memory of one call in a fresh process (VmHWM; includes the data and the torch runtime)")
        for mode in ["folds", *(["hard"] if args.mem_hard else [])]:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                mode,
                "--n",
                str(args.mem_n),
                "--d",
                str(args.d),
                "--noise",
                str(args.noise),
                "--threads",
                str(args.threads),
                "--device",
                args.device,
            ]
            r = json.loads(
                subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            )
            cuda = f", CUDA peak {r['cuda_peak_mb']:.0f} MB" if "cuda_peak_mb" in r else ""
            print(
                f"N={args.mem_n:>7}  ours {mode:<5} peak {r['peak_mb']:8.0f} MB  (after data: {r['data_mb']:.0f} MB), "
                f"{r['seconds']:.1f} s, r_precision={r['r_precision']:.4f}{cuda}"
            )


if __name__ == "__main__":
    main()
