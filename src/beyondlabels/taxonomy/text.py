"""Free text to taxonomy node: the mapping of "Taxonomy-Aware Evaluation of Vision-Language Models" (CVPR 2025), with
every rule switchable and every threshold on the encoder's own score scale.

A model answers "a conifer" or "it is a small red rhombus"; hierarchical metrics need a node. :class:`TextToNode`
maps each answer to one node and says which rule decided.

Normalisation
    Lower case; ``_`` and ``-`` become spaces; other characters that are not letters or digits are dropped; runs of
    spaces collapse; one leading article (``a``, ``an``, ``the``) is dropped. A node's texts are its name (a WordNet
    name loses its ``.n.01`` suffix: ``norway_spruce.n.01`` -> ``norway spruce``) or the texts given in ``node_texts``
    (e.g. every WordNet lemma of a synset), normalised alike.

Context
    With ``context="both"`` (the default) every node text is embedded twice, alone and as
    ``"<text> (<parent's first text>)"`` — ``"bass (musical instrument)"``, ``"crane (bird)"``: the parent says which
    sense of the name is meant, as class lists such as ImageNet's do by hand — and the node's score takes the better
    of the two. ``context="parent"`` embeds only the second form, ``context=None`` only the first. The root's texts
    are embedded alone. The lexical rules read the texts themselves, never the context.

Scores
    Answers and embedded node texts are L2-normalised; a node's score ``s_v`` is the best cosine of its texts. The
    candidates are the ``top_k`` nodes by score, best first (ties: smaller node index first). ``σ`` is the standard
    deviation (population) of the answer's scores over all nodes: the encoder's own scale for this answer. Every gap
    and temperature is in units of ``σ``, so a rule means the same for an encoder whose cosines spread over
    ``[-0.1, 0.3]`` (hashing) and one whose cosines crowd ``[0.2, 0.8]`` (a sentence encoder): changing every score
    to ``a * s + b`` (``a > 0``) changes no decision. No threshold is a fixed cosine gap.

Rules (``rules``: any subset, applied in this order; the first that applies decides)
    1. ``exact``: the normalised answer equals a normalised node text (any node, not only candidates); several such
       nodes: the best scored.
    2. ``ngram`` (the paper's n-gram rule; orders ``ngram_orders``): candidates sharing a word n-gram with the answer
       (n-grams made only of stop words do not count); the highest n that matches decides; among those candidates,
       most shared n-grams, then best score. Reported as ``ngram4``, ``ngram3``, ...
    3. ``word`` (not in the paper): candidates whose one-word text (not a stop word) is a word of the answer; the
       deepest, then the best scored.
    4. ``lca`` (the paper's fallback for ambiguous candidates): the candidates within ``lca_gap * σ`` of the best;
       when there are several, their lowest common ancestor — unless that is the root (then the rule does not apply).
    5. ``expected``: the node of highest expected per-sample hierarchical F (ancestor sets without the root; the root
       is worth 0) when the answer's meaning is candidate ``v`` with probability
       ``p(v) ∝ exp((s_v - s_best) / (temperature * σ))``. The options are the candidates and the lowest common
       ancestors of their pairs. A clear best candidate stays; an answer torn between several siblings goes to their
       parent when that is worth more than a guess (two equally likely siblings at depth ``d``: a guess is worth
       ``(2d - 1) / 2d``, the parent ``2(d - 1) / (2d - 1)``, less); the best candidate wins ties. It does not apply
       when the best candidate is the root, and is reported only when it moves the answer away from the best
       candidate.
    6. ``embedding`` (always, last): the best candidate.

Abstentions
    A match at the root — the answer is the root's name, or the root is its best candidate — is an *abstention*
    (:attr:`NodeMatch.abstained`). No rule falls back to the root. The metrics count abstentions (``abstentions``) and
    by default give them no precision (:mod:`beyondlabels.functional.hierarchy`), so a mapper cannot gain by them.

Defaults
    ``rules=("exact", "expected")``, ``context="both"``, ``top_k=10``, ``temperature=1/3``: chosen on WordNet answers
    that no one here wrote (synonyms, glosses, "a kind of <parent>") of development subtrees, with a pretrained
    sentence encoder and with the hashing encoder, and checked on held-out subtrees; ``ngram``, ``word`` and ``lca``
    lowered hF there and are off. ``benchmarks/bench_text_mapping.py`` prints every rule's ablation.

Each mapper keeps the embeddings of its node texts, computed with its encoder under its ``encoder_key``; they are
recomputed when :attr:`TextToNode.encoder_key` changes (set a new key when the encoder's weights change, a model in
training), when :meth:`TextToNode.set_encoder` installs another encoder, or after :meth:`TextToNode.clear_cache`.
Answers are embedded once per distinct text, and the last ``cache_size`` distinct answers are kept under the same key.

Encoders (:func:`as_encoder`): a callable ``list[str] -> Tensor [N, D]`` (or an array), an object with
``encode_text`` (the demo's TinyCLIP, any LightningModule) or ``encode`` (a sentence-transformers model); by default
:class:`HashingTextEncoder`, a dependency-free lexical baseline (character trigrams and words hashed into a fixed
vector). Encoders named by a string (``"hashing"``, ``"sentence-transformers:<name or path>"``,
``"open_clip:<model>[:<pretrained>]"``) or a Hydra ``_target_`` are built by
:func:`beyondlabels.io.text_encoders.text_encoder`.

Examples:
    >>> from beyondlabels.taxonomy import Taxonomy
    >>> tax = Taxonomy({"conifer": "tree", "norway_spruce": "conifer", "oak": "tree"}, root="tree")
    >>> mapper = TextToNode(tax)
    >>> [(m.node, m.rule) for m in mapper.map(["A Norway spruce.", "a conifer", "an oak tree"])]
    [('norway_spruce', 'exact'), ('conifer', 'exact'), ('oak', 'embedding')]
"""

