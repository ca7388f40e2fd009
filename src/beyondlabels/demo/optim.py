"""The demo models' optimiser: AdamW without weight decay on biases, norms and scales, a linear warm-up, then a
cosine decay to 0 over the run."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch


def adamw_warmup_cosine(
    named_parameters: Iterable[tuple[str, torch.nn.Parameter]],
    *,
    lr: float,
    weight_decay: float,
    warmup_steps: int,
    total_steps: int,
    betas: tuple[float, float] = (0.9, 0.999),
    no_decay: Callable[[str, torch.nn.Parameter], bool] = lambda name, param: param.ndim < 2,
) -> dict[str, Any]:
    """``configure_optimizers`` output: AdamW (``no_decay(name, param)`` parameters without weight decay) and a
    per-step schedule that rises linearly over ``min(warmup_steps, total_steps // 10)`` steps (at least 1), then
    follows a half cosine from ``lr`` to 0 at ``total_steps``.

    Examples:
        >>> out = adamw_warmup_cosine(torch.nn.Linear(2, 2).named_parameters(), lr=1.0, weight_decay=0.1,
        ...                           warmup_steps=2, total_steps=40)
        >>> [round(out["lr_scheduler"]["scheduler"].lr_lambdas[0](s), 3) for s in (0, 1, 2, 21, 40)]
        [0.5, 1.0, 1.0, 0.5, 0.0]
    """
    decay, plain = [], []
    for name, param in named_parameters:
        if param.requires_grad:
            (plain if no_decay(name, param) else decay).append(param)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}], lr=lr, betas=betas
    )
    total = max(1, int(total_steps))
    warmup = min(warmup_steps, max(1, total // 10))

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def module_optimizers(module: Any, **options: Any) -> dict[str, Any]:
    """:func:`adamw_warmup_cosine` of a demo ``LightningModule``: its parameters, its ``lr``, ``weight_decay`` and
    ``warmup_steps`` hyperparameters, over its trainer's steps; ``options`` are the other keywords (``betas``,
    ``no_decay``)."""
    return adamw_warmup_cosine(
        module.named_parameters(),
        lr=module.hparams.lr,
        weight_decay=module.hparams.weight_decay,
        warmup_steps=module.hparams.warmup_steps,
        total_steps=module.trainer.estimated_stepping_batches,
        **options,
    )
