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
