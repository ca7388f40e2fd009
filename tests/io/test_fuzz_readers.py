"""Every reader of files that come from elsewhere, fuzzed with Hypothesis: run folders (history, schema, media
manifest, overrides, per-query files), qrels and runs (TREC and JSON), taxonomies (YAML, JSON, TSV), profiles,
predictions, candidate sets, demo evaluator files, saved embeddings and mismatch pairs (CSV and npz); JSON large enough
to be counted before it is parsed (the census, whose counts must equal the parsed document's), YAML with anchors and
merge keys, the offline W&B reader's values, text-feature cache shards and the kept W&B run id.

Property: a reader returns a value or raises a ``ValueError`` that names the file (``FileNotFoundError`` only for a
file that is not there), never another exception, never a hang (each example has a deadline); and the report of a
run folder with one fuzzed family renders the other families.

Inputs mix well-formed documents of each format with small corruptions of them (cut short, a byte-order mark, a
repeated key, odd numbers, deep nesting, bytes that are not UTF-8) and arbitrary text or bytes. ``make test`` runs a
few seeded examples per reader (derandomized: the same examples every run); ``make fuzz`` runs many random ones
(``BEYONDLABELS_FUZZ_EXAMPLES``, default 40; ``BEYONDLABELS_FUZZ_RANDOM=1`` draws new examples each run).
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beyondlabels._internal.parse import CENSUS_BYTES, json_census
from beyondlabels.demo.evaluator import _evaluator_arguments, _read_record
from beyondlabels.io.arrays import load_embeddings_npz
from beyondlabels.io.candidate_sets import load_candidate_sets
from beyondlabels.io.evaluator import TextFeatureCache
from beyondlabels.io.pairs import load_mismatch_pairs
from beyondlabels.io.predictions import read_hierarchy_predictions
from beyondlabels.io.profiles_files import read_profiles
from beyondlabels.io.qrels import load_qrels, load_run
from beyondlabels.io.run_files import read_evaluation_run, read_history, run_overrides
from beyondlabels.io.run_folders import read_media_manifest, read_run_folder
from beyondlabels.io.taxonomy_files import read_taxonomy
from beyondlabels.reporting.html_report import report_html
from beyondlabels.taxonomy import Taxonomy
from beyondlabels.utils.run import wandb_run_id

EXAMPLES = int(os.environ.get("BEYONDLABELS_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=10_000,  # ms per example: a hang or a blow-up fails (readers take milliseconds; slack for busy machines)
    derandomize=os.environ.get("BEYONDLABELS_FUZZ_RANDOM", "") != "1",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

# ---- strategies ---------------------------------------------------------------------------------------------------

NAMES = st.sampled_from(
    ["a", "b", "root", "1", "map@r", "precision@1", "step", "epoch", "é", " a", "", "a/b", "..", "\x00"]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    NAMES,
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.one_of(NAMES, st.text(max_size=6)), inner, max_size=5)
    ),
    max_leaves=25,
)


def _corrupt(data: bytes, how: int, position: int) -> bytes:
    """One of a few small corruptions of a well-formed file."""
    cut = position % (len(data) + 1)
    return [
        data,
        data[:cut],  # cut short
        b"\xef\xbb\xbf" + data,  # a byte-order mark
        data[:cut] + b"\xff\xfe" + data[cut:],  # bytes that are not UTF-8
        data[:cut] + b"[" * 5000 + data[cut:],  # deep nesting (unbalanced)
        b"[" * 100_000 + b"]" * 100_000,  # deep nesting (valid JSON)
        data.replace(b"1", b"1_0").replace(b"2", b"1e400"),  # loose and huge numbers
        data + data[:cut],  # repeated tail
    ][how % 8]


def documents(well_formed: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Well-formed files, small corruptions of them, JSON of any shape, arbitrary text and bytes."""
    corrupted = st.builds(_corrupt, well_formed, st.integers(0, 7), st.integers(0, 10_000))
    any_json = JSON_VALUES.map(lambda v: json.dumps(v).encode())
    text = st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))
    return st.one_of(well_formed, corrupted, any_json, text, st.binary(max_size=200))


