"""Build Lightning objects from Hydra config groups (callbacks, loggers) with clear errors."""

from __future__ import annotations

from typing import Any

import hydra
from omegaconf import DictConfig


def _instantiate_group(group: DictConfig | None, what: str) -> list[Any]:
    if not group:
        return []
    if not isinstance(group, DictConfig):
        raise TypeError(f"the {what} config must be a mapping of name -> config, got {type(group).__name__}")
    objects = []
    for name, item in group.items():
        if isinstance(item, DictConfig) and "_target_" in item:
            objects.append(hydra.utils.instantiate(item))
        elif item is not None:
            raise TypeError(f"{what}.{name} has no _target_; every entry of {what} must name a class to build")
    return objects


def instantiate_callbacks(config: DictConfig | None) -> list[Any]:
    """Instantiate every entry of the ``callbacks`` group (a mapping name → config with ``_target_``)."""
    return _instantiate_group(config, "callbacks")


def instantiate_loggers(config: DictConfig | None) -> list[Any]:
    """Instantiate every entry of the ``logger`` group (a mapping name → config with ``_target_``)."""
    return _instantiate_group(config, "logger")
