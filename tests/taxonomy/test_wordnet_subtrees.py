"""WordNet subtrees, lemma node texts and the labelled answers built from the dictionary files, against a reader of
``data.noun`` written here from the file format (hyponym pointers ``~`` / ``~i``, not the hypernyms the loader
reads)."""

from __future__ import annotations

import warnings
from functools import lru_cache
from pathlib import Path

import pytest

from beyondlabels.io.taxonomy_files import (
    find_wordnet_dir,
    load_node_texts,
    load_taxonomy,
    load_wordnet,
    wordnet_glosses,
    wordnet_lemmas,
    wordnet_mapping_cases,
)
from beyondlabels.taxonomy import Taxonomy

try:
    WORDNET = find_wordnet_dir()
except FileNotFoundError as _err:
    WORDNET, _REASON = None, f"WordNet 3.0 files are not installed ({_err}); apt-get install wordnet-base"
else:
    _REASON = ""
pytestmark = pytest.mark.skipif(WORDNET is None, reason=_REASON)


@lru_cache(maxsize=1)
def oracle() -> tuple[dict[str, set[str]], dict[str, list[str]], dict[str, str], dict[str, set[str]]]:
    """``(hyponyms, lemmas, glosses, hypernyms)`` by synset name, straight from the files."""
    sense: dict[tuple[str, str], int] = {}
    for line in (WORDNET / "index.noun").read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(" "):
            continue
        fields = line.split()
        for number, offset in enumerate(fields[-int(fields[2]) :], start=1):
            sense[(fields[0], offset)] = number
    rows = {}
    for line in (WORDNET / "data.noun").read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(" "):
            continue
        head, gloss = line.split(" | ", 1)
        fields = head.split()
        words = fields[4 : 4 + 2 * int(fields[3], 16) : 2]
        at = 4 + 2 * int(fields[3], 16)
        pointers = [fields[at + 1 + 4 * i : at + 5 + 4 * i] for i in range(int(fields[at]))]
        rows[fields[0]] = (words, pointers, gloss.strip())
    name = {o: f"{w[0].lower()}.n.{sense[(w[0].lower(), o)]:02d}" for o, (w, _, _) in rows.items()}
    down: dict[str, set[str]] = {n: set() for n in name.values()}
    up: dict[str, set[str]] = {n: set() for n in name.values()}
    for offset, (_, pointers, _) in rows.items():
        for symbol, target, pos, _ in pointers:
            if pos == "n" and symbol in ("~", "~i"):
                down[name[offset]].add(name[target])
            if pos == "n" and symbol in ("@", "@i"):
                up[name[offset]].add(name[target])
    lemmas = {name[o]: [x.replace("_", " ") for x in w] for o, (w, _, _) in rows.items()}
    glosses = {name[o]: g for o, (_, _, g) in rows.items()}
    return down, lemmas, glosses, up


def descendants(root: str) -> set[str]:
    down = oracle()[0]
    seen, stack = set(), [root]
    while stack:
        for child in down[stack.pop()]:
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def test_a_subtree_is_the_whole_trees_subtree_and_says_what_it_leaves_out():
    whole = load_wordnet()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vehicles = load_taxonomy("wordnet", root="vehicle.n.01")  # every hyponym stays: no warning
    assert vehicles.root == "vehicle.n.01" and set(vehicles.nodes[1:]) == descendants("vehicle.n.01")
    for node in vehicles.nodes[1:]:
        assert vehicles.ancestors(node) == whole.ancestors(node)[: len(vehicles.ancestors(node))]
    with pytest.warns(UserWarning) as caught:
        food = load_taxonomy("wordnet", root="food.n.02")
    below = descendants("food.n.02")
    kept = {n for n in whole.nodes if "food.n.02" in whole.ancestors(n)[1:]}
    assert set(food.nodes[1:]) == kept and len(below) == 1120
    message = str(caught[0].message)
    assert f"{len(below - kept)} of its {len(below)} hyponyms are left out" in message and "hyponyms='all'" in message
    assert len(below - kept) == 366


def test_every_hyponym_can_be_kept_with_the_longest_chain_inside_the_subtree():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        food = load_wordnet(root="food.n.02", hyponyms="all")
    inside = descendants("food.n.02") | {"food.n.02"}
    assert set(food.nodes) == inside
    up = oracle()[3]
    level: dict[str, int] = {"food.n.02": 0}

    def longest(node: str) -> int:  # the longest chain of hypernyms inside the subtree (memoised recursion)
        if node not in level:
            level[node] = 1 + max(longest(p) for p in up[node] if p in inside)
        return level[node]

    for node in food.nodes[1:]:
        parent = food.ancestors(node)[1]
        assert parent in up[node] and longest(node) == len(food.ancestors(node)) - 1


def test_lemmas_glosses_and_answers_come_from_the_files():
    tax = load_wordnet(root="musical_instrument.n.01")
    _, lemmas, glosses, _ = oracle()
    assert wordnet_lemmas(nodes=tax) == {n: lemmas[n] for n in tax.nodes}
    assert wordnet_glosses(nodes=["car.n.01"])["car.n.01"].startswith("a motor vehicle with four wheels;")
    cases = wordnet_mapping_cases(tax)
    names = {n.split(".n.")[0].replace("_", " ").lower() for n in tax.nodes}
    for text, gold, kind in cases:
        assert gold in tax and gold != tax.root
        if kind == "synonym":
            assert text in lemmas[gold][1:] and text.lower() not in names
        elif kind == "gloss":
            assert glosses[gold].startswith(text) and ";" not in text
        else:
            assert text == f"a kind of {lemmas[tax.ancestors(gold)[1]][0]}"
    kinds = {k for _, _, k in cases}
    assert kinds == {"synonym", "gloss", "kind_of"}
    assert sum(k == "kind_of" for _, _, k in cases) == len(tax) - 1
    assert {c for c in cases if c[2] == "gloss"} == set(wordnet_mapping_cases(tax, kinds=["gloss"]))


def test_node_texts_from_a_config():
    tax = load_wordnet(root="car.n.01")
    texts = load_node_texts("wordnet_lemmas", tax)
    assert set(texts) == set(tax.nodes) and "automobile" in texts["car.n.01"]
    other = Taxonomy({"b": "a"}, root="a")
    with pytest.raises(ValueError, match="node_texts='wordnet_lemmas': .* not WordNet noun synsets"):
        load_node_texts("wordnet_lemmas", other)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"root": "no_such.n.01"}, "is not a WordNet noun synset"),
        ({"root": "car.n.01", "hyponyms": "some"}, "`hyponyms` must be 'tree'"),
        ({"root": "minivan.n.01"}, "has no hyponyms"),
    ],
)
def test_bad_subtrees_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_wordnet(**kwargs)


def test_subtrees_of_any_taxonomy(tmp_path: Path):
    tree = {"root": "a", "parent": {"b": "a", "c": "b", "d": "b", "e": "a"}}
    assert load_taxonomy(tree, root="b").to_dict() == {"root": "b", "parent": {"c": "b", "d": "b"}}
    assert load_taxonomy(tree, root="a") == load_taxonomy(tree)
    with pytest.raises(ValueError, match="`root`: 'e' is a leaf"):
        load_taxonomy(tree, root="e")
    with pytest.raises(ValueError, match="`root`: unknown taxonomy node"):
        load_taxonomy(tree, root="z")
    with pytest.raises(ValueError, match="`root` must be a node name"):
        load_taxonomy(tree, root=3)
