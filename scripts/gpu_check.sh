#!/usr/bin/env bash
# GPU checks of the embedding-retrieval kernels: the CUDA tests (CUDA results equal CPU ones, every precision) and the
# benchmark on the device. Run from the repository root on a machine with a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
"$PY" -m pytest -m gpu tests/functional tests/metrics -q -rs
"$PY" benchmarks/bench_retrieval.py --device cuda "$@"
