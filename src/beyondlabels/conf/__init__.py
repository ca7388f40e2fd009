"""The Hydra configs that ship with beyondlabels, for a Hydra app of your own and for the ``beyondlabels`` command.

Add the package to your app's search path, in your primary config or on the command line::

    hydra:
      searchpath:
        - pkg://beyondlabels.conf

Everything here lies under ``beyondlabels/``, so it never mixes with your own ``callbacks/``, ``logger/``,
``trainer/`` or ``task/`` groups:

- ``beyondlabels/callbacks/lightning/<name>``: an evaluation callback (``retrieval``, ``crossmodal``, ``zeroshot``,
  ``hierarchy``, ``rprecision``) or ``convergence`` (:class:`~beyondlabels.callbacks.ConvergenceMonitor`) for a
  ``lightning.pytorch`` Trainer; ``beyondlabels/callbacks/pytorch_lightning/<name>`` the same for a
  ``pytorch_lightning`` Trainer. Each lands at ``callbacks.<name>`` unless the defaults entry says otherwise with
  ``@``. Both compose ``beyondlabels/callbacks/options/<name>``: the options, one copy for both packages.
- ``beyondlabels/logger/lightning/<name>`` and ``beyondlabels/logger/pytorch_lightning/<name>``: ``wandb`` (offline),
  ``csv``, ``tensorboard``, ``mlflow`` (a local SQLite store), writing into the Hydra job's folder; each lands at
  ``logger.<name>``; their options in ``beyondlabels/logger/options/<name>``.
- ``beyondlabels/evaluate/``: the config tree of the ``beyondlabels`` command (and of ``evaluate.py``): its primary
  config ``evaluate.yaml`` and the groups ``task/``, ``eval/``, ``paths/``, ``hydra/``. It is a search path root of
  its own, :data:`EVALUATE_SEARCHPATH`; nothing else refers to it.

No config interpolates a key that your config must define: what a config needs of its run (an output folder) comes
from Hydra itself (``${hydra:runtime.output_dir}``).

Examples:
    >>> from importlib.resources import files
    >>> files("beyondlabels.conf").joinpath("beyondlabels/callbacks/lightning/retrieval.yaml").is_file()
    True
"""

SEARCHPATH = "pkg://beyondlabels.conf"
"""The search path entry of the configs users compose (``hydra.searchpath=[pkg://beyondlabels.conf]``)."""

EVALUATE_SEARCHPATH = "pkg://beyondlabels.conf.beyondlabels.evaluate"
"""The search path root of the ``beyondlabels`` command's configs (``evaluate.yaml`` and its groups)."""

__all__ = ["EVALUATE_SEARCHPATH", "SEARCHPATH"]
