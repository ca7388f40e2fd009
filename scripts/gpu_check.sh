#!/usr/bin/env bash
# GPU checks: every test marked gpu (CUDA results equal CPU ones: retrieval in every precision, taxonomy LCA) and the
# benchmark on the device. Run from the repository root on a machine with a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
"$PY" -m pytest -m gpu tests -q -rs
"$PY" benchmarks/bench_retrieval.py --device cuda "$@"
