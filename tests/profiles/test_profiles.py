"""FeatureProfiles: dense tensors against plain-Python reads of the data; loading; every validation error."""

from __future__ import annotations

import copy
import json
import random
from importlib import resources
from pathlib import Path

import pytest
import torch
import yaml

from beyondlabels.demo import CLASS_NAMES, demo_profiles, profiles_dict
from beyondlabels.io.profiles_files import load_profiles, read_profiles
from beyondlabels.profiles import FeatureProfiles


def _demo_file() -> Path:
    return Path(str(resources.files("beyondlabels.demo").joinpath("data", "profiles.yaml")))


def _raw_demo() -> dict:
    return yaml.safe_load(_demo_file().read_text())


def random_profiles(seed: int) -> dict:
    """Random data in the file format, class names in a non-sorted order, set values in a shuffled order."""
    rng = random.Random(seed)
    ordinal_max = rng.randint(1, 5)
    ordinal = {f"o{i}": f"feature {i}" for i in rng.sample(range(50), rng.randint(0, 6))}
    sets = {f"s{i}": [f"v{j}" for j in rng.sample(range(30), rng.randint(1, 7))] for i in rng.sample(range(50), 3)}
    if not ordinal:
        sets = sets or {"s": ["v"]}
    classes = {}
    for c in rng.sample(range(1000), rng.randint(1, 40)):
        profile = {f: rng.randint(0, ordinal_max) for f in ordinal}
        for group, allowed in sets.items():
            profile[group] = rng.sample(allowed, rng.randint(0, len(allowed)))
        items = list(profile.items())
        rng.shuffle(items)
        classes[f"class{c}"] = dict(items)
    return {"ordinal_max": ordinal_max, "features": {"ordinal": ordinal, "sets": sets}, "classes": classes}


# --------------------------------------------------------------------------------------------------------------------
# tensors against plain reads of the data
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_tensors_match_the_data_on_random_profiles(seed):
    data = random_profiles(seed)
    profiles = FeatureProfiles.from_dict(copy.deepcopy(data))
    classes = list(data["classes"])
    ordinal = list(data["features"]["ordinal"])
    sets = data["features"]["sets"]

    assert profiles.classes == tuple(classes) and len(profiles) == len(classes)
    assert profiles.ordinal_features == tuple(ordinal) and profiles.ordinal_max == data["ordinal_max"]
    assert profiles.set_groups == {g: tuple(v) for g, v in sets.items()}
    matrix = profiles.ordinal_matrix()
    assert matrix.dtype == torch.long and matrix.shape == (len(classes), len(ordinal))
    for i, c in enumerate(classes):
        for j, f in enumerate(ordinal):
            assert matrix[i, j] == data["classes"][c][f]
    for group, allowed in sets.items():
        member = profiles.set_membership(group)
        assert member.dtype == torch.bool and member.shape == (len(classes), len(allowed))
        expected = [[value in data["classes"][c][group] for value in allowed] for c in classes]
        assert member.tolist() == expected
    for c in classes:
        profile = profiles.profile(c)
        assert list(profile) == ordinal + list(sets)  # ordinal features, then set groups
        for group, allowed in sets.items():  # set values come back in allowed order
            assert profile[group] == [v for v in allowed if v in data["classes"][c][group]]
    shuffled = random.Random(seed).sample(classes, len(classes))
    assert profiles.require_classes(shuffled).tolist() == [classes.index(c) for c in shuffled]


def test_returned_values_are_copies():
    profiles = demo_profiles()
    profiles.ordinal_matrix()[0, 0] = 99
    profiles.set_membership("edge_kinds")[0] = False
    profiles.profile("square")["angle_kinds"].append("acute")
    profiles.set_groups["edge_kinds"] = ()
    profiles.ordinal_descriptions["symmetry"] = "changed"
    assert int(profiles.ordinal_matrix()[0, 0]) == 2
    assert profiles.set_membership("edge_kinds")[0].tolist() == [True, False]
    assert profiles.profile("square")["angle_kinds"] == ["right"]
    assert profiles.set_groups["edge_kinds"] == ("straight", "curved")
    assert profiles.ordinal_descriptions["symmetry"].startswith("0 = one axis")


# --------------------------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------------------------