def _json_bytes(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return strategy.map(lambda v: json.dumps(v).encode())


RECORDS = st.fixed_dictionaries(
    {"step": st.one_of(st.integers(0, 10**6), SCALARS), "epoch": st.integers(0, 9)},
    optional={
        "map@r": st.floats(0, 1),
        "precision_curve": st.lists(st.floats(0, 1), max_size=4),
        "error": st.text(max_size=8),
        "per_query_file": st.one_of(
            st.just("per_query/step_000000004.npz"),
            st.text(max_size=20),
            st.just("/etc/hostname"),
            st.just("../../x.npz"),
        ),
    },
)
HISTORY = st.lists(RECORDS, max_size=4).map(lambda rs: "".join(json.dumps(r) + "\n" for r in rs).encode())
SCHEMA = _json_bytes(
    st.fixed_dictionaries(
        {
            "keys": st.dictionaries(
                NAMES,
                st.fixed_dictionaries(
                    {
                        "kind": st.sampled_from(["scalar", "curve", "per_query", "other"]),
                        "higher_is_better": st.sampled_from([True, False, None, 3]),
                    }
                ),
                max_size=3,
            )
        }
    )
)
CELL = st.one_of(
    SCALARS,
    st.fixed_dictionaries({"image": st.one_of(st.just("x.png"), st.just("../x.png"), st.text(max_size=10), SCALARS)}),
)
MANIFEST = _json_bytes(
    st.fixed_dictionaries(
        {"format": st.sampled_from([1, 1, 2, "1"]), "prefix": SCALARS, "step": SCALARS},
        optional={
            "figures": st.lists(
                st.fixed_dictionaries({"name": SCALARS, "file": st.one_of(st.just("x.png"), SCALARS)}), max_size=3
            ),
            "tables": st.lists(
                st.fixed_dictionaries(
                    {
                        "name": NAMES,
                        "columns": st.lists(NAMES, max_size=3),
                        "rows": st.lists(st.lists(CELL, max_size=3), max_size=3),
                    }
                ),
                max_size=2,
            ),
            "curves": st.lists(
                st.fixed_dictionaries(
                    {"name": NAMES, "x": st.lists(SCALARS, max_size=3), "y": st.lists(SCALARS, max_size=3)}
                ),
                max_size=2,
            ),
        },
    )
)
OVERRIDES = st.lists(st.one_of(st.text(max_size=10), SCALARS), max_size=4).map(
    lambda v: "\n".join(f"- {json.dumps(o)}" for o in v).encode()
)
TOKEN = st.one_of(
    st.sampled_from(
        ["301", "q1", "d1", "d2", "0", "1", "2", "-1", "1.0", "1_0", "0x1", "1e3", "nan", "inf", "#", "Q0"]
    ),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=5),
)
TREC_QRELS = st.lists(st.lists(TOKEN, min_size=3, max_size=5), max_size=6).map(
    lambda ls: "\n".join(" ".join(line) for line in ls).encode()
)
TREC_RUN = st.lists(st.lists(TOKEN, min_size=5, max_size=7), max_size=6).map(
    lambda ls: "\n".join(" ".join(line) for line in ls).encode()
)
JSON_QRELS = _json_bytes(
    st.dictionaries(NAMES, st.dictionaries(NAMES, st.one_of(st.integers(-3, 3), SCALARS), max_size=4), max_size=4)
)
JSON_RUN = _json_bytes(
    st.dictionaries(
        NAMES, st.one_of(st.dictionaries(NAMES, SCALARS, max_size=4), st.lists(SCALARS, max_size=4)), max_size=4
    )
)
TAXONOMY = _json_bytes(
    st.fixed_dictionaries(
        {
            "root": NAMES,
            "parent": st.dictionaries(NAMES, st.one_of(NAMES, st.lists(NAMES, max_size=3), SCALARS), max_size=6),
        }
    )
)
TSV = st.lists(st.lists(NAMES, min_size=1, max_size=3), max_size=6).map(
    lambda ls: "\n".join("\t".join(line) for line in ls).encode()
)
PROFILES = _json_bytes(
    st.fixed_dictionaries(
        {
            "features": st.fixed_dictionaries(
                {},
                optional={
                    "ordinal": st.dictionaries(NAMES, st.one_of(st.text(max_size=10), SCALARS), max_size=2),
                    "sets": st.dictionaries(NAMES, st.lists(NAMES, max_size=3), max_size=2),
                },
            ),
            "classes": st.dictionaries(NAMES, st.dictionaries(NAMES, SCALARS, max_size=3), max_size=3),
        },
        optional={"ordinal_max": SCALARS},
    )
)
PREDICTIONS = st.lists(
    st.fixed_dictionaries(
        {"gt": st.sampled_from(["a", "b", "c", "x"])},
        optional={
            "pred": st.one_of(NAMES, SCALARS),
            "pred_text": st.one_of(st.text(max_size=8), SCALARS),
            "id": SCALARS,
        },
    ),
    max_size=4,
).map(lambda rs: "\n".join(json.dumps(r) for r in rs).encode())
EVALUATOR = _json_bytes(
    st.fixed_dictionaries(
        {
            "format": st.text(max_size=5),
            "training": st.one_of(st.dictionaries(NAMES, SCALARS, max_size=2), SCALARS),
            "evaluator": st.one_of(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "model_factory": st.sampled_from(["beyondlabels.demo.model.tiny_clip_model", "os.system", ""]),
                        "model_cfg": st.dictionaries(
                            st.sampled_from(["embed_dim", "vision", "text_width", "wings"]), SCALARS, max_size=3
                        ),
                        "mean": st.lists(SCALARS, max_size=4),
                        "std": st.lists(SCALARS, max_size=4),
                        "model_name": SCALARS,
                    },
                ),
                SCALARS,
            ),
        },
    )
)


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


