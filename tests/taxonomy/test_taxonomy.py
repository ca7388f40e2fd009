"""Taxonomy: node order, depth, ancestors and LCA against a pure-Python oracle; loading; every validation error."""

from __future__ import annotations

import json
import random
import re
from importlib import resources
from pathlib import Path

import pytest
import torch
import yaml

from beyondlabels.demo import CLASS_NAMES, ancestors, demo_taxonomy, taxonomy_dict  # noqa: E402
from beyondlabels.io.taxonomy_files import load_taxonomy, read_taxonomy  # noqa: E402
from beyondlabels.taxonomy import Taxonomy  # noqa: E402
from tests.gpu.devices import accelerator_device, needs_accelerator

# --------------------------------------------------------------------------------------------------------------------
# pure-Python oracle on {child: parent} dicts
# --------------------------------------------------------------------------------------------------------------------


def oracle_ancestors(parent: dict[str, str], root: str, node: str) -> list[str]:
    path = [node]
    while path[-1] != root:
        path.append(parent[path[-1]])
    return path


def oracle_lca(parent: dict[str, str], root: str, a: str, b: str) -> str:
    on_b = set(oracle_ancestors(parent, root, b))
    return next(x for x in oracle_ancestors(parent, root, a) if x in on_b)


def random_tree(seed: int, size: int, window: int) -> tuple[dict[str, str], str]:
    """A random tree whose names sort unlike their creation order; small ``window`` gives deep, chain-like trees."""
    rng = random.Random(seed)
    names = [f"n{x}" for x in rng.sample(range(10 * size), size)]
    parent = {names[i]: names[rng.randrange(max(0, i - window), i)] for i in range(1, size)}
    items = list(parent.items())
    rng.shuffle(items)  # the mapping's order must not matter
    return dict(items), names[0]


TREES = [(0, 2, 1), (1, 40, 3), (2, 60, 60), (3, 200, 2), (4, 150, 10)]


# --------------------------------------------------------------------------------------------------------------------
# structure against the oracle
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seed", "size", "window"), TREES)
def test_structure_matches_oracle_on_random_trees(seed, size, window):
    parent, root = random_tree(seed, size, window)
    tax = Taxonomy(parent, root)
    depth = {n: len(oracle_ancestors(parent, root, n)) - 1 for n in [root, *parent]}

    assert len(tax) == size and tax.root == root and tax.nodes[0] == root
    assert list(tax.nodes) == sorted(depth, key=lambda n: (depth[n], n))
    assert tax.depth.tolist() == [depth[n] for n in tax.nodes]
    assert tax.max_depth == max(depth.values())
    assert tax.parent_index.tolist() == [-1] + [tax.nodes.index(parent[n]) for n in tax.nodes[1:]]
    assert tax.leaves == tuple(n for n in tax.nodes if n not in set(parent.values()))
    for name in tax.nodes:
        assert tax.ancestors(name) == oracle_ancestors(parent, root, name)
        assert name in tax and tax.nodes[tax.index(name)] == name
    assert "not-a-node" not in tax and 3 not in tax


@pytest.mark.parametrize(("seed", "size", "window"), TREES)
@pytest.mark.parametrize("include_root", [False, True])
def test_ancestor_matrix_matches_oracle(seed, size, window, include_root):
    parent, root = random_tree(seed, size, window)
    tax = Taxonomy(parent, root)
    expected = torch.zeros(size, size, dtype=torch.bool)
    for v, name in enumerate(tax.nodes):
        for anc in oracle_ancestors(parent, root, name):
            if include_root or anc != root:
                expected[v, tax.index(anc)] = True
    got = tax.ancestor_matrix(include_root=include_root)
    assert got.dtype == torch.bool and got.shape == (size, size)
    assert torch.equal(got, expected)


@pytest.mark.parametrize(("seed", "size", "window", "min_depth"), [(7, 300, 4, 20), (8, 120, 120, 4)])
def test_lca_on_10000_random_pairs_matches_oracle(seed, size, window, min_depth):
    # a deep chain-like tree, and a bushy one where many pairs of deepest nodes meet only at the root
    parent, root = random_tree(seed=seed, size=size, window=window)
    tax = Taxonomy(parent, root)
    assert tax.max_depth >= min_depth
    gen = torch.Generator().manual_seed(11)
    a = torch.randint(len(tax), (10_000,), generator=gen)
    b = torch.randint(len(tax), (10_000,), generator=gen)
    b[:500] = a[:500]  # equal pairs
    deepest = (tax.depth == tax.max_depth).nonzero().flatten()
    a[500:1500] = deepest[torch.randint(len(deepest), (1000,), generator=gen)]  # pairs of deepest nodes
    b[500:1500] = deepest[torch.randint(len(deepest), (1000,), generator=gen)]
    got = tax.lowest_common_ancestor(a, b)
    expected = [tax.index(oracle_lca(parent, root, tax.nodes[i], tax.nodes[j])) for i, j in zip(a.tolist(), b.tolist())]
    assert got.dtype == torch.long and got.shape == (10_000,)
    assert got.tolist() == expected
    # symmetric, and broadcasting gives the same values in the broadcast shape
    assert torch.equal(tax.lowest_common_ancestor(b, a), got)
    grid = tax.lowest_common_ancestor(a[:50, None].int(), b[None, :40])
    assert grid.shape == (50, 40)
    assert grid[7, 13] == tax.index(oracle_lca(parent, root, tax.nodes[int(a[7])], tax.nodes[int(b[13])]))


