"""The ``protocol="folds"`` aggregation of text-to-image R-precision against a separately written numpy oracle of the
DM-GAN / Comp-T2I procedure: shuffle the per-sample hits with the seed, split them into 10 folds, take each fold's
mean, report the mean and the ddof-0 standard deviation of the fold means.

Everything the oracle needs is computed here in numpy (float64): the candidate sets are drawn with numpy's generator
and pinned (``candidate_sets=``), so the kernel's own draw plays no part; the hits come from a plain cosine loop; the
shuffle is the documented "order of a hash of (seed, id)" with the hash (the splitmix64 finaliser) written over
numpy uint64; the folds are ``np.array_split``. A second, hash-free check treats the shuffle as a black box and tests
that it behaves like a uniform random partition (the expected variance of fold means), which a split without shuffle
fails on the data used.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from beyondlabels.functional.rprecision import CandidateSets, fold_assignment, text_image_r_precision

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


def oracle_hits(img: np.ndarray, txt: np.ndarray, distractor_rows: np.ndarray, cut: int) -> tuple[np.ndarray, np.ndarray]:
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
    """Embeddings ``[n, 16]`` (the first ``aligned`` rows nearly perfect pairs, the rest with ``noise``), scattered unique ids
    in a shuffled row order, and candidate sets drawn with numpy (distractor rows and the pinned CandidateSets)."""
    rng = np.random.default_rng(seed)
    txt = rng.normal(size=(n, 16))
    img = txt + rng.normal(size=(n, 16)) * np.where(np.arange(n) < aligned, 0.01, noise)[:, None]
    ids = 1000 + 7 * rng.permutation(n)
    rows = np.stack([rng.choice(np.delete(np.arange(n), q), num_candidates - 1, replace=False) for q in range(n)])
    sets = CandidateSets(torch.from_numpy(ids).long(), torch.from_numpy(ids[rows]).long())
    return img, txt, ids, rows, sets


def _kernel(img, txt, ids, sets, num_candidates, repeats, seed):
    return text_image_r_precision(
        torch.from_numpy(img).float(), torch.from_numpy(txt).float(), torch.from_numpy(ids).long(), candidate_sets=sets,
        num_candidates=num_candidates, top_r=(1, 3), repeats=repeats, seed=seed, near_duplicate_threshold=None,
    )  # fmt: skip


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
