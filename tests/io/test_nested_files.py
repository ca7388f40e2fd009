"""A taxonomy, a profiles file or a predictions file nested a hundred thousand deep is a ValueError naming the file,
not a RecursionError; a YAML file whose aliases expand beyond bounds, or that contains itself, likewise."""

from __future__ import annotations

from pathlib import Path

import pytest

from beyondlabels.io.predictions import read_hierarchy_predictions
from beyondlabels.io.profiles_files import read_profiles
from beyondlabels.io.taxonomy_files import read_taxonomy
from beyondlabels.taxonomy import Taxonomy

DEEP = "[" * 100_000 + "]" * 100_000
BOMB = "\n".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 12)]
)


@pytest.mark.parametrize(
    "name, text",
    [
        ("t.json", '{"root": "a", "parent": {"b": ' + DEEP + "}}"),
        ("t.yaml", "root: a\nparent:\n  b: " + DEEP + "\n"),
        ("t.yaml", "root: a\nparent: {b: a}\n" + BOMB + "\n"),
        ("t.yaml", "root: a\nparent: &p {b: *p}\n"),
    ],
)
def test_a_taxonomy_nested_too_deep_or_too_large_names_the_file(tmp_path: Path, name, text):
    (tmp_path / name).write_text(text)
    with pytest.raises(
        ValueError, match=rf"{name}.*(nested more than|aliases are expanded|contains itself|could not be parsed)"
    ):
        read_taxonomy(tmp_path / name)


@pytest.mark.parametrize("name", ["p.json", "p.yaml"])
def test_a_profiles_file_nested_too_deep_names_the_file(tmp_path: Path, name):
    (tmp_path / name).write_text('{"features": {}, "classes": ' + DEEP + "}")
    with pytest.raises(ValueError, match=rf"{name}.*nested more than"):
        read_profiles(tmp_path / name)


def test_a_predictions_line_nested_too_deep_names_the_file_and_line(tmp_path: Path):
    (tmp_path / "p.jsonl").write_text('{"gt": "b", "pred": "a"}\n{"gt": "b", "pred": ' + DEEP + "}\n")
    with pytest.raises(ValueError, match=r"p\.jsonl', line 2.*nested more than"):
        read_hierarchy_predictions(tmp_path / "p.jsonl", Taxonomy({"b": "a"}, root="a"))
