"""The config tree of the ``beyondlabels`` command, a Hydra search path root of its own
(:data:`beyondlabels.conf.EVALUATE_SEARCHPATH`): ``evaluate.yaml`` and the groups ``task/``, ``eval/``, ``paths/``,
``hydra/``."""
