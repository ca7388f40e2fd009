"""beyondlabels: evaluate retrieval and generation models while they train.

Layers, in the order data flows: ``beyondlabels.functional`` (pure tensor kernels) feeds
``beyondlabels.metrics`` (torchmetrics classes), which ``beyondlabels.callbacks`` (Lightning
callbacks) drive during training and log through Lightning loggers.
"""

__version__ = "0.1.0"