ARRAYS = st.dictionaries(
    st.sampled_from(["query_ids", "distractor_ids", "query_id", "score", "x"]),
    st.one_of(
        st.lists(st.integers(-5, 5), max_size=6).map(lambda v: np.array(v, dtype=np.int64)),
        st.lists(st.lists(st.integers(-5, 5), min_size=2, max_size=2), max_size=4).map(
            lambda v: np.array(v, dtype=np.int64).reshape(-1, 2)
        ),
        st.lists(st.floats(allow_nan=True), max_size=4).map(np.array),
        st.lists(st.text(max_size=3), max_size=3).map(lambda v: np.array(v, dtype=str)),
    ),
    max_size=3,
)
NPZ = st.one_of(
    ARRAYS.map(_npz),
    st.builds(_corrupt, ARRAYS.map(_npz), st.integers(0, 7), st.integers(0, 400)),
    st.binary(max_size=300),
)


def _npz_of(names: list[str]) -> st.SearchStrategy[bytes]:
    column = st.one_of(
        st.lists(st.integers(-3, 3), max_size=5).map(lambda v: np.array(v, dtype=np.int64)),
        st.lists(st.floats(allow_nan=True, width=32), max_size=6).map(lambda v: np.array(v, dtype=np.float32)),
        st.lists(
            st.tuples(*[st.floats(width=32, allow_nan=False, allow_infinity=False)] * 2), min_size=1, max_size=4
        ).map(lambda v: np.array(v, dtype=np.float32)),
        st.lists(st.text(max_size=3), max_size=4).map(lambda v: np.array(v, dtype=str)),
        st.lists(st.booleans(), max_size=3).map(np.array),
    )
    arrays = st.dictionaries(st.sampled_from(names), column, max_size=len(names))
    return st.one_of(arrays.map(_npz), st.builds(_corrupt, arrays.map(_npz), st.integers(0, 7), st.integers(0, 400)))


EMBEDDINGS = _npz_of(["embeddings", "labels", "ids"])
PAIRS_NPZ = _npz_of(["query_label", "retrieved_label", "rank"])
CSV_FIELD = st.one_of(
    st.sampled_from(["cat", "dog", "1", "2", "1_0", " 3", "0", "-1", "3.0", '"', ""]), st.text(max_size=4)
)
PAIRS_CSV = st.builds(
    lambda header, rows: "\n".join([",".join(header)] + [",".join(r) for r in rows]).encode(),
    st.lists(st.sampled_from(["query_label", "retrieved_label", "rank", "x"]), min_size=1, max_size=4),
    st.lists(st.lists(CSV_FIELD, min_size=1, max_size=4), max_size=5),
)