def test_lca_special_pairs():
    tax = Taxonomy({"b": "a", "c": "a", "d": "b", "e": "d", "f": "c", "g": "f", "h": "d"}, root="a")
    pairs = {
        ("e", "e"): "e",
        ("e", "b"): "b",
        ("b", "e"): "b",
        ("e", "f"): "a",
        ("a", "e"): "a",
        ("d", "e"): "d",
        ("e", "g"): "a",  # both at the largest depth, meeting only at the root
        ("h", "e"): "d",
        ("a", "a"): "a",
    }
    got = tax.lowest_common_ancestor(tax.indices([p[0] for p in pairs]), tax.indices([p[1] for p in pairs]))
    assert [tax.nodes[i] for i in got.tolist()] == list(pairs.values())
    assert tax.lowest_common_ancestor(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)).numel() == 0


@pytest.mark.gpu
@needs_accelerator
def test_lca_and_ancestor_matrix_on_cuda_match_cpu():
    device = accelerator_device()
    parent, root = random_tree(seed=5, size=400, window=6)
    tax = Taxonomy(parent, root)
    a, b = torch.randint(len(tax), (2, 5000), generator=torch.Generator().manual_seed(0))
    got = tax.lowest_common_ancestor(a.to(device), b.to(device))
    assert got.device == device
    assert torch.equal(got.cpu(), tax.lowest_common_ancestor(a, b))
    ancestors_on_device = tax.ancestor_matrix(device=device)
    assert ancestors_on_device.device == device
    assert torch.equal(ancestors_on_device.cpu(), tax.ancestor_matrix())


# --------------------------------------------------------------------------------------------------------------------
# identity, immutability, lookups
# --------------------------------------------------------------------------------------------------------------------


def test_mapping_order_does_not_matter_and_equality():
    parent, root = random_tree(seed=3, size=50, window=5)
    reordered = dict(sorted(parent.items(), reverse=True))
    one, two = Taxonomy(parent, root), Taxonomy(reordered, root)
    assert one == two and hash(one) == hash(two) and one.nodes == two.nodes
    assert torch.equal(one.parent_index, two.parent_index)
    moved = dict(parent)
    leaf = one.leaves[0]
    moved[leaf] = root if parent[leaf] != root else one.nodes[-1]
    assert Taxonomy(moved, root) != one
    assert Taxonomy.from_dict(one.to_dict()) == one


def test_returned_tensors_and_collections_are_copies():
    tax = Taxonomy({"b": "a", "c": "b"}, root="a")
    tax.parent_index[1] = 2
    tax.depth[2] = 0
    tax.to_dict()["parent"]["c"] = "a"
    assert tax.parent_index.tolist() == [-1, 0, 1] and tax.depth.tolist() == [0, 1, 2]
    assert tax.ancestors("c") == ["c", "b", "a"]


def test_indices_unknown_names_are_listed():
    tax = Taxonomy({"b": "a", "c": "a"}, root="a")
    assert tax.indices(("c", "b")).tolist() == [2, 1] and tax.indices([]).shape == (0,)
    with pytest.raises(ValueError, match=r"'x', 'y', 'z', 'w', 'v', \.\.\. \(6 in all\) \(6 of 8"):
        tax.indices(["a", "x", "y", "z", "x", "w", "v", "u"])
    with pytest.raises(ValueError, match="'zebra'"):
        tax.index("zebra")
    with pytest.raises(ValueError, match="'zebra'"):
        tax.ancestors("zebra")
    with pytest.raises(ValueError, match="use index"):
        tax.indices("abc")


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (torch.tensor([0.0]), torch.tensor([1]), "`a_idx` must hold integer"),
        (torch.tensor([0]), torch.tensor([True]), "`b_idx` must hold integer"),
        (torch.tensor([0, 3]), torch.tensor([1, 1]), r"`a_idx` holds indices outside \[0, 3\): \[3\]"),
        (torch.tensor([0]), torch.tensor([-1]), r"`b_idx` holds indices outside \[0, 3\): \[-1\]"),
        (torch.tensor([0, 1]), torch.tensor([0, 1, 2]), "do not broadcast"),
        ([0], torch.tensor([0]), "`a_idx` must be a tensor"),
    ],
)
def test_lca_argument_errors(a, b, match):
    tax = Taxonomy({"b": "a", "c": "a"}, root="a")
    with pytest.raises(ValueError, match=match):
        tax.lowest_common_ancestor(a, b)


