"""TSV edge lists, the DAG -> tree rule (longest chain, ties by name), YAML with several parents, WordNet 3.0 nouns,
and the ancestor table / LCA structure against independent oracles."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from beyondlabels.functional import hierarchical_precision_recall
from beyondlabels.io.taxonomy_files import (
    find_wordnet_dir,
    load_taxonomy,
    load_wordnet,
    read_taxonomy,
    read_tsv,
    wordnet_lemmas,
)
from beyondlabels.taxonomy import Taxonomy, dag_to_tree, taxonomy_from_edges


def longest_chain(parents: dict[str, list[str]], node: str) -> int:
    """Oracle: length of the longest parent chain from ``node`` to a node without parents (plain recursion)."""
    ups = parents.get(node, [])
    return 0 if not ups else 1 + max(longest_chain(parents, p) for p in ups)


def random_dag(seed: int, size: int) -> dict[str, list[str]]:
    rng = random.Random(seed)
    names = [f"v{x}" for x in rng.sample(range(10 * size), size)]
    parents = {}
    for i in range(1, size):
        k = 1 if rng.random() < 0.6 else rng.randint(2, 3)
        parents[names[i]] = sorted({names[rng.randrange(0, i)] for _ in range(k)})
    return parents


# ---- DAG -> tree -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dag_rule_keeps_a_parent_on_the_longest_chain_with_ties_by_name(seed):
    parents = random_dag(seed, 120)
    tree, root = dag_to_tree(parents)
    tax = Taxonomy(tree, root)
    for child, ups in parents.items():
        level = {p: longest_chain(parents, p) for p in ups}
        best = max(level.values())
        assert tree[child] == min(p for p in ups if level[p] == best), child
        assert int(tax.depth[tax.index(child)]) == longest_chain(parents, child)
    # the order of edges and of parents does not matter
    rng = random.Random(seed)
    items = [(c, list(reversed(ps))) for c, ps in parents.items()]
    rng.shuffle(items)
    assert dag_to_tree(dict(items)) == (tree, root)


def test_dag_tie_is_broken_by_the_smaller_name():
    tree, root = dag_to_tree({"x": ["p2", "p1"], "p1": ["r"], "p2": ["r"]})
    assert root == "r" and tree["x"] == "p1"


def test_dag_errors_name_the_nodes():
    with pytest.raises(ValueError, match=r"cycle through .*'b'.*'c'"):
        dag_to_tree({"b": ["a", "c"], "c": ["b"]})
    with pytest.raises(ValueError, match=r"cycle through .*'a'"):
        dag_to_tree({"a": ["a"], "b": ["r"]})
    with pytest.raises(ValueError, match=r"several roots .*'r1', 'r2'"):
        dag_to_tree({"a": ["r1"], "b": ["r2"]})
    with pytest.raises(ValueError, match=r"the root 'a' has parents 'r'"):
        dag_to_tree({"a": ["r"]}, root="a")
    with pytest.raises(ValueError, match="every node has a parent"):
        dag_to_tree({"a": ["b"], "b": ["a"]})
    with pytest.raises(ValueError, match="non-empty strings"):
        dag_to_tree({"a": [""]})


def test_yaml_mapping_may_list_several_parents(tmp_path: Path):
    file = tmp_path / "dag.yaml"
    file.write_text("root: r\nparent:\n  a: r\n  b: a\n  x: [r, b]\n")
    tax = read_taxonomy(file)
    assert tax.ancestors("x") == ["x", "b", "a", "r"]


# ---- TSV -------------------------------------------------------------------------------------------------------------


def test_tsv_edge_list(tmp_path: Path):
    file = tmp_path / "tree.tsv"
    file.write_text("# child\tparent\n\nb\ta\nc\tb\nd\ta\nd\tc\nc\tb\n")
    tax = read_tsv(file)
    assert tax == load_taxonomy(file) == taxonomy_from_edges([("b", "a"), ("c", "b"), ("d", "c")])
    assert tax.ancestors("d") == ["d", "c", "b", "a"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("b\ta\nc b\n", r"line 2: expected 'child<TAB>parent'"),
        ("b\ta\nc\t\n", r"line 2: expected"),
        ("b\ta\tx\n", r"line 1: expected"),
        ("# nothing\n", "holds no 'child<TAB>parent' lines"),
        ("b\ta\nc\td\n", r"several roots .*'a', 'd'"),
        ("b\ta\na\tb\nc\tr\n", r"cycle"),
    ],
)
def test_tsv_errors_name_the_file_and_line(tmp_path: Path, text, match):
    file = tmp_path / "bad.tsv"
    file.write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        read_tsv(file)
    assert str(file) in str(info.value)


# ---- ancestor table and LCA structure --------------------------------------------------------------------------------


@pytest.mark.parametrize(("seed", "size", "window"), [(0, 2, 1), (1, 60, 3), (2, 150, 150), (3, 300, 2)])
def test_ancestor_table_and_lca_structure_match_the_ancestor_lists(seed, size, window):
    rng = random.Random(seed)
    names = [f"n{x}" for x in rng.sample(range(10 * size), size)]
    tax = Taxonomy({names[i]: names[rng.randrange(max(0, i - window), i)] for i in range(1, size)}, names[0])
    table = tax.ancestor_table()
    for v, name in enumerate(tax.nodes):
        chain = [tax.index(a) for a in reversed(tax.ancestors(name))]
        assert table[v, : len(chain)].tolist() == chain and (table[v, len(chain) :] == -1).all()
    first, sparse, log2 = tax.lca_structure()
    assert first.shape == (size,) and sparse.shape[1] == 2 * size - 1 and int(log2[1]) == 0
    assert (sparse[0] // size).min() == 0  # the root (depth 0) is on the tour


# ---- WordNet 3.0 nouns -----------------------------------------------------------------------------------------------

try:
    WORDNET = find_wordnet_dir()
except FileNotFoundError as _err:
    WORDNET = None
    _REASON = (
        f"WordNet 3.0 files are not installed ({_err}); `make test` installs Debian's wordnet-base where apt works"
    )
else:
    _REASON = ""
needs_wordnet = pytest.mark.skipif(WORDNET is None, reason=_REASON)


@needs_wordnet
def test_wordnet_nouns_load_as_a_tree_named_like_nltk():
    tax = load_wordnet()
    assert len(tax) == 82115 and tax.root == "entity.n.01"
    assert tax.ancestors("train.n.01")[:3] == ["train.n.01", "public_transport.n.01", "conveyance.n.03"]
    assert tax.ancestors("norway_spruce.n.01")[:3] == ["norway_spruce.n.01", "spruce.n.02", "conifer.n.01"]
    # NLTK's canonical names: the first lemma of the synset with its sense number in index.noun
    assert "bank.n.01" in tax and "bank.n.02" not in tax and "depository_financial_institution.n.01" in tax
    assert "dog.n.01" in tax and tax.ancestors("dog.n.01")[1] == "canine.n.02"
    assert load_taxonomy("wordnet") is tax  # cached
    lemmas = wordnet_lemmas()
    assert lemmas["dog.n.01"][:2] == ["dog", "domestic dog"]


@needs_wordnet
def test_wordnet_train_predicted_as_conveyance():
    tax = load_wordnet()
    out = hierarchical_precision_recall(tax.indices(["conveyance.n.03"]), tax.indices(["train.n.01"]), tax)
    assert float(out["hP"]) == 1.0 and float(out["hR"]) == 0.75


@needs_wordnet
def test_wordnet_dag_rule_on_a_node_with_two_hypernyms():
    # person.n.01 has the hypernyms causal_agent.n.01 and organism.n.01; organism is on the longer chain
    # (organism -> living_thing -> whole -> object -> physical_entity -> entity, five links, against causal_agent's
    # causal_agent -> physical_entity -> entity)
    tax = load_wordnet()
    assert tax.ancestors("person.n.01")[1] == "organism.n.01"


def test_missing_wordnet_folder_says_how_to_install(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="apt-get install wordnet-base"):
        find_wordnet_dir(tmp_path)


def test_load_taxonomy_names_the_accepted_sources():
    with pytest.raises(ValueError, match="or 'wordnet'"):
        load_taxonomy(3)
    with pytest.raises(ValueError, match="unsupported suffix"):
        load_taxonomy("demo")  # the demo's tree is beyondlabels.demo.demo_taxonomy(), not a loader source
