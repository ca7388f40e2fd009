"""Graded relevance (class-gain matrices), binary nDCG, and query shares of the public search."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from beyondlabels.functional import (  # noqa: E402
    ClassGains,
    aggregate_retrieval,
    embedding_retrieval_metrics,
    retrieval_per_query,
    search_neighbors,
)
from beyondlabels.functional.search import normalize_rows  # noqa: E402
from tests.oracles.outputs import assert_same_outputs
from tests.oracles.retrieval_data import clustered, clustered_without_ties

KS = (1, 3, 5, 10)


def random_gains(num_classes: int, seed: int) -> np.ndarray:
    """A non-symmetric gain matrix with values on a grid of 1/4 (integer grades 0..4 for trec_eval)."""
    rng = np.random.default_rng(seed)
    gains = rng.integers(0, 4, size=(num_classes, num_classes)) / 4.0
    np.fill_diagonal(gains, 1.0)
    return gains


def numpy_graded(emb: np.ndarray, labels: np.ndarray, gains: np.ndarray, ks) -> dict[str, float]:
    """Leave-one-out graded precision@k and nDCG@k by a full sort per query, written independently of the kernel."""
    x = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sims = x @ x.T
    n = len(x)
    out = {f"{m}@{k}": [] for m in ("g_precision", "g_ndcg", "ndcg") for k in ks}
    for q in range(n):
        others = np.array([j for j in range(n) if j != q])
        if not (labels[others] == labels[q]).any():
            continue  # lone query
        order = others[np.lexsort((others, -sims[q, others]))]  # descending score, then ascending index
        g = gains[labels[q], labels[order]]
        ideal = np.sort(gains[labels[q], labels[others]])[::-1]
        rel = (labels[order] == labels[q]).astype(float)
        ideal_rel = np.sort(rel)[::-1]
        disc = 1.0 / np.log2(np.arange(2, n + 1))
        for k in ks:
            out[f"g_precision@{k}"].append(g[:k].sum() / k)
            out[f"g_ndcg@{k}"].append((g[:k] * disc[:k]).sum() / (ideal[:k] * disc[:k]).sum())
            out[f"ndcg@{k}"].append((rel[:k] * disc[:k]).sum() / (ideal_rel[:k] * disc[:k]).sum())
    return {key: float(np.mean(v)) for key, v in out.items()}


@pytest.fixture(scope="module")
def gallery():
    sizes = [30, 22, 15, 9, 6, 4, 2, 1]
    return clustered_without_ties(sum(sizes), 12, len(sizes), seed=5, noise=1.3, sizes=sizes)


def test_graded_metrics_match_a_numpy_oracle(gallery):
    emb, labels = gallery
    gains = random_gains(8, seed=1)
    out = embedding_retrieval_metrics(emb, labels, ks=KS, graded=[ClassGains(gains, list(range(8)), name="g")])
    ref = numpy_graded(emb.numpy().astype(np.float64), labels.numpy(), gains, KS)
    for key, value in ref.items():
        assert float(out[key]) == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_identity_gains_reproduce_the_binary_metrics(gallery):
    emb, labels = gallery
    out = embedding_retrieval_metrics(emb, labels, ks=KS, graded=[ClassGains.identity(list(range(8)), name="same")])
    for k in KS:
        assert torch.equal(out[f"same_precision@{k}"], out[f"precision@{k}"]), k
        assert torch.allclose(out[f"same_ndcg@{k}"], out[f"ndcg@{k}"], rtol=1e-14, atol=0), k
        assert torch.equal(out["per_query"][f"same_precision@{k}"].isnan(), out["per_query"][f"precision@{k}"].isnan())


def test_graded_ndcg_matches_trec_eval(gallery):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    emb, labels = gallery
    gains = random_gains(8, seed=2)
    out = embedding_retrieval_metrics(emb, labels, ks=(5, 10), graded=[ClassGains(gains, list(range(8)), name="g")])
    x = emb.double() / emb.double().norm(dim=1, keepdim=True)
    sims = (x @ x.T).numpy()
    lab = labels.numpy()
    n = len(lab)
    lone = np.bincount(lab)[lab] == 1
    qrels, run = {}, {}
    for q in range(n):
        if lone[q]:
            continue
        # every available gallery item is judged with its integer grade (gain x 4): the ideal order is the gallery's
        qrels[f"q{q}"] = {f"d{j:04d}": int(round(gains[lab[q], lab[j]] * 4)) for j in range(n) if j != q}
        run[f"q{q}"] = {f"d{j:04d}": float(sims[q, j]) for j in range(n) if j != q}
    res = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.5,10"}).evaluate(run)
    for k in (5, 10):
        ref = np.mean([res[q][f"ndcg_cut_{k}"] for q in sorted(res)])
        assert float(out[f"g_ndcg@{k}"]) == pytest.approx(ref, abs=1e-14), (
            k
        )  # pytrec_eval returns full doubles: measured 2.2e-16


def test_graded_ideal_with_a_separate_query_set_and_id_exclusion():
    emb, labels = clustered_without_ties(60, 8, 4, seed=3)
    gains = random_gains(4, seed=4)
    ids = torch.arange(60)
    kw = dict(ks=(1, 2, 5), graded=[ClassGains(gains, [0, 1, 2, 3], name="g")])
    loo = embedding_retrieval_metrics(emb, labels, ids, **kw)
    qs = embedding_retrieval_metrics(emb, labels, ids, query_embeddings=emb, query_labels=labels, query_ids=ids, **kw)
    assert_same_outputs(loo, qs)
    # without exclusion the query finds itself first: graded precision@1 is then 1 for every query
    own = embedding_retrieval_metrics(emb, labels, ids, query_embeddings=emb, query_labels=labels, **kw)
    assert float(own["g_precision@1"]) == 1.0 and float(own["g_ndcg@1"]) == 1.0
    # ... and its ideal counts the query itself as available: nDCG@2 stays below 1 when its second item is no class mate
    second_is_other = own["per_query"]["precision@2"] < 1
    assert bool(second_is_other.any()) and bool((own["per_query"]["g_ndcg@2"][second_is_other] < 1).all())


def test_string_class_names_and_unknown_labels():
    emb, labels = clustered(30, 6, 3, seed=0)
    names = ["a", "b", "c"]
    from beyondlabels.functional import encode_labels

    codes, _ = encode_labels([names[i] for i in labels.tolist()])
    gains = ClassGains(np.eye(3), names, name="g")
    by_name = embedding_retrieval_metrics(emb, codes, ks=(1,), graded=[gains])
    assert torch.equal(by_name["g_precision@1"], by_name["precision@1"])
    with pytest.raises(ValueError, match=r"labels .* does not list"):
        embedding_retrieval_metrics(emb, labels, ks=(1,), graded=[gains])


@pytest.mark.parametrize(
    ("gains", "classes", "name", "match"),
    [
        (np.ones((2, 3)), [0, 1], "g", "square"),
        (np.array([[1.0, 2.0], [0.0, 1.0]]), [0, 1], "g", r"\[0, 1\]"),
        (np.array([[0.5, 0.0], [0.0, 1.0]]), [0, 1], "g", "diagonal"),
        (np.eye(2), [0, 0], "g", "twice"),
        (np.eye(2), [0, 1, 2], "g", "must match"),
        (np.eye(2), [0, 1], "bad name", "name"),
    ],
)
def test_bad_gain_matrices_are_refused(gains, classes, name, match):
    with pytest.raises(ValueError, match=match):
        ClassGains(gains, classes, name=name)


# --------------------------------------------------------------------------------------------------------------------
# shares: the distributed work split
# --------------------------------------------------------------------------------------------------------------------


def _by_shares(count: int, emb, labels, ids=None, query=False, **kw):
    parts = []
    extra = dict(query_embeddings=emb, query_labels=labels, query_ids=ids) if query else {}
    for i in range(count):
        parts.append(retrieval_per_query(emb, labels, ids, share=(i, count), **extra, **kw))
    joined = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    graded = [g.name for g in kw.get("graded", ())]
    return aggregate_retrieval(
        joined, labels, ks=kw["ks"], curve_max_k=kw.get("curve_max_k"), graded=graded, query_ids=ids
    )


@pytest.mark.parametrize("count", [2, 3, 7])
@pytest.mark.parametrize("query", [False, True])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_shares_give_bitwise_the_single_result(count, query, precision):
    emb, labels = clustered(900, 16, 11, seed=9, noise=1.8)
    ids = torch.arange(900) * 3 + 1
    gains = ClassGains(random_gains(11, seed=3), list(range(11)), name="g")
    kw = dict(ks=KS, curve_max_k=15, chunk_size=100, precision=precision, graded=[gains], return_neighbors=4)
    extra = dict(query_embeddings=emb, query_labels=labels, query_ids=ids) if query else {}
    single = embedding_retrieval_metrics(emb, labels, ids, **extra, **kw)
    assert_same_outputs(_by_shares(count, emb, labels, ids, query=query, **kw), single, (count, query))


def test_each_query_is_in_exactly_one_share():
    emb, _ = clustered(700, 8, 5, seed=1)
    g = normalize_rows(emb)
    depth = torch.randint(1, 40, (700,), generator=torch.Generator().manual_seed(0))
    seen = []
    for i in range(4):
        for chunk in search_neighbors(g, depth, share=(i, 4), chunk_size=64, normalized=True):
            assert chunk.depth >= int(depth[chunk.rows].max())
            seen.append(chunk.rows)
    rows = torch.sort(torch.cat(seen)).values
    assert torch.equal(rows, torch.arange(700))


def test_shares_split_the_products_between_processes(monkeypatch):
    """A leave-one-out share multiplies only the block pairs touching its rows: with 4 shares, each share computes
    well under half of the single search's products."""
    import beyondlabels.functional._leave_one_out as kernel

    emb, _ = clustered(2048, 8, 5, seed=1)
    counted = []
    real = kernel.score_block

    def counting(q, g, ws=None):
        counted.append(q.shape[0] * g.shape[0])
        return real(q, g, ws)

    monkeypatch.setattr(kernel, "score_block", counting)
    list(search_neighbors(emb, 5, chunk_size=128))
    whole = sum(counted)
    per_share = []
    for i in range(4):
        counted.clear()
        list(search_neighbors(emb, 5, chunk_size=128, share=(i, 4)))
        per_share.append(sum(counted))
    assert max(per_share) < 0.5 * whole
    assert math.isclose(whole, 2048 * 2048 / 2, rel_tol=0.2)