# --------------------------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parent", "root", "match"),
    [
        ({"b": "a", "c": "d", "d": "e", "e": "c"}, "a", r"cycle: 'c' -> 'd' -> 'e' -> 'c'"),
        ({"b": "a", "c": "c"}, "a", r"cycle: 'c' -> 'c'"),
        ({"b": "a", "x": "y", "z": "x"}, "a", r"several roots.*'y'.*nodes 'x', 'z' do not reach the root 'a'"),
        ({"b": "a", "a": "b"}, "a", r"root 'a' is given a parent \('b'\)"),
        ({}, "a", "taxonomy is empty"),
        ({"b": "a", False: "a"}, "a", r"non-empty string, got False \(bool\).*quote"),
        ({"b": "a", "c": ""}, "a", "the parent of 'c' must be a non-empty string"),
        ({"b": "a"}, None, "`root` must be a non-empty string"),
        ([("b", "a")], "a", "`parent` must be a mapping"),
    ],
)
def test_invalid_trees_name_the_offending_nodes(parent, root, match):
    with pytest.raises(ValueError, match=match):
        Taxonomy(parent, root)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"root": "a"}, "missing 'parent'"),
        ({"root": "a", "parent": {"b": "a"}, "parents": {}}, "unknown 'parents'"),
        ({"root": "a", "parent": None}, "taxonomy is empty"),
        (["root", "a"], "must be a mapping"),
    ],
)
def test_from_dict_errors(data, match):
    with pytest.raises(ValueError, match=match):
        Taxonomy.from_dict(data)


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("t.yaml", "root: a\nparent:\n  b: a\n  b: a\n", "duplicate key 'b'"),
        ("t.json", '{"root": "a", "parent": {"b": "a", "b": "a"}}', "duplicate key 'b'"),
        ("t.yaml", "root: a\nparent:\n  no: a\n", r"got False \(bool\)"),
        ("t.yaml", "- a\n- b\n", "top level must be a mapping, got list"),
        ("t.yaml", "", "the file is empty"),
        ("t.yaml", "root: [a\n", "could not be parsed"),
        ("t.txt", "root: a\nparent: {b: a}\n", r"unsupported suffix '\.txt'"),
        ("t.yml", "root: a\nparent: {b: c}\n", r"t\.yml': the taxonomy has several roots"),
    ],
)
def test_file_errors_name_the_file_and_problem(tmp_path: Path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        read_taxonomy(path)
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------------------------------------------------
# loading: demo file, YAML vs JSON, load_taxonomy
# --------------------------------------------------------------------------------------------------------------------


def _demo_file() -> Path:
    return Path(str(resources.files("beyondlabels.demo").joinpath("data", "taxonomy.yaml")))


def test_demo_file_loads_with_the_demo_classes_as_leaves():
    raw = yaml.safe_load(_demo_file().read_text())
    tax = read_taxonomy(_demo_file())
    assert tax == demo_taxonomy() and tax.to_dict()["parent"] == raw["parent"] and tax.root == raw["root"] == "shape"
    assert set(tax.leaves) == set(CLASS_NAMES) and len(tax) == len(raw["parent"]) + 1
    assert tax.ancestors("square") == ["square", "parallelogram_family", "quadrilateral", "polygon", "shape"]
    for name in tax.nodes:
        assert tax.ancestors(name) == oracle_ancestors(raw["parent"], raw["root"], name)
    sq, rect, circle, star = tax.indices(["square", "rectangle", "circle", "star"]).tolist()
    lca = tax.lowest_common_ancestor(torch.tensor([sq, circle]), torch.tensor([rect, star]))
    assert [tax.nodes[i] for i in lca.tolist()] == ["parallelogram_family", "shape"]


def test_demo_functions_keep_their_formats():
    data = taxonomy_dict()
    assert set(data) == {"root", "parent"} and data["parent"]["circle"] == "curved"
    data["parent"]["circle"] = "polygon"  # a fresh copy each time
    assert taxonomy_dict()["parent"]["circle"] == "curved"
    assert ancestors("circle", data) == ["circle", "polygon", "shape"]  # a dict argument is honoured
    assert ancestors("circle", demo_taxonomy()) == ancestors("circle") == ["circle", "curved", "shape"]
    with pytest.raises(ValueError, match="cycle"):
        ancestors("circle", {"root": "shape", "parent": {"circle": "curved", "curved": "circle"}})


def test_yaml_and_json_give_the_same_taxonomy(tmp_path: Path):
    raw = yaml.safe_load(_demo_file().read_text())
    (tmp_path / "t.json").write_text(json.dumps(raw))
    (tmp_path / "t.yml").write_text(yaml.safe_dump(raw))
    from_json = read_taxonomy(tmp_path / "t.json")
    from_yaml = load_taxonomy(str(tmp_path / "t.yml"))
    assert from_json == from_yaml == read_taxonomy(_demo_file())
    assert from_json.nodes == from_yaml.nodes
    assert torch.equal(from_json.parent_index, from_yaml.parent_index)
    assert torch.equal(from_json.depth, from_yaml.depth)


def test_load_taxonomy_accepts_path_dict_or_taxonomy():
    tax = load_taxonomy(_demo_file())
    assert load_taxonomy(tax) is tax
    assert load_taxonomy(tax.to_dict()) == tax
    with pytest.raises(ValueError, match=re.escape("`source` must be a Taxonomy")):
        load_taxonomy(42)
