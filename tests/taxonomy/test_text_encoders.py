"""Encoders as users have them: a callable, an object with ``encode`` (sentence-transformers' shape: an ``nn.Module``
whose ``forward`` takes token features, not strings), names, and Hydra ``_target_`` configs from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from beyondlabels import tasks
from beyondlabels.io.text_encoders import text_encoder
from beyondlabels.taxonomy import HashingTextEncoder, Taxonomy, TextToNode
from tests.entrypoints.helpers import evaluate_config

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_TAXONOMY = REPO_ROOT / "src" / "beyondlabels" / "demo" / "data" / "taxonomy.yaml"
TREE = Taxonomy({"dog": "animal", "cat": "animal", "oak": "plant", "animal": "thing", "plant": "thing"}, root="thing")


class SentenceModel(torch.nn.Module):
    """The shape of a sentence-transformers model: calling it runs ``forward`` on token features (a dict), and
    ``encode(sentences, ...)`` returns a numpy array unless asked for a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.hashing = HashingTextEncoder(64)
        self.calls: list[dict] = []

    def forward(self, features: dict) -> dict:
        return {"sentence_embedding": features["input_ids"].float()}

    def encode(self, sentences, batch_size=32, show_progress_bar=None, convert_to_numpy=True, convert_to_tensor=False):
        self.calls.append({"show_progress_bar": show_progress_bar, "convert_to_tensor": convert_to_tensor})
        out = self.hashing(list(sentences))
        return out if convert_to_tensor else out.numpy()


def test_an_object_with_encode_is_used_through_encode():
    model = SentenceModel()
    matches = TextToNode(TREE, encoder=model).map(["a dog", "an oak tree"])
    assert [m.node for m in matches] == ["dog", "oak"]
    assert model.calls and all(c == {"show_progress_bar": False, "convert_to_tensor": True} for c in model.calls)
    reference = TextToNode(TREE, encoder=HashingTextEncoder(64)).map(["a dog", "an oak tree"])
    assert [(m.node, m.rule, m.score) for m in matches] == [(m.node, m.rule, m.score) for m in reference]


def test_a_callable_may_return_an_array():
    encoder = HashingTextEncoder(64)
    matches = TextToNode(TREE, encoder=lambda texts: encoder(texts).numpy()).map(["a cat"])
    assert matches[0].node == "cat"
    plain_encode = type("Plain", (), {"encode": lambda self, texts: encoder(texts).tolist()})()
    assert TextToNode(TREE, encoder=plain_encode).map(["a cat"])[0].node == "cat"


def test_names_and_configs():
    encode, key = text_encoder({"_target_": "beyondlabels.taxonomy.HashingTextEncoder", "dim": 64})
    assert isinstance(encode, HashingTextEncoder) and encode.dim == 64 and key[1] is encode
    with pytest.raises(ValueError, match="must name the object to build with `_target_`"):
        text_encoder({"dim": 64})
    with pytest.raises(ValueError, match="_target_ 'no.such.Encoder' could not be instantiated"):
        text_encoder({"_target_": "no.such.Encoder"})
    with pytest.raises(ValueError, match="names no model"):
        text_encoder("sentence-transformers:")
    with pytest.raises(ValueError, match="is not known: use 'hashing', 'sentence-transformers:<name or path>'"):
        text_encoder("minilm")
    with pytest.raises(ValueError, match="is a name or a config"):
        TextToNode(TREE, encoder="hashing")
    with pytest.raises(ValueError, match="`encoder` must be a callable"):
        text_encoder(3)


def _cfg(tmp_path: Path, *overrides: str):
    return evaluate_config(tmp_path, "task=hierarchy", *overrides)


def test_task_hierarchy_takes_an_encoder_by_target_and_the_mapper_options(tmp_path: Path):
    rows = [
        {"gt": "square", "pred_text": "a square"},
        {"gt": "rhombus", "pred_text": "a diamond shape"},
        {"gt": "circle", "pred_text": "the shape"},
    ]
    predictions = tmp_path / "p.jsonl"
    predictions.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "report.json"
    cfg = _cfg(
        tmp_path,
        f"taxonomy={DEMO_TAXONOMY}",
        f"predictions={predictions}",
        f"output={output}",
        "hierarchy.encoder={_target_: beyondlabels.taxonomy.HashingTextEncoder, dim: 64}",
        "hierarchy.rules=[exact]",
        "hierarchy.context=null",
    )
    report = tasks.hierarchy.run(cfg)
    mapper = TextToNode(
        instantiate({"_target_": "beyondlabels.demo.demo_taxonomy"}),
        encoder=HashingTextEncoder(64),
        rules=["exact"],
        context=None,
    )
    matches = mapper.map([r["pred_text"] for r in rows])
    want = [m.rule for m in matches]
    assert report["rules"] == {rule: want.count(rule) for rule in dict.fromkeys(want)}
    abstained = sum(m.abstained for m in matches)
    assert abstained >= 1 and matches[2].abstained  # "the shape" is the root's name
    assert report["abstentions"] == abstained and report["settings"]["encoder"]["dim"] == 64
    saved = json.loads(output.read_text())
    assert saved["hP"] == pytest.approx(report["hP"]) and saved["abstention_rate"] == pytest.approx(abstained / 3)
    legacy = tasks.hierarchy.run(
        _cfg(
            tmp_path,
            f"taxonomy={DEMO_TAXONOMY}",
            f"predictions={predictions}",
            f"output={tmp_path / 'legacy.json'}",
            "hierarchy.abstention_precision=1.0",
            "hierarchy.encoder={_target_: beyondlabels.taxonomy.HashingTextEncoder, dim: 64}",
            "hierarchy.rules=[exact]",
            "hierarchy.context=null",
        )
    )
    assert legacy["hP"] == pytest.approx(report["hP"] + abstained / 3)


def test_the_callback_config_builds_an_encoder_by_target():
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO_ROOT / "conf")):
        cfg = compose(
            config_name="train",
            overrides=[
                "callbacks=hierarchy",
                "callbacks.hierarchy.source=text",
                "callbacks.hierarchy.encoder={_target_: beyondlabels.taxonomy.HashingTextEncoder, dim: 32}",
                "callbacks.hierarchy.rules=[exact, lca]",
                "callbacks.hierarchy.lca_gap=0.5",
            ],
        )
    callback = instantiate(cfg.callbacks.hierarchy)
    assert isinstance(callback.encoder, HashingTextEncoder) and callback.encoder.dim == 32
    mapper = callback._mapper
    assert mapper is not None and mapper.rules == ("exact", "lca") and mapper.lca_gap == 0.5
    assert np.isclose(mapper.temperature, 1 / 3, atol=1e-3) and mapper.context == "both"
