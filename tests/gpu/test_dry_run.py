"""The GPU checks on the CPU: ``scripts/gpu_check.sh`` with ``BEYONDLABELS_GPU_DRY_RUN=1`` selects and passes every
GPU test of tests/gpu and the CUDA retrieval, R-precision, projection, mismatch and taxonomy tests, so a GPU test
whose own logic is broken fails without a GPU."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from tests.gpu.devices import (
    DRY_RUN_ENV,
    accelerator_device,
    lightning_accelerator,
    process_group_backend,
)

# Variables of a launcher (torchrun, SLURM) that a child pytest must not inherit.
_LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")


def _outcomes(junit: Path) -> dict[str, str]:
    """``{"<module>.<test name>": "passed" | "skipped" | "failed"}`` of a JUnit XML report."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        out[f"{case.get('classname')}.{case.get('name')}"] = outcome
    return out


def _test_names(path: Path) -> list[str]:
    return [
        n.name
        for n in ast.parse(path.read_text()).body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    ]


def test_the_device_helpers_follow_the_dry_run_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(DRY_RUN_ENV, "1")
    assert (accelerator_device(1), lightning_accelerator(), process_group_backend()) == (
        torch.device("cpu"),
        "cpu",
        "gloo",
    )
    monkeypatch.delenv(DRY_RUN_ENV)
    assert (accelerator_device(1), lightning_accelerator(), process_group_backend()) == (
        torch.device("cuda", 1),
        "gpu",
        "nccl",
    )


@pytest.mark.slow
def test_gpu_check_dry_run_passes_every_gpu_test(repo_root: Path, tmp_path: Path):
    junit = tmp_path / "gpu.xml"
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS and not k.startswith("SLURM_")}
    env.update(
        {DRY_RUN_ENV: "1", "PYTHON": sys.executable, "PYTEST_ADDOPTS": f"-p no:cacheprovider --junitxml={junit}"}
    )
    proc = subprocess.run(
        ["bash", str(repo_root / "scripts" / "gpu_check.sh")],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    outcomes = _outcomes(junit)
    expected = [f"test_gpu.{name}" for name in _test_names(repo_root / "tests" / "gpu" / "test_gpu.py")]
    expected += [f"test_retrieval.test_cuda_matches_cpu[{p}]" for p in ("fp32", "bf16", "fp16")]
    expected += [
        "test_rprecision.test_cuda_draws_the_cpu_sets_and_scores_blockwise_exactly",
        "test_projection.test_cuda_matches_cpu",
        "test_mismatch_metric.test_retrieval_with_mismatch_spearman_and_projection_sample_on_cuda",
        "test_taxonomy.test_lca_and_ancestor_matrix_on_cuda_match_cpu",
    ]
    assert len(expected) >= 10
    for name in expected:
        found = [outcome for key, outcome in outcomes.items() if key.endswith(f".{name}")]
        assert found == ["passed"], (name, found, proc.stdout[-3000:])
    assert "failed" not in outcomes.values()
