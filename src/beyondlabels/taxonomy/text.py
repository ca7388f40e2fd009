"""Free text to taxonomy node: Algorithm 1 of "Taxonomy-Aware Evaluation of Vision-Language Models" (CVPR 2025).

A model answers "a conifer" or "it is a small red rhombus"; hierarchical metrics need a node. :class:`TextToNode`
maps each answer to one node and says which rule decided:

Normalisation
    Lower case; ``_`` and ``-`` become spaces; other characters that are not letters or digits are dropped; runs of
    spaces collapse; one leading article (``a``, ``an``, ``the``) is dropped. A node's texts are its name (a WordNet
    name loses its ``.n.01`` suffix: ``norway_spruce.n.01`` -> ``norway spruce``) or the texts given in ``node_texts``
    (e.g. every WordNet lemma of a synset), normalised alike.

Candidates
    Every answer and every node text is embedded by the text encoder; a node's score is the best cosine of its texts.
    The candidates are the ``top_k`` nodes by score (ties: smaller node index first).

Rules, in order (the first that applies decides)
    1. ``exact``: the normalised answer equals a normalised node text (any node, not only candidates); several such
       nodes: the best scored.
    2. ``ngram4``, ``ngram3``, ``ngram2`` (``ngram_orders``): candidates sharing a word n-gram with the answer (n-grams
       made only of stop words do not count); the highest n that matches decides; among those candidates, most shared
       n-grams, then best score.
    3. ``word``: candidates whose one-word text (not a stop word) is a word of the answer; the deepest (most
       specific: "an oak tree" is an oak), then the best scored.
    4. ``lca``: no lexical match, and the second candidate scores within ``lca_margin`` of the first: the lowest
       common ancestor of every candidate within the margin — a conservative but correct answer.
    5. ``embedding``: the best scored candidate.

Each mapper keeps the embeddings of its node texts, computed with its encoder under its ``encoder_key``; they are
recomputed when :attr:`TextToNode.encoder_key` changes (set a new key when the encoder's weights change, a model in
training), when :meth:`TextToNode.set_encoder` installs another encoder, or after :meth:`TextToNode.clear_cache`.

Encoders (:func:`as_encoder`): a callable ``list[str] -> Tensor [N, D]`` or an object with ``encode_text`` (the
demo's TinyCLIP, any LightningModule); by default :class:`HashingTextEncoder`, a dependency-free lexical baseline
(character trigrams and words hashed into a fixed vector). Encoders named by a string (``"hashing"``,
``"open_clip:<model>[:<pretrained>]"``) are built by :func:`beyondlabels.io.text_encoders.text_encoder`.

Example:
    >>> from beyondlabels.taxonomy import Taxonomy
    >>> tax = Taxonomy({"conifer": "tree", "norway_spruce": "conifer", "oak": "tree"}, root="tree")
    >>> mapper = TextToNode(tax)
    >>> [(m.node, m.rule) for m in mapper.map(["A Norway spruce.", "it looks like a conifer to me", "an oak tree"])]
    [('norway_spruce', 'exact'), ('conifer', 'word'), ('oak', 'word')]
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from beyondlabels.taxonomy.tree import Taxonomy

__all__ = ["HashingTextEncoder", "NodeMatch", "RULES", "TextToNode", "as_encoder", "normalize_text"]

RULES = ("exact", "ngram4", "ngram3", "ngram2", "word", "lca", "embedding")
STOP_WORDS = frozenset(
    "a an the of in on at to for with and or is it its this that be are was like looks look some kind sort type "
    "my me i you he she they there here which what very".split()
)
_WORDNET_SUFFIX = re.compile(r"\.[nvasr]\.\d+$")
_DROP = re.compile(r"[^0-9a-z ]+")
_SPACES = re.compile(r"\s+")
_ARTICLES = ("a ", "an ", "the ")


def normalize_text(text: str) -> str:
    """The normalised form of an answer or node text (rule: the module docstring).

    Example:
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

    Example:
        >>> node_text("norway_spruce.n.01")
        'norway spruce'
    """
    return normalize_text(_WORDNET_SUFFIX.sub("", name))


def _ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {
        tuple(words[i : i + n])
        for i in range(len(words) - n + 1)
        if not all(w in STOP_WORDS for w in words[i : i + n])
    }


class HashingTextEncoder:
    """A lexical text encoder: character trigrams of each word (with boundary marks) and whole words, hashed (CRC32)
    into ``dim`` buckets with signs, L2-normalised. Deterministic, no weights, no downloads.

    Args:
        dim: output width.

    Example:
        >>> enc = HashingTextEncoder(dim=64)
        >>> e = enc(["norway spruce", "spruce", "oak"])
        >>> e.shape, bool(e[0] @ e[1] > e[0] @ e[2])
        (torch.Size([3, 64]), True)
    """

    def __init__(self, dim: int = 512) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 8:
            raise ValueError(f"`dim` must be an int >= 8, got {dim!r}.")
        self.dim = dim

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


def as_encoder(encoder: Any = None) -> tuple[Callable[[list[str]], Tensor], Any]:
    """``(encode, identity)`` for an encoder object: a callable ``list[str] -> Tensor [N, D]``, an object with
    ``encode_text``, or None (a :class:`HashingTextEncoder`). The identity names the encoder: ``("hashing", dim)`` for
    None, the object itself (compared by ``is``) otherwise. Names such as ``"open_clip:<model>"`` are turned into
    encoders by :func:`beyondlabels.io.text_encoders.text_encoder`.

    Raises:
        ValueError: for anything else (a name included).

    Example:
        >>> encode, key = as_encoder()
        >>> encode(["a cat"]).shape, key
        (torch.Size([1, 512]), ('hashing', 512))
    """
    if encoder is None:
        hashing = HashingTextEncoder()
        return hashing, ("hashing", hashing.dim)
    if isinstance(encoder, str):
        raise ValueError(
            f"encoder {encoder!r} is a name; pass an encoder object (a callable list[str] -> Tensor [N, D] or an object "
            "with an encode_text method), or build one from the name with beyondlabels.io.text_encoders.text_encoder"
        )
    method = getattr(encoder, "encode_text", None)
    if callable(method):
        return method, ("encode_text", encoder)
    if callable(encoder):
        return encoder, ("callable", encoder)
    raise ValueError(f"`encoder` must be a callable or an object with encode_text; got {type(encoder).__name__}.")


@dataclass(frozen=True)
class NodeMatch:
    """One answer mapped to a node.

    Attributes:
        text: the answer as given.
        node: the node's name.
        index: the node's index in the taxonomy.
        rule: which rule decided (one of :data:`RULES`).
        score: the chosen node's cosine score (for ``lca``: the best candidate's).
        candidates: the top-k candidate names, best first.
    """

    text: str
    node: str
    index: int
    rule: str
    score: float
    candidates: tuple[str, ...]


class TextToNode:
    """Map free-text answers to taxonomy nodes (rules: the module docstring).

    Args:
        taxonomy: the tree.
        encoder: a callable ``list[str] -> Tensor [N, D]``, an object with ``encode_text``, or None (default: a
            :class:`HashingTextEncoder`).
        node_texts: ``{node: [text, ...]}`` (synonyms); nodes not listed use their name. Default: every node's name.
        top_k: number of candidates.
        ngram_orders: word n-gram lengths tried, in order.
        lca_margin: score gap within which the top candidates are merged into their LCA (``None`` turns the rule off).
        encoder_key: identity of the encoder's current weights: the node-text embeddings are recomputed when it
            changes (default: the identity of :func:`as_encoder`, fixed for the mapper's life).
        batch_size: texts encoded, and answers scored, per block.

    Raises:
        ValueError: naming the argument, for a bad ``top_k``, ``ngram_orders``, ``lca_margin`` or ``node_texts``.
    """

    def __init__(
        self,
        taxonomy: Taxonomy,
        encoder: Any = None,
        node_texts: Mapping[str, Iterable[str]] | None = None,
        top_k: int = 5,
        ngram_orders: Sequence[int] = (4, 3, 2),
        lca_margin: float | None = 0.02,
        encoder_key: Any = None,
        batch_size: int = 256,
    ) -> None:
        if not isinstance(taxonomy, Taxonomy):
            raise ValueError(f"`taxonomy` must be a Taxonomy, got {type(taxonomy).__name__}; see load_taxonomy().")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"`top_k` must be a positive int, got {top_k!r}.")
        orders = tuple(ngram_orders)
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in orders) or len(set(orders)) != len(orders):
            raise ValueError(f"`ngram_orders` must be distinct ints >= 2 (e.g. (4, 3, 2)), got {ngram_orders!r}.")
        if lca_margin is not None and (isinstance(lca_margin, bool) or not isinstance(lca_margin, (int, float)) or lca_margin < 0):
            raise ValueError(f"`lca_margin` must be a number >= 0 or None (no LCA fallback), got {lca_margin!r}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}.")
        self.taxonomy = taxonomy
        self._embeddings: tuple[Any, Tensor] | None = None
        self.set_encoder(encoder, encoder_key)
        self.top_k = min(top_k, len(taxonomy))
        self.ngram_orders = tuple(sorted(orders, reverse=True))
        self.lca_margin = None if lca_margin is None else float(lca_margin)
        self.batch_size = batch_size
        texts: list[str] = []
        owner: list[int] = []
        given = dict(node_texts or {})
        unknown = [n for n in given if n not in taxonomy]
        if unknown:
            raise ValueError(f"`node_texts` names nodes that are not in the taxonomy: {unknown[:5]}.")
        for index, name in enumerate(taxonomy.nodes):
            options = given.get(name)
            if options is None:
                options = [name]
            elif isinstance(options, str):
                raise ValueError(f"`node_texts[{name!r}]` must be a list of texts, got the string {options!r}.")
            normalised = list(dict.fromkeys(t for t in (node_text(o) for o in options) if t))
            if not normalised:
                raise ValueError(f"node {name!r} has no usable text after normalisation; give it a name or node_texts entry.")
            texts.extend(normalised)
            owner.extend([index] * len(normalised))
        self.node_texts = texts
        self.text_owner = torch.tensor(owner, dtype=torch.long)
        self._exact: dict[str, list[int]] = {}
        for text, index in zip(texts, owner):
            self._exact.setdefault(text, []).append(index)
        self._words = [text.split() for text in texts]
        self._texts_of: list[list[int]] = [[] for _ in range(len(taxonomy))]
        for t, index in enumerate(owner):
            self._texts_of[index].append(t)
        self._table = taxonomy.ancestor_table()
        self._depth = taxonomy.depth

    # ---- embeddings ------------------------------------------------------------------------------------------------
    def set_encoder(self, encoder: Any, encoder_key: Any = None) -> None:
        """Use ``encoder`` (any form :func:`as_encoder` accepts) from now on, under ``encoder_key`` (default: its
        identity); the node-text embeddings are recomputed at the next :meth:`map` unless both the encoder's identity
        and the key are unchanged.

        Raises:
            ValueError: for an encoder :func:`as_encoder` does not accept.
        """
        encode, identity = as_encoder(encoder)
        if self._embeddings is not None and not _same(identity, self._identity):
            self._embeddings = None
        self.encode, self._identity = encode, identity
        self.encoder_key = identity if encoder_key is None else encoder_key

    def clear_cache(self) -> None:
        """Forget this mapper's node-text embeddings."""
        self._embeddings = None

    def _encode(self, texts: Sequence[str]) -> Tensor:
        parts = []
        for lo in range(0, len(texts), self.batch_size):
            out = self.encode(list(texts[lo : lo + self.batch_size]))
            if not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] != len(texts[lo : lo + self.batch_size]):
                raise ValueError(f"the text encoder must return a [N, D] tensor for N texts, got {getattr(out, 'shape', type(out))}.")
            parts.append(torch.nn.functional.normalize(out.detach().float(), dim=1))
        return torch.cat(parts)

    def node_embeddings(self) -> Tensor:
        """L2-normalised embeddings of every node text ``[T, D]`` (kept until the encoder or its key changes; see the
        module docstring)."""
        if self._embeddings is not None and _same(self._embeddings[0], self.encoder_key):
            return self._embeddings[1]
        embeddings = self._encode(self.node_texts)
        self._embeddings = (self.encoder_key, embeddings)
        return embeddings

    # ---- mapping -----------------------------------------------------------------------------------------------------
    def map(self, texts: Sequence[str]) -> list[NodeMatch]:
        """Map every answer to a node (see the module docstring).

        Raises:
            ValueError: if ``texts`` is not a sequence of strings.
        """
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise ValueError(f"`texts` must be a list of strings, got {type(texts).__name__}.")
        normalised = [normalize_text(t) for t in texts]
        if not texts:
            return []
        nodes = self.node_embeddings()
        owner = self.text_owner.to(nodes.device)
        size = len(self.taxonomy)
        out: list[NodeMatch] = []
        for lo in range(0, len(texts), self.batch_size):
            answers = self._encode(list(texts[lo : lo + self.batch_size])).to(nodes.device)
            if answers.shape[1] != nodes.shape[1]:
                raise ValueError(f"the encoder gave answers of width {answers.shape[1]} but node texts of width {nodes.shape[1]}.")
            text_scores = answers @ nodes.T
            node_scores = torch.full((answers.shape[0], size), -2.0, device=nodes.device)
            node_scores.scatter_reduce_(1, owner.expand(answers.shape[0], -1), text_scores, reduce="amax", include_self=True)
            scores, order = torch.sort(node_scores, dim=1, descending=True, stable=True)
            scores, order = scores[:, : self.top_k].cpu(), order[:, : self.top_k].cpu()
            node_scores = node_scores.cpu()
            for row in range(answers.shape[0]):
                i = lo + row
                out.append(self._decide(texts[i], normalised[i], order[row].tolist(), scores[row].tolist(), node_scores[row]))
        return out

    def map_indices(self, texts: Sequence[str]) -> tuple[Tensor, list[str]]:
        """``(node indices [N], rules)`` of :meth:`map`."""
        matches = self.map(texts)
        return torch.tensor([m.index for m in matches], dtype=torch.long), [m.rule for m in matches]

    def _match(self, text: str, index: int, rule: str, score: float, candidates: list[int]) -> NodeMatch:
        names = self.taxonomy.nodes
        return NodeMatch(text, names[index], index, rule, score, tuple(names[c] for c in candidates))

    def _decide(self, text: str, norm: str, cand: list[int], cand_scores: list[float], node_scores: Tensor) -> NodeMatch:
        exact = self._exact.get(norm)
        if exact:
            best = max(exact, key=lambda n: (float(node_scores[n]), -n))
            return self._match(text, best, "exact", float(node_scores[best]), cand)
        words = norm.split()
        rank = {c: r for r, c in enumerate(cand)}
        owner = self.text_owner
        cand_texts = [t for c in cand for t in self._texts_of[c]]
        for n in self.ngram_orders:
            grams = _ngrams(words, n)
            if not grams:
                continue
            shared: dict[int, int] = {}
            for t in cand_texts:
                count = len(grams & _ngrams(self._words[t], n))
                if count:
                    node = int(owner[t])
                    shared[node] = max(shared.get(node, 0), count)
            if shared:
                best = min(shared, key=lambda c: (-shared[c], rank[c]))
                return self._match(text, best, f"ngram{n}", cand_scores[rank[best]], cand)
        word_set = {w for w in words if w not in STOP_WORDS}
        hits = [int(owner[t]) for t in cand_texts if len(self._words[t]) == 1 and self._words[t][0] in word_set]
        if hits:
            best = min(hits, key=lambda c: (-int(self._depth[c]), rank[c]))
            return self._match(text, best, "word", cand_scores[rank[best]], cand)
        if self.lca_margin is not None and len(cand) > 1 and cand_scores[0] - cand_scores[1] <= self.lca_margin:
            close = torch.tensor([c for c, s in zip(cand, cand_scores) if cand_scores[0] - s <= self.lca_margin])
            rows = self._table[close]
            agree = (rows == rows[0]).all(dim=0) & (rows[0] >= 0)
            depth = int(agree.long().cumprod(0).sum()) - 1
            return self._match(text, int(rows[0, depth]), "lca", cand_scores[0], cand)
        return self._match(text, cand[0], "embedding", cand_scores[0], cand)


def _same(a: Any, b: Any) -> bool:
    """Whether two encoder identities or keys are the same: equal tuples of equal parts, objects by ``is``."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (str, int, float, bool, type(None))) and isinstance(b, (str, int, float, bool, type(None))):
        return type(a) is type(b) and a == b
    return a is b
