"""Offline evaluation of saved outputs, and comparison of runs (Hydra entry point).

    python evaluate.py task=retrieval input=embeddings.npz output=report.json k=[1,5,10]
    python evaluate.py task=retrieval input=embeddings.npz wandb=true     # also log an offline W&B run
    python evaluate.py task=audit input=embeddings.npz output=audit.json   # suspected label errors, duplicates, outliers
    python evaluate.py task=crossmodal input=pairs.npz output=report.json    # image<->text recall@k and ranks
    python evaluate.py task=hierarchy taxonomy=tree.yaml predictions=preds.jsonl output=report.json   # hP / hR / hF
    python evaluate.py task=ranking run=run.txt qrels=qrels.txt k=[5,10] output=report.json   # graded qrels, unjudged
    python evaluate.py task=rprecision input=gen.npz num_candidates=100 top_r=[1,5,10] output=report.json
    python evaluate.py task=mismatch pairs=pairs.csv profiles=profiles.yaml output=mismatch.json   # null, p-value
    python evaluate.py task=profiles profiles=profiles.yaml output=profiles.json   # class similarity matrix, heatmap
    python evaluate.py task=compare runs=[logs/train/runs/a,logs/train/runs/b] which=best output=cmp.json
    python evaluate.py task=abtest runs=[A,B,C] baseline=A metric=retrieval/precision@1 guardrails=[retrieval/map@r]
    python evaluate.py task=report runs=[logs/train/multiruns/<date>] output=report.html   # self-contained HTML

``task=<name>`` selects a task of :data:`beyondlabels.tasks.TASKS` and its settings ``conf/task/<name>.yaml``; what
each task reads and writes is described in its module, ``beyondlabels.tasks.<name>``.
"""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from beyondlabels.tasks import run_task
from beyondlabels.utils import close_wandb


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    try:
        run_task(HydraConfig.get().runtime.choices["task"], cfg)
    finally:
        close_wandb()


if __name__ == "__main__":
    main()
