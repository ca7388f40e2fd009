"""Helpers shared between beyondlabels' subpackages: internal, not public API (names and behaviour may change).

- :mod:`~beyondlabels._internal.checks`: argument checks (each returns the validated value or raises a
  ``ValueError`` that names the argument, says what was wrong and what to pass instead);
- :mod:`~beyondlabels._internal.stats`: intervals, quantiles and resampling shared by the statistics kernels;
- :mod:`~beyondlabels._internal.parse`: bounded, non-recursive parsing of JSON, YAML and npz files from elsewhere;
- :mod:`~beyondlabels._internal.names`: names in error messages (class and node names, listings);
- :mod:`~beyondlabels._internal.convert`: tensors and numpy values as plain Python for JSON;
- :mod:`~beyondlabels._internal.shares`: the share of a per-sample kernel's queries each process computes under DDP.
- :mod:`~beyondlabels._internal.memory`: freed heap pages handed back to the system (glibc ``malloc_trim``).

A module of a subpackage whose name starts with ``_`` is private to that subpackage; what more than one subpackage
needs lives here. ``tests/test_layers.py`` holds both rules. Nothing here imports another part of beyondlabels.
"""
