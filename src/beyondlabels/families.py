"""The evaluation families and the offline tasks, declared once: everything that lists families is derived from here.

A family is one record (:class:`Family`): its name, its metric, its output schema (whose ``headline`` names the keys
the family is read by), and where it has them its callback (the package-neutral core, the class name the two
Lightning package modules export, the default key prefix, the ``conf/callbacks`` option) and its ``evaluate.py``
task (:class:`Task`: the module with ``run(cfg)`` and the command lines the entry point's help shows). From
:data:`FAMILIES` and :data:`TOOLS` (the tasks that belong to no family) come:

- the callback classes of :mod:`beyondlabels.callbacks.pytorch_lightning` and :mod:`beyondlabels.callbacks.lightning`
  and the names they and :mod:`beyondlabels.callbacks` export;
- the family metrics :mod:`beyondlabels.metrics` exports;
- the logged key prefixes (:data:`beyondlabels.reporting.prefixes.FAMILY_PREFIXES`);
- the task registry :data:`beyondlabels.tasks.TASKS` and the task list of ``python evaluate.py --help``;
- the contract tests, which run over every family registered here.

Plain data: this module imports no other part of beyondlabels, so any layer may read it. A record names its classes
and functions by ``"module:attribute"`` references, imported only when asked for (:meth:`Family.load`).
Adding a family: ``docs/adding_a_metric_family.md``.

Examples:
    >>> retrieval = family("retrieval")
    >>> retrieval.prefix, retrieval.callback, retrieval.task.name
    ('retrieval', 'RetrievalEvalCallback', 'retrieval')
    >>> retrieval.load("metric").__name__
    'EmbeddingRetrieval'
    >>> [f.name for f in FAMILIES if f.callback is None]
    ['ranking', 'mismatch']
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FAMILIES",
    "TOOLS",
    "Family",
    "Task",
    "callback_families",
    "deprecated_callbacks",
    "family",
    "register",
    "resolve",
    "tasks",
]

_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def resolve(reference: str) -> Any:
    """The object a ``"module:attribute"`` reference names (the module is imported).

    Raises:
        ValueError: for a malformed reference, a module that cannot be imported or an attribute it lacks.
    """
    if not isinstance(reference, str) or not _REFERENCE.match(reference):
        raise ValueError(f"a family reference is 'module:attribute', got {reference!r}.")
    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"the family reference {reference!r} names a module that does not import: {exc}") from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"the family reference {reference!r}: module {module_name} has no {attribute!r}.") from None


@dataclass(frozen=True)
class Task:
    """A task of ``evaluate.py``: ``task=<name>`` runs ``<module>.run(cfg)`` with ``conf/task/<name>.yaml``.

    Args:
        name: The task's name (``task=<name>``).
        module: The module holding ``run(cfg) -> report``.
        usage: Command lines shown by ``python evaluate.py --help`` (each ``python evaluate.py task=<name> ...``,
            optionally followed by ``# what it does``).
    """

    name: str
    module: str
    usage: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"a task name is lower-case letters, digits and _, got {self.name!r}.")
        if not isinstance(self.module, str) or not _REFERENCE.match(f"{self.module}:run"):
            raise ValueError(f"task {self.name!r}: `module` must be a dotted module name, got {self.module!r}.")
        usage = (self.usage,) if isinstance(self.usage, str) else tuple(self.usage)
        wrong = [line for line in usage if not line.startswith(f"python evaluate.py task={self.name} ")]
        if not usage or wrong:
            raise ValueError(
                f"task {self.name!r}: `usage` lines start with 'python evaluate.py task={self.name} ', "
                f"got {wrong or usage!r}."
            )
        object.__setattr__(self, "usage", usage)

    @property
    def run(self) -> Any:
        """The task's ``run(cfg)`` (its module is imported)."""
        return resolve(f"{self.module}:run")


@dataclass(frozen=True)
class Family:
    """One evaluation family.

    Args:
        name: The family's name: the default prefix of its callback's keys and files, its config option
            ``conf/callbacks/<name>.yaml``.
        metric: ``"module:Class"`` of its :class:`~beyondlabels.metrics.PerSampleMetric`; the class's
            ``example()`` is a small evaluation of it, which the contract tests run.
        schema: ``"module:function"`` of its output schema (kind, direction, headline keys), in ``functional``.
        callback: The class name of its callback in both Lightning package modules (``<Name>EvalCallback``); None
            for a family evaluated offline only.
        core: ``"module:Class"`` of the callback's package-neutral core (an ``EvaluationCore``); with ``callback``.
        task: Its ``evaluate.py`` task (the task's name is the family's), or None.
        checkpoint_name: The class name in the callback's checkpoint state key (default ``callback``): kept when a
            callback is renamed, so that earlier checkpoints resume.
        deprecated_names: Earlier names of the callback, still importable (with a ``FutureWarning``, once).
    """

    name: str
    metric: str
    schema: str
    callback: str | None = None
    core: str | None = None
    task: Task | None = None
    checkpoint_name: str | None = None
    deprecated_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"a family name is lower-case letters, digits and _, got {self.name!r}.")
        for field in ("metric", "schema") + (("core",) if self.core is not None else ()):
            if not _REFERENCE.match(str(getattr(self, field))):
                value = getattr(self, field)
                raise ValueError(f"family {self.name!r}: `{field}` must be 'module:attribute', got {value!r}.")
        if (self.callback is None) != (self.core is None):
            raise ValueError(f"family {self.name!r}: give both `callback` (the class name) and `core`, or neither.")
        if self.callback is not None and not self.callback.endswith("EvalCallback"):
            raise ValueError(f"family {self.name!r}: callbacks are named <Name>EvalCallback, got {self.callback!r}.")
        if self.task is not None and self.task.name != self.name:
            raise ValueError(f"family {self.name!r}: its task is named after it, got task {self.task.name!r}.")
        object.__setattr__(self, "deprecated_names", tuple(self.deprecated_names))

    @property
    def prefix(self) -> str | None:
        """The default prefix of the callback's logged keys (``<prefix>/<key>``); None without a callback."""
        return self.name if self.callback is not None else None

    @property
    def config(self) -> str | None:
        """The callback's config file, relative to the repository (None without a callback)."""
        return f"conf/callbacks/{self.name}.yaml" if self.callback is not None else None

    @property
    def state_name(self) -> str | None:
        """The class name the callback's checkpoint state key starts with."""
        return self.checkpoint_name or self.callback

    def load(self, field: str) -> Any:
        """The object behind the reference ``field`` (``"metric"``, ``"schema"`` or ``"core"``), imported now."""
        if field not in ("metric", "schema", "core"):
            raise ValueError(f"`field` must be 'metric', 'schema' or 'core', got {field!r}.")
        reference = getattr(self, field)
        if reference is None:
            raise ValueError(f"family {self.name!r} has no {field} (it has no callback).")
        return resolve(reference)


