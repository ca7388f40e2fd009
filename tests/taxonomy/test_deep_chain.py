"""A legal but extreme taxonomy: a chain 100,000 nodes deep. Mapping free text to it must take seconds and well under
a gigabyte; it once built a nodes x depth table (4 bytes x 10^10 here) before the first answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, resource, sys, time
    from pathlib import Path
    import torch
    torch.set_num_threads(1)
    from beyondlabels.functional import hierarchical_precision_recall
    from beyondlabels.taxonomy import Taxonomy, TextToNode

    def rss_mb(key):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    depth = int(sys.argv[1])
    tax = Taxonomy({f"n{i}": f"n{i - 1}" for i in range(1, depth)}, root="n0")
    # beyond this, an allocation fails instead of taking the machine: address space now + 1.5 GB
    limit = int((rss_mb("VmSize") + 1536) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    before = rss_mb("VmRSS")
    start = time.perf_counter()
    mapper = TextToNode(tax)
    matches = mapper.map([f"n{depth - 1}", "n77777 n77778", "somewhere deep in the chain"])
    seconds = time.perf_counter() - start
    pred = torch.tensor([m.index for m in matches])
    score = hierarchical_precision_recall(pred, tax.indices([f"n{depth - 1}"] * 3), tax)
    print(json.dumps({"seconds": seconds, "grew_mb": rss_mb("VmHWM") - before, "nodes": [m.node for m in matches],
                      "rules": [m.rule for m in matches], "hR": float(score["hR"])}))
    """
)


def test_a_chain_100000_deep_maps_in_seconds_within_a_gigabyte():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", SCRIPT, "100000"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["nodes"][0] == "n99999" and out["rules"][0] == "exact"
    assert out["nodes"][1] in ("n77777", "n77778")  # the two nearest texts; the expected rule keeps the deeper one
    assert out["grew_mb"] < 1024, out
    assert out["seconds"] < 60, out  # about 5 s alone on one core; the bound leaves room for a shared machine