from __future__ import annotations

import inspect
import re
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import (
    check_choice,
    check_int,
    check_non_negative_int,
    check_number,
    check_positive_int,
    is_int,
)
from beyondlabels.taxonomy.tree import Taxonomy

__all__ = [
    "DEFAULT_RULES",
    "HashingTextEncoder",
    "NodeMatch",
    "RULES",
    "RULE_NAMES",
    "TextToNode",
    "as_encoder",
    "normalize_text",
]

RULE_NAMES = ("exact", "ngram", "word", "lca", "expected")
"""The switchable rules, in the order they are tried (``TextToNode(rules=...)``)."""
DEFAULT_RULES = ("exact", "expected")
"""The rules on by default (measured: the module docstring)."""
RULES = ("exact", "ngram4", "ngram3", "ngram2", "word", "lca", "expected", "embedding")
"""Every value :attr:`NodeMatch.rule` takes with the default ``ngram_orders`` (other orders: ``ngram<n>``)."""
STOP_WORDS = frozenset(
    "a an the of in on at to for with and or is it its this that be are was like looks look some kind sort type "
    "my me i you he she they there here which what very".split()
)
_WORDNET_SUFFIX = re.compile(r"\.[nvasr]\.\d+$")
_DROP = re.compile(r"[^0-9a-z ]+")
_SPACES = re.compile(r"\s+")
_ARTICLES = ("a ", "an ", "the ")
_FLOAT64_NODES = 4096  # node texts per float64 product (_scores)
_SCORE_BLOCK = 1 << 22  # answer x node-text scores per block: peak memory ~ 16 bytes per entry


def normalize_text(text: str) -> str:
    """The normalised form of an answer or node text (rule: the module docstring).

    Examples:
        >>> normalize_text("  The Norway-Spruce! "), normalize_text("high_jump")
        ('norway spruce', 'high jump')
    """
    if not isinstance(text, str):
        raise ValueError(f"texts must be strings, got {type(text).__name__} {text!r}")
    out = text.lower().replace("_", " ").replace("-", " ")
    out = _SPACES.sub(" ", _DROP.sub(" ", out)).strip()
    for article in _ARTICLES:
        if out.startswith(article):
            return out[len(article) :]
    return out


