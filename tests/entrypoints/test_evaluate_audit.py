"""evaluate.py task=audit on saved embeddings: the report's counts, suspects and per-query values against the numpy
loop oracle (tests/oracles/audit_oracle.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from beyondlabels.tasks import run_task  # noqa: E402
from tests.entrypoints.helpers import evaluate_config
from tests.oracles.audit_oracle import audit_oracle, brute_neighbors


def test_audit_task_matches_the_oracle(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    centres = rng.normal(size=(4, 10))
    labels = np.repeat(np.arange(4), 25)
    x = (centres[labels] + 0.6 * rng.normal(size=(100, 10))).astype(np.float32)
    labels[[3, 40, 77]] = [2, 0, 1]
    x[10] = x[60]  # cross-label duplicates
    names = np.array(["arch", "bell", "cone", "dome"])[labels]
    ids = np.arange(100) + 500
    path = tmp_path / "emb.npz"
    np.savez(path, embeddings=x, labels=names, ids=ids)
    out = tmp_path / "audit.json"
    cfg = evaluate_config(
        tmp_path,
        "task=audit",
        f"input={path}",
        f"output={out}",
        "audit.k=6",
        "audit.top=5",
        "audit.exclude_suspects=true",
        "bootstrap_rounds=50",
    )
    report = run_task("audit", cfg)
    assert json.loads(out.read_text())["audit_num_suspects"] == report["audit_num_suspects"]
    idx, sc = brute_neighbors(x, 6)
    want = audit_oracle(idx, sc, labels)
    assert report["audit_num_suspects"] == len(want["suspects"])
    assert report["audit_num_cross_label_duplicates"] == 1 and report["audit"]["cross_label_duplicates"][0]["ids"] == [
        510,
        560,
    ]
    assert [s["id"] for s in report["audit"]["suspects"]] == [int(ids[i]) for i in want["suspects"][:5]]
    first = want["suspects"][0]
    assert report["audit"]["suspects"][0]["given_label"] == names[first]
    assert (
        report["audit"]["suspects"][0]["suggested_label"]
        == ["arch", "bell", "cone", "dome"][want["suggested_label"][first]]
    )
    assert "clean/precision@1" in report and report["audit_num_excluded"] == 2
    per_query = np.load(tmp_path / "audit.per_query.npz")
    np.testing.assert_allclose(per_query["audit_label_quality"], want["label_quality"], atol=1e-6)
    assert sum(c["suspects"] for c in report["audit"]["per_class"]) == len(want["suspects"])
