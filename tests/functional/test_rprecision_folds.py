"""The ``protocol="folds"`` aggregation of text-to-image R-precision against a separately written numpy oracle of the
DM-GAN / Comp-T2I procedure: shuffle the per-sample hits with the seed, split them into 10 folds, take each fold's
mean, report the mean and the ddof-0 standard deviation of the fold means; and the seeded candidate draw against a
plain-loop oracle of its definition.

Everything the fold oracle needs is computed here in numpy (float64): the candidate sets are drawn with numpy's
generator and pinned (``candidate_sets=``), so the kernel's own draw plays no part; the hits come from a plain cosine
loop; the shuffle is the documented "order of a hash of (seed, id)" with the hash (the splitmix64 finaliser) written
over numpy uint64; the folds are ``np.array_split``. A second, hash-free check treats the shuffle as a black box and
tests that it behaves like a uniform random partition (the expected variance of fold means), which a split without
shuffle fails on the data used.

The draw oracle (:func:`oracle_draw`) follows the module docstring one draw at a time over Python ints (splitmix64
written out, the space of each query listed explicitly, eligibility checked with float64 cosines on data whose cosines
keep away from the threshold); it shares no code with the kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from beyondlabels.functional.rprecision import (
    CandidateSets,
    draw_candidate_sets,
    fold_assignment,
    text_image_r_precision,
)

_U64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


# ---- the oracle ------------------------------------------------------------------------------------------------------


def _finalise(z: np.ndarray) -> np.ndarray:
    """splitmix64's output function on uint64 arrays (numpy wraps uint64 products modulo 2**64)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _u64(value: int) -> np.ndarray:
    return np.array([value & _U64], dtype=np.uint64)


def shuffle_order(ids: np.ndarray, seed: int) -> np.ndarray:
    """Sample positions in the order of the fold shuffle: ascending signed 64-bit hash of (seed, id); the per-seed salt
    is the hash of the seed combined with that of the fold stream (stream number -1)."""
    salt = _finalise(_finalise(_u64(seed)) ^ _finalise(_u64(-_GOLDEN + 1)))
    keys = _finalise(ids.astype(np.int64).view(np.uint64) ^ salt)
    return np.argsort(keys.view(np.int64), kind="stable")


def dm_gan_folds(hits: np.ndarray, ids: np.ndarray, seed: int, folds: int) -> tuple[float, float, np.ndarray]:
    """DM-GAN's aggregation: shuffle, split into ``folds`` runs, per-run means; (mean, std ddof 0, the run means)."""
    shuffled = hits[shuffle_order(ids, seed)]
    means = np.array([part.mean() for part in np.array_split(shuffled, folds)])
    return float(means.mean()), float(means.std()), means