def node_text(name: str) -> str:
    """The normalised text of a node name (a WordNet ``.n.01`` suffix dropped).

    Examples:
        >>> node_text("norway_spruce.n.01")
        'norway spruce'
    """
    return normalize_text(_WORDNET_SUFFIX.sub("", name))


def _ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {
        tuple(words[i : i + n]) for i in range(len(words) - n + 1) if not all(w in STOP_WORDS for w in words[i : i + n])
    }


class HashingTextEncoder:
    """A lexical text encoder: character trigrams of each word (with boundary marks) and whole words, hashed (CRC32)
    into ``dim`` buckets with signs, L2-normalised. Deterministic, no weights, no downloads.

    Args:
        dim: output width.

    Examples:
        >>> enc = HashingTextEncoder(dim=64)
        >>> e = enc(["norway spruce", "spruce", "oak"])
        >>> e.shape, bool(e[0] @ e[1] > e[0] @ e[2])
        (torch.Size([3, 64]), True)
    """

    def __init__(self, dim: int = 512) -> None:
        self.dim = check_int(dim, "dim", minimum=8)

    def _features(self, text: str) -> list[str]:
        feats = []
        for word in normalize_text(text).split():
            feats.append("w:" + word)
            marked = f"<{word}>"
            feats.extend(marked[i : i + 3] for i in range(len(marked) - 2))
        return feats

    def __call__(self, texts: Sequence[str]) -> Tensor:
        rows, cols, vals = [], [], []
        for row, text in enumerate(texts):
            for feat in self._features(text):
                h = zlib.crc32(feat.encode("utf-8"))
                rows.append(row)
                cols.append(h % self.dim)
                vals.append(1.0 if (h >> 31) & 1 else -1.0)
        out = torch.zeros(len(texts), self.dim, dtype=torch.float32)
        if rows:
            out.index_put_((torch.tensor(rows), torch.tensor(cols)), torch.tensor(vals), accumulate=True)
        return torch.nn.functional.normalize(out, dim=1)

    def __repr__(self) -> str:
        return f"HashingTextEncoder(dim={self.dim})"


