"""The toy modules of ``package_toy`` under importable names, for configurations that name classes by their import
path (LightningCLI's ``class_path``): ``cli_toy.LightningDualEncoder`` / ``cli_toy.LightningPairData`` build on
``lightning.pytorch``, ``cli_toy.PLDualEncoder`` / ``cli_toy.PLPairData`` on ``pytorch_lightning``."""

from __future__ import annotations

from tests.callbacks.package_toy import ColourEvaluator, toy_classes

__all__ = ["ColourEvaluator", "LightningDualEncoder", "LightningPairData", "PLDualEncoder", "PLPairData"]

_LIGHTNING, _, _LIGHTNING_DATA = toy_classes("lightning.pytorch")
_PL, _, _PL_DATA = toy_classes("pytorch_lightning")


class LightningDualEncoder(_LIGHTNING):
    pass


class LightningPairData(_LIGHTNING_DATA):
    pass


class PLDualEncoder(_PL):
    pass


class PLPairData(_PL_DATA):
    pass
