"""Tests of the embedding-retrieval kernels against independent references (numpy oracle, pytorch-metric-learning,
trec_eval, torchmetrics), plus tie, chunk, fast-mode and input-validation rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tests.oracles.numpy_retrieval as oracle
from beyondlabels.functional import (  # noqa: E402
    cosine_topk,
    embedding_retrieval_metrics,
    retrieval_output_schema,
)
from tests.gpu.devices import (
    accelerator_device,
    assert_matches_cpu,
    cosine_tolerance,
    needs_accelerator,
)
from tests.oracles.outputs import assert_same_outputs
from tests.oracles.retrieval_data import clustered, clustered_without_ties

KS = (1, 3, 5, 10)
CURVE = 12


def _as_float(v):
    return v.tolist() if isinstance(v, torch.Tensor) and v.dim() == 1 else float(v)


def assert_matches_oracle(ours: dict, ref: dict, ks=KS) -> None:
    assert int(ours["num_queries"]) == ref["num_queries"]
    assert int(ours["num_lone_queries"]) == ref["num_lone_queries"]
    keys = [f"{m}@{k}" for m in ("precision", "recall", "hit", "macro_precision") for k in ks]
    keys += [
        "r_precision",
        "map@r",
        "macro_r_precision",
        "macro_map@r",
        "mean_first_relevant_rank",
        "median_first_relevant_rank",
    ]
    for key in keys:
        assert float(ours[key]) == pytest.approx(ref[key], rel=1e-12, abs=1e-12), key
    np.testing.assert_allclose(ours["precision_curve"].numpy(), ref["precision_curve"], rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def gallery():
    """Uneven clusters incl. two singleton classes (lone queries), no near ties."""
    sizes = [40, 25, 18, 12, 9, 5, 3, 2, 1, 1]
    emb, labels = clustered_without_ties(sum(sizes), 16, len(sizes), seed=0, noise=1.2, sizes=sizes)
    return emb, labels


# --------------------------------------------------------------------------------------------------------------------
# independent references
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 7, 1024])
def test_leave_one_out_matches_numpy_oracle(gallery, chunk_size):
    emb, labels = gallery
    ours = embedding_retrieval_metrics(emb, labels, ks=KS, curve_max_k=CURVE, chunk_size=chunk_size)
    ref = oracle.retrieval_metrics(emb.numpy(), labels.numpy(), ks=KS, curve_max_k=CURVE)
    assert ref["num_lone_queries"] == 2
    assert_matches_oracle(ours, ref)


def test_ids_give_the_same_result_as_positions(gallery):
    emb, labels = gallery
    ids = torch.randperm(len(labels), generator=torch.Generator().manual_seed(3)) * 7 + 100
    a = embedding_retrieval_metrics(emb, labels, ks=KS)
    b = embedding_retrieval_metrics(emb, labels, ids, ks=KS)
    assert torch.equal(b["per_query"]["query_id"], ids) and torch.equal(
        a["per_query"]["query_id"], torch.arange(len(ids))
    )
    a["per_query"].pop("query_id"), b["per_query"].pop("query_id")
    assert_same_outputs(a, b)


def test_separate_query_set_matches_oracle():
    emb, labels = clustered_without_ties(90, 12, 6, seed=10)
    q, ql = clustered(30, 12, 7, seed=99)  # label 6 is absent from the gallery -> lone
    ours = embedding_retrieval_metrics(emb, labels, ks=KS, curve_max_k=CURVE, query_embeddings=q, query_labels=ql)
    ref = oracle.retrieval_metrics(
        emb.numpy(), labels.numpy(), ks=KS, curve_max_k=CURVE, query_embeddings=q.numpy(), query_labels=ql.numpy()
    )
    assert_matches_oracle(ours, ref)


def test_separate_query_set_with_id_exclusion_matches_oracle():
    emb, labels = clustered_without_ties(80, 12, 5, seed=20)
    gids = torch.arange(80) + 1000
    # Queries are noisy copies of the first 30 items, sharing their ids: each must not retrieve its own item.
    q = emb[:30] + 0.3 * torch.randn(30, 12, generator=torch.Generator().manual_seed(1))
    ours = embedding_retrieval_metrics(
        emb, labels, gids, ks=KS, query_embeddings=q, query_labels=labels[:30], query_ids=gids[:30]
    )
    ref = oracle.retrieval_metrics(
        emb.numpy(),
        labels.numpy(),
        ks=KS,
        query_embeddings=q.numpy(),
        query_labels=labels[:30].numpy(),
        excluded=np.arange(30),
    )
    assert_matches_oracle(ours, ref)


def test_matches_pytorch_metric_learning(gallery):
    from pytorch_metric_learning.distances import CosineSimilarity
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    emb, labels = gallery
    calc = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k="max_bin_count",
        device=torch.device("cpu"),
        knn_func=CustomKNN(CosineSimilarity()),
    )
    # reference=None -> ref_includes_query=True: the query's own match is removed from its neighbours.
    ref = calc.get_accuracy(emb, labels)
    ours = embedding_retrieval_metrics(emb, labels, ks=(1,))
    assert float(ours["precision@1"]) == pytest.approx(ref["precision_at_1"], abs=1e-12)
    assert float(ours["r_precision"]) == pytest.approx(ref["r_precision"], abs=1e-12)
    assert float(ours["map@r"]) == pytest.approx(ref["mean_average_precision_at_r"], abs=1e-12)

    calc_macro = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k="max_bin_count",
        avg_of_avgs=True,
        device=torch.device("cpu"),
        knn_func=CustomKNN(CosineSimilarity()),
    )
    ref = calc_macro.get_accuracy(emb, labels)
    assert float(ours["macro_precision@1"]) == pytest.approx(ref["precision_at_1"], abs=1e-12)
    assert float(ours["macro_r_precision"]) == pytest.approx(ref["r_precision"], abs=1e-12)
    assert float(ours["macro_map@r"]) == pytest.approx(ref["mean_average_precision_at_r"], abs=1e-12)


def test_matches_trec_eval(gallery):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    emb, labels = gallery
    g = emb.double() / emb.double().norm(dim=1, keepdim=True)
    scores = (g @ g.T).numpy()
    lab = labels.numpy()
    n = len(lab)
    qrels, run = {}, {}
    for q in range(n):
        rel = {f"d{j}": 1 for j in range(n) if j != q and lab[j] == lab[q]}
        if not rel:
            continue  # lone query: trec_eval has no relevant document for it
        qrels[f"q{q}"] = rel
        run[f"q{q}"] = {f"d{j}": float(scores[q, j]) for j in range(n) if j != q}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"P_1", "P_5", "P_10", "Rprec", "recip_rank"})
    res = evaluator.evaluate(run)
    ours = embedding_retrieval_metrics(emb, labels, ks=(1, 5, 10), return_neighbors=1)
    for k in (1, 5, 10):
        assert float(ours[f"precision@{k}"]) == pytest.approx(np.mean([r[f"P_{k}"] for r in res.values()]), abs=1e-12)
    assert float(ours["r_precision"]) == pytest.approx(np.mean([r["Rprec"] for r in res.values()]), abs=1e-12)
    ranks = ours["per_query"]["first_relevant_rank"]
    rr = {f"q{q}": 1.0 / float(ranks[q]) for q in range(n) if not torch.isnan(ranks[q])}
    assert rr.keys() == res.keys()
    for qid, r in res.items():
        assert rr[qid] == pytest.approx(r["recip_rank"], abs=1e-12)


def test_matches_torchmetrics_on_positive_scores(gallery):
    import torchmetrics.retrieval as tr

    emb, labels = gallery
    emb = emb + 6.0  # every cosine > 0: torchmetrics drops candidates scoring <= 0
    g = emb.double() / emb.double().norm(dim=1, keepdim=True)
    s = g @ g.T
    assert float(s.min()) > 0
    n = len(labels)
    off = ~torch.eye(n, dtype=torch.bool)
    preds = s[off].float()
    target = (labels[:, None] == labels[None, :])[off]
    indexes = torch.arange(n)[:, None].expand(n, n)[off]
    ours = embedding_retrieval_metrics(emb, labels, ks=(1, 5))
    for k in (1, 5):
        for name, cls in (
            ("precision", tr.RetrievalPrecision),
            ("recall", tr.RetrievalRecall),
            ("hit", tr.RetrievalHitRate),
        ):
            ref = cls(top_k=k, empty_target_action="skip")(preds, target, indexes=indexes)
            assert float(ours[f"{name}@{k}"]) == pytest.approx(float(ref), abs=1e-6), (name, k)
    ref = tr.RetrievalRPrecision(empty_target_action="skip")(preds, target, indexes=indexes)
    assert float(ours["r_precision"]) == pytest.approx(float(ref), abs=1e-6)


# --------------------------------------------------------------------------------------------------------------------
# ties, depth, chunking, fast mode
# --------------------------------------------------------------------------------------------------------------------


def test_tie_rule_smaller_index_first_across_the_boundary():
    torch.manual_seed(0)
    base = torch.randn(1, 8)
    other = torch.randn(1, 8)
    # 30 exact copies of one vector (indices 0..29), one distinct vector last.
    gallery = torch.cat([base.expand(30, 8), other])
    for chunk in (1, 30):
        scores, idx = cosine_topk(base, gallery, 5, chunk_size=chunk)
        assert idx.tolist() == [[0, 1, 2, 3, 4]]
    # Copies scattered among other items: the top 4 must be the four smallest indices holding the copies.
    perm = torch.randperm(31, generator=torch.Generator().manual_seed(5))
    shuffled = gallery[perm]
    copies = sorted(int(i) for i in torch.nonzero(perm < 30).flatten())
    _, idx = cosine_topk(base, shuffled, 4)
    assert idx.tolist() == [copies[:4]]
    # With self-exclusion by id the copy that is the query itself drops out, the next smallest index enters.
    ids = torch.arange(31)
    _, idx = cosine_topk(shuffled, shuffled, 3, query_ids=ids, gallery_ids=ids)
    first = copies[0]
    assert idx[first].tolist() == copies[1:4]


def test_ties_match_oracle_on_duplicated_vectors():
    # 6 distinct directions, each repeated with mixed labels: many exact ties, at and across every cut-off.
    rng = np.random.default_rng(4)
    base = rng.normal(size=(6, 10))
    which = rng.integers(0, 6, size=120)
    emb = torch.tensor(base[which], dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, 4, size=120))
    ours = embedding_retrieval_metrics(emb, labels, ks=KS, curve_max_k=CURVE, chunk_size=13)
    ref = oracle.retrieval_metrics(emb.numpy(), labels.numpy(), ks=KS, curve_max_k=CURVE)
    assert_matches_oracle(ours, ref)
    for precision in ("bf16", "fp16"):
        fast = embedding_retrieval_metrics(emb, labels, ks=KS, curve_max_k=CURVE, precision=precision)
        assert_same_outputs(ours, fast, precision)


def test_topk_order_is_descending_then_by_index():
    emb, labels = clustered(200, 8, 5, seed=2)
    emb = torch.cat([emb, emb[:50]])  # exact duplicates create ties
    ids = torch.arange(250)
    scores, idx = cosine_topk(emb, emb, 25, query_ids=ids, gallery_ids=ids, chunk_size=64)
    assert bool((scores[:, 1:] <= scores[:, :-1]).all())
    same = scores[:, 1:] == scores[:, :-1]
    assert bool((idx[:, 1:][same] > idx[:, :-1][same]).all())
    assert not bool((idx == ids[:, None]).any())


def test_first_relevant_rank_beyond_the_searched_depth():
    # Query 0's only relevant partner is the item farthest from it: rank = gallery size - 1 (self excluded).
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(40, 6))
    emb[1] = -emb[0]
    labels = np.arange(40) % 19 + 1
    labels[0] = labels[1] = 0
    labels[2:21] = np.arange(19) + 1  # every other label has exactly two members
    labels[21:] = np.arange(19) + 1
    emb_t, lab_t = torch.tensor(emb, dtype=torch.float32), torch.tensor(labels)
    ours = embedding_retrieval_metrics(emb_t, lab_t, ks=(1, 2), return_neighbors=2)
    assert float(ours["per_query"]["first_relevant_rank"][0]) == 39.0
    ref = oracle.retrieval_metrics(emb, labels, ks=(1, 2))
    assert_matches_oracle(ours, ref, ks=(1, 2))
    for precision in ("bf16", "fp16"):
        fast = embedding_retrieval_metrics(emb_t, lab_t, ks=(1, 2), precision=precision)
        assert float(fast["mean_first_relevant_rank"]) == float(ours["mean_first_relevant_rank"])


def test_chunk_size_invariance_is_exact():
    emb, labels = clustered(300, 24, 9, seed=7, noise=1.5)
    ref = embedding_retrieval_metrics(emb, labels, ks=KS, curve_max_k=CURVE, chunk_size=4096)
    for chunk in (1, 3, 17, 128):
        out = embedding_retrieval_metrics(emb, labels, ks=KS, curve_max_k=CURVE, chunk_size=chunk)
        assert_same_outputs(out, ref, chunk)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_fast_mode_equals_fp32_on_random_data(precision):
    emb, labels = clustered(600, 48, 12, seed=11, noise=2.0)
    ref = embedding_retrieval_metrics(emb, labels, ks=KS, curve_max_k=20, chunk_size=128, return_neighbors=10)
    fast = embedding_retrieval_metrics(
        emb, labels, ks=KS, curve_max_k=20, chunk_size=128, precision=precision, return_neighbors=10
    )
    assert_same_outputs(ref, fast)
    s32, i32 = cosine_topk(emb[:100], emb, 15)
    slow, ilow = cosine_topk(emb[:100], emb, 15, precision=precision, chunk_size=32)
    assert torch.equal(i32, ilow)
    torch.testing.assert_close(s32, slow, rtol=0, atol=1e-6)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("noise", [0.3, 3.0])
def test_fast_mode_takes_both_rescoring_paths(precision, noise, monkeypatch):
    """Separated classes rescore a small candidate union; crowded ones rescore whole chunks. Both equal fp32."""
    import beyondlabels.functional._low_precision as kernel

    emb, labels = clustered(800, 64, 40, seed=12, noise=noise)
    ref = embedding_retrieval_metrics(emb, labels, ks=KS, chunk_size=200)
    widths = []
    real = kernel.score_block
    monkeypatch.setattr(kernel, "score_block", lambda q, g: widths.append(g.shape[0]) or real(q, g))
    fast = embedding_retrieval_metrics(emb, labels, ks=KS, chunk_size=50, precision=precision)
    assert_same_outputs(ref, fast)
    if noise < 1:
        assert max(widths) < 400  # union of candidates
    else:
        assert max(widths) == 800  # whole gallery


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_fast_mode_equals_fp32_on_near_ties(precision):
    # Items within 1e-4..1e-3 (far below bf16 resolution) of a few anchors, labels alternating: ranks hinge on
    # differences the coarse search cannot see.
    g = torch.Generator().manual_seed(8)
    anchors = torch.randn(5, 32, generator=g)
    emb = anchors.repeat_interleave(60, dim=0)
    emb = emb + torch.randn(emb.shape, generator=g) * torch.logspace(-5, -3, 300).unsqueeze(1)
    labels = torch.arange(300) % 4
    ref = embedding_retrieval_metrics(emb, labels, ks=KS, curve_max_k=30, chunk_size=50)
    fast = embedding_retrieval_metrics(emb, labels, ks=KS, curve_max_k=30, chunk_size=50, precision=precision)
    assert_same_outputs(ref, fast)
    i32 = cosine_topk(emb, emb, 20, query_ids=torch.arange(300), gallery_ids=torch.arange(300))[1]
    ilow = cosine_topk(emb, emb, 20, query_ids=torch.arange(300), gallery_ids=torch.arange(300), precision=precision)[1]
    assert torch.equal(i32, ilow)


@pytest.mark.parametrize(
    ("n", "classes", "chunk_size"), [(3000, 8, 64), (3000, 8, 700), (3000, 8, 4096), (6000, 200, 256)]
)
def test_symmetric_leave_one_out_equals_query_set_search(n, classes, chunk_size):
    """The default leave-one-out search multiplies each block pair once; a separate query set (the same rows, self
    excluded by id) is searched row chunk by row chunk. Both must give bitwise the same scores and metrics. Many
    small classes (shallow R) over many blocks exercise the pre-selection by the running worst score."""
    emb, labels = clustered(n, 32, classes, seed=21, noise=2.0)
    ids = torch.arange(n)
    loo = embedding_retrieval_metrics(emb, labels, ids, ks=KS, chunk_size=chunk_size, return_neighbors=40)
    qs = embedding_retrieval_metrics(
        emb,
        labels,
        ids,
        ks=KS,
        chunk_size=chunk_size,
        return_neighbors=40,
        query_embeddings=emb,
        query_labels=labels,
        query_ids=ids,
    )
    assert_same_outputs(loo, qs)


def _reference_topk(queries, gallery, k, exclude_self=False):
    """Top k by (descending fp32 score, ascending index) with numpy's lexsort on one fp32 product."""
    q = queries / queries.norm(dim=1, keepdim=True)
    g = gallery / gallery.norm(dim=1, keepdim=True)
    s = (q @ g.T).numpy()
    if exclude_self:
        np.fill_diagonal(s, -np.inf)
    cols = np.arange(s.shape[1])
    return np.stack([np.lexsort((cols, -row))[:k] for row in s])


