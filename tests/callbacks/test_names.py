"""One naming rule: a family's callback is ``<Name>EvalCallback`` in both Lightning package modules and in
``beyondlabels.callbacks``; an earlier name (``RPrecisionCallback``, ``RankingAudit``) still imports, is the same
class, and warns once per process; the renamed classes keep their checkpoint state keys."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from beyondlabels.families import callback_families, deprecated_callbacks

MODULES = ("beyondlabels.callbacks", "beyondlabels.callbacks.pytorch_lightning", "beyondlabels.callbacks.lightning")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )


def test_every_family_callback_follows_the_rule_in_every_module():
    pytest.importorskip("lightning.pytorch")
    import importlib

    for name in MODULES:
        module = importlib.import_module(name)
        for family in callback_families():
            assert family.callback.endswith("EvalCallback") and family.callback in module.__all__, (name, family.name)
            cls = getattr(module, family.callback)
            assert cls.__name__ == cls.__qualname__ == family.callback and cls.__doc__, (name, family.name)
        assert not set(deprecated_callbacks()) & set(module.__all__), "an earlier name is not exported"


def test_earlier_callback_name_is_the_same_class_and_warns_once():
    result = _run("""
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            from beyondlabels.callbacks import RPrecisionCallback
            from beyondlabels.callbacks import RPrecisionCallback as again
        from beyondlabels.callbacks import RPrecisionEvalCallback
        assert RPrecisionCallback is again is RPrecisionEvalCallback
        future = [w for w in caught if issubclass(w.category, FutureWarning)]
        assert len(future) == 1, [str(w.message) for w in future]
        assert "RPrecisionCallback is now called RPrecisionEvalCallback" in str(future[0].message)
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_earlier_metric_name_is_the_same_class_and_warns_once():
    result = _run("""
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            from beyondlabels.metrics import RankingAudit
            from beyondlabels.metrics.ranking import RankingAudit as again
        from beyondlabels.metrics import GradedRanking
        assert RankingAudit is again is GradedRanking
        future = [w for w in caught if issubclass(w.category, FutureWarning)]
        assert len(future) == 1 and "RankingAudit is now called GradedRanking" in str(future[0].message), future
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_unknown_names_are_attribute_errors():
    import beyondlabels.callbacks as callbacks
    import beyondlabels.metrics as metrics

    for module in (callbacks, metrics):
        with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
            module.Nope  # noqa: B018
