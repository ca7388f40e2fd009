"""Text-to-image R-precision kernel against a numpy oracle, torchmetrics RetrievalHitRate and analytic cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchmetrics.retrieval import RetrievalHitRate

from beyondlabels.functional import rprecision  # noqa: E402
from beyondlabels.functional.rprecision import (  # noqa: E402
    CandidateSets,
    aggregate_rprecision,
    candidate_scores,
    draw_candidate_sets,
    fold_assignment,
    rprecision_output_schema,
    rprecision_per_query,
    text_image_r_precision,
)
from beyondlabels.io.candidate_sets import load_candidate_sets, save_candidate_sets  # noqa: E402
from tests.gpu.devices import accelerator_device, needs_accelerator
from tests.oracles.outputs import assert_same_outputs


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pairs(n: int, d: int = 32, noise: float = 1.0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    txt = torch.randn(n, d, generator=_gen(seed))
    img = txt + noise * torch.randn(n, d, generator=_gen(seed + 1))
    return img, txt


# ---- a numpy oracle, written from the definition (float64, sample ids as row indices) --------------------------------


def numpy_scores(img: torch.Tensor, txt: torch.Tensor) -> np.ndarray:
    """``s[i, t]``: the cosine of image ``i`` and text ``t`` in float64."""
    a, b = img.detach().cpu().double().numpy(), txt.detach().cpu().double().numpy()
    return (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (b / np.linalg.norm(b, axis=1, keepdims=True)).T


def fp32_bound(d: int) -> float:
    """Worst-case error of an fp32 cosine of ``d``-dimensional fp32 vectors: normalising each costs ``d / 2 + 2``
    unit roundoffs per component, a ``d``-term dot product of unit vectors ``d`` more."""
    return (2 * d + 4) * 2.0**-24


def oracle_ranks(img: np.ndarray, txt: np.ndarray, distractors: np.ndarray, direction: str) -> np.ndarray:
    img = img / np.linalg.norm(img, axis=1, keepdims=True)
    txt = txt / np.linalg.norm(txt, axis=1, keepdims=True)
    sim = img @ txt.T  # sim[i, t]
    ranks = []
    for q, ds in enumerate(distractors):
        gt = sim[q, q]
        other = sim[q, ds] if direction == "image_to_text" else sim[ds, q]
        ranks.append(1 + int(np.sum(other >= gt)))
    return np.array(ranks)


def test_matches_numpy_oracle_both_directions_and_curve():
    img, txt = _pairs(60, noise=4.0)
    out = text_image_r_precision(img, txt, num_candidates=12, top_r=(1, 3), repeats=7, near_duplicate_threshold=None)
    sets = draw_candidate_sets(txt, num_candidates=12, near_duplicate_threshold=None)
    i2t = oracle_ranks(img.double().numpy(), txt.double().numpy(), sets.distractor_ids.numpy(), "image_to_text")
    t2i = oracle_ranks(img.double().numpy(), txt.double().numpy(), sets.distractor_ids.numpy(), "text_to_image")
    assert out["per_query"]["rank"].tolist() == i2t.tolist()
    assert out["per_query"]["text_to_image_r_precision"].tolist() == (t2i <= 1).astype(float).tolist()
    assert 0.1 < (i2t <= 1).mean() < 0.95  # the case is informative
    curve = [(i2t <= r).mean() for r in range(1, 13)]
    np.testing.assert_allclose(out["r_precision_curve"].numpy(), curve)
    # folds (7 unequal folds of 60): the value is the mean over samples, the std that of the fold means (ddof 0)
    fold = fold_assignment(torch.arange(60), 0, 7).numpy()
    assert sorted(np.bincount(fold).tolist()) == [8, 8, 8, 9, 9, 9, 9]
    for key, ranks, cut in [("r_precision", i2t, 1), ("r_precision@3", i2t, 3), ("text_to_image_r_precision", t2i, 1)]:
        assert out[key].item() == pytest.approx((ranks <= cut).mean(), abs=1e-12)
    for key, ranks in [("r_precision_std", i2t), ("text_to_image_r_precision_std", t2i)]:
        means = [(ranks[fold == j] <= 1).mean() for j in range(7)]
        assert out[key].item() == pytest.approx(np.std(means), abs=1e-12)
    for key in ("r_precision", "text_to_image_r_precision", "clip_score"):  # per-sample means are the scalars
        assert out["per_query"][key].mean().item() == pytest.approx(out[key].item(), abs=1e-12)


def test_resample_redraws_per_repeat():
    img, txt = _pairs(40, noise=1.5, seed=3)
    out = text_image_r_precision(
        img, txt, num_candidates=8, top_r=(1,), protocol="resample", repeats=4, seed=7, near_duplicate_threshold=None
    )
    means = []
    for k in range(4):
        sets = draw_candidate_sets(txt, num_candidates=8, seed=7, repeat=k, near_duplicate_threshold=None)
        means.append((oracle_ranks(img.numpy(), txt.numpy(), sets.distractor_ids.numpy(), "image_to_text") <= 1).mean())
    assert len(set(means)) > 1  # the draws differ
    assert out["r_precision"].item() == pytest.approx(np.mean(means), abs=1e-12)
    assert out["r_precision_std"].item() == pytest.approx(np.std(means), abs=1e-12)


def test_equals_torchmetrics_hit_rate_on_the_same_groups():
    img, txt = _pairs(50, noise=2.0, seed=5)
    sets = draw_candidate_sets(txt, num_candidates=10, near_duplicate_threshold=None)
    cands = torch.cat(
        [torch.arange(50).unsqueeze(1), sets.distractor_ids], dim=1
    ).numpy()  # ids are 0..N-1: ids are rows
    scores = torch.from_numpy(np.take_along_axis(numpy_scores(img, txt), cands, axis=1))
    target = torch.zeros_like(scores, dtype=torch.bool)
    target[:, 0] = True
    indexes = torch.arange(50).unsqueeze(1).expand_as(scores)
    # torchmetrics >= 1.8 drops candidates with score <= 0: shift every score (order is kept)
    ref = RetrievalHitRate(top_k=1)(scores.flatten() + 2.0, target.flatten(), indexes=indexes.flatten())
    out = text_image_r_precision(img, txt, num_candidates=10, top_r=(1,), repeats=1, near_duplicate_threshold=None)
    assert out["r_precision"].item() == pytest.approx(ref.item(), abs=1e-7)
    assert 0.0 < ref.item() < 1.0


def test_perfectly_aligned_is_one_in_both_directions():
    txt = torch.randn(80, 64, generator=_gen(1))
    out = text_image_r_precision(txt.clone(), txt, num_candidates=20, top_r=(1, 5))
    for key in ("r_precision", "r_precision@5", "text_to_image_r_precision"):
        assert out[key].item() == 1.0
    assert out["r_precision_std"].item() == 0.0
    assert out["clip_score"].item() == pytest.approx(100.0, abs=1e-4)
    assert out["clip_score_w2.5"].item() == pytest.approx(2.5, abs=1e-6)
    assert torch.all(out["r_precision_curve"] == 1.0)


def test_independent_random_is_chance_within_a_binomial_bound():
    n, r_cands = 3000, 10
    img = torch.randn(n, 48, generator=_gen(2))
    txt = torch.randn(n, 48, generator=_gen(3))
    out = text_image_r_precision(img, txt, num_candidates=r_cands, top_r=(1, 5), repeats=10)
    bound = 5 * math.sqrt(0.1 * 0.9 / n)
    assert out["chance"].item() == pytest.approx(0.1)
    assert abs(out["r_precision"].item() - 0.1) < bound
    assert abs(out["text_to_image_r_precision"].item() - 0.1) < bound
    assert abs(out["r_precision@5"].item() - 0.5) < 5 * math.sqrt(0.25 / n)


def test_planted_ties_count_as_misses():
    txt = torch.randn(10, 16, generator=_gen(4))
    txt[1] = txt[0]  # samples 0 and 1: one embedding, two captions
    img = txt.clone()
    out = text_image_r_precision(img, txt, num_candidates=10, top_r=(1, 2), repeats=1, near_duplicate_threshold=None)
    rank = out["per_query"]["rank"]
    assert rank[:2].tolist() == [2.0, 2.0]  # the tied distractor counts against the ground truth
    assert torch.all(rank[2:] == 1)
    assert out["r_precision"].item() == pytest.approx(0.8)
    assert out["r_precision@2"].item() == 1.0
    # with the captions' codes equal, the duplicate is no distractor: no tie is left
    codes = torch.tensor([5, 5, 1, 2, 3, 4, 6, 7, 8, 9])
    out = text_image_r_precision(
        img, txt, caption_codes=codes, num_candidates=9, top_r=(1,), repeats=1, near_duplicate_threshold=None
    )
    assert out["r_precision"].item() == 1.0


def test_clip_score_matches_definition():
    img, txt = _pairs(30, noise=3.0, seed=8)
    out = text_image_r_precision(img, txt, num_candidates=5, top_r=(1,))
    a = img.double().numpy()
    b = txt.double().numpy()
    cos = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert (cos < 0).any()  # the clamp matters
    assert out["clip_score"].item() == pytest.approx(100 * np.maximum(cos, 0).mean(), abs=1e-4)
    assert out["clip_score_w2.5"].item() == pytest.approx(2.5 * np.maximum(cos, 0).mean(), abs=1e-6)


# ---- candidate sets -------------------------------------------------------------------------------------------------


def test_sets_are_a_function_of_seed_and_ids_only():
    img, txt = _pairs(70, seed=9)
    ids = torch.randperm(1000, generator=_gen(0))[:70]
    perm = torch.randperm(70, generator=_gen(1))
    a = text_image_r_precision(img, txt, ids, num_candidates=15, top_r=(1,), chunk_size=7)
    b = text_image_r_precision(img[perm], txt[perm], ids[perm], num_candidates=15, top_r=(1,), chunk_size=64)
    for key in ("r_precision", "r_precision_std", "text_to_image_r_precision"):
        assert a[key].item() == b[key].item()
    assert torch.equal(a["per_query"]["query_id"], torch.sort(ids).values)
    assert torch.equal(a["per_query"]["rank"], b["per_query"]["rank"])
    s1 = draw_candidate_sets(txt, ids, num_candidates=15, chunk_size=5)
    s2 = draw_candidate_sets(txt[perm], ids[perm], num_candidates=15, chunk_size=100)
    assert torch.equal(s1.distractor_ids, s2.distractor_ids)
    s3 = draw_candidate_sets(txt, ids, num_candidates=15, seed=1)
    assert not torch.equal(s1.distractor_ids, s3.distractor_ids)


def test_draw_is_without_replacement_and_uniform():
    txt = torch.randn(20, 8, generator=_gen(10))
    counts = np.zeros(20)
    for seed in range(300):
        d = draw_candidate_sets(txt, num_candidates=5, seed=seed, near_duplicate_threshold=None).distractor_ids
        for row in range(20):
            assert len(set(d[row].tolist())) == 4 and row not in d[row].tolist()
        counts[d[0].numpy()] += 1
    p = 4 / 19
    assert counts[0] == 0
    bound = 5 * math.sqrt(300 * p * (1 - p))
    assert np.all(np.abs(counts[1:] - 300 * p) < bound), counts


def test_exclusions_class_caption_and_near_duplicates():
    txt = torch.randn(60, 6, generator=_gen(11))
    classes = torch.arange(60) % 4
    codes = torch.arange(60) % 30  # sample i and i + 30 share a caption
    sets = draw_candidate_sets(
        txt, num_candidates=20, class_ids=classes, caption_codes=codes, near_duplicate_threshold=0.5
    )
    tn = torch.nn.functional.normalize(txt, dim=1)
    for q, ds in enumerate(sets.distractor_ids.tolist()):
        assert all(classes[d] != classes[q] for d in ds)
        assert all(codes[d] != codes[q] for d in ds)
        assert all(float(tn[q] @ tn[d]) < 0.5 for d in ds)
    assert (tn @ tn.T).fill_diagonal_(0).max() > 0.5  # the filter had something to drop


def test_hard_negatives_are_the_nearest_eligible_captions():
    img, txt = _pairs(40, d=4, noise=0.5, seed=12)
    classes = torch.arange(40) % 5
    sets = draw_candidate_sets(
        txt, num_candidates=6, class_ids=classes, hard_negatives=True, near_duplicate_threshold=0.9
    )
    t = txt.double().numpy()
    t = t / np.linalg.norm(t, axis=1, keepdims=True)
    sim = t @ t.T
    for q in range(40):
        eligible = [j for j in range(40) if classes[j] != classes[q] and sim[q, j] < 0.9]
        expected = sorted(eligible, key=lambda j: (-sim[q, j], j))[:5]
        assert sets.distractor_ids[q].tolist() == expected
    out = text_image_r_precision(
        img, txt, class_ids=classes, num_candidates=6, top_r=(1,), hard_negatives=True, near_duplicate_threshold=0.9
    )
    ranks = oracle_ranks(img.double().numpy(), txt.double().numpy(), sets.distractor_ids.numpy(), "image_to_text")
    assert out["hard_r_precision"].item() == pytest.approx((ranks <= 1).mean())
    assert out["hard_r_precision"].item() < out["r_precision"].item()  # hard negatives are harder
    assert set(rprecision_output_schema((1,), True).per_query) == set(out["per_query"])


def test_saved_sets_pin_the_protocol(tmp_path):
    img, txt = _pairs(30, noise=1.5, seed=13)
    ids = torch.arange(100, 130)
    sets = draw_candidate_sets(txt, ids, num_candidates=7, seed=3)
    save_candidate_sets(sets, tmp_path / "sets.npz")
    loaded = load_candidate_sets(tmp_path / "sets.npz")
    pinned = text_image_r_precision(img, txt, ids, num_candidates=7, top_r=(1,), candidate_sets=loaded, seed=0)
    drawn = text_image_r_precision(img, txt, ids, num_candidates=7, top_r=(1,), seed=3)
    assert torch.equal(pinned["per_query"]["rank"], drawn["per_query"]["rank"])
    bad = CandidateSets(loaded.query_ids, loaded.distractor_ids.clone())
    bad.distractor_ids[0, 0] = 999
    with pytest.raises(ValueError, match="not in the pool"):
        text_image_r_precision(img, txt, ids, num_candidates=7, top_r=(1,), candidate_sets=bad)
    with pytest.raises(ValueError, match="num_candidates"):
        text_image_r_precision(img, txt, ids, num_candidates=8, top_r=(1,), candidate_sets=loaded)
    with pytest.raises(ValueError, match="protocol"):
        text_image_r_precision(img, txt, ids, num_candidates=7, top_r=(1,), candidate_sets=loaded, protocol="resample")


# ---- bitwise independence of the blocking, hard negatives ------------------------------------------------------------


def test_scores_are_the_pair_cosine_bitwise_the_same_whatever_the_blocking(monkeypatch):
    """Every candidate score, in both directions, is the cosine of its (image, text) pair to fp32 rounding, and one
    pair gets the same bits in every direction, candidate set, pool and blocking (the products cut into small pieces
    too); planted duplicate rows tie exactly wherever they sit among the candidates."""
    img, txt = _pairs(53, d=24, noise=2.0, seed=14)
    img[7], txt[7] = img[3], txt[3]  # samples 3 and 7: one image, one text
    rows = torch.stack([torch.randperm(53, generator=_gen(q))[:20] for q in range(53)])
    rows[3, 11], rows[7, 0] = 7, 3
    ref = numpy_scores(img, txt)  # ref[i, t] = cos(image i, text t)
    seen: dict[tuple[int, int], float] = {}

    def check(scores: torch.Tensor, queries: torch.Tensor, cands: torch.Tensor, direction: str) -> None:
        own = queries.unsqueeze(1).expand_as(cands)
        image, text = (own, cands) if direction == "image_to_text" else (cands, own)
        np.testing.assert_allclose(
            scores.double().numpy(), ref[image.numpy(), text.numpy()], rtol=0, atol=fp32_bound(24)
        )
        for pair, value in zip(zip(image.flatten().tolist(), text.flatten().tolist()), scores.flatten().tolist()):
            assert seen.setdefault(pair, value) == value, pair  # float32 values: equal as floats = equal bits

    cands = torch.cat([torch.arange(53).unsqueeze(1), rows], dim=1)
    i2t = candidate_scores(img, txt, rows)
    t2i = candidate_scores(img, txt, rows, "text_to_image")
    assert i2t.dtype == torch.float32
    check(i2t, torch.arange(53), cands, "image_to_text")
    check(t2i, torch.arange(53), cands, "text_to_image")
    assert i2t[3, 12] == i2t[3, 0] and t2i[7, 1] == t2i[7, 0]  # the planted ties
    monkeypatch.setattr(rprecision._pairs, "_MAX_PAIRS", 7)
    assert torch.equal(candidate_scores(img, txt, rows), i2t) and torch.equal(
        candidate_scores(img, txt, rows, "text_to_image"), t2i
    )
    monkeypatch.undo()
    for part in (torch.arange(0, 17), torch.arange(30, 53)):  # other pools and candidate sets: the same bits per pair
        m = part.numel()
        local = (torch.arange(m).unsqueeze(1) + torch.arange(1, 6)) % m
        cands = part[torch.cat([torch.arange(m).unsqueeze(1), local], dim=1)]
        check(candidate_scores(img[part], txt[part], local), part, cands, "image_to_text")
        check(candidate_scores(img[part], txt[part], local, "text_to_image"), part, cands, "text_to_image")
    assert len(seen) > 53 * 21  # pairs met in both directions and in several calls


def test_outputs_are_bitwise_the_same_for_any_chunk_size_and_order():
    img, txt = _pairs(75, d=16, noise=2.5, seed=15)
    txt[40] = txt[10] + 0.01  # a near-duplicate pair
    ids = torch.randperm(500, generator=_gen(2))[:75] - 100
    classes, codes = ids % 3, ids % 25
    settings = dict(
        class_ids=classes,
        caption_codes=codes,
        num_candidates=16,
        top_r=(1, 4),
        hard_negatives=True,
        near_duplicate_threshold=0.7,
    )
    ref = text_image_r_precision(img, txt, ids, chunk_size=256, **settings)
    assert 0.05 < ref["r_precision"].item() < 0.95
    # the ranks are those of the drawn sets under numpy's float64 cosines (rows in ascending id order)
    order = torch.argsort(ids)
    sets = draw_candidate_sets(
        txt, ids, num_candidates=16, class_ids=classes, caption_codes=codes, near_duplicate_threshold=0.7
    )
    rows = torch.searchsorted(ids[order], sets.distractor_ids).numpy()
    sim = numpy_scores(img[order], txt[order])
    gt = np.diag(sim)[:, None]
    i2t, t2i = np.take_along_axis(sim, rows, axis=1), sim.T[np.arange(75)[:, None], rows]
    assert min(np.abs(i2t - gt).min(), np.abs(t2i - gt).min()) > 2 * fp32_bound(16)  # no near tie: fp32 ranks the same
    assert ref["per_query"]["rank"].tolist() == (1 + (i2t >= gt).sum(axis=1)).tolist()
    assert ref["per_query"]["text_to_image_r_precision"].tolist() == (t2i < gt).all(axis=1).astype(float).tolist()
    np.testing.assert_allclose(
        ref["per_query"]["clip_score"].numpy(), 100.0 * np.maximum(gt[:, 0], 0), rtol=0, atol=100 * fp32_bound(16)
    )
    for chunk, seed in [(1, 0), (5, 1), (16, 2)]:
        perm = torch.randperm(75, generator=_gen(seed))
        s = {**settings, "class_ids": classes[perm], "caption_codes": codes[perm]}
        assert_same_outputs(text_image_r_precision(img[perm], txt[perm], ids[perm], chunk_size=chunk, **s), ref, chunk)
        for hard in (False, True):
            a = draw_candidate_sets(
                txt,
                ids,
                num_candidates=16,
                class_ids=classes,
                caption_codes=codes,
                hard_negatives=hard,
                near_duplicate_threshold=0.7,
            )
            b = draw_candidate_sets(
                txt[perm],
                ids[perm],
                num_candidates=16,
                class_ids=classes[perm],
                caption_codes=codes[perm],
                hard_negatives=hard,
                near_duplicate_threshold=0.7,
                chunk_size=chunk,
            )
            assert torch.equal(a.distractor_ids, b.distractor_ids) and torch.equal(a.query_ids, b.query_ids)


def _shares_concatenated(count: int, *args, **kwargs) -> dict[str, torch.Tensor]:
    parts = [rprecision_per_query(*args, share=(i, count), **kwargs) for i in range(count)]
    sizes = [part["query_id"].numel() for part in parts]
    assert max(sizes) - min(sizes) <= 1  # near-equal shares
    return {key: torch.cat([part[key] for part in parts]) for key in parts[0]}


@pytest.mark.parametrize(
    "settings",
    [
        dict(protocol="folds", hard_negatives=True, near_duplicate_threshold=0.7),
        dict(protocol="resample", repeats=3, near_duplicate_threshold=None),
        dict(protocol="folds", pinned=True),
    ],
)
def test_shares_of_the_queries_concatenate_to_one_call_bit_for_bit(settings):
    img, txt = _pairs(61, d=16, noise=2.5, seed=21)
    txt[50] = txt[3] + 0.01  # a near-duplicate pair
    ids = torch.randperm(400, generator=_gen(5))[:61] * 3 - 50
    kwargs = dict(class_ids=ids % 4, caption_codes=ids % 29, num_candidates=12, **settings)
    if kwargs.pop("pinned", False):
        kwargs["candidate_sets"] = draw_candidate_sets(txt, ids, num_candidates=12, seed=9, class_ids=ids % 4)
    ref = text_image_r_precision(img, txt, ids, top_r=(1, 3), **kwargs)
    assert 0.05 < ref["r_precision"].item() < 0.95
    whole = rprecision_per_query(img, txt, ids, chunk_size=7, **kwargs)
    assert torch.equal(whole["query_id"], torch.sort(ids).values)
    for count in (2, 3, 4, 100):  # 100 shares: most are empty
        rows = _shares_concatenated(count, img, txt, ids, chunk_size=5, **kwargs)
        assert rows.keys() == whole.keys()
        for key in rows:
            assert rows[key].dtype == whole[key].dtype and torch.equal(rows[key], whole[key]), (count, key)
        aggregated = aggregate_rprecision(
            rows,
            num_candidates=12,
            top_r=(1, 3),
            **{k: v for k, v in kwargs.items() if k in ("protocol", "repeats", "seed")},
        )
        assert_same_outputs(aggregated, ref, count)


def test_a_share_reports_its_smallest_query_short_of_distractors():
    img, txt = _pairs(30, d=16, seed=3)
    txt[20:] = txt[20] + 1e-3 * torch.randn(10, 16, generator=_gen(4))  # ids 20..29: nine near-duplicates each
    settings = dict(num_candidates=24, near_duplicate_threshold=0.8)
    with pytest.raises(ValueError, match="sample id 20 has only 20 eligible") as whole:
        text_image_r_precision(img, txt, **settings)
    for share in ((0, 2), (0, 3)):  # ids 0..14 and 0..9: every query has 29 eligible samples
        assert rprecision_per_query(img, txt, **settings, share=share)["query_id"].numel() == 30 // share[1]
    for share in ((1, 2), (2, 3)):
        with pytest.raises(ValueError) as error:
            rprecision_per_query(img, txt, **settings, share=share)
        assert str(error.value) == str(whole.value)


@pytest.mark.parametrize("threshold", [None, 0.9])
def test_hard_negatives_equal_a_full_sort_with_planted_ties(threshold):
    """Brute force: every eligible sample sorted by (descending Score, ascending id), the first R - 1 kept. Texts are
    20 directions three times over (exact duplicates tie exactly), so ties straddle the (R - 1)-th place."""
    base = torch.randn(20, 6, generator=_gen(16))
    txt = base.repeat(3, 1)
    n = txt.shape[0]
    ids = torch.randperm(1000, generator=_gen(17))[:n]
    classes = torch.randint(0, 4, (n,), generator=_gen(18))
    codes = torch.arange(n) % 37
    k = 7
    order = torch.argsort(ids)
    directions = numpy_scores(base, base)
    gaps = np.diff(np.sort(directions, axis=1), axis=1)
    assert gaps.min() > 2 * fp32_bound(6)  # distinct directions: no near tie, fp32 orders them as float64 does
    if threshold is not None:
        assert np.abs(directions - threshold).min() > fp32_bound(6)  # and none on the threshold
    score = directions[np.arange(n) % 20][:, np.arange(n) % 20].tolist()  # copies of one direction tie exactly
    expected, straddles = [], 0
    for q in order.tolist():
        eligible = [
            j
            for j in range(n)
            if j != q
            and classes[j] != classes[q]
            and codes[j] != codes[q]
            and (threshold is None or score[q][j] < threshold)
        ]
        ranked = sorted(eligible, key=lambda j: (-score[q][j], int(ids[j])))
        expected.append([int(ids[j]) for j in ranked[:k]])
        straddles += score[q][ranked[k - 1]] == score[q][ranked[k]]
    assert straddles > 5  # the tie rule decides who is in
    perm = torch.randperm(n, generator=_gen(19))
    for chunk in (1, 7, 256):
        got = draw_candidate_sets(
            txt[perm],
            ids[perm],
            num_candidates=k + 1,
            class_ids=classes[perm],
            caption_codes=codes[perm],
            hard_negatives=True,
            near_duplicate_threshold=threshold,
            chunk_size=chunk,
        )
        assert got.distractor_ids.tolist() == expected


def check_device_against_cpu(device: str, monkeypatch) -> None:
    """The seeded draw is integer arithmetic: the same sets on ``device``; its scores are the pair cosines to fp32
    rounding, bitwise the same whatever the blocking; its candidate sets (hard ones included) and ranks are the CPU's
    except where a score gap is below 1e-6."""
    tie = 1e-6
    img, txt = _pairs(300, d=32, noise=3.0, seed=20)
    ids, classes, codes = (
        torch.arange(300) * 3 - 7,
        torch.arange(300) % 7,
        torch.arange(300) % 120,
    )  # ascending ids: rows
    kwargs = dict(num_candidates=20, class_ids=classes, caption_codes=codes, near_duplicate_threshold=None, seed=3)
    cpu = draw_candidate_sets(txt, ids, **kwargs)
    gpu = draw_candidate_sets(
        txt.to(device), ids.to(device), **{**kwargs, "class_ids": classes.to(device), "caption_codes": codes.to(device)}
    )
    assert torch.equal(gpu.distractor_ids.cpu(), cpu.distractor_ids)
    rows = torch.searchsorted(ids, cpu.distractor_ids)
    sim = numpy_scores(img, txt)
    cands = torch.cat([torch.arange(300).unsqueeze(1), rows], dim=1).numpy()
    i2t = candidate_scores(img.to(device), txt.to(device), rows.to(device))
    t2i = candidate_scores(img.to(device), txt.to(device), rows.to(device), "text_to_image")
    np.testing.assert_allclose(
        i2t.cpu().double().numpy(), np.take_along_axis(sim, cands, axis=1), rtol=0, atol=fp32_bound(32)
    )
    np.testing.assert_allclose(
        t2i.cpu().double().numpy(), np.take_along_axis(sim.T, cands, axis=1), rtol=0, atol=fp32_bound(32)
    )
    monkeypatch.setattr(rprecision._pairs, "_MAX_PAIRS", 7)  # the products in small pieces: the same bits
    assert torch.equal(candidate_scores(img.to(device), txt.to(device), rows.to(device)), i2t)
    assert torch.equal(candidate_scores(img.to(device), txt.to(device), rows.to(device), "text_to_image"), t2i)
    monkeypatch.undo()

    # the evaluation (default near-duplicate filter at 0.8, hard negatives) on both devices
    text = numpy_scores(txt, txt)
    np.fill_diagonal(text, 0.0)
    assert np.abs(text - 0.8).min() > tie  # the filter decides alike on both devices
    settings = dict(num_candidates=20, hard_negatives=True)
    out_cpu = text_image_r_precision(img, txt, ids, **settings)
    out_gpu = text_image_r_precision(img.to(device), txt.to(device), ids.to(device), **settings)
    assert_same_outputs(
        text_image_r_precision(img.to(device), txt.to(device), ids.to(device), chunk_size=7, **settings), out_gpu
    )
    pools = ((txt, ids), (txt.to(device), ids.to(device)))
    drawn = [draw_candidate_sets(t, i, num_candidates=20) for t, i in pools]
    assert torch.equal(drawn[1].distractor_ids.cpu(), drawn[0].distractor_ids)
    hard = [draw_candidate_sets(t, i, num_candidates=20, hard_negatives=True).distractor_ids.cpu() for t, i in pools]
    hard_rows = [torch.searchsorted(ids, h).numpy() for h in hard]
    # both lists are in descending score order: where they differ, the scores at that place are tied within 1e-6
    swapped = np.abs(np.take_along_axis(text, hard_rows[0], axis=1) - np.take_along_axis(text, hard_rows[1], axis=1))
    assert np.all((hard_rows[0] == hard_rows[1]) | (swapped < tie))
    gt = np.diag(sim)[:, None]
    random_rows = torch.searchsorted(ids, drawn[0].distractor_ids).numpy()
    near_i2t = (np.abs(np.take_along_axis(sim, random_rows, axis=1) - gt) < tie).any(axis=1)
    near_t2i = (np.abs(np.take_along_axis(sim.T, random_rows, axis=1) - gt) < tie).any(axis=1)
    near_hard = ~(hard_rows[0] == hard_rows[1]).all(axis=1) | (
        np.abs(np.take_along_axis(sim, hard_rows[0], axis=1) - gt) < tie
    ).any(axis=1)
    expected_rank = 1 + (np.take_along_axis(sim, random_rows, axis=1) >= gt).sum(axis=1)
    expected_hard = (np.take_along_axis(sim, hard_rows[0], axis=1) < gt).all(axis=1).astype(float)
    for out in (out_cpu, out_gpu):  # numpy's ranks and hits away from ties
        pq = {key: value.cpu().numpy() for key, value in out["per_query"].items()}
        assert pq["query_id"].tolist() == ids.tolist()
        np.testing.assert_array_equal(pq["rank"][~near_i2t], expected_rank[~near_i2t])
        np.testing.assert_array_equal(pq["hard_r_precision"][~near_hard], expected_hard[~near_hard])
    assert 0.05 < expected_hard.mean() < 0.95 and near_i2t.mean() < 0.05  # informative, and few places left to rounding
    a = {key: value.cpu().numpy() for key, value in out_cpu["per_query"].items()}
    b = {key: value.cpu().numpy() for key, value in out_gpu["per_query"].items()}
    for key, near in (
        ("rank", near_i2t),
        ("r_precision", near_i2t),
        ("text_to_image_r_precision", near_t2i),
        ("hard_r_precision", near_hard),
    ):
        assert np.all((a[key] == b[key]) | near), key
    np.testing.assert_allclose(b["clip_score"], a["clip_score"], rtol=0, atol=100 * 2 * fp32_bound(32))


@pytest.mark.gpu
@needs_accelerator
def test_cuda_draws_the_cpu_sets_and_scores_blockwise_exactly(monkeypatch):
    check_device_against_cpu(accelerator_device(), monkeypatch)


# ---- bad inputs -----------------------------------------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors():
    img, txt = _pairs(10)
    with pytest.raises(ValueError, match=r"`num_candidates` 11 .* only 10 samples"):
        text_image_r_precision(img, txt, num_candidates=11, top_r=(1,))
    nan = img.clone()
    nan[3, 0] = float("nan")
    with pytest.raises(ValueError, match="image_embeddings.*NaN"):
        text_image_r_precision(nan, txt, num_candidates=5, top_r=(1,))
    with pytest.raises(ValueError, match="text_embeddings.*2-D"):
        text_image_r_precision(img, txt[0], num_candidates=5, top_r=(1,))
    with pytest.raises(ValueError, match="10 rows but `text_embeddings` has 9"):
        text_image_r_precision(img, txt[:9], num_candidates=5, top_r=(1,))
    with pytest.raises(ValueError, match="dimension"):
        text_image_r_precision(img, txt[:, :5], num_candidates=5, top_r=(1,))
    with pytest.raises(ValueError, match="`ids` contains duplicates"):
        text_image_r_precision(img, txt, torch.zeros(10, dtype=torch.long), num_candidates=5, top_r=(1,))
    with pytest.raises(ValueError, match="`class_ids` has 9 entries"):
        text_image_r_precision(img, txt, class_ids=torch.zeros(9, dtype=torch.long), num_candidates=5, top_r=(1,))
    with pytest.raises(ValueError, match=r"only 8 eligible distractors .* needs 9"):
        text_image_r_precision(img, txt, class_ids=torch.arange(10) % 5, num_candidates=10, top_r=(1,))
    with pytest.raises(ValueError, match="`protocol`"):
        text_image_r_precision(img, txt, num_candidates=5, top_r=(1,), protocol="bootstrap")
    with pytest.raises(ValueError, match="`top_r`"):
        text_image_r_precision(img, txt, num_candidates=5, top_r=(1, 6))
    with pytest.raises(ValueError, match="near_duplicate_threshold"):
        text_image_r_precision(img, txt, num_candidates=5, top_r=(1,), near_duplicate_threshold=2.0)
    with pytest.raises(ValueError, match="`repeats`"):
        text_image_r_precision(img, txt, num_candidates=5, top_r=(1,), repeats=0)
    with pytest.raises(ValueError, match="`rows` must index"):
        candidate_scores(img, txt, torch.full((10, 3), 10))
    with pytest.raises(ValueError, match="`rows` must be an integer tensor"):
        candidate_scores(img, txt, torch.zeros(9, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="`seed` must be an int"):
        draw_candidate_sets(txt, num_candidates=3, seed=1.5)