def test_wide_rows_with_many_ties_follow_the_tie_rule():
    # 7 directions repeated over 3000 items: every score is tied with hundreds of others, so the group-maximum
    # pre-selection meets ties at its floor and at the k-th position.
    rng = np.random.default_rng(6)
    base = torch.tensor(rng.normal(size=(7, 8)), dtype=torch.float32)
    emb = base[torch.tensor(rng.integers(0, 7, size=3000))]
    labels = torch.tensor(rng.integers(0, 5, size=3000))
    for k in (1, 37, 300):
        _, idx = cosine_topk(emb[:200], emb, k, chunk_size=64)
        np.testing.assert_array_equal(idx.numpy(), _reference_topk(emb[:200], emb, k))
    out = embedding_retrieval_metrics(emb, labels, ks=(1, 5), return_neighbors=300, chunk_size=256)
    np.testing.assert_array_equal(
        out["neighbors"]["indices"].numpy(), _reference_topk(emb, emb, 300, exclude_self=True)
    )
    ref = oracle.retrieval_metrics(emb.numpy(), labels.numpy(), ks=(1, 5))
    assert_matches_oracle(out, ref, ks=(1, 5))


def test_wide_rows_without_ties_match_the_reference_order():
    emb, _ = clustered(5000, 24, 30, seed=4, noise=1.5)
    for k in (1, 50, 400):
        scores, idx = cosine_topk(emb[:300], emb, k, chunk_size=100)
        np.testing.assert_array_equal(idx.numpy(), _reference_topk(emb[:300], emb, k))
        assert bool((scores[:, 1:] <= scores[:, :-1]).all())