def _task(name: str, *usage: str) -> Task:
    return Task(name, f"beyondlabels.tasks.{name}", usage)


FAMILIES: tuple[Family, ...] = (
    Family(
        name="retrieval",
        metric="beyondlabels.metrics.retrieval:EmbeddingRetrieval",
        schema="beyondlabels.functional.retrieval:retrieval_output_schema",
        callback="RetrievalEvalCallback",
        core="beyondlabels.callbacks.retrieval:RetrievalEvalCore",
        task=_task(
            "retrieval",
            "python evaluate.py task=retrieval input=embeddings.npz output=report.json k=[1,5,10]",
            "python evaluate.py task=retrieval input=embeddings.npz wandb=true     # also log an offline W&B run",
        ),
    ),
    Family(
        name="crossmodal",
        metric="beyondlabels.metrics.crossmodal:CrossModalRetrieval",
        schema="beyondlabels.functional.crossmodal:crossmodal_output_schema",
        callback="CrossModalEvalCallback",
        core="beyondlabels.callbacks.crossmodal:CrossModalEvalCore",
        task=_task(
            "crossmodal",
            "python evaluate.py task=crossmodal input=pairs.npz output=report.json   # image<->text recall@k and ranks",
        ),
    ),
    Family(
        name="hierarchy",
        metric="beyondlabels.metrics.hierarchy:HierarchicalPrecisionRecall",
        schema="beyondlabels.functional.hierarchy:hierarchy_output_schema",
        callback="HierarchyEvalCallback",
        core="beyondlabels.callbacks.hierarchy:HierarchyEvalCore",
        task=_task(
            "hierarchy",
            "python evaluate.py task=hierarchy taxonomy=tree.yaml predictions=preds.jsonl output=report.json"
            "   # hP / hR / hF",
        ),
    ),
    Family(
        name="rprecision",
        metric="beyondlabels.metrics.rprecision:TextImageRPrecision",
        schema="beyondlabels.functional.rprecision:rprecision_output_schema",
        callback="RPrecisionEvalCallback",
        core="beyondlabels.callbacks.rprecision:RPrecisionCore",
        task=_task(
            "rprecision",
            "python evaluate.py task=rprecision input=gen.npz num_candidates=100 top_r=[1,5,10] output=report.json",
        ),
        checkpoint_name="RPrecisionCallback",
        deprecated_names=("RPrecisionCallback",),
    ),
    Family(
        name="zeroshot",
        metric="beyondlabels.metrics.zeroshot:ZeroShotClassification",
        schema="beyondlabels.functional.zeroshot:zeroshot_output_schema",
        callback="ZeroShotEvalCallback",
        core="beyondlabels.callbacks.zeroshot:ZeroShotEvalCore",
    ),
    Family(
        name="ranking",
        metric="beyondlabels.metrics.ranking:GradedRanking",
        schema="beyondlabels.functional.ranking:ranking_output_schema",
        task=_task(
            "ranking",
            "python evaluate.py task=ranking run=run.txt qrels=qrels.txt k=[5,10] output=report.json"
            "   # graded qrels, unjudged",
        ),
    ),
    Family(
        name="mismatch",
        metric="beyondlabels.metrics.mismatch:LabelMismatchAnalysis",
        schema="beyondlabels.functional.mismatch:mismatch_output_schema",
        task=_task(
            "mismatch",
            "python evaluate.py task=mismatch pairs=pairs.csv profiles=profiles.yaml output=mismatch.json"
            "   # null, p-value",
        ),
    ),
)

