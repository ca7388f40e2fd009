"""Image↔text retrieval kernel against a numpy oracle written from the definitions (several captions per image, ties,
an image with one caption and one with none), against trec_eval's success@k, and against the core's separate-query
retrieval where the two coincide; chunking and shares do not change a value; bad input is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from beyondlabels.functional import (
    aggregate_crossmodal,
    crossmodal_output_schema,
    crossmodal_per_query,
    crossmodal_retrieval_metrics,
    embedding_retrieval_metrics,
)

KS = (1, 5, 10)


# ----------------------------------------------------------------------------------------------------------------------
# numpy oracle: float64 cosines, a full ranking per query by (descending score, ascending gallery row)
# ----------------------------------------------------------------------------------------------------------------------


def _first_relevant_rank(query: np.ndarray, gallery: np.ndarray, relevant: np.ndarray) -> float:
    scores = gallery @ query
    rows = np.arange(len(gallery))
    ranking = np.lexsort((rows, -scores))  # primary key last: descending score, then ascending row
    positions = np.nonzero(relevant[ranking])[0]
    return float(positions[0] + 1) if len(positions) else float("nan")


def oracle(images: np.ndarray, texts: np.ndarray, owner: np.ndarray, ks=KS) -> dict:
    img = images / np.linalg.norm(images, axis=1, keepdims=True)
    txt = texts / np.linalg.norm(texts, axis=1, keepdims=True)
    i2t = np.array([_first_relevant_rank(img[i], txt, owner == i) for i in range(len(img))])
    t2i = np.array([_first_relevant_rank(txt[t], img, np.arange(len(img)) == owner[t]) for t in range(len(txt))])
    out = {"num_images": len(img), "num_texts": len(txt), "num_images_without_text": int(np.isnan(i2t).sum())}
    for name, ranks in (("image_to_text", i2t[~np.isnan(i2t)]), ("text_to_image", t2i)):
        for k in ks:
            out[f"{name}_recall@{k}"] = float(np.mean(ranks <= k))
        out[f"{name}_mean_rank"] = float(np.mean(ranks))
        out[f"{name}_median_rank"] = float(np.median(ranks))
    out["i2t_ranks"], out["t2i_ranks"] = i2t, t2i
    return out


def paired_data(seed: int = 0, n_images: int = 24, dim: int = 6):
    """Images with 0 to 5 captions each (image 0: none, image 1: exactly one), captions near their image, and exact
    ties: image 3 duplicates image 2, caption rows 4 and 5 are identical, one caption equals another image."""
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(n_images, dim))
    images[3] = images[2]
    counts = rng.integers(1, 6, size=n_images)
    counts[0], counts[1] = 0, 1
    owner = np.repeat(np.arange(n_images), counts)
    rng.shuffle(owner)
    texts = images[owner] + 1.1 * rng.normal(size=(len(owner), dim))
    texts[5] = texts[4]
    texts[7] = images[(owner[7] + 1) % n_images]
    return images.astype(np.float32), texts.astype(np.float32), owner.astype(np.int64)


@pytest.fixture(scope="module")
def data():
    return paired_data()


def _run(images, texts, owner, **kwargs):
    return crossmodal_retrieval_metrics(
        torch.from_numpy(images), torch.from_numpy(texts), torch.from_numpy(owner), **kwargs
    )


def test_oracle_fixture_has_what_it_promises(data):
    images, texts, owner = data
    counts = np.bincount(owner, minlength=len(images))
    assert counts[0] == 0 and counts[1] == 1 and counts.max() >= 4
    assert np.array_equal(images[2], images[3]) and np.array_equal(texts[4], texts[5])


def test_matches_numpy_oracle(data):
    images, texts, owner = data
    got = _run(images, texts, owner, ks=KS)
    ref = oracle(images.astype(np.float64), texts.astype(np.float64), owner)
    schema = crossmodal_output_schema(KS)
    for key in schema.scalar_keys():
        assert float(got[key]) == pytest.approx(ref[key], abs=1e-12), key
    assert int(got["num_images_without_text"]) == 1
    pq = got["per_query"]
    n_img = len(images)
    np.testing.assert_array_equal(pq["image_to_text_rank"][:n_img].numpy(), ref["i2t_ranks"])
    np.testing.assert_array_equal(pq["text_to_image_rank"][n_img:].numpy(), ref["t2i_ranks"])
    assert pq["image_to_text_rank"][n_img:].isnan().all() and pq["text_to_image_rank"][:n_img].isnan().all()
    # the NaN-free mean of a per-query vector is its scalar
    for key in ("image_to_text_recall@5", "text_to_image_recall@1"):
        vector = pq[key]
        assert float(vector[~vector.isnan()].mean()) == pytest.approx(float(got[key]))


def test_ties_rank_by_gallery_row(data):
    images, texts, owner = data
    got = _run(images, texts, owner, ks=(1,))["per_query"]
    n_img = len(images)
    # captions of image 2 and of its duplicate image 3: image 2 (the smaller row) always ranks first of the two
    s3 = torch.nonzero(torch.from_numpy(owner) == 3).flatten()
    assert s3.numel() > 0
    t2i = got["text_to_image_rank"][n_img:]
    # ... so a caption of image 3 finds it exactly one place after where it finds image 2
    moved = owner.copy()
    moved[s3.numpy()] = 2
    as_image_2 = _run(images, texts, moved, ks=(1,))["per_query"]["text_to_image_rank"][n_img:]
    assert torch.equal(t2i[s3], as_image_2[s3] + 1)
    # captions 0 and 1 are identical: for image 0 they tie, and caption 0 (the smaller row) ranks first
    tie_images = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    tie_texts = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    m = crossmodal_retrieval_metrics(tie_images, tie_texts, torch.tensor([1, 0, 0]), ks=(1, 2))
    assert m["per_query"]["image_to_text_rank"][:2].tolist() == [2.0, 2.0]
    assert m["per_query"]["text_to_image_rank"][2:].tolist() == [2.0, 1.0, 2.0]


def test_an_image_with_one_caption_and_one_with_none():
    images = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    texts = torch.tensor([[0.9, 0.1, 0.0], [0.1, 0.0, 0.9], [0.0, 0.2, 1.0]])
    m = crossmodal_retrieval_metrics(images, texts, torch.tensor([0, 2, 2]), ks=(1, 2))
    # image 1 has no caption: it is a lone image -> image query, but a distractor for text -> image
    assert int(m["num_images_without_text"]) == 1
    assert m["per_query"]["image_to_text_rank"][:3].isnan().tolist() == [False, True, False]
    # image 0's one caption ranks first; image 2's best caption is caption 2 (rank 1)
    assert float(m["image_to_text_recall@1"]) == 1.0 and float(m["image_to_text_mean_rank"]) == 1.0
    assert float(m["text_to_image_recall@1"]) == 1.0


def test_matches_trec_eval_success_at_k():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    images, texts, owner = paired_data(seed=3, n_images=15)
    images[3] += 0.01  # no exact ties: trec_eval breaks ties by document name, not by row
    texts[5] += 0.01
    got = _run(images, texts, owner, ks=KS)
    img = images / np.linalg.norm(images, axis=1, keepdims=True)
    txt = texts / np.linalg.norm(texts, axis=1, keepdims=True)
    measures = {f"success.{','.join(map(str, KS))}"}

    def success(scores: np.ndarray, qrels: dict) -> dict:
        run = {q: {f"d{j}": float(s) for j, s in enumerate(row)} for q, row in zip(qrels, scores)}
        return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)

    t2i = success(txt @ img.T, {f"t{t}": {f"d{owner[t]}": 1} for t in range(len(txt))})
    qrels_i2t = {
        f"i{i}": {f"d{t}": 1 for t in np.nonzero(owner == i)[0]} for i in range(len(img)) if (owner == i).any()
    }
    keep = [i for i in range(len(img)) if (owner == i).any()]
    i2t = success((img @ txt.T)[keep], qrels_i2t)
    for k in KS:
        assert float(got[f"text_to_image_recall@{k}"]) == pytest.approx(
            np.mean([v[f"success_{k}"] for v in t2i.values()])
        )
        assert float(got[f"image_to_text_recall@{k}"]) == pytest.approx(
            np.mean([v[f"success_{k}"] for v in i2t.values()])
        )


def test_agrees_with_the_core_separate_query_retrieval(data):
    """Text -> image with pair ids as labels is the core's separate-query retrieval with R = 1: recall@k is hit@k
    and the mean rank is the mean first-relevant rank; image -> text likewise with the captions as gallery."""
    images, texts, owner = (torch.from_numpy(a) for a in data)
    got = crossmodal_retrieval_metrics(images, texts, owner, ks=KS)
    rows = torch.arange(len(images))
    t2i = embedding_retrieval_metrics(images, rows, ks=KS, query_embeddings=texts, query_labels=owner)
    i2t = embedding_retrieval_metrics(texts, owner, ks=KS, query_embeddings=images, query_labels=rows)
    for k in KS:
        assert float(got[f"text_to_image_recall@{k}"]) == float(t2i[f"hit@{k}"]) == float(t2i[f"recall@{k}"])
        assert float(got[f"image_to_text_recall@{k}"]) == float(i2t[f"hit@{k}"])
    assert float(got["text_to_image_mean_rank"]) == float(t2i["mean_first_relevant_rank"])
    assert float(got["image_to_text_median_rank"]) == float(i2t["median_first_relevant_rank"])
    assert int(got["num_images_without_text"]) == int(i2t["num_lone_queries"])


def _assert_same(a: dict, b: dict) -> None:
    for key in a:
        if key == "per_query":
            for name in a[key]:
                x, y = a[key][name], b[key][name]
                assert torch.equal(x.isnan(), y.isnan()) if x.is_floating_point() else True, name
                assert torch.equal(
                    x.nan_to_num(0.0) if x.is_floating_point() else x, y.nan_to_num(0.0) if y.is_floating_point() else y
                ), name
        elif key != "neighbors":
            x, y = a[key], b[key]
            assert x.dtype == y.dtype and (torch.equal(x, y) or (x.isnan() & y.isnan()).all()), key


def test_chunking_shares_and_fast_mode_do_not_change_values(data):
    images, texts, owner = (torch.from_numpy(a) for a in data)
    ref = crossmodal_retrieval_metrics(images, texts, owner, ks=KS, return_neighbors=2)
    _assert_same(ref, crossmodal_retrieval_metrics(images, texts, owner, ks=KS, chunk_size=5))
    _assert_same(ref, crossmodal_retrieval_metrics(images, texts, owner, ks=KS, precision="bf16"))
    parts = [crossmodal_per_query(images, texts, owner, ks=KS, return_neighbors=2, share=(i, 3)) for i in range(3)]
    rows = {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
    shared = aggregate_crossmodal(rows, owner, ks=KS)
    _assert_same(ref, shared)
    assert torch.equal(ref["neighbors"]["indices"], shared["neighbors"]["indices"])
    assert ref["neighbors"]["indices"].shape == (len(texts), 2)


def test_ids_are_reported(data):
    images, texts, owner = (torch.from_numpy(a) for a in data)
    image_ids, text_ids = torch.arange(len(images)) * 10 + 3, torch.arange(len(texts)) + 1000
    pq = crossmodal_retrieval_metrics(images, texts, owner, ks=(1,), image_ids=image_ids, text_ids=text_ids)[
        "per_query"
    ]
    assert pq["query_id"].tolist() == image_ids.tolist() + text_ids.tolist()
    assert pq["image_id"].tolist() == image_ids.tolist() + image_ids[owner].tolist()
    assert pq["direction"].tolist() == [0] * len(images) + [1] * len(texts)


@pytest.mark.parametrize(
    "images,texts,index,kwargs,name",
    [
        (torch.ones(3, 4), torch.ones(2, 5), torch.tensor([0, 1]), {}, "text_embeddings"),
        (torch.ones(3, 4), torch.ones(2, 4), torch.tensor([0, 3]), {}, "text_image_index"),
        (torch.ones(3, 4), torch.ones(2, 4), torch.tensor([0.0, 1.0]), {}, "text_image_index"),
        (torch.ones(3, 4), torch.ones(2, 4), torch.tensor([0]), {}, "text_image_index"),
        (torch.ones(3, 4), torch.ones(2, 4), torch.tensor([0, 1]), {"ks": (1, 3)}, "ks"),
        (torch.ones(3, 4), torch.ones(4, 4), torch.tensor([0, 1, 2, 2]), {"ks": (5,)}, "ks"),
        (torch.zeros(3, 4), torch.ones(2, 4), torch.tensor([0, 1]), {}, "image_embeddings"),
        (torch.ones(3), torch.ones(2, 4), torch.tensor([0, 1]), {}, "image_embeddings"),
    ],
)
def test_bad_input_is_named(images, texts, index, kwargs, name):
    with pytest.raises(ValueError, match=name):
        crossmodal_retrieval_metrics(images, texts, index, **kwargs)