def test_ranking_keys_round_trip_and_order():
    import beyondlabels.functional._topk as kernel

    vals = torch.tensor([[0.5, -0.0, 0.0, float("-inf"), -1.0, 1e-38, -1e-38, 0.5]])
    idx = torch.tensor([[3, 1, 0, 2, 7, 5, 6, 4]])
    keys = kernel.to_keys(vals, idx)
    back_vals, back_idx = kernel.from_keys(keys)
    assert torch.equal(back_idx, idx)
    assert torch.equal(back_vals, vals + 0.0)  # -0.0 comes back as +0.0: it ties with 0.0
    order = torch.argsort(keys[0], descending=True)
    # descending score, equal scores (0.5 twice, +-0.0) by ascending index
    assert idx[0, order].tolist() == [3, 4, 5, 0, 1, 6, 7, 2]


def test_lone_queries_are_excluded_and_counted():
    emb = torch.tensor([[1.0, 0.0], [0.9, 0.2], [0.0, 1.0], [-1.0, 0.1]])
    labels = torch.tensor([0, 0, 1, 2])
    out = embedding_retrieval_metrics(emb, labels, ks=(1,), return_neighbors=1)
    assert int(out["num_queries"]) == 2 and int(out["num_lone_queries"]) == 2
    assert float(out["precision@1"]) == 1.0
    assert out["per_query"]["num_relevant"].tolist() == [1, 1, 0, 0]
    assert torch.isnan(out["per_query"]["map@r"][2:]).all() and not torch.isnan(out["per_query"]["map@r"][:2]).any()
    none = embedding_retrieval_metrics(emb[2:], labels[2:], ks=(1,))
    assert int(none["num_queries"]) == 0 and int(none["num_lone_queries"]) == 2
    assert torch.isnan(none["precision@1"]) and torch.isnan(none["precision_curve"]).all()


