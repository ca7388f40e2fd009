"""Headline keys and note keys travel with the output schema: every family declares its headline where it declares
its schema, it survives prefixing, merging and ``schema.json``, and a schema from elsewhere that names keys it does
not hold is an error naming them."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import pytest

import beyondlabels.functional
from beyondlabels.families import FAMILIES
from beyondlabels.io.run_files import read_evaluation_run
from beyondlabels.metrics import EmbeddingRetrieval
from beyondlabels.schema import KeySpec, OutputSchema

UP, DOWN, COUNT = KeySpec("scalar", True), KeySpec("scalar", False), KeySpec("scalar", None, count=True)


def _family_schema_functions() -> dict[str, object]:
    """Every ``*_output_schema`` function of the kernel modules, found by name: a new family is checked unasked."""
    found = {}
    for info in pkgutil.iter_modules(beyondlabels.functional.__path__):
        module = importlib.import_module(f"beyondlabels.functional.{info.name}")
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if name.endswith("_output_schema") and function.__module__ == module.__name__:
                found[f"{info.name}.{name}"] = function
    return found


def _with_registered(found: dict[str, object]) -> dict[str, object]:
    """``found`` plus the schema of every family of the registry (:mod:`beyondlabels.families`) not among them (a
    family whose kernels live outside ``beyondlabels.functional``)."""
    extra = {f"{f.name}.registered": f.load("schema") for f in FAMILIES if f.load("schema") not in found.values()}
    return {**found, **extra}


FAMILY_SCHEMAS = _with_registered(_family_schema_functions())


def test_every_kernel_schema_function_belongs_to_a_registered_family():
    """A family's schema found in the kernels but missing from the registry is a family the contract tests skip."""
    registered = [family.load("schema") for family in FAMILIES]
    assert [name for name, function in FAMILY_SCHEMAS.items() if function not in registered] == []


@pytest.mark.parametrize("name", sorted(FAMILY_SCHEMAS))
def test_every_family_declares_a_headline_of_scalars_with_a_direction(name: str):
    function = FAMILY_SCHEMAS[name]
    ks = inspect.signature(function).parameters.get("ks")
    needs_ks = ks is not None and ks.default is inspect.Parameter.empty
    schema = function((1, 5, 10)) if needs_ks else function()
    assert 1 <= len(schema.headline) <= 6, schema.headline
    for key in schema.headline:
        assert schema[key].kind == "scalar" and schema.mode(key) is not None, key


def test_the_headlines_the_issue_names():
    from beyondlabels.functional.crossmodal import crossmodal_output_schema
    from beyondlabels.functional.hierarchy import hierarchy_output_schema
    from beyondlabels.functional.retrieval import retrieval_output_schema
    from beyondlabels.functional.rprecision import rprecision_output_schema
    from beyondlabels.functional.zeroshot import zeroshot_output_schema

    assert retrieval_output_schema((1, 5, 10)).headline == ["precision@1", "r_precision", "map@r", "ndcg@10"]
    assert retrieval_output_schema((5, 10), deep_metrics=False).headline == ["precision@5", "precision@10", "ndcg@10"]
    assert crossmodal_output_schema((1, 5, 10)).headline == [
        "image_to_text_recall@1",
        "image_to_text_recall@5",
        "text_to_image_recall@1",
        "text_to_image_recall@5",
    ]
    assert zeroshot_output_schema((1, 5)).headline == ["top1", "balanced_accuracy"]
    assert hierarchy_output_schema().headline == ["hP", "hR", "hF"]
    assert rprecision_output_schema().headline == ["r_precision", "text_to_image_r_precision"]


def test_a_metric_keeps_its_family_headline_and_the_audit_adds_its_notes():
    metric = EmbeddingRetrieval(ks=(1, 5, 10), audit={"k": 5})
    schema = metric.output_schema()
    assert schema.headline == ["precision@1", "r_precision", "map@r", "ndcg@10"]
    assert schema.notes == {
        "audit_num_suspects": "suspected label errors",
        "audit_num_outliers": "outliers",
        "audit_num_cross_label_duplicates": "cross-label duplicates",
    }
    assert EmbeddingRetrieval(ks=(1,)).output_schema().notes == {}


def test_headline_and_notes_survive_prefix_merge_and_json():
    keys = {"a": UP, "b": DOWN, "n": COUNT, "c": KeySpec("curve", True)}
    schema = OutputSchema(keys, headline=["b", "a"], notes={"n": "items"})
    other = OutputSchema({"z": UP, "a": UP}, headline=["z", "a"], notes={})
    merged = schema.merged(other)
    assert merged.headline == ["b", "a", "z"] and merged.notes == {"n": "items"}
    prefixed = schema.prefixed("fam")
    assert prefixed.headline == ["fam/b", "fam/a"] and prefixed.notes == {"fam/n": "items"}
    data = json.loads(json.dumps(schema.to_json()))
    assert data["headline"] == ["b", "a"] and data["notes"] == {"n": "items"}
    assert OutputSchema.from_json(data) == schema
    assert OutputSchema.from_json(data) != OutputSchema(keys)
    # a key another schema turns into a curve leaves the headline
    assert schema.merged(OutputSchema({"a": KeySpec("curve", True)})).headline == ["b"]


def test_a_schema_written_before_headlines_reads_with_none():
    old = {"keys": {"map@r": {"kind": "scalar", "higher_is_better": True, "count": False}}, "per_query": {}}
    schema = OutputSchema.from_json(old)
    assert schema.headline == [] and schema.notes == {}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"headline": ["missing"]}, r"`headline` names \['missing'\], which are not scalar keys"),
        ({"headline": ["c"]}, r"`headline` names \['c'\]"),  # a curve
        ({"headline": "a"}, "the string 'a'"),
        ({"headline": ["a", "a"]}, "repeats a key"),
        ({"notes": {"zz": "x"}}, r"`notes` names \['zz'\]"),
        ({"notes": {"n": ""}}, "non-empty label"),
    ],
)
def test_headline_and_notes_must_name_scalar_keys(kwargs: dict, match: str):
    with pytest.raises(ValueError, match=match):
        OutputSchema({"a": UP, "n": COUNT, "c": KeySpec("curve", True)}, **kwargs)


def test_a_schema_json_from_elsewhere_with_a_bad_headline_names_the_file(tmp_path):
    folder = tmp_path / "run" / "retrieval"
    folder.mkdir(parents=True)
    (folder / "history.jsonl").write_text(json.dumps({"step": 1, "epoch": 0, "a": 0.5}) + "\n")
    keys = {"a": {"kind": "scalar", "higher_is_better": True, "count": False}}
    for bad in (
        {"keys": keys, "headline": ["b"]},
        {"keys": keys, "headline": "a"},
        {"keys": keys, "notes": ["a"]},
        {"keys": keys, "headline": [["a"]]},
    ):
        (folder / "schema.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match="schema.json"):
            read_evaluation_run(folder)