@pytest.mark.parametrize("share", [(2, 2), (-1, 2), (0, 0), "0/2"])
def test_bad_share_is_refused(share):
    with pytest.raises(ValueError, match="share"):
        list(search_neighbors(torch.randn(10, 3), 2, share=share))


def numpy_mistake_means(emb: np.ndarray, labels: np.ndarray, table: np.ndarray) -> float:
    """Mean of table[label(q), label(top 1)] over non-lone queries whose top-1 neighbour has another label."""
    x = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sims = x @ x.T
    values = []
    for q in range(len(x)):
        others = np.array([j for j in range(len(x)) if j != q])
        if not (labels[others] == labels[q]).any():
            continue
        top = others[np.lexsort((others, -sims[q, others]))][0]
        if labels[top] != labels[q]:
            values.append(table[labels[q], labels[top]])
    return float(np.mean(values))


def test_mistake_stats_average_over_wrong_top1_neighbours(gallery):
    emb, labels = gallery
    rng = np.random.default_rng(6)
    table = rng.integers(0, 5, size=(8, 8)).astype(float)
    gains = ClassGains(random_gains(8, seed=1), list(range(8)), name="g", mistake_stats={"depth": table})
    out = embedding_retrieval_metrics(emb, labels, ks=(1, 5), graded=[gains])
    expected = numpy_mistake_means(emb.numpy().astype(np.float64), labels.numpy(), table)
    assert float(out["g_mistake_depth"]) == pytest.approx(expected, rel=1e-12)
    per_query = out["per_query"]["g_mistake_depth"]
    wrong = out["per_query"]["precision@1"] == 0
    assert torch.equal(~torch.isnan(per_query), wrong)  # defined exactly for the top-1 mistakes
    with pytest.raises(ValueError, match="mistake_stats"):
        ClassGains(np.eye(2), [0, 1], mistake_stats={"depth": np.zeros((3, 3))})