# The tasks that belong to no family: the label audit (from the retrieval family's search), feature profiles, and the
# tasks that read finished runs.
TOOLS: tuple[Task, ...] = (
    _task(
        "audit",
        "python evaluate.py task=audit input=embeddings.npz output=audit.json"
        "   # suspected label errors, duplicates, outliers",
    ),
    _task(
        "profiles",
        "python evaluate.py task=profiles profiles=profiles.yaml output=profiles.json"
        "   # class similarity matrix, heatmap",
    ),
    _task(
        "compare",
        "python evaluate.py task=compare runs=[logs/train/runs/a,logs/train/runs/b] which=best output=cmp.json",
        "python evaluate.py task=compare runs=[logs/train/multiruns/<date>]   # a sweep: groups of seeds, per setting",
    ),
    _task(
        "abtest",
        "python evaluate.py task=abtest runs=[A,B,C] baseline=A metric=retrieval/precision@1"
        " guardrails=[retrieval/map@r]",
    ),
    _task(
        "select",
        "python evaluate.py task=select runs=[logs/train/runs/<date>] metric=retrieval/precision@1"
        "   # checkpoints as good as the best",
    ),
    _task(
        "report",
        "python evaluate.py task=report runs=[logs/train/multiruns/<date>] output=report.html   # self-contained HTML",
    ),
)


def _check_unique() -> None:
    names = [f.name for f in FAMILIES] + [t.name for t in TOOLS]
    callbacks = [n for f in FAMILIES for n in (f.callback, *f.deprecated_names) if n is not None]
    for what, values in (("family or task name", names), ("callback name", callbacks)):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ValueError(f"a {what} is declared twice in beyondlabels.families: {repeated}")


_check_unique()


# The modules whose names, classes or tasks are made from the registry when they are imported.
_DERIVED = (
    "beyondlabels.callbacks.pytorch_lightning",
    "beyondlabels.callbacks.lightning",
    "beyondlabels.tasks",
    "beyondlabels.reporting.prefixes",
)


def register(record: Family) -> None:
    """Add a family of your own (its modules outside beyondlabels) to the registry, before anything made from it is
    imported: its callback then comes with the others from both Lightning package modules, its task from
    ``evaluate.py``, its prefix from the prefix list. A family of beyondlabels itself is a record in
    :data:`FAMILIES` instead.

    Raises:
        ValueError: for a record that is not a :class:`Family`, or a name already taken.
        RuntimeError: when a module made from the registry is already imported (it would not see the family).
    """
    global FAMILIES
    if not isinstance(record, Family):
        raise ValueError(f"`record` must be a beyondlabels.families.Family, got {type(record).__name__}.")
    import sys

    early = [name for name in _DERIVED if name in sys.modules]
    if early:
        raise RuntimeError(
            f"register family {record.name!r} before importing {early}: they are made from the registry at import."
        )
    previous = FAMILIES
    FAMILIES = (*FAMILIES, record)
    try:
        _check_unique()
    except ValueError:
        FAMILIES = previous
        raise


def family(name: str) -> Family:
    """The family called ``name``.

    Raises:
        ValueError: for a name that is not a family (the message lists them).
    """
    for record in FAMILIES:
        if record.name == name:
            return record
    raise ValueError(f"`name` must be one of the families {[f.name for f in FAMILIES]}, got {name!r}.")


def callback_families() -> tuple[Family, ...]:
    """The families with a callback, in registry order."""
    return tuple(f for f in FAMILIES if f.callback is not None)


def tasks() -> tuple[Task, ...]:
    """Every ``evaluate.py`` task: the families' in registry order, then :data:`TOOLS`."""
    return tuple(f.task for f in FAMILIES if f.task is not None) + TOOLS


def deprecated_callbacks() -> dict[str, str]:
    """``{earlier name: current name}`` of every renamed callback."""
    return {old: f.callback for f in callback_families() for old in f.deprecated_names}
