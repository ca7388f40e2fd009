"""Free text -> node (Algorithm 1): every rule, the cache, encoders, bad arguments, and mapping quality on the demo's
labelled answers."""

from __future__ import annotations

from importlib import resources

import pytest
import torch
import yaml

from beyondlabels.demo import demo_taxonomy
from beyondlabels.functional import mapping_quality
from beyondlabels.io.text_encoders import text_encoder
from beyondlabels.taxonomy import (
    HashingTextEncoder,
    Taxonomy,
    TextToNode,
    normalize_text,
)

TREE = Taxonomy(
    {
        "animal": "thing",
        "dog": "animal",
        "golden_retriever": "dog",
        "shark": "animal",
        "white_shark": "shark",
        "great_white_shark": "white_shark",
        "vehicle": "thing",
        "red_fire_truck": "vehicle",
        "big_red_fire_truck": "red_fire_truck",
        "plant": "thing",
        "tree": "plant",
        "oak": "tree",
        "pine": "tree",
    },
    root="thing",
)


class FixedEncoder:
    """Known texts get fixed vectors; anything else a vector of its own (a test double with countable calls)."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors
        self.calls = 0
        self.texts_seen = 0

    def __call__(self, texts):
        self.calls += 1
        self.texts_seen += len(texts)
        width = len(next(iter(self.vectors.values())))
        return torch.tensor([self.vectors.get(normalize_text(t), [0.0] * (width - 1) + [1.0]) for t in texts])


@pytest.mark.parametrize(
    ("answer", "node", "rule"),
    [
        ("The Golden-Retriever!", "golden_retriever", "exact"),
        ("a big red fire truck toy", "big_red_fire_truck", "ngram4"),
        ("look, a great white shark swimming", "great_white_shark", "ngram3"),
        ("my golden retriever puppy", "golden_retriever", "ngram2"),
        ("an oak in autumn", "oak", "word"),
    ],
)
def test_lexical_rules(answer, node, rule):
    mapper = TextToNode(TREE, encoder=HashingTextEncoder(), top_k=8, rules=["exact", "ngram", "word"], context=None)
    match = mapper.map([answer])[0]
    assert (match.node, match.rule) == (node, rule), match.candidates
    assert match.index == TREE.index(node) and len(match.candidates) == 8 and match.text == answer


def test_lca_fallback_and_embedding_rule():
    # "woody stuff" is equally close to oak and pine: the LCA (tree) is the conservative answer; "evergreen" is
    # clearly nearest to pine.
    vectors = {
        name: [0.0] * 4
        for name in (
            "thing",
            "animal",
            "dog",
            "golden retriever",
            "shark",
            "white shark",
            "great white shark",
            "vehicle",
            "red fire truck",
            "big red fire truck",
            "plant",
            "tree",
        )
    }
    vectors.update(
        {
            "oak": [1.0, 0.0, 0.0, 0.0],
            "pine": [0.0, 1.0, 0.0, 0.0],
            "woody stuff": [1.0, 1.0, 0.0, 0.0],
            "evergreen": [0.2, 1.0, 0.0, 0.0],
        }
    )
    encoder = FixedEncoder(vectors)
    mapper = TextToNode(TREE, encoder=encoder, top_k=3, rules=["exact", "lca"], lca_gap=0.25, context=None)
    woody, evergreen = mapper.map(["woody stuff", "evergreen"])
    assert (woody.node, woody.rule) == ("tree", "lca") and set(woody.candidates[:2]) == {"oak", "pine"}
    assert (evergreen.node, evergreen.rule) == ("pine", "embedding")
    no_lca = TextToNode(TREE, encoder=encoder, top_k=3, rules=["exact"], context=None).map(["woody stuff"])[0]
    assert no_lca.rule == "embedding" and no_lca.node == "oak"  # tie: the smaller node index ranks first
    assert TREE.index("oak") < TREE.index("pine")


def test_exact_match_wins_over_lexical_rules_and_synonyms_count():
    tax = Taxonomy({"curved": "shape", "ellipse": "curved", "circle": "curved"}, root="shape")
    mapper = TextToNode(
        tax, node_texts={"ellipse": ["ellipse", "oval"], "circle": ["circle", "round disc"]}, rules=["exact", "word"]
    )
    got = [(m.node, m.rule) for m in mapper.map(["an oval", "Round disc", "a red circle"])]
    assert got == [("ellipse", "exact"), ("circle", "exact"), ("circle", "word")]


def test_stop_words_alone_do_not_make_an_ngram():
    tax = Taxonomy({"piece_of_the_action": "x", "oak": "x"}, root="x")
    match = TextToNode(tax, encoder=HashingTextEncoder(), rules=["exact", "ngram"]).map(["one of the best"])[0]
    assert match.rule == "embedding"


def test_node_embeddings_are_cached_per_encoder_identity():
    encoder = FixedEncoder({"thing": [1.0, 0.0], "oak": [0.0, 1.0]})
    mapper = TextToNode(TREE, encoder=encoder, encoder_key=("test", 1), batch_size=1000, context=None)
    mapper.clear_cache()
    mapper.map(["a"])
    mapper.map(["b"])
    node_calls = encoder.texts_seen - 2  # two answers were encoded besides the node texts
    assert node_calls == len(TREE)  # node texts encoded once
    mapper.encoder_key = ("test", 2)  # e.g. new weights after a training step
    mapper.map(["c"])
    assert encoder.texts_seen - 3 == 2 * len(TREE)


def test_each_mapper_keeps_its_own_node_embeddings():
    encoder = FixedEncoder({"thing": [1.0, 0.0], "oak": [0.0, 1.0]})
    first = TextToNode(TREE, encoder=encoder, encoder_key=("test", 1), batch_size=1000, context=None)
    second = TextToNode(TREE, encoder=encoder, encoder_key=("test", 1), batch_size=1000, context=None)
    first.map(["a"])
    second.map(["b"])
    assert encoder.texts_seen - 2 == 2 * len(TREE)  # one encoding of the node texts per mapper
    first.clear_cache()  # empties the first mapper's embeddings only
    second.map(["c"])
    assert encoder.texts_seen - 3 == 2 * len(TREE)
    first.map(["d"])
    assert encoder.texts_seen - 4 == 3 * len(TREE)


def test_set_encoder_recomputes_only_for_another_encoder_or_key():
    encoder = FixedEncoder({"thing": [1.0, 0.0], "oak": [0.0, 1.0]})
    mapper = TextToNode(TREE, encoder=encoder, encoder_key=("step", 0), batch_size=1000, context=None)
    mapper.map(["a"])
    mapper.set_encoder(encoder, encoder_key=("step", 0))  # same encoder, same weights
    mapper.map(["b"])
    assert encoder.texts_seen - 2 == len(TREE)
    mapper.set_encoder(encoder, encoder_key=("step", 1))  # same encoder, new weights
    mapper.map(["c"])
    assert encoder.texts_seen - 3 == 2 * len(TREE)
    other = FixedEncoder({"thing": [1.0, 0.0], "oak": [0.0, 1.0]})
    mapper.set_encoder(other, encoder_key=("step", 1))  # another encoder under the same key
    mapper.map(["d"])
    assert other.texts_seen - 1 == len(TREE) and mapper.encode is other


def test_encoders_by_name_object_and_callable():
    encode, key = text_encoder("hashing")
    assert isinstance(encode, HashingTextEncoder) and key == ("hashing", 512)

    class WithEncodeText:
        def encode_text(self, texts):
            return HashingTextEncoder(64)(texts)

    obj = WithEncodeText()
    encode, key = text_encoder(obj)
    assert key[0] == "encode_text" and key[1] is obj and encode(["a"]).shape == (1, 64)
    with pytest.raises(ValueError, match="open_clip could not create model 'no-such-model'"):
        text_encoder("open_clip:no-such-model")
    with pytest.raises(ValueError, match="encoder 'clip' is not known"):
        text_encoder("clip")


def test_the_demo_tiny_clip_can_be_the_encoder():
    from beyondlabels.demo import TinyCLIP

    torch.manual_seed(0)
    model = TinyCLIP(
        embed_dim=16, vision_width=32, vision_layers=1, vision_head_width=16, text_width=32, text_heads=2, text_layers=1
    )
    tax = demo_taxonomy()
    matches = TextToNode(tax, encoder=model).map(["a square", "something else entirely"])
    assert (matches[0].node, matches[0].rule) == ("square", "exact") and matches[1].node in tax


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"top_k": 0}, "`top_k` must be a positive int"),
        ({"ngram_orders": (1,)}, "`ngram_orders` must be distinct ints >= 2"),
        ({"ngram_orders": (2, 2)}, "`ngram_orders` must be distinct"),
        ({"lca_gap": -0.1}, "`lca_gap` must be a number > 0"),
        ({"lca_gap": float("nan")}, "`lca_gap` must be a number > 0"),
        ({"temperature": 0}, "`temperature` must be a number > 0"),
        ({"rules": ["exact", "nearest"]}, r"`rules` must name distinct rules .* with unknown \['nearest'\]"),
        ({"rules": "exact"}, "`rules` must be a list of rule names"),
        ({"rules": ["lca", "lca"]}, "`rules` must name distinct rules"),
        ({"context": "grandparent"}, "`context` must be 'both'"),
        ({"cache_size": -1}, "`cache_size` must be an int >= 0"),
        ({"node_texts": {"nope": ["x"]}}, "`node_texts` names nodes that are not in the taxonomy: \\['nope'\\]"),
        ({"node_texts": {"oak": "oak"}}, "must be a list of texts"),
        ({"batch_size": 0}, "`batch_size` must be a positive int"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TextToNode(TREE, **kwargs)


def test_bad_texts_and_encoder_outputs():
    with pytest.raises(ValueError, match="`texts` must be a list of strings"):
        TextToNode(TREE).map("oak")
    with pytest.raises(ValueError, match="texts must be strings"):
        TextToNode(TREE).map([3])
    with pytest.raises(ValueError, match=r"must return a \[N, D\] tensor"):
        TextToNode(TREE, encoder=lambda texts: torch.zeros(len(texts))).map(["oak"])
    with pytest.raises(ValueError, match="returned NaN or infinite values"):
        TextToNode(TREE, encoder=lambda texts: torch.full((len(texts), 4), float("nan"))).map(["oak"])
    with pytest.raises(ValueError, match=r"cannot be called with a list of \d+ strings"):
        TextToNode(TREE, encoder=lambda: None).map(["oak"])
    with pytest.raises(ValueError, match="`taxonomy` must be a Taxonomy"):
        TextToNode({"root": "a"})


# ---- mapping quality on the demo's labelled answers ------------------------------------------------------------------


def _labelled():
    text = resources.files("beyondlabels.demo").joinpath("data", "mapping_labels.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["items"]


def test_demo_labelled_set_is_valid():
    tax = demo_taxonomy()
    items = _labelled()
    assert len(items) >= 40
    assert all(item["node"] in tax and item["node"] != tax.root for item in items)
    assert set(tax.leaves) <= {item["node"] for item in items}  # every class is asked about at least once


def test_mapping_quality_matches_an_oracle_on_its_own_matches():
    tax = demo_taxonomy()
    items = _labelled()
    quality = mapping_quality(TextToNode(tax), [i["text"] for i in items], [i["node"] for i in items])
    matches = quality["matches"]
    # oracle from the definition, with ancestor lists instead of LCA depths
    p, r = [], []
    for item, match in zip(items, matches):
        pred, gold = set(tax.ancestors(match.node)[:-1]), set(tax.ancestors(item["node"])[:-1])
        p.append(len(pred & gold) / len(pred) if pred else 0.0)  # an abstention earns no precision
        r.append(len(pred & gold) / len(gold))
    assert quality["hP"] == pytest.approx(sum(p) / len(p)) and quality["hR"] == pytest.approx(sum(r) / len(r))
    assert quality["exact_match"] == pytest.approx(
        sum(m.node == i["node"] for m, i in zip(matches, items)) / len(items)
    )
    assert sum(quality["rules"].values()) == len(items) == quality["num_samples"]
    # answers that are a class name (after normalisation) are always mapped exactly
    for item, match in zip(items, matches):
        if normalize_text(item["text"]) == item["node"].replace("_", " "):
            assert (match.node, match.rule) == (item["node"], "exact")
    with pytest.raises(ValueError, match="one gold node per text"):
        mapping_quality(TextToNode(tax), ["a"], [])
