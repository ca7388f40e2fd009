"""A sweep's jobs grouped by setting (seeds summarised), tested against a baseline group with the Holm–Bonferroni
correction, and shown as a terminal table, Markdown, LaTeX (booktabs) and one PNG per metric.

The grouped comparison (what ``evaluate.py task=compare runs=[<multirun>] output=PATH.json`` saves)::

    {"kind": "sweep", "which": "final" | "best", "seed_keys": ["seed"], "confidence": 0.95,
     "min_bootstrap_seeds": 5, "common_overrides": [str],
     "metrics": {key: {"direction": "max" | "min" | None}},
     "groups": {name: {"key": group key, "overrides": [str], "seeds": [str],
                       "jobs": [{"path": str, "seed": str, "values": {key: float | None}}],
                       "metrics": {key: {"values": [float], "seeds": SeedSummary.to_json(),
                                         "pooled": Interval.to_json() | None}}}},
     "baseline": None | {"group": name, "metric": key, "guardrails": [key], "level": 0.05,
                         "correction": "Holm–Bonferroni", "family_size": m, "permutations": int, "test": str,
                         "effect_size": str,
                         "comparisons": [{"group": name, "metric": key, "direction": "max" | "min",
                                          **GroupDifference.to_json(), "p_adjusted": float,
                                          "decision": "better" | "worse" | "cannot distinguish" | "no conclusion",
                                          "reason": str}]},
     "warnings": [str]}

Groups (:func:`beyondlabels.io.sweeps.group_jobs`) are named by the overrides that differ between groups (those every
group shares are ``common_overrides``). A group's value of a key is each job's final (or best) scalar, summarised across
its seeds (:func:`beyondlabels.functional.sweeps.seed_summary`); ``pooled`` is the bootstrap over the per-query values
of all its jobs. Against a baseline every other group is compared on ``metric`` and each guardrail
(:func:`beyondlabels.functional.sweeps.paired_group_difference`: the decision's p-value is the larger of the query-level
and the seed-level test's); the p-values of all these comparisons (groups × keys) are adjusted together
(:func:`beyondlabels.functional.multiple_testing.holm_adjust`) and the decision reads the adjusted one: below ``level``
→ ``better`` or ``worse`` under the key's direction, else ``cannot distinguish`` (never "no difference": a test that
does not reject shows no equality); ``no conclusion`` when the groups share no seed or no query.

Modules (every name importable from this package): :mod:`~beyondlabels.reporting.sweeps.comparison` the grouped
comparison and its tests; :mod:`~beyondlabels.reporting.sweeps.console` the terminal table;
:mod:`~beyondlabels.reporting.sweeps.markdown` and :mod:`~beyondlabels.reporting.sweeps.latex` the tables of a
write-up; :mod:`~beyondlabels.reporting.sweeps.picture` one PNG per metric; :mod:`~beyondlabels.reporting.sweeps.files`
all of them beside a JSON report.

Three modules are named after sweeps, one per layer: :mod:`beyondlabels.functional.sweeps` the statistics,
:mod:`beyondlabels.io.sweeps` the reading and grouping of the job folders, :mod:`beyondlabels.reporting.sweeps` the
tables and pictures; each name reads as what a sweep is to its layer.
"""

from __future__ import annotations

from beyondlabels.reporting.sweeps.comparison import DAGGER, TEST, sweep_comparison, sweep_headline_keys
from beyondlabels.reporting.sweeps.console import print_sweep
from beyondlabels.reporting.sweeps.files import write_sweep_files
from beyondlabels.reporting.sweeps.latex import sweep_latex
from beyondlabels.reporting.sweeps.markdown import sweep_markdown
from beyondlabels.reporting.sweeps.picture import plot_sweep

__all__ = [
    "DAGGER",
    "TEST",
    "plot_sweep",
    "print_sweep",
    "sweep_comparison",
    "sweep_headline_keys",
    "sweep_latex",
    "sweep_markdown",
    "write_sweep_files",
]