def _base() -> dict:
    return {
        "features": {
            "ordinal": {"size": "0 small .. 2 big", "legs": "0 none .. 2 many"},
            "sets": {"color": ["red", "blue"]},
        },
        "classes": {
            "ant": {"size": 0, "legs": 2, "color": ["red"]},
            "whale": {"size": 2, "legs": 0, "color": ["blue"]},
        },
    }


def _edit(path: tuple, value) -> dict:
    data = _base()
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()

INVALID = [
    (("classes", "ant", "legs"), _DELETE, r"class 'ant': missing feature\(s\) 'legs'"),
    (("classes", "whale", "color"), _DELETE, r"class 'whale': missing feature\(s\) 'color'"),
    (("classes", "ant", "wings"), 1, r"class 'ant': unknown feature\(s\) 'wings'"),
    (("classes", "ant", "size"), 3, r"class 'ant', ordinal feature 'size': level 3 is outside 0\.\.2"),
    (("classes", "whale", "legs"), -1, r"class 'whale', ordinal feature 'legs': level -1 is outside 0\.\.2"),
    (("classes", "ant", "size"), 1.0, r"class 'ant', ordinal feature 'size': level 1\.0 \(float\) is not an int"),
    (("classes", "ant", "size"), True, r"class 'ant', ordinal feature 'size': level True \(bool\) is not an int"),
    (("classes", "ant", "size"), "1", r"class 'ant', ordinal feature 'size': level '1' \(str\) is not an int"),
    (("classes", "ant", "color"), ["green"], r"class 'ant', set group 'color': value\(s\) 'green' not in the allowed"),
    (("classes", "ant", "color"), ["red", "red"], r"class 'ant', set group 'color': value\(s\) 'red' repeated"),
    (("classes", "ant", "color"), "red", r"class 'ant', set group 'color': the value must be a list"),
    (("classes", "ant"), [0, 2], r"class 'ant': the profile must be a mapping"),
    (("classes",), {}, "`classes` is empty"),
    (("classes",), {None: {"size": 0}}, r"a class name .* got None \(NoneType\)"),
    (("features", "sets", "color"), ["red", "red"], r"set group 'color' lists allowed value\(s\) 'red' more than once"),
    (("features", "sets", "color"), [], "allowed values of set group 'color' must be a non-empty list"),
    (("features", "sets", "size"), ["x"], r"'size' are both an ordinal feature and a set group"),
    (("features", "ordinal", "size"), 3, "description of ordinal feature 'size' must be a string"),
    (("features", "shape"), {}, r"'features' has unknown key\(s\) 'shape'"),
    (("features",), {}, "no features"),
    (("ordinal_max",), 0, r"`ordinal_max` must be a positive int \(the largest ordinal level\), got 0\."),
    (("ordinal_max",), True, r"`ordinal_max` must be a positive int \(the largest ordinal level\), got True\."),
    (("colour",), {}, "unknown 'colour'"),
    (("classes",), _DELETE, "missing 'classes'"),
]


@pytest.mark.parametrize(("path", "value", "match"), INVALID, ids=[m for _, _, m in INVALID])
def test_invalid_profiles_name_the_class_and_feature(path, value, match):
    with pytest.raises(ValueError, match=match):
        FeatureProfiles.from_dict(_edit(path, value))


def test_valid_base_and_ordinal_max():
    assert FeatureProfiles.from_dict(_base()).ordinal_matrix().tolist() == [[0, 2], [2, 0]]
    data = _edit(("classes", "ant", "size"), 3)
    data["ordinal_max"] = 3
    assert FeatureProfiles.from_dict(data).ordinal_matrix().tolist() == [[3, 2], [2, 0]]
    assert FeatureProfiles.from_dict(_edit(("classes", "ant", "color"), None)).profile("ant")["color"] == []


def test_every_problem_is_reported_at_once():
    data = _base()
    data["classes"]["ant"]["size"] = 7
    data["classes"]["whale"]["color"] = ["green"]
    del data["classes"]["whale"]["legs"]
    with pytest.raises(ValueError) as info:
        FeatureProfiles.from_dict(data)
    message = str(info.value)
    for part in ("class 'ant', ordinal feature 'size'", "class 'whale', set group 'color'", "class 'whale': missing"):
        assert part in message


