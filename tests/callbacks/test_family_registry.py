"""The family registry's records check themselves (names, references, the callback naming rule), and registering a
family of one's own refuses what would silently not take effect."""

from __future__ import annotations

import pytest

from beyondlabels.families import (
    FAMILIES,
    Family,
    Task,
    family,
    register,
    resolve,
    tasks,
)


def test_records_check_their_fields():
    with pytest.raises(ValueError, match="callbacks are named <Name>EvalCallback"):
        Family("toy", "m:Metric", "m:schema", callback="ToyCallback", core="m:Core")
    with pytest.raises(ValueError, match="give both `callback`"):
        Family("toy", "m:Metric", "m:schema", callback="ToyEvalCallback")
    with pytest.raises(ValueError, match="`metric` must be 'module:attribute'"):
        Family("toy", "m.Metric", "m:schema")
    with pytest.raises(ValueError, match="its task is named after it"):
        Family("toy", "m:Metric", "m:schema", task=Task("other", "m", ("python evaluate.py task=other x=1",)))
    with pytest.raises(ValueError, match="`usage` lines start with 'python evaluate.py task=toy '"):
        Task("toy", "m", ("python train.py",))


def test_lookups_and_references():
    assert family("retrieval").load("metric") is resolve("beyondlabels.metrics.retrieval:EmbeddingRetrieval")
    with pytest.raises(ValueError, match="`name` must be one of the families"):
        family("nope")
    with pytest.raises(ValueError, match="has no 'Nope'"):
        resolve("beyondlabels.metrics:Nope")
    names = [t.name for t in tasks()]
    assert len(names) == len(set(names)) and {f.task.name for f in FAMILIES if f.task} <= set(names)


def test_register_refuses_what_would_not_take_effect():
    import beyondlabels.callbacks.pytorch_lightning  # noqa: F401 - made from the registry at import

    with pytest.raises(ValueError, match="must be a beyondlabels.families.Family"):
        register("toy")
    before = FAMILIES
    with pytest.raises(RuntimeError, match="register family 'toy' before importing"):
        register(Family("toy", "m:Metric", "m:schema"))
    from beyondlabels import families

    assert families.FAMILIES == before


@pytest.mark.parametrize(
    "module_name", ["beyondlabels.callbacks.pytorch_lightning", "beyondlabels.callbacks.lightning"]
)
def test_every_family_has_a_class_statement_in_both_package_modules(module_name: str):
    """A reader (and a type checker) finds each callback as a class statement of the package module, built on its
    family's core and on the module's EvaluationCallback; the registry only checks them."""
    import importlib
    import inspect
    from pathlib import Path

    module = importlib.import_module(module_name)
    source = Path(inspect.getfile(module)).read_text(encoding="utf-8")
    evaluation = module.EvaluationCallback
    names = ["EvaluationCallback", "ConvergenceMonitor"]
    for record in FAMILIES:
        if record.callback is None:
            continue
        names.append(record.callback)
        cls = getattr(module, record.callback)
        assert issubclass(cls, record.load("core")) and issubclass(cls, evaluation), record.name
        assert cls.__doc__ == record.load("core").__doc__, record.name
    for name in names:
        assert f"\nclass {name}(" in source, f"{module_name} has no class statement for {name}"
        assert getattr(module, name).__module__ == module_name


def test_the_registry_check_names_what_differs():
    import pytorch_lightning as pl

    from beyondlabels.callbacks import _classes, pytorch_lightning

    namespace = dict(vars(pytorch_lightning))
    namespace.pop("ZeroShotEvalCallback")
    with pytest.raises(TypeError, match="no class statement for the family 'zeroshot': add ZeroShotEvalCallback"):
        _classes.package_classes(namespace, pl.Callback, pytorch_lightning.__name__)
    namespace = dict(vars(pytorch_lightning), RetrievalEvalCallback=pytorch_lightning.CrossModalEvalCallback)
    with pytest.raises(TypeError, match="RetrievalEvalCallback is not the callback.*RetrievalEvalCore"):
        _classes.package_classes(namespace, pl.Callback, pytorch_lightning.__name__)

    class RPrecisionEvalCallback(pytorch_lightning.RPrecisionEvalCallback):
        checkpoint_name = "Other"

    RPrecisionEvalCallback.__module__ = pytorch_lightning.__name__
    namespace = dict(vars(pytorch_lightning), RPrecisionEvalCallback=RPrecisionEvalCallback)
    with pytest.raises(TypeError, match="checkpoint name is not 'RPrecisionCallback'"):
        _classes.package_classes(namespace, pl.Callback, pytorch_lightning.__name__)
    assert _classes.package_classes(dict(vars(pytorch_lightning)), pl.Callback, pytorch_lightning.__name__) == {}