def _counted(document: bytes) -> bytes:
    """The same document, padded with spaces (JSON whitespace) to the size from which it is counted first."""
    return document + b" " * max(0, CENSUS_BYTES - len(document))


def _counted_lines(history: bytes) -> bytes:
    return history + b"\n" * max(0, CENSUS_BYTES - len(history))


ANCHORS = st.lists(st.sampled_from(["x: 1", "y: [1, 2]", "z: {w: 3}", "'<<': 1", "k: v"]), min_size=1, max_size=3)


def _merge_yaml(levels: list[tuple[list[str], list[int], bool]]) -> bytes:
    """A taxonomy-like YAML document whose mappings carry anchors and merge (``<<``) the ones before them, by alias
    or by a list of aliases."""
    lines = ["root: r"]
    for i, (entries, merged, as_list) in enumerate(levels):
        parts = list(entries)
        targets = [f"*a{j % i}" for j in merged] if i else []
        if targets:
            parts.insert(0, f"<<: [{', '.join(targets)}]" if as_list else f"<<: {targets[0]}")
        lines.append(f"a{i}: &a{i} {{{', '.join(parts)}}}")
    lines.append("parent: {b: r}" if not levels else f"parent: {{<<: *a{len(levels) - 1}}}")
    return ("\n".join(lines) + "\n").encode()


MERGE_YAML = st.lists(st.tuples(ANCHORS, st.lists(st.integers(0, 30), max_size=12), st.booleans()), max_size=8).map(
    _merge_yaml
)


