"""An evaluator file from elsewhere never runs code: the JSON beside the weights names no factory other than the
demo's own TinyCLIP, holds only the TinyCLIP arguments, and must describe the checkpoint's own parameter shapes
before any model is built; a malformed JSON is a clear error naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from beyondlabels.demo import TinyCLIP, demo_evaluator, export_demo_evaluator

TINY_CLIP = dict(
    embed_dim=8, vision_width=16, vision_layers=1, vision_head_width=8, text_width=16, text_heads=2, text_layers=1
)


@pytest.fixture()
def exported(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    export_demo_evaluator(TinyCLIP(**TINY_CLIP), tmp_path / "clip.pt")
    return tmp_path / "clip.pt"


def _edit(path: Path, change) -> None:
    record = json.loads(path.with_suffix(".json").read_text())
    change(record)
    path.with_suffix(".json").write_text(json.dumps(record))


def _factories(marker: Path) -> list[tuple[str, dict]]:
    """Callables that would run a command when called with the keyword arguments beside them."""
    return [
        ("os.system", {"command": f"touch {marker}"}),
        ("subprocess.getoutput", {"cmd": f"touch {marker}"}),
        ("subprocess.run", {"args": ["touch", str(marker)]}),
        ("beyondlabels.demo.model.TinyCLIP", TINY_CLIP),  # importable and harmless, but still not the file's to name
    ]


@pytest.mark.parametrize("which", range(4))
def test_a_factory_named_in_the_file_is_never_imported_or_called(exported: Path, tmp_path: Path, which):
    marker = tmp_path / "ran"
    factory, arguments = _factories(marker)[which]
    _edit(exported, lambda r: r["evaluator"].update(model_factory=factory, model_cfg=arguments))
    with pytest.raises(ValueError, match=r"clip\.json.*model_factory"):
        demo_evaluator(exported)
    assert not marker.exists(), f"the file's factory {factory} ran"


def test_the_file_holds_only_the_tinyclip_arguments(exported: Path):
    _edit(exported, lambda r: r["evaluator"].update(model_name="ViT-B-32", pretrained="openai"))
    with pytest.raises(ValueError, match=r"clip\.json.*'model_name'"):
        demo_evaluator(exported)


def test_architecture_arguments_are_checked_by_name_and_type(exported: Path):
    _edit(exported, lambda r: r["evaluator"]["model_cfg"].update(wings=2))
    with pytest.raises(ValueError, match=r"clip\.json.*'wings'"):
        demo_evaluator(exported)
    _edit(
        exported, lambda r: r["evaluator"]["model_cfg"].update(wings=None) or r["evaluator"]["model_cfg"].pop("wings")
    )
    _edit(exported, lambda r: r["evaluator"]["model_cfg"].update(text_width="16"))
    with pytest.raises(ValueError, match=r"clip\.json.*'text_width'"):
        demo_evaluator(exported)


def test_an_architecture_that_does_not_match_the_weights_is_refused_before_it_is_built(exported: Path, monkeypatch):
    """A wider model than the checkpoint holds would allocate memory the file never paid for: shapes are compared on
    the meta device first."""
    _edit(exported, lambda r: r["evaluator"]["model_cfg"].update(text_width=4096))
    built = []
    monkeypatch.setattr("beyondlabels.io.evaluator.ClipEvaluator.__init__", lambda self, **kw: built.append(kw))
    with pytest.raises(ValueError, match=r"clip\.json.*do not match.*clip\.pt"):
        demo_evaluator(exported)
    assert not built


@pytest.mark.parametrize(
    "text", ["[" * 100000 + "]" * 100000, "\ufeff{", '{"format": 1, "format": 2}', "[]", '{"evaluator": 3}']
)
def test_a_malformed_evaluator_json_names_the_file(exported: Path, text):
    exported.with_suffix(".json").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"clip\.json"):
        demo_evaluator(exported)


def test_the_exported_evaluator_still_loads_with_the_same_identity(exported: Path):
    evaluator = demo_evaluator(exported)
    assert evaluator.identity["model_factory"] == "beyondlabels.demo.model.tiny_clip_model"
    assert evaluator.identity["model"]["config"]["embed_dim"] == 8