def test_require_classes_and_lookups_name_what_is_missing():
    profiles = demo_profiles()
    assert profiles.require_classes(CLASS_NAMES).tolist() == [profiles.classes.index(c) for c in CLASS_NAMES]
    with pytest.raises(ValueError, match=r"no class 'blob', 'zebra' \(2 of 3 name\(s\) given\)"):
        profiles.require_classes(["blob", "square", "zebra"])
    with pytest.raises(ValueError, match="'blob'"):
        profiles.profile("blob")
    with pytest.raises(ValueError, match="unknown set group 'symmetry'.*'angle_kinds', 'edge_kinds'"):
        profiles.set_membership("symmetry")
    with pytest.raises(ValueError, match="sequence of class names"):
        profiles.require_classes("square")
    assert "square" in profiles and "blob" not in profiles


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("p.yaml", "features: {ordinal: {a: x}}\nclasses:\n  c: {a: 0}\n  c: {a: 1}\n", "duplicate key 'c'"),
        ("p.json", '{"features": {"ordinal": {"a": "x"}}, "classes": {"c": {"a": 0}, "c": {"a": 1}}}', "duplicate key"),
        (
            "p.yaml",
            "features: {ordinal: {a: x}}\nclasses: {c: {a: 5}}\n",
            "p.yaml': invalid feature profiles: class 'c'",
        ),
        ("p.toml", "", "unsupported suffix"),
    ],
)
def test_file_errors_name_the_file(tmp_path: Path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        read_profiles(path)
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------------------------------------------------
# loading: demo file, YAML vs JSON, load_profiles
# --------------------------------------------------------------------------------------------------------------------


def test_demo_file_loads_and_matches_a_plain_read():
    raw = _raw_demo()
    profiles = read_profiles(_demo_file())
    assert profiles == demo_profiles()
    assert profiles.classes == tuple(raw["classes"])  # file order
    assert set(profiles.classes) == set(CLASS_NAMES)
    assert profiles.ordinal_features == tuple(raw["features"]["ordinal"]) and profiles.ordinal_max == 2
    assert profiles.ordinal_matrix().tolist() == [
        [raw["classes"][c][f] for f in raw["features"]["ordinal"]] for c in raw["classes"]
    ]
    arrow = profiles.classes.index("arrow")
    assert profiles.set_membership("angle_kinds")[arrow].tolist() == [True, True, False, True]
    # the demo's dict view is unchanged by the move into the library
    assert profiles_dict() == {"features": raw["features"], "classes": raw["classes"]}


def test_yaml_and_json_give_the_same_profiles(tmp_path: Path):
    raw = _raw_demo()
    (tmp_path / "p.json").write_text(json.dumps(raw))
    (tmp_path / "p.yml").write_text(yaml.safe_dump(raw, sort_keys=False))
    from_json = read_profiles(tmp_path / "p.json")
    from_yaml = load_profiles(str(tmp_path / "p.yml"))
    assert from_json == from_yaml == demo_profiles()
    assert torch.equal(from_json.ordinal_matrix(), from_yaml.ordinal_matrix())
    for group in from_json.set_groups:
        assert torch.equal(from_json.set_membership(group), from_yaml.set_membership(group))


def test_equality_sees_class_order_and_values():
    data = random_profiles(3)  # 35 classes, 4 ordinal features, 3 set groups
    one = FeatureProfiles.from_dict(data)
    assert FeatureProfiles.from_dict(one.to_dict()) == one
    reordered = dict(data, classes=dict(reversed(list(data["classes"].items()))))
    assert FeatureProfiles.from_dict(reordered) != one
    changed = copy.deepcopy(data)
    first = next(iter(changed["classes"]))
    feature = next(iter(changed["features"]["ordinal"]))
    changed["classes"][first][feature] = 1 - min(changed["classes"][first][feature], 1)
    assert FeatureProfiles.from_dict(changed) != one
    group, allowed = next(iter(changed["features"]["sets"].items()))
    changed = copy.deepcopy(data)
    values = changed["classes"][first][group]
    changed["classes"][first][group] = values[:-1] if values else allowed[:1]
    assert FeatureProfiles.from_dict(changed) != one


def test_load_profiles_accepts_path_dict_or_profiles():
    profiles = load_profiles(_demo_file())
    assert load_profiles(profiles) is profiles
    assert load_profiles(profiles.to_dict()) == profiles
    with pytest.raises(ValueError, match="`source` must be FeatureProfiles"):
        load_profiles(3.5)
