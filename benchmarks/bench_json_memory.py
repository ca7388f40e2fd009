"""Memory and time of the JSON readers of files from elsewhere against Python's own ``json.loads`` (the peer), per file
shape, in one run: the peak bytes traced while reading (tracemalloc, so the file's bytes, its text and every object
count) divided by the file's size, and the seconds.

Shapes (about ``--mb`` megabytes each):

- ``empty objects``: qrels ``{"q0": {}, "q1": {}, ...}`` (the attack: about 24 times its size as Python objects);
- ``list of {}``: ``[{}, {}, ...]`` (more values than a file may hold);
- ``qrels``: 100 judgements per query, 10-character document ids (a real shape);
- ``dense qrels``: 1,000 judgements per query, short numeric ids;
- ``history``: a ``history.jsonl`` of evaluation records.

The project's reader refuses a file whose objects would take more than 10 times its size (plus 16 MiB), from a count
of its bytes, before making them; the peer makes them all. Usage: ``python benchmarks/bench_json_memory.py [--mb 30]``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from beyondlabels.io.qrels import load_qrels
from beyondlabels.io.run_files import read_history


def _shapes(mb: float) -> dict[str, tuple[str, str]]:
    """``name -> (file name, text)``."""
    rng = random.Random(0)
    n = int(mb * 1e6)
    queries = max(1, n // 1700)
    return {
        "empty objects": ("qrels.json", "{" + ",".join(f'"q{i}": {{}}' for i in range(n // 13)) + "}"),
        "list of {}": ("qrels.json", "[" + ",".join(["{}"] * (n // 3)) + "]"),
        "qrels": (
            "qrels.json",
            json.dumps(
                {
                    f"q{i}": {f"doc{rng.randrange(10**7):07d}": rng.randrange(4) for _ in range(100)}
                    for i in range(queries)
                }
            ),
        ),
        "dense qrels": (
            "qrels.json",
            json.dumps({str(i): {str(j): j % 3 for j in range(1000)} for i in range(max(1, n // 9000))}),
        ),
        "history": (
            "history.jsonl",
            "".join(
                json.dumps(
                    {"step": i, "epoch": 0, **{f"key{k}@{k}": rng.random() for k in range(12)}, "curve": [0.5] * 10}
                )
                + "\n"
                for i in range(n // 480)
            ),
        ),
    }


def _outcome(read: Callable[[], Any]) -> str:
    try:
        read()
    except ValueError as exc:
        return "refused: " + str(exc).split(": ", 2)[-1][:60]
    return "read"


def _measure(read: Callable[[], Any]) -> tuple[int, float, str]:
    """Peak traced bytes (one run under tracemalloc) and seconds (another run without it: tracing slows every
    allocation)."""
    tracemalloc.start()
    outcome = _outcome(read)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    start = time.perf_counter()
    _outcome(read)
    return peak, time.perf_counter() - start, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=30.0, help="megabytes per file")
    args = parser.parse_args()
    print(f"{'shape':14} {'MB':>6} {'ours x file':>11} {'s':>6} {'json.loads x file':>17} {'s':>6}  outcome")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (file_name, text) in _shapes(args.mb).items():
            path = Path(tmp) / file_name
            path.write_text(text)
            del text
            size = path.stat().st_size
            ours = (lambda p=path: read_history(p)) if file_name.endswith(".jsonl") else (lambda p=path: load_qrels(p))

            def peer(p: Path = path, lines: bool = file_name.endswith(".jsonl")) -> Any:
                data = p.read_bytes()
                return [json.loads(line) for line in data.splitlines()] if lines else json.loads(data)

            peak, seconds, outcome = _measure(ours)
            peer_peak, peer_seconds, _ = _measure(peer)
            print(
                f"{name:14} {size / 1e6:6.1f} {peak / size:11.2f} {seconds:6.2f} {peer_peak / size:17.2f} "
                f"{peer_seconds:6.2f}  {outcome}"
            )
            path.unlink()


if __name__ == "__main__":
    main()
