"""The mapper's rules as a user with a real encoder meets them: no rule overrides a clear best candidate by default,
the ambiguity rules read the encoder's own score scale (an affine change of every cosine changes no decision), no rule
falls back to the root, every rule can be switched, and answers are embedded once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from beyondlabels.functional import mapping_quality
from beyondlabels.taxonomy import (
    HashingTextEncoder,
    Taxonomy,
    TextToNode,
    normalize_text,
)

VEHICLES = Taxonomy(
    {
        "military_vehicle": "vehicle",
        "wheeled_vehicle": "vehicle",
        "craft": "vehicle",
        "tank": "military_vehicle",
        "jeep": "military_vehicle",
        "car": "wheeled_vehicle",
        "bicycle": "wheeled_vehicle",
        "tricycle": "wheeled_vehicle",
        "boat": "craft",
        "aircraft": "craft",
    },
    root="vehicle",
)

CONCEPTS = {
    "military": ("military", "armed", "forces", "army"),
    "wheel": ("wheeled", "wheels"),
    "craft": ("craft", "water"),
    "vehicle": ("vehicle",),
    "tank": ("tank",),
    "jeep": ("jeep",),
    "car": ("car",),
    "bicycle": ("bicycle", "pedals"),
    "tricycle": ("tricycle",),
    "boat": ("boat", "sails"),
    "aircraft": ("aircraft", "flies", "wings"),
}


class ConceptEncoder:
    """Bag of concepts: each text counts the keywords of every concept (a transparent stand-in for a sentence
    encoder that knows what words mean). Counts its calls."""

    def __init__(self, offset: float = 0.0, scale: float = 1.0) -> None:
        self.offset, self.scale, self.texts_seen = offset, scale, 0

    def __call__(self, texts):
        self.texts_seen += len(texts)
        rows = []
        for text in texts:
            words = normalize_text(text).split()
            rows.append([sum(w in keys for w in words) for keys in CONCEPTS.values()] + [0.05])
        return torch.tensor(rows, dtype=torch.float32)


class AffineEncoder:
    """Another encoder's unit vectors with a constant direction appended: every cosine becomes
    ``(cos + c**2) / (1 + c**2)``, an increasing affine map that crowds the scores together (gaps shrink
    ``1 + c**2`` times), as a sentence encoder's cosines crowd [0.2, 0.8] where hashing's spread around 0."""

    def __init__(self, inner, c: float = 2.0) -> None:
        self.inner, self.c = inner, c

    def __call__(self, texts):
        base = torch.nn.functional.normalize(torch.as_tensor(self.inner(texts)).float(), dim=1)
        return torch.cat([base, torch.full((len(texts), 1), self.c)], dim=1)


def test_a_one_word_match_does_not_override_a_clear_best_candidate():
    # "vehicle used by the armed forces" (WordNet's gloss of military_vehicle): the old extra "word" rule sent it to
    # the root because "vehicle" is a word of the answer and a node of one word.
    mapper = TextToNode(VEHICLES, encoder=ConceptEncoder())
    match = mapper.map(["vehicle used by the armed forces"])[0]
    assert match.candidates[0] == "military_vehicle"
    assert match.node == "military_vehicle" and not match.abstained
    # the rule is still there for whoever wants it, and does what its definition says
    word_rule = TextToNode(VEHICLES, encoder=ConceptEncoder(), rules=["exact", "word"])
    word = word_rule.map(["vehicle used by the armed forces"])[0]
    assert (word.node, word.rule) == ("vehicle", "word") and word.abstained


ANSWERS = [
    "a vehicle with wheels and pedals",
    "an armed vehicle of the army",
    "a craft that flies",
    "a boat with sails",
    "a craft on the water",
    "something with wheels",
    "a jeep of the armed forces",
    "a tank",
    "aircraft with wings",
    "a military boat",
    "wheeled military vehicle",
    "a vehicle that flies over water",
    "car or bicycle",
    "wings over the water",
    "water flies",
    "armed sails",
    "tricycles and bicycles",
    "militant",
    "wheelie",
    "bicycling",
    "tanker",
    "jeeps",
    "boating",
]


@pytest.mark.parametrize("inner", ["concepts", "hashing"])
def test_decisions_do_not_depend_on_the_encoders_cosine_scale(inner):
    encoder = ConceptEncoder() if inner == "concepts" else HashingTextEncoder(256)
    spread = TextToNode(VEHICLES, encoder=encoder).map(ANSWERS)
    crowded = TextToNode(VEHICLES, encoder=AffineEncoder(encoder)).map(ANSWERS)
    assert [(m.node, m.rule) for m in spread] == [(m.node, m.rule) for m in crowded]
    decided = set()
    for rules in (["exact", "lca"], ["exact", "lca", "expected"], ["expected"]):
        spread = TextToNode(VEHICLES, encoder=encoder, rules=rules).map(ANSWERS)
        crowded = TextToNode(VEHICLES, encoder=AffineEncoder(encoder), rules=rules).map(ANSWERS)
        assert [(m.node, m.rule) for m in spread] == [(m.node, m.rule) for m in crowded], rules
        decided.update(m.rule for m in spread)
    if inner == "concepts":
        assert {"lca", "expected"} <= decided  # the scale-dependent rules did decide something


def test_no_rule_falls_back_to_the_root():
    # equally close to a military and a wheeled node: their common ancestor is the root, which earns nothing
    answers = ["a jeep or a car", "army bicycle"]
    for rules in (None, ["exact", "lca"], ["exact", "lca", "expected"]):
        kwargs = {} if rules is None else {"rules": rules}
        for match in TextToNode(VEHICLES, encoder=ConceptEncoder(), **kwargs).map(answers):
            assert not match.abstained and match.rule in ("embedding", "expected"), (rules, match)
    # an answer that is the root, or whose best candidate is the root, is an abstention, and counted
    quality = mapping_quality(
        TextToNode(VEHICLES, encoder=ConceptEncoder()), ["a vehicle", "a vehicle, a vehicle"], ["car", "car"]
    )
    assert [m.abstained for m in quality["matches"]] == [True, True] and quality["abstentions"] == 2
    assert quality["hP"] == 0.0  # an abstention earns no precision


def test_an_answer_torn_between_several_siblings_goes_to_their_parent():
    match = TextToNode(VEHICLES, encoder=ConceptEncoder(), context="parent").map(["something with wheels"])[0]
    assert set(match.candidates[:3]) == {"car", "bicycle", "tricycle"}
    assert (match.node, match.rule) == ("wheeled_vehicle", "expected")
    # two equally likely siblings: a guess is worth more than the parent (0.5 + 0.5 * 1/2 > 2/3)
    two = TextToNode(VEHICLES, encoder=ConceptEncoder(), context="parent").map(["a car or a bicycle"])[0]
    assert two.node in ("car", "bicycle")


def _expected_oracle(tax, cand, scores, sigma, temperature):
    """The expected rule from its definition: every ancestor of every candidate is an option (not only the pairwise
    lowest common ancestors the mapper searches), ancestor sets as Python sets."""

    def anc(node):
        return set(tax.ancestors(node)[:-1])

    weights = np.exp((np.array(scores) - scores[0]) / (temperature * sigma))
    weights /= weights.sum()
    options = sorted({a for c in cand for a in tax.ancestors(c)}, key=tax.index)
    best, choice = -1.0, None
    for u in [cand[0], *options]:
        gain = 0.0
        for v, w in zip(cand, weights):
            shared = len(anc(u) & anc(v))
            p = shared / len(anc(u)) if anc(u) else 0.0
            r = shared / len(anc(v)) if anc(v) else 0.0
            gain += w * (2 * p * r / (p + r) if p + r else 0.0)
        if gain > best + 1e-12:
            best, choice = gain, u
    return choice


def test_the_expected_rule_matches_its_definition_on_a_real_tree():
    from beyondlabels.demo import demo_taxonomy

    tax = demo_taxonomy()
    encoder = HashingTextEncoder(128)
    answers = [
        "a red rhombus",
        "four sided shape",
        "a curved thing",
        "triangle with a right angle",
        "a star shape",
        "polygon with six sides",
        "an arrow pointing left",
        "a round ellipse",
        "a sharp angle",
        "a box",
    ]
    mapper = TextToNode(tax, encoder=encoder, top_k=6, rules=["expected"], context=None)
    nodes = mapper.node_embeddings()
    for answer, match in zip(answers, mapper.map(answers)):
        row = torch.nn.functional.normalize(encoder([answer]), dim=1)[0] @ nodes.T
        scores = torch.full((len(tax),), -2.0).scatter_reduce(0, mapper.embedded_owner, row, "amax")
        if match.candidates[0] == tax.root:
            assert match.abstained
            continue
        top = [float(scores[tax.index(c)]) for c in match.candidates]
        want = _expected_oracle(tax, list(match.candidates), top, float(scores.std(correction=0)), mapper.temperature)
        assert match.node == want, answer


def test_answers_are_embedded_once_and_cached_under_the_encoder_key():
    encoder = ConceptEncoder()
    mapper = TextToNode(VEHICLES, encoder=encoder, cache_size=2, context=None)
    mapper.map(["a tank", "a tank", "a boat"])
    assert encoder.texts_seen == len(VEHICLES) + 2  # node texts once, two distinct answers
    mapper.map(["a boat", "a tank"])  # both cached
    assert encoder.texts_seen == len(VEHICLES) + 2
    mapper.map(["a car"])  # evicts the least recent ("a boat" was used before "a tank")
    mapper.map(["a tank"])
    assert encoder.texts_seen == len(VEHICLES) + 3
    mapper.map(["a boat"])
    assert encoder.texts_seen == len(VEHICLES) + 4
    mapper.encoder_key = "new weights"  # node texts and answers again
    mapper.map(["a boat"])
    assert encoder.texts_seen == 2 * len(VEHICLES) + 5


def test_results_do_not_depend_on_the_block_size():
    encoder = HashingTextEncoder(128)
    answers = ANSWERS * 3
    ref = [(m.node, m.rule) for m in TextToNode(VEHICLES, encoder=encoder).map(answers)]
    for batch in (1, 4, 1000):
        got = TextToNode(VEHICLES, encoder=encoder, batch_size=batch, cache_size=0).map(answers)
        assert [(m.node, m.rule) for m in got] == ref


def test_node_texts_are_embedded_with_their_parent_for_context():
    mapper = TextToNode(VEHICLES, node_texts={"boat": ["boat", "ship"]})
    assert "boat (craft)" in mapper.embedded_texts and "ship (craft)" in mapper.embedded_texts
    assert "vehicle" in mapper.embedded_texts  # the root alone
    assert mapper.node_texts[:1] == ["vehicle"] and "ship" in mapper.node_texts  # the lexical rules read these
    both = TextToNode(VEHICLES, context="both")
    assert {"boat", "boat (craft)"} <= set(both.embedded_texts)
    assert TextToNode(VEHICLES, context=None).embedded_texts == TextToNode(VEHICLES, context=None).node_texts