class _EncodeMethod:
    """``list[str] -> Tensor`` through an object's ``encode`` (sentence-transformers' signature when it has one)."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        try:
            params = inspect.signature(owner.encode).parameters
        except (TypeError, ValueError):
            params = {}
        wanted = {"convert_to_tensor": True, "show_progress_bar": False}
        self.kwargs = {k: v for k, v in wanted.items() if k in params}

    def __call__(self, texts: list[str]) -> Any:
        return self.owner.encode(list(texts), **self.kwargs)


def as_encoder(encoder: Any = None) -> tuple[Callable[[list[str]], Any], Any]:
    """``(encode, identity)`` for an encoder object: None (a :class:`HashingTextEncoder`), an object with
    ``encode_text`` (its method is used), an object with ``encode`` (a sentence-transformers model: called with
    ``convert_to_tensor=True, show_progress_bar=False`` where its signature has them), or a callable
    ``list[str] -> Tensor [N, D]`` (an array or nested list is turned into a tensor). The identity names the
    encoder: ``("hashing", dim)`` for None, the object itself (compared by ``is``) otherwise. Names such as
    ``"sentence-transformers:<name>"`` are turned into encoders by :func:`beyondlabels.io.text_encoders.text_encoder`.

    Raises:
        ValueError: for anything else (a name included).

    Examples:
        >>> encode, key = as_encoder()
        >>> encode(["a cat"]).shape, key
        (torch.Size([1, 512]), ('hashing', 512))
    """
    if encoder is None:
        hashing = HashingTextEncoder()
        return hashing, ("hashing", hashing.dim)
    if isinstance(encoder, (str, Mapping)):
        raise ValueError(
            f"encoder {encoder!r} is a name or a config; pass an encoder object (a callable list[str] -> Tensor "
            "[N, D], an object with encode_text or encode), or build one with "
            "beyondlabels.io.text_encoders.text_encoder"
        )
    method = getattr(encoder, "encode_text", None)
    if callable(method):
        return method, ("encode_text", encoder)
    if callable(getattr(encoder, "encode", None)):
        return _EncodeMethod(encoder), ("encode", encoder)
    if callable(encoder):
        return encoder, ("callable", encoder)
    raise ValueError(
        f"`encoder` must be a callable list[str] -> Tensor [N, D] or an object with encode_text or encode; got "
        f"{type(encoder).__name__}."
    )


@dataclass(frozen=True)
class NodeMatch:
    """One answer mapped to a node.

    Attributes:
        text: the answer as given.
        node: the node's name.
        index: the node's index in the taxonomy.
        rule: which rule decided (one of :data:`RULES`).
        score: the chosen node's cosine score (for ``lca`` and ``expected`` choices that are no candidate: the best
            candidate's).
        candidates: the top-k candidate names, best first.
    """

    text: str
    node: str
    index: int
    rule: str
    score: float
    candidates: tuple[str, ...]

    @property
    def abstained(self) -> bool:
        """Whether the answer was mapped to the root (an abstention)."""
        return self.index == 0


def _positive(value: Any, name: str, hint: str) -> float:
    return check_number(value, name, above=0.0, hint=hint)


def _check_rules(rules: Any) -> tuple[str, ...]:
    if isinstance(rules, str) or not isinstance(rules, Iterable):
        raise ValueError(
            f"`rules` must be a list of rule names from {RULE_NAMES} (e.g. {list(DEFAULT_RULES)}), got {rules!r}."
        )
    rules = tuple(rules)
    unknown = [r for r in rules if r not in RULE_NAMES]
    if unknown or len(set(rules)) != len(rules):
        raise ValueError(
            f"`rules` must name distinct rules from {RULE_NAMES} (the best candidate, 'embedding', always comes last); "
            f"got {list(rules)}" + (f" with unknown {unknown}" if unknown else "")
        )
    return tuple(r for r in RULE_NAMES if r in rules)


class TextToNode:
    """Map free-text answers to taxonomy nodes (rules and definitions: the module docstring).

    Args:
        taxonomy: the tree.
        encoder: a callable ``list[str] -> Tensor [N, D]``, an object with ``encode_text`` or ``encode``, or None
            (default: a :class:`HashingTextEncoder`); names and configs:
            :func:`beyondlabels.io.text_encoders.text_encoder`.
        node_texts: ``{node: [text, ...]}`` (synonyms); nodes not listed use their name. Default: every node's name.
        top_k: number of candidates.
        rules: the rules tried, any of :data:`RULE_NAMES` (default :data:`DEFAULT_RULES`); the best candidate
            (``embedding``) decides when none applies.
        ngram_orders: word n-gram lengths of the ``ngram`` rule, tried longest first.
        context: ``"both"``: node texts are embedded alone and with their parent's text, the better score counts;
            ``"parent"``: only with the parent's text; None: only alone.
        lca_gap: the ``lca`` rule's gap, in standard deviations of the answer's scores.
        temperature: the ``expected`` rule's temperature, in standard deviations of the answer's scores.
        encoder_key: identity of the encoder's current weights: the embeddings are recomputed when it changes
            (default: the identity of :func:`as_encoder`, fixed for the mapper's life).
        batch_size: texts per call of the encoder, and answers scored per block (fewer when the taxonomy is large, so
            a block's scores stay under about 64 MB).
        cache_size: distinct answers whose embeddings are kept between calls (0: none).

    Raises:
        ValueError: naming the argument, for a bad ``top_k``, ``rules``, ``ngram_orders``, ``context``, ``lca_gap``,
            ``temperature``, ``batch_size``, ``cache_size`` or ``node_texts``.

    Examples:
        >>> tax = Taxonomy({"oak": "tree", "pine": "tree", "fir": "tree"}, root="tree")
        >>> TextToNode(tax, rules=["exact"]).map(["an oak"])[0].rule
        'exact'
    """

    def __init__(
        self,
        taxonomy: Taxonomy,
        encoder: Any = None,
        node_texts: Mapping[str, Iterable[str]] | None = None,
        top_k: int = 10,
        rules: Sequence[str] = DEFAULT_RULES,
        ngram_orders: Sequence[int] = (4, 3, 2),
        context: str | None = "both",
        lca_gap: float = 0.1,
        temperature: float = 1 / 3,
        encoder_key: Any = None,
        batch_size: int = 256,
        cache_size: int = 10_000,
    ) -> None:
        if not isinstance(taxonomy, Taxonomy):
            raise ValueError(f"`taxonomy` must be a Taxonomy, got {type(taxonomy).__name__}; see load_taxonomy().")
        top_k = check_positive_int(top_k, "top_k")
        orders = tuple(ngram_orders)
        if any(not is_int(n) or n < 2 for n in orders) or len(set(orders)) != len(orders):
            raise ValueError(f"`ngram_orders` must be distinct ints >= 2 (e.g. (4, 3, 2)), got {ngram_orders!r}.")
        what = "'both' (node texts embedded alone and with their parent's), 'parent' or None (alone)"
        check_choice(context, "context", ("parent", "both", None), what=what)
        batch_size = check_positive_int(batch_size, "batch_size")
        cache_size = check_non_negative_int(cache_size, "cache_size", hint="distinct answers kept")
        self.taxonomy = taxonomy
        self.rules = _check_rules(rules)
        self.lca_gap = _positive(lca_gap, "lca_gap", "standard deviations of the answer's scores")
        self.temperature = _positive(temperature, "temperature", "standard deviations of the answer's scores")
        self.top_k = min(top_k, len(taxonomy))
        self.ngram_orders = tuple(sorted((int(n) for n in orders), reverse=True))
        self.context = context
        self.batch_size = batch_size
        self.cache_size = cache_size
        self._embeddings: tuple[Any, Tensor] | None = None
        self._answers: OrderedDict[str, Tensor] = OrderedDict()
        self._answers_key: Any = None
        self._identity: Any = None
        self.set_encoder(encoder, encoder_key)
        self._set_texts(node_texts)
        self._depth = taxonomy.depth

    def _set_texts(self, node_texts: Mapping[str, Iterable[str]] | None) -> None:
        taxonomy = self.taxonomy
        texts: list[str] = []
        owner: list[int] = []
        given = dict(node_texts or {})
        unknown = [n for n in given if n not in taxonomy]
        if unknown:
            raise ValueError(f"`node_texts` names nodes that are not in the taxonomy: {unknown[:5]}.")
        first: list[str] = []
        for index, name in enumerate(taxonomy.nodes):
            options = given.get(name)
            if options is None:
                options = [name]
            elif isinstance(options, str):
                raise ValueError(f"`node_texts[{name!r}]` must be a list of texts, got the string {options!r}.")
            normalised = list(dict.fromkeys(t for t in (node_text(o) for o in options) if t))
            if not normalised:
                raise ValueError(
                    f"node {name!r} has no usable text after normalisation; give it a name or node_texts entry."
                )
            texts.extend(normalised)
            owner.extend([index] * len(normalised))
            first.append(normalised[0])
        self.node_texts = texts
        parent = taxonomy.parent_index.tolist()
        embedded, embedded_owner = [], []
        if self.context in (None, "both"):
            embedded, embedded_owner = list(texts), list(owner)
        if self.context in ("parent", "both"):
            for text, index in zip(texts, owner):
                if parent[index] >= 0 or self.context == "parent":  # "both" embeds the root's texts once
                    embedded.append(text if parent[index] < 0 else f"{text} ({first[parent[index]]})")
                    embedded_owner.append(index)
        self.embedded_texts = embedded
        self.embedded_owner = torch.tensor(embedded_owner, dtype=torch.long)
        self.text_owner = torch.tensor(owner, dtype=torch.long)
        self._exact: dict[str, list[int]] = {}
        for text, index in zip(texts, owner):
            self._exact.setdefault(text, []).append(index)
        self._words = [text.split() for text in texts]
        self._texts_of: list[list[int]] = [[] for _ in range(len(taxonomy))]
        for t, index in enumerate(owner):
            self._texts_of[index].append(t)

    # ---- embeddings ------------------------------------------------------------------------------------------------
    def set_encoder(self, encoder: Any, encoder_key: Any = None) -> None:
        """Use ``encoder`` (any form :func:`as_encoder` accepts) from now on, under ``encoder_key`` (default: its
        identity); the embeddings are recomputed at the next :meth:`map` unless both the encoder's identity and the
        key are unchanged.

        Raises:
            ValueError: for an encoder :func:`as_encoder` does not accept.
        """
        encode, identity = as_encoder(encoder)
        if self._identity is not None and not _same(identity, self._identity):
            self.clear_cache()
        self.encode, self._identity = encode, identity
        self.encoder_key = identity if encoder_key is None else encoder_key

    def clear_cache(self) -> None:
        """Forget this mapper's node-text and answer embeddings."""
        self._embeddings = None
        self._answers = OrderedDict()

    def _encode(self, texts: Sequence[str]) -> Tensor:
        """L2-normalised float32 embeddings ``[N, D]`` of ``texts``, encoded ``batch_size`` at a time into one
        tensor."""
        result: Tensor | None = None
        for lo in range(0, len(texts), self.batch_size):
            chunk = self._encode_chunk(list(texts[lo : lo + self.batch_size]))
            if result is None:
                result = chunk.new_empty((len(texts), chunk.shape[1]))
            if chunk.shape[1] != result.shape[1] or chunk.device != result.device:
                raise ValueError(f"the text encoder {_describe(self._identity)} changed its output width or device")
            result[lo : lo + chunk.shape[0]] = chunk
        return result if result is not None else torch.empty(0, 0)

    def _encode_chunk(self, chunk: list[str]) -> Tensor:
        try:
            out = self.encode(chunk)
        except TypeError as err:
            raise ValueError(
                f"the text encoder {_describe(self._identity)} cannot be called with a list of {len(chunk)} "
                f"strings ({err}); give a callable list[str] -> Tensor [N, D] or an object with encode_text or "
                "encode"
            ) from err
        if not isinstance(out, Tensor):
            try:
                out = torch.as_tensor(out)
            except (TypeError, ValueError, RuntimeError):
                pass
        if not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] != len(chunk):
            raise ValueError(
                f"the text encoder {_describe(self._identity)} must return a [N, D] tensor for N texts; for "
                f"{len(chunk)} texts it returned "
                f"{tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__}."
            )
        out = out.detach().float()
        if not bool(torch.isfinite(out).all()):
            raise ValueError(f"the text encoder {_describe(self._identity)} returned NaN or infinite values.")
        return torch.nn.functional.normalize(out, dim=1)

    def node_embeddings(self) -> Tensor:
        """L2-normalised embeddings of every embedded node text ``[T, D]`` (kept until the encoder or its key changes;
        see the module docstring)."""
        if self._embeddings is not None and _same(self._embeddings[0], self.encoder_key):
            return self._embeddings[1]
        embeddings = self._encode(self.embedded_texts)
        self._embeddings = (self.encoder_key, embeddings)
        return embeddings

    def _answer_embeddings(self, texts: Sequence[str], device: torch.device) -> Tensor:
        """Embeddings of ``texts`` (each distinct text encoded once; the last ``cache_size`` kept under the key)."""
        if not _same(self._answers_key, self.encoder_key):
            self._answers, self._answers_key = OrderedDict(), self.encoder_key
        distinct = list(dict.fromkeys(texts))
        missing = [t for t in distinct if t not in self._answers]
        fresh = dict(zip(missing, self._encode(missing).to(device))) if missing else {}
        rows = torch.stack([fresh[t] if t in fresh else self._answers[t].to(device) for t in distinct])
        if self.cache_size:
            for i, text in enumerate(distinct):
                self._answers.pop(text, None)
                self._answers[text] = rows[i]
            while len(self._answers) > self.cache_size:
                self._answers.popitem(last=False)
        position = {t: i for i, t in enumerate(distinct)}
        return rows[torch.tensor([position[t] for t in texts], device=device)]

    # ---- mapping -----------------------------------------------------------------------------------------------------
    def map(self, texts: Sequence[str]) -> list[NodeMatch]:
        """Map every answer to a node (see the module docstring).

        Raises:
            ValueError: if ``texts`` is not a sequence of strings, or the encoder returns no ``[N, D]`` tensor.
        """
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise ValueError(f"`texts` must be a list of strings, got {type(texts).__name__}.")
        normalised = [normalize_text(t) for t in texts]
        if not texts:
            return []
        nodes = self.node_embeddings()
        rows = max(1, min(self.batch_size, _SCORE_BLOCK // max(1, nodes.shape[0])))
        out: list[NodeMatch] = []
        for lo in range(0, len(texts), rows):
            block = list(texts[lo : lo + rows])
            answers = self._answer_embeddings(block, nodes.device)
            if answers.shape[1] != nodes.shape[1]:
                raise ValueError(
                    f"the encoder gave answers of width {answers.shape[1]} but node texts of width {nodes.shape[1]}."
                )
            out.extend(self._decide_block(block, normalised[lo : lo + rows], _scores(answers, nodes)))
        return out

    def map_indices(self, texts: Sequence[str]) -> tuple[Tensor, list[str]]:
        """``(node indices [N], rules)`` of :meth:`map`."""
        matches = self.map(texts)
        return torch.tensor([m.index for m in matches], dtype=torch.long), [m.rule for m in matches]

    def _decide_block(self, texts: list[str], normalised: list[str], text_scores: Tensor) -> list[NodeMatch]:
        """The matches of one block of answers from their scores against every embedded node text ``[B, T]``."""
        size, count = len(self.taxonomy), text_scores.shape[0]
        owner = self.embedded_owner.to(text_scores.device).expand(count, -1)
        node_scores = torch.full((count, size), -2.0, device=text_scores.device)
        node_scores.scatter_reduce_(1, owner, text_scores, reduce="amax", include_self=True)
        sigma = node_scores.std(dim=1, correction=0).clamp_min(1e-12).cpu()
        scores, order = torch.sort(node_scores, dim=1, descending=True, stable=True)
        scores, order = scores[:, : self.top_k].cpu(), order[:, : self.top_k].cpu()
        node_scores = node_scores.cpu()
        decided: list[tuple[int, str, float] | None] = []
        for row in range(count):
            cand = order[row].tolist()
            decided.append(self._lexical(normalised[row], cand, scores[row], node_scores[row], float(sigma[row])))
        if "expected" in self.rules:
            todo = [r for r, d in enumerate(decided) if d is None and int(order[r, 0]) != 0 and self.top_k > 1]
            if todo:
                rows = torch.tensor(todo)
                choice = self._expected(order[rows], scores[rows], sigma[rows]).tolist()
                for r, node in zip(todo, choice):
                    if node != int(order[r, 0]):
                        decided[r] = (node, "expected", float(node_scores[r, node]))
        names = self.taxonomy.nodes
        matches = []
        for row, decision in enumerate(decided):
            cand = order[row].tolist()
            node, rule, score = decision if decision is not None else (cand[0], "embedding", float(scores[row, 0]))
            matches.append(NodeMatch(texts[row], names[node], node, rule, score, tuple(names[c] for c in cand)))
        return matches

    def _lexical(self, norm: str, cand: list[int], cand_scores: Tensor, node_scores: Tensor, sigma: float):
        """``(node, rule, score)`` of the first of the rules exact, ngram, word, lca that applies, else None."""
        rules = self.rules
        if "exact" in rules and norm in self._exact:
            best = max(self._exact[norm], key=lambda n: (float(node_scores[n]), -n))
            return best, "exact", float(node_scores[best])
        words = norm.split()
        rank = {c: r for r, c in enumerate(cand)}
        cand_texts = [t for c in cand for t in self._texts_of[c]]
        owner = self.text_owner
        if "ngram" in rules:
            for n in self.ngram_orders:
                grams = _ngrams(words, n)
                if not grams:
                    continue
                shared: dict[int, int] = {}
                for t in cand_texts:
                    hits = len(grams & _ngrams(self._words[t], n))
                    if hits:
                        node = int(owner[t])
                        shared[node] = max(shared.get(node, 0), hits)
                if shared:
                    best = min(shared, key=lambda c: (-shared[c], rank[c]))
                    return best, f"ngram{n}", float(cand_scores[rank[best]])
        if "word" in rules:
            word_set = {w for w in words if w not in STOP_WORDS}
            hits = [int(owner[t]) for t in cand_texts if len(self._words[t]) == 1 and self._words[t][0] in word_set]
            if hits:
                best = min(hits, key=lambda c: (-int(self._depth[c]), rank[c]))
                return best, "word", float(cand_scores[rank[best]])
        if "lca" in rules and len(cand) > 1:
            close = [c for c, s in zip(cand, cand_scores.tolist()) if float(cand_scores[0]) - s <= self.lca_gap * sigma]
            if len(close) > 1:
                common = self.taxonomy.common_ancestor(close)
                if common != 0:
                    return common, "lca", float(cand_scores[0])
        return None

    def _expected(self, cand: Tensor, scores: Tensor, sigma: Tensor) -> Tensor:
        """The ``expected`` rule for rows of candidates ``[R, K]`` (best first) with their scores and ``σ``."""
        k = cand.shape[1]
        first, second = torch.triu_indices(k, k)  # (0, 0) first: the best candidate wins ties
        pairs = self.taxonomy.lowest_common_ancestor(cand[:, :, None], cand[:, None, :])  # [R, K, K]
        depth = self._depth[pairs].float()
        options = pairs[:, first, second]  # [R, P]: the candidates (i == j) and their pairwise LCAs
        size_u = depth[:, first, second][:, :, None]
        # depth of LCA(LCA(c_i, c_j), c_k): the shallowest of the three pairwise LCAs of c_i, c_j and c_k
        shared = torch.minimum(size_u, torch.minimum(depth[:, first, :], depth[:, second, :]))  # [R, P, K]
        size_v = torch.diagonal(depth, dim1=1, dim2=2)[:, None, :]
        f = 2 * shared / (size_u + size_v).clamp_min(1)  # per-sample hF 2|∩| / (|anc u| + |anc v|); 0 at the root
        logits = (scores.double() - scores[:, :1].double()) / (self.temperature * sigma.double()[:, None])
        gain = (f.double() * torch.softmax(logits, dim=1)[:, None, :]).sum(dim=2)
        return options[torch.arange(cand.shape[0]), gain.argmax(dim=1)]


def _scores(answers: Tensor, nodes: Tensor) -> Tensor:
    """``answers @ nodes.T`` summed in float64 (over slices of ``_FLOAT64_NODES`` node texts, so the float64 copies stay
    small) and rounded back: scores equal in exact arithmetic (an answer that shares nothing with many node texts scores
    0 against all of them) come out equal whatever the block size, where float32 sums differ in their last bits
    between a matrix-vector and a matrix-matrix product and ordered the tied candidates differently. Rounding the
    float32 scores to a grid instead would erase the differences of an encoder whose cosines crowd together. Cost: 3x
    the float32 product's time on CPU, small beside encoding the answers."""
    dtype = torch.promote_types(answers.dtype, nodes.dtype)
    out = torch.empty(answers.shape[0], nodes.shape[0], dtype=dtype, device=answers.device)
    wide = answers.double()
    for lo in range(0, nodes.shape[0], _FLOAT64_NODES):
        out[:, lo : lo + _FLOAT64_NODES] = wide @ nodes[lo : lo + _FLOAT64_NODES].double().T
    return out


def _describe(identity: Any) -> str:
    """A short name of an encoder identity for error messages."""
    if isinstance(identity, tuple) and len(identity) == 2 and not isinstance(identity[1], (str, int)):
        return f"{type(identity[1]).__name__} ({identity[0]})"
    return repr(identity)


def _same(a: Any, b: Any) -> bool:
    """Whether two encoder identities or keys are the same: equal tuples of equal parts, objects by ``is``."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (str, int, float, bool, type(None))) and isinstance(b, (str, int, float, bool, type(None))):
        return type(a) is type(b) and a == b
    return a is b