def oracle_hits(
    img: np.ndarray, txt: np.ndarray, distractor_rows: np.ndarray, cut: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample hits (rank of the ground truth <= cut; a tie counts against it) image->text and text->image."""
    a = img / np.linalg.norm(img, axis=1, keepdims=True)
    b = txt / np.linalg.norm(txt, axis=1, keepdims=True)
    i2t, t2i = [], []
    for q, rows in enumerate(distractor_rows):
        gt = float(a[q] @ b[q])
        i2t.append(1 + sum(float(a[q] @ b[d]) >= gt for d in rows) <= cut)
        t2i.append(1 + sum(float(a[d] @ b[q]) >= gt for d in rows) <= cut)
    return np.array(i2t, dtype=float), np.array(t2i, dtype=float)


def _case(n: int, num_candidates: int, aligned: int = 0, seed: int = 0, noise: float = 1.5):
    """Embeddings ``[n, 16]`` (the first ``aligned`` rows nearly perfect pairs, the rest with ``noise``), scattered
    unique ids in a shuffled row order, and candidate sets drawn with numpy (distractor rows and the pinned
    CandidateSets)."""
    rng = np.random.default_rng(seed)
    txt = rng.normal(size=(n, 16))
    img = txt + rng.normal(size=(n, 16)) * np.where(np.arange(n) < aligned, 0.01, noise)[:, None]
    ids = 1000 + 7 * rng.permutation(n)
    rows = np.stack([rng.choice(np.delete(np.arange(n), q), num_candidates - 1, replace=False) for q in range(n)])
    sets = CandidateSets(torch.from_numpy(ids).long(), torch.from_numpy(ids[rows]).long())
    return img, txt, ids, rows, sets


def _kernel(img, txt, ids, sets, num_candidates, repeats, seed):
    return text_image_r_precision(
        torch.from_numpy(img).float(),
        torch.from_numpy(txt).float(),
        torch.from_numpy(ids).long(),
        candidate_sets=sets,
        num_candidates=num_candidates,
        top_r=(1, 3),
        repeats=repeats,
        seed=seed,
        near_duplicate_threshold=None,
    )


# ---- the tests -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "repeats", "seed"), [(200, 10, 0), (200, 10, 123), (203, 10, 4), (7, 10, 2)])
def test_folds_follow_the_dm_gan_procedure(n, repeats, seed):
    """``r_precision_std`` is the ddof-0 std of the fold means of the seeded shuffle; ``r_precision`` is the mean over
    all samples, which is DM-GAN's mean of fold means exactly when the folds are equal (N divisible by the folds)."""
    num_candidates = 5 if n < 10 else 10
    img, txt, ids, rows, sets = _case(n, num_candidates, seed=n)
    out = _kernel(img, txt, ids, sets, num_candidates, repeats, seed)
    folds = min(repeats, n)
    order = np.argsort(ids)
    i2t, t2i = oracle_hits(img, txt, rows, cut=1)
    i2t_at3, _ = oracle_hits(img, txt, rows, cut=3)
    assert 0.05 < i2t.mean() < 0.95 and 0.05 < t2i.mean() < 0.95  # informative hits
    assert out["per_query"]["r_precision"].numpy().tolist() == i2t[order].tolist()

    for key, hits in [("r_precision", i2t), ("text_to_image_r_precision", t2i)]:
        dm_mean, dm_std, fold_means = dm_gan_folds(hits, ids, seed, folds)
        assert len(set(fold_means.tolist())) > 1  # the folds differ: the std is informative
        assert out[f"{key}_std"].item() == pytest.approx(dm_std, abs=1e-12), key
        assert out[key].item() == pytest.approx(hits.mean(), abs=1e-12), key
        if n % folds == 0:
            assert out[key].item() == pytest.approx(dm_mean, abs=1e-12), key
        else:  # documented difference: the kernel does not weight the samples of smaller folds more
            assert abs(out[key].item() - dm_mean) > 1e-6, key
    assert out["r_precision@3"].item() == pytest.approx(i2t_at3.mean(), abs=1e-12)


def test_fold_std_behaves_like_a_uniform_random_partition():
    """Hash-free: over many seeds the mean of the squared fold std must match the expectation for a uniformly random
    split into k equal folds of m samples, p(1 - p) (N - m) / (m (N - 1)). The hits are sorted by id here (the lower
    half of the ids are near-perfect pairs), so a split in id order without a shuffle would be far off. The kernel's
    ``r_precision_std`` is checked to be the std of the folds of :func:`fold_assignment` on a few seeds (with the
    candidate sets pinned, the seed moves only the folds); the statistic runs over ``fold_assignment`` alone (cheap)."""
    n, k, num_candidates, rounds = 200, 10, 10, 1000
    m = n // k
    img, txt, _, rows, _ = _case(n, num_candidates, aligned=100, seed=1, noise=6.0)
    ids = np.arange(n)  # row order = id order: the aligned pairs hold the lowest ids
    sets = CandidateSets(torch.arange(n), torch.from_numpy(rows).long())
    hits, _ = oracle_hits(img, txt, rows, cut=1)
    p = hits.mean()
    assert hits[:100].mean() > 0.95 and hits[100:].mean() < 0.3
    expected = p * (1 - p) * (n - m) / (m * (n - 1))
    unshuffled = np.array([part.mean() for part in np.array_split(hits, k)]).var()
    assert unshuffled > 10 * expected  # the check below can tell a missing shuffle

    def fold_var(seed: int) -> float:
        fold = fold_assignment(torch.from_numpy(ids), seed, k).numpy()
        assert np.bincount(fold).tolist() == [m] * k
        return float(np.array([hits[fold == j].mean() for j in range(k)]).var())

    stds = []
    for seed in range(8):
        out = _kernel(img, txt, ids, sets, num_candidates, k, seed)
        assert out["r_precision"].item() == pytest.approx(p, abs=1e-12)  # the seed does not touch the hits
        assert out["r_precision_std"].item() == pytest.approx(np.sqrt(fold_var(seed)), abs=1e-12)
        stds.append(out["r_precision_std"].item())
    assert len(set(stds)) > 4  # ... it moves the folds

    variances = np.array([fold_var(seed) for seed in range(rounds)])
    standard_error = variances.std() / np.sqrt(rounds)
    assert abs(variances.mean() - expected) < 5 * standard_error, (variances.mean(), expected, standard_error)


# ---- the seeded draw -------------------------------------------------------------------------------------------------


def _mix64(z: int) -> int:
    """splitmix64's finaliser on a Python int in [0, 2**64)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


def oracle_draw(ids, txt, k, seed, repeat, classes=None, captions=None, threshold=None, stats=None):
    """The distractor ids of every query (dict id -> list, in the order drawn), one draw at a time as defined: for
    j = 0, 1, ... take the sample at position (h_j mod 2**63) mod M of the query's space (the other classes' samples,
    or all, ascending id) with h_j = mix(mix(base ^ id) + (j + 1) * golden); keep it unless it is the query, shares
    its caption, is a near-duplicate (cosine >= threshold) or was kept before. ``stats`` counts each reason."""
    ids = [int(i) for i in ids]
    unit = txt / np.linalg.norm(txt, axis=1, keepdims=True)
    pool = sorted(range(len(ids)), key=lambda i: ids[i])
    base = _mix64(_mix64(seed & _U64) ^ _mix64((repeat * _GOLDEN + 1) & _U64))
    stats = {} if stats is None else stats
    out = {}
    for q in pool:
        space = [j for j in pool if classes is None or classes[j] != classes[q]]
        state = _mix64(base ^ (ids[q] & _U64))
        kept, j = [], 0
        while len(kept) < k:
            assert j < 100_000, "the oracle's query does not fill"
            h = _mix64((state + (j + 1) * _GOLDEN) & _U64)
            cand = space[(h & ((1 << 63) - 1)) % len(space)]
            j += 1
            if cand == q:
                reason = "self"
            elif captions is not None and captions[cand] == captions[q]:
                reason = "caption"
            elif threshold is not None and float(unit[q] @ unit[cand]) >= threshold:
                reason = "near"
            elif cand in kept:
                reason = "repeat"
            else:
                kept.append(cand)
                continue
            stats[reason] = stats.get(reason, 0) + 1
        out[ids[q]] = [ids[c] for c in kept]
    return out


def _draw_case(n: int = 90, seed: int = 0):
    """Texts [n, 64] with planted near-duplicates (cosine ~0.99; random pairs stay far below 0.9), unbalanced classes,
    shared captions, scattered ids (one negative) in a shuffled row order."""
    rng = np.random.default_rng(seed)
    txt = rng.normal(size=(n, 64))
    for a, b in [(0, 1), (2, 3), (2, 4), (10, 11), (20, 21), (30, 31), (40, 41), (50, 51), (60, 61), (70, 71)]:
        txt[b] = txt[a] + 0.1 * rng.normal(size=64)
    classes = rng.choice(4, size=n, p=[0.55, 0.25, 0.15, 0.05])
    captions = np.arange(n) % (n // 3)  # three samples per caption
    ids = rng.permutation(n * 5)[:n] * 3 - 40
    unit = txt / np.linalg.norm(txt, axis=1, keepdims=True)
    cos = unit @ unit.T
    assert np.abs(cos - 0.9).min() > 1e-3  # float64 and fp32 scores fall on the same side of the threshold
    return txt, classes, captions, ids


@pytest.mark.parametrize(("seed", "repeat"), [(0, 0), (5, 3), (-2, 1)])
def test_seeded_draw_equals_the_oracle(seed, repeat):
    txt, classes, captions, ids = _draw_case()
    k = 12
    stats: dict = {}
    expected = oracle_draw(ids, txt, k, seed, repeat, classes, captions, 0.9, stats)
    assert {"caption", "near", "repeat"} <= set(stats), stats  # the exclusions were exercised
    perm = np.random.default_rng(seed + 10).permutation(len(ids))
    t = lambda rows: torch.from_numpy(rows)  # noqa: E731
    for chunk in (1, 7, 256):
        sets = draw_candidate_sets(
            t(txt[perm]).float(),
            t(ids[perm]),
            num_candidates=k + 1,
            seed=seed,
            repeat=repeat,
            class_ids=t(classes[perm]),
            caption_codes=t(captions[perm]),
            near_duplicate_threshold=0.9,
            chunk_size=chunk,
        )
        assert sets.query_ids.tolist() == sorted(expected)
        assert {q: d for q, d in zip(sets.query_ids.tolist(), sets.distractor_ids.tolist())} == expected, chunk


def test_seeded_draw_without_exclusions_and_a_dominant_class():
    """No classes / captions / filter (the space is the whole pool, the query itself is skipped), then one class
    holding most samples (the space of its queries is the few others): both as the oracle."""
    rng = np.random.default_rng(3)
    n = 60
    txt = rng.normal(size=(n, 8))
    ids = np.arange(n) * 11
    t = torch.from_numpy
    got = draw_candidate_sets(t(txt).float(), t(ids), num_candidates=40, seed=9, near_duplicate_threshold=None)
    stats: dict = {}
    assert dict(zip(got.query_ids.tolist(), got.distractor_ids.tolist())) == oracle_draw(
        ids, txt, 39, 9, 0, stats=stats
    )
    assert stats.get("self", 0) > 0 and stats.get("repeat", 0) > 0
    classes = np.where(np.arange(n) < 52, 0, 1 + np.arange(n) % 3)
    got = draw_candidate_sets(
        t(txt).float(), t(ids), num_candidates=6, seed=2, class_ids=t(classes), near_duplicate_threshold=None
    )
    assert dict(zip(got.query_ids.tolist(), got.distractor_ids.tolist())) == oracle_draw(ids, txt, 5, 2, 0, classes)


def test_seeded_draw_when_near_duplicates_crowd_the_pool():
    """Clusters of five near-duplicates and R - 1 close to the eligible count: queries take many rounds, meeting
    rejected near-duplicates and repeats again and again, and still draw what the oracle draws."""
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(9, 64))
    txt = np.repeat(centres, 5, axis=0) + 0.05 * rng.normal(size=(45, 64))
    ids = rng.permutation(45) + 7
    stats: dict = {}
    expected = oracle_draw(ids, txt, 38, 1, 0, threshold=0.9, stats=stats)
    assert stats["near"] > 45 * 5 and stats["repeat"] > 45 * 5, stats
    for chunk in (1, 256):
        got = draw_candidate_sets(
            torch.from_numpy(txt).float(),
            torch.from_numpy(ids),
            num_candidates=39,
            seed=1,
            near_duplicate_threshold=0.9,
            chunk_size=chunk,
        )
        assert dict(zip(got.query_ids.tolist(), got.distractor_ids.tolist())) == expected


def test_resample_uses_the_oracle_draws():
    """``protocol="resample"``: draw ``r`` is the oracle's ``repeat = r``; the value and std are over the draws'
    means."""
    txt, classes, captions, ids = _draw_case(seed=1)
    rng = np.random.default_rng(2)
    img = txt + 8.0 * rng.normal(size=txt.shape)
    t = torch.from_numpy
    out = text_image_r_precision(
        t(img).float(),
        t(txt).float(),
        t(ids),
        class_ids=t(classes),
        caption_codes=t(captions),
        num_candidates=8,
        top_r=(1,),
        protocol="resample",
        repeats=3,
        seed=4,
        near_duplicate_threshold=0.9,
    )
    row = {int(i): r for r, i in enumerate(ids)}
    means = []
    for repeat in range(3):
        sets = oracle_draw(ids, txt, 7, 4, repeat, classes, captions, 0.9)
        rows = np.array([[row[d] for d in sets[int(i)]] for i in ids])
        i2t, _ = oracle_hits(img, txt, rows, cut=1)
        means.append(i2t.mean())
    assert len(set(means)) > 1
    assert out["r_precision"].item() == pytest.approx(np.mean(means), abs=1e-12)
    assert out["r_precision_std"].item() == pytest.approx(np.std(means), abs=1e-12)


def test_too_few_eligible_names_the_exact_count():
    """Near-duplicates (found only while drawing) leave samples 0..3 with 6 eligible others where 7 are needed; the
    error names the smallest of them and its exact count, whatever the chunk size; hard negatives agree."""
    rng = np.random.default_rng(4)
    txt = rng.normal(size=(10, 64))
    txt[1:4] = txt[0] + 0.05 * rng.normal(size=(3, 64))
    ids = torch.tensor([9, 3, 5, 7, 8, 1, 0, 2, 4, 6]) + 100  # row 0 holds id 109, rows 1..3 ids 103, 105, 107
    for chunk in (1, 4, 256):
        for hard in (False, True):
            with pytest.raises(ValueError, match=r"sample id 103 has only 6 eligible distractors .* needs 7"):
                draw_candidate_sets(
                    torch.from_numpy(txt).float(), ids, num_candidates=8, chunk_size=chunk, hard_negatives=hard
                )