def test_returned_keys_and_neighbors(gallery):
    emb, labels = gallery
    ids = torch.arange(len(labels)) + 500
    out = embedding_retrieval_metrics(emb, labels, ids, ks=(1, 5), return_neighbors=3)
    expected = {f"{m}@{k}" for m in ("precision", "recall", "hit", "ndcg", "macro_precision") for k in (1, 5)}
    expected |= {"r_precision", "map@r", "macro_r_precision", "macro_map@r", "mean_first_relevant_rank"}
    expected |= {"median_first_relevant_rank", "num_queries", "num_lone_queries", "precision_curve", "per_query"}
    plain = embedding_retrieval_metrics(emb, labels, ids, ks=(1, 5))
    assert set(plain) == expected
    schema = retrieval_output_schema((1, 5))
    assert set(plain) - {"per_query"} == set(schema)
    assert set(plain["per_query"]) == set(schema.per_query)
    assert plain["precision_curve"].shape == (5,)
    assert float(plain["precision_curve"][0]) == float(plain["precision@1"])
    scores, idx = cosine_topk(emb, emb, 3, query_ids=ids, gallery_ids=ids)
    assert torch.equal(out["neighbors"]["indices"], idx)
    assert torch.equal(out["neighbors"]["scores"], scores)
    assert torch.equal(out["per_query"]["query_id"], ids)