def _shard_bytes(value: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _shard(rows: int, width: int, scale: float, good_keys: bool) -> Any:
    import torch

    features = torch.nn.functional.normalize(torch.ones(rows, width), dim=1) * scale
    keys = [f"{i:064x}" if good_keys else f"key {i}" for i in range(rows)]
    return {"keys": keys, "features": features}


SHARDS = st.one_of(
    st.builds(
        _shard, st.integers(0, 3), st.integers(0, 4), st.sampled_from([1.0, 1.0, 4000.0, 0.0]), st.booleans()
    ).map(_shard_bytes),
    st.builds(
        _corrupt,
        st.builds(_shard, st.integers(1, 3), st.just(4), st.just(1.0), st.just(True)).map(_shard_bytes),
        st.integers(0, 7),
        st.integers(0, 2000),
    ),
    JSON_VALUES.map(_shard_bytes),
    st.binary(max_size=200),
)


def _read_shard(path: Path) -> Any:
    return TextFeatureCache(path.parent.parent, {}, dim=4)._read_shard(path)


# ---- the property -------------------------------------------------------------------------------------------------


def _holds(read: Callable[[Path], Any], path: Path, data: bytes) -> None:
    """``read(path)`` after writing ``data`` there returns, or raises a ValueError that names the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    try:
        read(path)
    except ValueError as exc:
        assert path.name in str(exc) or str(path.parent) in str(exc), f"the error does not name the file: {exc}"


def _in_tmp(test: Callable[[Path], None]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        test(Path(tmp))


TAX = Taxonomy({"b": "a", "c": "b"}, root="a")


def _with_history(schema: Path, read: Callable[[Path], Any]) -> Any:
    (schema.parent / "history.jsonl").write_text(json.dumps({"step": 1, "map@r": 0.5}) + "\n")
    return read(schema.parent)


READERS: dict[str, tuple[str, st.SearchStrategy[bytes], Callable[[Path], Any]]] = {
    "history.jsonl": ("run/retrieval/history.jsonl", HISTORY, read_history),
    "history.json": (
        "run/retrieval/history.json",
        HISTORY.map(lambda b: b"[" + b",".join(b.splitlines()) + b"]"),
        read_evaluation_run,
    ),
    "schema.json": ("run/retrieval/schema.json", SCHEMA, lambda p: _with_history(p, read_evaluation_run)),
    "media.json": ("run/retrieval/media/media.json", MANIFEST, lambda p: read_media_manifest(p.parent)),
    "qrels.txt": ("qrels.txt", TREC_QRELS, load_qrels),
    "qrels.json": ("qrels.json", JSON_QRELS, load_qrels),
    "run.txt": ("run.txt", TREC_RUN, load_run),
    "run.json": ("run.json", JSON_RUN, load_run),
    "taxonomy.yaml": ("taxonomy.yaml", TAXONOMY, read_taxonomy),
    "taxonomy.json": ("taxonomy.json", TAXONOMY, read_taxonomy),
    "taxonomy.tsv": ("taxonomy.tsv", TSV, read_taxonomy),
    "profiles.yaml": ("profiles.yaml", PROFILES, read_profiles),
    "profiles.json": ("profiles.json", PROFILES, read_profiles),
    "predictions.jsonl": ("predictions.jsonl", PREDICTIONS, lambda p: read_hierarchy_predictions(p, TAX)),
    "candidates.npz": ("candidates.npz", NPZ, load_candidate_sets),
    "evaluator.json": ("clip.json", EVALUATOR, lambda p: _evaluator_arguments(_read_record(p), p)),
    "embeddings.npz": ("embeddings.npz", EMBEDDINGS, load_embeddings_npz),
    "pairs.csv": ("pairs.csv", PAIRS_CSV, load_mismatch_pairs),
    "pairs.npz": ("pairs.npz", PAIRS_NPZ, load_mismatch_pairs),
    "qrels.json (counted)": ("qrels.json", JSON_QRELS.map(_counted), load_qrels),
    "media.json (counted)": (
        "run/retrieval/media/media.json",
        MANIFEST.map(_counted),
        lambda p: read_media_manifest(p.parent),
    ),
    "history.jsonl (counted)": ("run/retrieval/history.jsonl", HISTORY.map(_counted_lines), read_history),
    "taxonomy.yaml (merge keys)": ("taxonomy.yaml", MERGE_YAML, read_taxonomy),
    "text feature shard": ("cache/h/shard_0.pt", SHARDS, _read_shard),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reader_returns_or_raises_a_value_error_naming_the_file(reader):
    relative, well_formed, read = READERS[reader]

    @FUZZ
    @given(data=well_formed if reader.endswith(".npz") else documents(well_formed))
    def check(data: bytes) -> None:
        _in_tmp(lambda tmp: _holds(read, tmp / relative, data))

    check()


@FUZZ
@given(value=JSON_VALUES, indent=st.sampled_from([None, 0, 2]), ascii_only=st.booleans())
def test_the_census_of_a_json_document_counts_what_the_parser_makes(value, indent, ascii_only):
    """The counts the memory bound is computed from equal those of the document Python's parser makes."""
    document = json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()
    census = json_census(document)
    objects = lists = members = items = depth = 0
    stack = [(json.loads(document), 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            children = list(node.values()) if isinstance(node, dict) else node
            objects += isinstance(node, dict)
            lists += isinstance(node, list)
            members += len(node) if isinstance(node, dict) else 0
            items += len(children)
            depth = max(depth, level)
            stack.extend((child, level + 1) for child in children)
    assert (census.objects, census.lists, census.members, census.items, census.depth) == (
        objects,
        lists,
        members,
        items,
        depth,
    )


@FUZZ
@given(data=documents(_json_bytes(JSON_VALUES)), keys=st.lists(NAMES, min_size=1, max_size=70))
def test_an_offline_wandb_value_is_read_finite_or_refused_naming_the_log(data, keys):
    from types import SimpleNamespace

    from beyondlabels.io.wandb_offline import OfflineRun, _decode

    run = OfflineRun(Path("run-x.wandb"))
    item = SimpleNamespace(
        key=keys[0], nested_key=keys if len(keys) > 1 else [], value_json=data.decode("utf-8", "replace")
    )
    try:
        value = _decode(run.path, item, "summary", run)
    except ValueError as exc:
        assert "run-x.wandb" in str(exc)
        return
    flat = [value]
    while flat:
        v = flat.pop()
        assert not (isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))))
        flat.extend(v.values() if isinstance(v, dict) else v if isinstance(v, list) else [])


