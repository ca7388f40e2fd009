"""Peak memory of the running benchmark process (shared by the benchmark scripts)."""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB (VmHWM; unlike ru_maxrss it does not carry the parent's peak
    across exec; ru_maxrss where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
