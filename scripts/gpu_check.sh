#!/usr/bin/env bash
# GPU checks: every test marked gpu and the benchmark on the device. Run from the repository root on a machine with a
# CUDA device. The tests compare CUDA results with the CPU results of the same inputs: retrieval in every precision,
# R-precision, projection, mismatch, taxonomy LCA, and (tests/gpu) the cross-modal, zero-shot and ranking metrics,
# the statistics, the retrieval callback under Trainer(accelerator="gpu") and two NCCL processes (with 2 devices).
#
# BEYONDLABELS_GPU_DRY_RUN=1 runs the same test selection on the CPU (every gpu test takes its device from
# tests/gpu/devices.py), so that their logic is checked without a GPU; the benchmark is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
gpu_tests() { "$PY" -m pytest -m gpu tests -q -rs; }
if [[ "${BEYONDLABELS_GPU_DRY_RUN:-}" == 1 ]]; then
    gpu_tests
    exit
fi
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
gpu_tests
"$PY" benchmarks/bench_retrieval.py --device cuda "$@"