def test_float64_and_half_inputs_are_accepted():
    emb, labels = clustered(60, 8, 3, seed=1)
    ref = embedding_retrieval_metrics(emb.double().float(), labels)
    assert_same_outputs(embedding_retrieval_metrics(emb.double(), labels.int()), ref)
    for dtype in (torch.float16, torch.bfloat16):
        low = emb.to(dtype)
        assert_same_outputs(
            embedding_retrieval_metrics(low, labels), embedding_retrieval_metrics(low.float(), labels), dtype
        )


# --------------------------------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------------------------------

E = torch.randn(6, 4)
L = torch.tensor([0, 0, 1, 1, 2, 2])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"embeddings": torch.empty(0, 4), "labels": torch.empty(0, dtype=torch.long)}, "embeddings"),
        ({"embeddings": torch.randn(6), "labels": L}, "embeddings"),
        ({"embeddings": E.clone().index_fill_(0, torch.tensor([2]), float("nan")), "labels": L}, "embeddings"),
        ({"embeddings": E.clone().index_fill_(0, torch.tensor([1]), float("inf")), "labels": L}, "embeddings"),
        ({"embeddings": E.clone().index_fill_(0, torch.tensor([3]), 0.0), "labels": L}, "embeddings"),
        ({"embeddings": E.long(), "labels": L}, "embeddings"),
        ({"embeddings": E, "labels": L[:5]}, "labels"),
        ({"embeddings": E, "labels": L.float()}, "labels"),
        ({"embeddings": E, "labels": [0, 0, 1, 1, 2, 2]}, "labels"),
        ({"embeddings": E, "labels": L, "ids": torch.arange(5)}, "ids"),
        ({"embeddings": E, "labels": L, "ids": torch.tensor([0, 1, 2, 2, 4, 5])}, "ids"),
        ({"embeddings": E, "labels": L, "ks": (1, 6)}, "ks"),
        ({"embeddings": E, "labels": L, "ks": (0,)}, "ks"),
        ({"embeddings": E, "labels": L, "ks": ()}, "ks"),
        ({"embeddings": E, "labels": L, "ks": (1.5,)}, "ks"),
        ({"embeddings": E, "labels": L, "chunk_size": 0}, "chunk_size"),
        ({"embeddings": E, "labels": L, "precision": "fp8"}, "precision"),
        ({"embeddings": E, "labels": L, "ks": (1,), "curve_max_k": 9}, "curve_max_k"),
        ({"embeddings": E, "labels": L, "ks": (1,), "curve_max_k": 0}, "curve_max_k"),
        ({"embeddings": E, "labels": L, "ks": (1,), "return_neighbors": -1}, "return_neighbors"),
        ({"embeddings": E, "labels": L, "ks": (1,), "return_neighbors": 6}, "return_neighbors"),
        (
            {"embeddings": E, "labels": L, "query_embeddings": torch.randn(2, 3), "query_labels": L[:2]},
            "query_embeddings",
        ),
        ({"embeddings": E, "labels": L, "query_embeddings": torch.randn(2, 4)}, "query_labels"),
        ({"embeddings": E, "labels": L, "query_embeddings": torch.randn(2, 4), "query_labels": L[:3]}, "query_labels"),
        ({"embeddings": E, "labels": L, "query_labels": L}, "query_embeddings"),
        (
            {
                "embeddings": E,
                "labels": L,
                "ids": torch.arange(6),
                "query_embeddings": torch.randn(2, 4),
                "query_labels": L[:2],
                "query_ids": torch.tensor([1, 1]),
            },
            "query_ids",
        ),
    ],
)
def test_metrics_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        embedding_retrieval_metrics(**kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        ((E, E, 7), {}, "k"),
        ((E, E, 6), {"query_ids": torch.arange(6), "gallery_ids": torch.arange(6)}, "k"),
        ((E, E, 0), {}, "k"),
        ((E, E, 2), {"query_ids": torch.arange(6)}, "gallery_ids"),
        ((E, E, 2), {"query_ids": torch.arange(6), "gallery_ids": torch.zeros(6, dtype=torch.long)}, "gallery_ids"),
        ((E, E, 2), {"query_ids": torch.arange(5), "gallery_ids": torch.arange(6)}, "query_ids"),
        ((E, torch.randn(6, 3), 2), {}, "gallery"),
        ((torch.zeros(2, 4), E, 2), {}, "queries"),
        ((E, E, 2), {"chunk_size": -3}, "chunk_size"),
        ((E, E, 2), {"precision": "int8"}, "precision"),
    ],
)
def test_topk_bad_input_names_the_argument(args, kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        cosine_topk(*args, **kwargs)


def test_k_equal_to_available_gallery_is_allowed():
    ids = torch.arange(6)
    scores, idx = cosine_topk(E, E, 5, query_ids=ids, gallery_ids=ids)
    assert idx.shape == (6, 5)
    assert not bool((idx == ids[:, None]).any())
    out = embedding_retrieval_metrics(E, L, ks=(5,))
    assert float(out["recall@5"]) == 1.0


# --------------------------------------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_accelerator
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_cuda_matches_cpu(precision):
    """Every tensor of the output, nested ``per_query`` and ``neighbors`` included, lies on the device; the fast mode
    equals the device's fp32 search bitwise; the device's values equal the CPU's (the same neighbors and ranks on
    tie-free data, so equal hit-based metrics up to float64 summation order, and cosines within fp32 rounding)."""
    device = accelerator_device()
    emb, labels = clustered_without_ties(200, 32, 8, seed=3)
    ids = torch.arange(200) * 3 + 5
    kwargs = {"ks": KS, "curve_max_k": CURVE, "return_neighbors": 10}
    cpu = embedding_retrieval_metrics(emb, labels, ids, **kwargs)
    dev_fp32 = embedding_retrieval_metrics(emb.to(device), labels.to(device), ids.to(device), **kwargs)
    dev = embedding_retrieval_metrics(emb.to(device), labels.to(device), ids.to(device), **kwargs, precision=precision)
    assert {"per_query", "neighbors"} <= cpu.keys()
    assert_same_outputs(dev, dev_fp32)
    assert_matches_cpu(dev, cpu, device, tolerances={"neighbors/scores": cosine_tolerance(32)})
    s_cpu, i_cpu = cosine_topk(emb, emb, 10)
    s_dev, i_dev = cosine_topk(emb.to(device), emb.to(device), 10, precision=precision)
    assert i_dev.device == device and s_dev.device == device
    assert torch.equal(i_dev.cpu(), i_cpu)
    torch.testing.assert_close(s_dev.cpu(), s_cpu, rtol=0, atol=cosine_tolerance(32))