def test_taxonomy_gains_report_the_lca_depth_of_top1_mistakes():
    """Against numpy's top-1 neighbour (float64 cosine, the query itself left out) and the LCA found by walking the
    taxonomy's parent links."""
    from beyondlabels.demo import demo_taxonomy
    from beyondlabels.demo.metadata import leaf_classes
    from beyondlabels.functional import taxonomy_class_gains

    classes = list(leaf_classes())
    emb, labels = clustered(400, 10, len(classes), seed=2, noise=2.5)
    gains = taxonomy_class_gains(demo_taxonomy(), classes, labels="index")
    out = embedding_retrieval_metrics(emb, labels, ks=(1,), graded=[gains])
    x = emb.double().numpy()
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    top2 = np.sort(sims, axis=1)[:, -2:]
    assert np.min(top2[:, 1] - top2[:, 0]) > 1e-5  # no near tie at rank 1: fp32 scores pick the same neighbour
    top = sims.argmax(axis=1)
    tax = demo_taxonomy()
    parent = dict(zip(tax.nodes, [None if p < 0 else tax.nodes[p] for p in tax.parent_index.tolist()]))

    def ancestors(node):  # the node, its parent, ..., the root
        chain = [node]
        while parent[chain[-1]] is not None:
            chain.append(parent[chain[-1]])
        return chain

    lab = labels.numpy()
    depths = []
    for q in range(400):
        a, b = classes[lab[q]], classes[lab[top[q]]]
        if a != b:
            up = set(ancestors(a))
            meet = next(node for node in ancestors(b) if node in up)
            depths.append(len(ancestors(meet)) - 1)  # the root has depth 0
    assert 50 < len(depths) < 400 and len(set(depths)) > 1  # mistakes at several depths
    assert float(out["hierarchical_mistake_lca_depth"]) == pytest.approx(np.mean(depths), rel=1e-12)