@FUZZ
@given(data=documents(_json_bytes(st.one_of(st.fixed_dictionaries({"id": SCALARS}), JSON_VALUES))))
def test_the_kept_wandb_run_id_is_a_string_or_none(data):
    def check(tmp: Path) -> None:
        (tmp / "wandb_run.json").write_bytes(data)
        assert wandb_run_id(tmp) is None or isinstance(wandb_run_id(tmp), str)

    _in_tmp(check)


@FUZZ
@given(data=documents(OVERRIDES))
def test_hydra_overrides_never_raise(data):
    def check(tmp: Path) -> None:
        (tmp / ".hydra").mkdir()
        (tmp / ".hydra" / "overrides.yaml").write_bytes(data)
        overrides = run_overrides(tmp)
        assert isinstance(overrides, list) and all(isinstance(o, str) for o in overrides)

    _in_tmp(check)


@FUZZ
@given(npz=NPZ, history=HISTORY)
def test_per_query_files_are_read_or_refused_with_a_value_error(npz, history):
    def check(tmp: Path) -> None:
        folder = tmp / "run" / "retrieval"
        (folder / "per_query").mkdir(parents=True)
        (folder / "per_query" / "step_000000004.npz").write_bytes(npz)
        (folder / "history.jsonl").write_bytes(history)
        try:
            run = read_evaluation_run(folder)
        except ValueError:
            return
        for step in run.steps:
            try:
                run.per_query(step)
            except (ValueError, FileNotFoundError, KeyError):
                pass  # KeyError: a record whose step repeats another's; FileNotFoundError: none named or on disk

    _in_tmp(check)


FAMILY_FILES = st.fixed_dictionaries(
    {},
    optional={
        "history.jsonl": documents(HISTORY),
        "schema.json": documents(SCHEMA),
        "media/media.json": documents(MANIFEST),
        "figure.png": st.binary(max_size=64),
        "media/x.png": st.binary(max_size=64),
        "series/step_000000001.png": st.binary(max_size=32),
    },
)


def test_the_report_of_a_folder_with_one_fuzzed_family_renders_the_others():
    curve = {"format": 1, "curves": [{"name": "c", "x": [1, 2], "y": [0.5, 0.25]}]}
    warm_up = {"media/media.json": json.dumps(curve).encode()}  # plotting imports happen here, outside the deadline
    _in_tmp(lambda tmp: _report_of_one_fuzzed_family(tmp, warm_up, b""))
    _fuzzed_report()


@FUZZ
@given(files=FAMILY_FILES, overrides=documents(OVERRIDES))
def _fuzzed_report(files, overrides):
    _in_tmp(lambda tmp: _report_of_one_fuzzed_family(tmp, files, overrides))


def _report_of_one_fuzzed_family(tmp: Path, files: dict[str, bytes], overrides: bytes) -> None:
    run = tmp / "run"
    for prefix, value in (("a_good", 0.25), ("z_good", 0.75)):
        (run / prefix).mkdir(parents=True)
        (run / prefix / "history.jsonl").write_text(json.dumps({"step": 4, "epoch": 0, "map@r": value}) + "\n")
    (run / "m_fuzzed").mkdir()
    (run / "m_fuzzed" / "history.jsonl").write_text("")
    for name, data in files.items():
        (run / "m_fuzzed" / name).parent.mkdir(parents=True, exist_ok=True)
        (run / "m_fuzzed" / name).write_bytes(data)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_bytes(overrides)
    folder = read_run_folder(run)
    assert [f.prefix for f in folder.families] == ["a_good", "m_fuzzed", "z_good"]
    page = report_html([folder])
    assert "0.2500" in page and "0.7500" in page


def test_a_corrupt_npz_member_is_a_value_error(tmp_path: Path):
    """A zip whose member claims to be an array but is not (one of the shapes the fuzzer reaches only rarely)."""
    with zipfile.ZipFile(tmp_path / "c.npz", "w") as archive:
        archive.writestr("query_ids.npy", b"\x93NUMPY\x01\x00" + b"\xff" * 20)
    with pytest.raises(ValueError, match=r"c\.npz"):
        load_candidate_sets(tmp_path / "c.npz")
