"""beyondlabels: evaluate retrieval and generation models while they train.

Layers, in the order data flows: ``beyondlabels.functional`` (pure tensor kernels) feeds
``beyondlabels.metrics`` (torchmetrics classes), which ``beyondlabels.callbacks`` (Lightning
callbacks) drive during training and log through Lightning loggers.
"""

from beyondlabels._internal.run_names import register_resolver as _register_resolver

__version__ = "0.1.0"

# The default run folders of the configs are named `<time>_${beyondlabels.job_tag:}`: two jobs started in the same
# second get folders of their own (beyondlabels._internal.run_names).
_register_resolver()
