"""Ranking metrics over graded judgements with unjudged items (qrels), and term satisfaction of multi-term queries.

Pure torch (plus :func:`judge_run`, which turns the dicts of a run and its qrels into the kernel's tensors). No
torchmetrics, no Lightning. Each metric equals the trec_eval measure named beside it (as pytrec-eval-terrier
computes it) on every query that has a relevant document.

Judgements
    A query's qrels map document ids to an integer grade or None (*unjudged*: listed, e.g. pooled, but not
    assessed); a document missing from the qrels is unjudged too. A grade ``>= relevance_level`` (1) is *relevant*;
    a grade in ``[0, relevance_level)`` is *judged non-relevant*. A negative grade (TREC's -1 / -2) is read as
    trec_eval reads it, as a pooled document that was not judged: never relevant, and unjudged wherever only judged
    documents count (``judged@k``, judged-only and condensed precision, bpref's non-relevant documents). ``R`` is the
    number of relevant documents in the query's qrels, retrieved or not; ``N`` the number of judged non-relevant
    ones. In the tensors, a ranked document's grade is NaN (or negative) when it is unjudged.

Ranking order (:func:`judge_run`)
    A run given as ``{doc: score}`` is ranked by score, highest first; equal scores are ordered by document id
    *descending* as text (trec_eval's rule). A run given as a list is already in rank order.

Metrics (per query over its ranking, cut at ``depth``; then the mean over queries)
    - ``precision@k`` = relevant in the top k / k; unjudged count as non-relevant (trec_eval ``P_k``).
    - ``recall@k`` = relevant in the top k / R (trec_eval ``recall_k``).
    - ``success@k`` = 1 if the top k hold a relevant document, else 0 (trec_eval ``success_k``).
    - ``map`` = the sum of precision@rank over the ranks of the retrieved relevant documents, divided by R: a
      relevant document never retrieved adds 0 (trec_eval ``map``).
    - ``recip_rank`` = 1 / the rank of the first relevant document, 0 when none is retrieved (trec_eval
      ``recip_rank``; its mean is the MRR).
    - ``bpref`` = the mean over the R relevant documents of ``1 - min(n_r, R) / min(R, N)``, where ``n_r`` is the
      number of judged non-relevant documents ranked above relevant document r; a relevant document not retrieved
      adds 0, and with ``N = 0`` each retrieved relevant one adds 1 (trec_eval ``bpref``). Unjudged documents are
      skipped.
    - ``judged@k`` = judged documents in the top k; ``coverage@k`` = ``judged@k / min(k, retrieved)``.
    - ``judged_precision@k`` = relevant / judged in the top k. A query with no judged document in its top k has no
      value (NaN): it is left out of the mean and counted in ``num_unjudged_top@k``.
    - ``condensed_precision@k``: precision@k of the *condensed list* (Sakai 2007): drop the unjudged documents, then
      take the top k (trec_eval ``-J`` ``P_k``).
    - ``ndcg@k`` with gain ``2^g - 1`` and ``ndcg_linear@k`` with gain ``g`` (trec_eval ``ndcg_cut_k``): DCG@k =
      sum over ranks i <= k of gain / log2(i + 1) (unjudged and negative grades gain 0, as in trec_eval), divided by
      the DCG@k of all the query's judged grades sorted from the highest. The exponential gains of a query are
      scaled by ``2^-m`` (``m`` its largest grade) before they are summed, which changes no value (a power of two
      scales floats exactly) but keeps grades of 1024 and more, whose ``2^g`` overflows a float, finite.
    - ``r_precision`` = relevant in the top R / R (trec_eval ``Rprec``).
    - nDCG's gains are the grades whatever ``relevance_level`` (as in trec_eval); every other metric reads only
      relevant / non-relevant.
    - Lone queries (``R == 0``: nothing relevant judged) get NaN for every relevance metric above, are left out of
      their means and counted in ``num_lone_queries``; trec_eval reports 0 for them (nDCG: the value of their gains
      below ``relevance_level``) and averages them in. ``judged@k`` and ``coverage@k`` are defined for every query.
    - A query with relevant documents and an empty ranking gets 0 for every relevance metric (trec_eval leaves it
      out, or reports 0 with ``-c``).
    - ``num_unjudged``: unjudged documents among the top ``max(ks)`` of all queries.

    Every sum over a ranking is a float64 sum from the top rank down, so a query's values do not depend on the
    other queries evaluated with it (nor on the width of the table that holds it); every mean is a float64 sum in
    query order; an empty mean is NaN.

Term satisfaction (multi-term queries)
    Per-term scores ``s_t`` in [0, 1] (e.g. a detector's or a CLIP judge's score for each term of "complex cold
    scene"). ``term_satisfaction`` = share of terms with ``s_t >= threshold`` (0.15). Fusion with weights ``w_t``:
    arithmetic ``sum w s / sum w``; geometric ``exp(sum w log(max(s, eps)) / sum w)`` with ``eps = 1e-3``. NaN scores
    mark absent terms (queries with fewer terms) and are left out.

Examples:
    >>> ranked = torch.tensor([[2.0, float("nan"), 0.0, 1.0]])      # grades in rank order, NaN = unjudged
    >>> pool = torch.tensor([[2.0, 1.0, 1.0, 0.0]])                 # every judged grade of the query
    >>> m = ranking_metrics(ranked, torch.tensor([4]), pool, ks=(2, 4))
    >>> m["precision@2"].item(), m["judged_precision@2"].item(), m["condensed_precision@2"].item()
    (0.5, 1.0, 0.5)
    >>> m["r_precision"].item(), m["num_unjudged"].item()
    (0.3333333333333333, 1)
    >>> m["map"].item(), m["recip_rank"].item(), m["recall@2"].item(), m["success@2"].item()   # R = 3, N = 1
    (0.5, 1.0, 0.3333333333333333, 1.0)
    >>> m["bpref"].item()            # rank 1 adds 1; rank 4 is below the non-relevant rank 3 and adds 1 - 1/1
    0.3333333333333333
    >>> neg = ranking_metrics(torch.tensor([[-2.0, 1.0]]), torch.tensor([2]), torch.tensor([[-2.0, 1.0]]), ks=(1,))
    >>> neg["precision@1"].item(), neg["condensed_precision@1"].item(), neg["judged@1"].item()   # -2: unjudged
    (0.0, 1.0, 0.0)
    >>> fuse_term_scores(torch.tensor([1.0, 0.0]), torch.tensor([0.8, 1.0]),
    ...                  method="geometric").mul(100).round(decimals=1)
    tensor(2.2000, dtype=torch.float64)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_choice, check_ks, check_number, check_positive_int, is_number
from beyondlabels.functional.labels import label_code
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = [
    "JudgedRun",
    "aggregate_ranking",
    "fuse_term_scores",
    "judge_run",
    "query_code",
    "ranking_metrics",
    "ranking_output_schema",
    "ranking_per_query",
    "term_satisfaction",
]

_INT = re.compile(r"^-?\d{1,18}$")
# the relevance metrics with a cut-off, and those over the whole ranking (definitions: the module docstring)
_AT_K = ("precision", "recall", "success", "judged_precision", "condensed_precision", "ndcg", "ndcg_linear")
_WHOLE = ("r_precision", "map", "recip_rank", "bpref")


def query_code(query_id: Any) -> int:
    """The int64 id of a query in per-query files: decimal ids (``"301"``) keep their value, ints stay ints, other
    names get the stable hash code of :func:`~beyondlabels.functional.labels.label_code`.

    Examples:
        >>> query_code("301"), query_code(7), query_code("q1") == query_code("q1")
        (301, 7, True)
    """
    if isinstance(query_id, str) and _INT.match(query_id):
        return int(query_id)
    return label_code(query_id)


def ranking_output_schema(ks: Sequence[int]) -> OutputSchema:
    """The output schema of :func:`ranking_metrics` for cut-offs ``ks``.

    Examples:
        >>> s = ranking_output_schema((5,))
        >>> s["ndcg@5"].higher_is_better, s["judged@5"].higher_is_better, s["num_lone_queries"].count
        (True, None, True)
        >>> s.headline
        ['ndcg@5', 'map', 'recip_rank', 'judged_precision@5']
    """
    ks = check_ks(ks)
    up, plain = KeySpec("scalar", True), KeySpec("scalar", None)
    count = KeySpec("scalar", None, count=True)
    keys: dict[str, KeySpec] = {}
    per_query: dict[str, KeySpec] = {"query_id": KeySpec("per_query", None)}
    for k in ks:
        for name in _AT_K:
            keys[f"{name}@{k}"] = up
            per_query[f"{name}@{k}"] = KeySpec("per_query", True)
        keys[f"judged@{k}"] = keys[f"coverage@{k}"] = plain
        per_query[f"judged@{k}"] = KeySpec("per_query", None, count=True)
        per_query[f"coverage@{k}"] = KeySpec("per_query", None)
        keys[f"num_unjudged_top@{k}"] = count
    for name in _WHOLE:
        keys[name] = up
        per_query[name] = KeySpec("per_query", True)
    per_query["num_relevant"] = KeySpec("per_query", None, count=True)
    per_query["num_retrieved"] = KeySpec("per_query", None, count=True)
    keys["num_queries"] = keys["num_lone_queries"] = keys["num_unjudged"] = count
    return OutputSchema(keys, per_query, headline=[f"ndcg@{ks[-1]}", "map", "recip_rank", f"judged_precision@{ks[0]}"])


def _check_grades(ranked: Any, num_retrieved: Any, pool: Any) -> tuple[Tensor, Tensor, Tensor]:
    if not isinstance(ranked, Tensor) or ranked.dim() != 2:
        raise ValueError(
            "`ranked` must be a 2-D tensor [Q, L] of grades in rank order (NaN = unjudged), "
            f"got {type(ranked).__name__} {tuple(getattr(ranked, 'shape', ()))}."
        )
    if not isinstance(pool, Tensor) or pool.dim() != 2 or pool.shape[0] != ranked.shape[0]:
        raise ValueError(
            "`pool` must be a 2-D tensor [Q, M] of every judged grade per query (NaN padding), "
            f"with Q = {ranked.shape[0]}."
        )
    if (
        not isinstance(num_retrieved, Tensor)
        or num_retrieved.shape != (ranked.shape[0],)
        or num_retrieved.is_floating_point()
    ):
        raise ValueError(f"`num_retrieved` must be an integer tensor [Q] = [{ranked.shape[0]}] of ranking lengths.")
    ranked, pool = ranked.to(torch.float64), pool.to(torch.float64)
    if bool(torch.isinf(ranked).any()) or bool(torch.isinf(pool).any()):
        raise ValueError("grades must be finite numbers (NaN or a negative grade for unjudged).")
    if bool((num_retrieved < 0).any()) or bool((num_retrieved > ranked.shape[1]).any()):
        raise ValueError(f"`num_retrieved` must lie in [0, {ranked.shape[1]}] (the width of `ranked`).")
    return ranked, num_retrieved.to(device=ranked.device, dtype=torch.long), pool.to(ranked.device)


def _row_sum(values: Tensor) -> Tensor:
    """Each row's sum, added left to right: zero padding on the right changes no bit, so a query's value does not
    depend on how wide the table around it is (which other queries it is evaluated with)."""
    if values.shape[1] == 0:
        return torch.zeros(values.shape[0], dtype=values.dtype, device=values.device)
    return torch.cumsum(values, dim=1)[:, -1]


def _dcg(gains: Tensor, k: int) -> Tensor:
    width = min(k, gains.shape[1])
    discount = 1.0 / torch.log2(torch.arange(2, width + 2, device=gains.device, dtype=torch.float64))
    return _row_sum(gains[:, :width] * discount)


def _exponential_gains(grade: Tensor, ideal: Tensor) -> tuple[Tensor, Tensor]:
    """The gains ``2^g - 1`` of the ranked and of the ideal grades, each query's scaled by ``2^-m`` (``m``: its
    largest grade, at least 0). nDCG is a ratio, so the scale cancels; a power of two scales binary floats exactly,
    so wherever ``2^g`` is finite (``m < 1024``, and the products stay normal) the ratio is bit for bit that of the
    unscaled gains, and where ``2^g`` overflows (``m >= 1024``: the query used to become NaN) it stays finite."""
    top = torch.zeros(grade.shape[0], dtype=grade.dtype, device=grade.device)
    if grade.shape[1]:
        top = torch.maximum(top, grade.amax(dim=1))
    if ideal.shape[1]:
        top = torch.maximum(top, ideal[:, 0])  # sorted descending
    top = top.unsqueeze(1)
    floor = torch.exp2(-top)
    return torch.exp2(grade - top) - floor, torch.exp2(ideal - top) - floor


def ranking_per_query(
    ranked: Tensor, num_retrieved: Tensor, pool: Tensor, *, ks: Sequence[int] = (5, 10), relevance_level: int = 1
) -> dict[str, Tensor]:
    """Per-query values of every metric (definitions: the module docstring).

    Args:
        ranked: float ``[Q, L]``: the grade of the document at each rank (NaN or negative = unjudged); entries at or
            past ``num_retrieved`` are ignored.
        num_retrieved: int ``[Q]``: how many documents each query's ranking holds.
        pool: float ``[Q, M]``: every grade of each query's qrels (any order; NaN = padding), for ``R``, ``N`` and the
            ideal DCG.
        ks: Cut-offs.
        relevance_level: Smallest grade that counts as relevant (>= 1).

    Returns:
        ``{key: float64 [Q]}`` for every per-query key of :func:`ranking_output_schema` except ``query_id``.
    """
    ks = check_ks(ks)
    relevance_level = check_positive_int(relevance_level, "relevance_level", hint="the smallest relevant grade")
    ranked, num_retrieved, pool = _check_grades(ranked, num_retrieved, pool)
    q, width = ranked.shape
    device = ranked.device
    nan = float("nan")
    inside = torch.arange(width, device=device).unsqueeze(0) < num_retrieved.unsqueeze(1)
    judged = inside & (ranked >= 0)  # False for NaN
    grade = torch.where(judged, ranked, 0.0)
    relevant = judged & (grade >= relevance_level)
    non_relevant = judged & (grade < relevance_level)
    pool_judged = pool >= 0
    r = (pool >= relevance_level).sum(dim=1)
    n_non_relevant = (pool_judged & (pool < relevance_level)).sum(dim=1).to(torch.float64)
    ok = r > 0
    r_f = r.to(torch.float64)
    # condensed list: judged documents moved to the front, in rank order (stable sort on "unjudged")
    order = torch.argsort((~judged).to(torch.int8), dim=1, stable=True)
    condensed_relevant = torch.gather(relevant, 1, order)
    cum_rel = torch.cumsum(relevant.to(torch.float64), dim=1)
    cum_judged = torch.cumsum(judged.to(torch.float64), dim=1)
    cum_condensed = torch.cumsum(condensed_relevant.to(torch.float64), dim=1)
    ideal = torch.sort(torch.where(pool_judged, pool, 0.0), dim=1, descending=True).values
    exp_gain, exp_ideal = _exponential_gains(grade, ideal)
    out: dict[str, Tensor] = {}

    def at(cum: Tensor, k: int) -> Tensor:
        if width == 0:
            return torch.zeros(q, dtype=torch.float64, device=device)
        return cum[:, min(k, width) - 1]

    for k in ks:
        rel_k, judged_k = at(cum_rel, k), at(cum_judged, k)
        shown = num_retrieved.clamp(max=k).to(torch.float64)
        out[f"precision@{k}"] = torch.where(ok, rel_k / k, nan)
        out[f"recall@{k}"] = torch.where(ok, rel_k / r_f.clamp(min=1), nan)
        out[f"success@{k}"] = torch.where(ok, (rel_k > 0).to(torch.float64), nan)
        out[f"judged_precision@{k}"] = torch.where(ok & (judged_k > 0), rel_k / judged_k.clamp(min=1), nan)
        out[f"condensed_precision@{k}"] = torch.where(ok, at(cum_condensed, k) / k, nan)
        out[f"judged@{k}"] = judged_k
        out[f"coverage@{k}"] = torch.where(shown > 0, judged_k / shown.clamp(min=1), nan)
        for name, gain in (("ndcg", exp_gain), ("ndcg_linear", grade)):
            ideal_gain = exp_ideal if name == "ndcg" else ideal
            idcg = _dcg(ideal_gain, k)
            out[f"{name}@{k}"] = torch.where(ok & (idcg > 0), _dcg(gain, k) / idcg.clamp(min=1e-300), nan)
    out["r_precision"] = torch.where(ok, _relevant_within_r(cum_rel, r) / r_f.clamp(min=1), nan)
    rank = torch.arange(1, width + 1, device=device, dtype=torch.float64).unsqueeze(0)
    precision_at_rank = torch.where(relevant, cum_rel / rank, 0.0)
    out["map"] = torch.where(ok, _row_sum(precision_at_rank) / r_f.clamp(min=1), nan)
    first = (
        torch.where(relevant, rank, math.inf).amin(dim=1)
        if width
        else torch.full((q,), math.inf, dtype=torch.float64, device=device)
    )
    out["recip_rank"] = torch.where(ok, 1.0 / first, nan)  # 1 / inf = 0: nothing relevant retrieved
    out["bpref"] = torch.where(ok, _bpref_sum(relevant, non_relevant, r_f, n_non_relevant) / r_f.clamp(min=1), nan)
    out["num_relevant"] = r_f
    out["num_retrieved"] = num_retrieved.to(torch.float64)
    # exposed for aggregate_ranking: unjudged documents within the top max(k)
    top = min(ks[-1], width)
    out["_unjudged_top"] = (inside[:, :top] & ~judged[:, :top]).sum(dim=1).to(torch.float64)
    return out


def _relevant_within_r(cum_rel: Tensor, r: Tensor) -> Tensor:
    """The relevant documents within the top ``R`` of each query (``cum_rel``: their running count by rank)."""
    q, width = cum_rel.shape
    if width:
        index = (r.clamp(min=1, max=width) - 1).unsqueeze(1)
        return torch.gather(cum_rel, 1, index).squeeze(1)
    return torch.zeros(q, dtype=torch.float64, device=cum_rel.device)


def _bpref_sum(relevant: Tensor, non_relevant: Tensor, r_f: Tensor, n_non_relevant: Tensor) -> Tensor:
    """bpref's sum over the relevant documents of ``1 - (judged non-relevant documents above it, capped at R) /
    min(R, N)`` (no non-relevant document sits at a relevant rank)."""
    above = torch.cumsum(non_relevant.to(torch.float64), dim=1)
    denominator = torch.minimum(r_f, n_non_relevant).clamp(min=1).unsqueeze(1)
    penalty = torch.where(n_non_relevant.unsqueeze(1) > 0, torch.minimum(above, r_f.unsqueeze(1)) / denominator, 0.0)
    return _row_sum(torch.where(relevant, 1.0 - penalty, 0.0))


def _mean(values: Tensor) -> Tensor:
    keep = ~torch.isnan(values)
    if not bool(keep.any()):
        return torch.tensor(float("nan"), dtype=torch.float64, device=values.device)
    return values[keep].sum() / keep.sum()


def aggregate_ranking(
    per_query: Mapping[str, Tensor], ks: Sequence[int], query_ids: Tensor | None = None
) -> dict[str, Any]:
    """Means and counts from :func:`ranking_per_query`'s output, plus ``per_query`` (with ``query_id``)."""
    ks = check_ks(ks)
    out: dict[str, Any] = {}
    ok = per_query["num_relevant"] > 0
    device = ok.device
    for k in ks:
        for name in _AT_K:
            out[f"{name}@{k}"] = _mean(per_query[f"{name}@{k}"])
        out[f"judged@{k}"] = _mean(per_query[f"judged@{k}"])
        out[f"coverage@{k}"] = _mean(per_query[f"coverage@{k}"])
        out[f"num_unjudged_top@{k}"] = (ok & (per_query[f"judged@{k}"] == 0)).sum()
    for name in _WHOLE:
        out[name] = _mean(per_query[name])
    out["num_queries"] = ok.sum()
    out["num_lone_queries"] = (~ok).sum()
    unjudged = per_query.get("_unjudged_top")
    out["num_unjudged"] = unjudged.sum().to(torch.long) if unjudged is not None else torch.tensor(0, device=device)
    pq = {key: value for key, value in per_query.items() if not key.startswith("_")}
    n = ok.numel()
    pq["query_id"] = (
        torch.arange(n, device=device) if query_ids is None else query_ids.to(device=device, dtype=torch.long)
    )
    out["per_query"] = pq
    return out


def ranking_metrics(
    ranked: Tensor,
    num_retrieved: Tensor,
    pool: Tensor,
    *,
    ks: Sequence[int] = (5, 10),
    relevance_level: int = 1,
    query_ids: Tensor | None = None,
) -> dict[str, Any]:
    """Every ranking metric of the module docstring, with per-query values (arguments: :func:`ranking_per_query`).

    Returns:
        Scalars (0-dim tensors; keys of :func:`ranking_output_schema`) and ``per_query``: one float64 ``[Q]`` vector
        per metric plus ``query_id`` (``query_ids`` or ``0..Q-1``), ``num_relevant`` and ``num_retrieved``.
    """
    per_query = ranking_per_query(ranked, num_retrieved, pool, ks=ks, relevance_level=relevance_level)
    if query_ids is not None and (not isinstance(query_ids, Tensor) or query_ids.shape != (ranked.shape[0],)):
        raise ValueError(f"`query_ids` must be an integer tensor [Q] = [{ranked.shape[0]}].")
    return aggregate_ranking(per_query, ks, query_ids)


# ---- dicts to tensors ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgedRun:
    """A run aligned with its qrels, ready for :func:`ranking_metrics`, held as the documents actually ranked.

    Every ranked document's grade is stored once, query after query (``grades``), and so is every judged grade
    (``pool_grades``): memory grows with the documents ranked and judged, not with the number of queries times the
    longest ranking. :meth:`metrics` evaluates the queries in groups of similar length, none larger than
    ``max_cells`` table cells (or one query's own row), and gives the numbers of one dense table.

    Attributes:
        queries: The evaluated query ids (run order): those both in the run and in the qrels.
        query_ids: int64 ``[Q]``: :func:`query_code` of each.
        grades: float64 ``[sum(num_retrieved)]``: the grade of each ranked document (NaN = unjudged), query by
            query in rank order.
        num_retrieved: int64 ``[Q]``: how many documents each query's ranking holds.
        pool_grades: float64: every judged grade of each query's qrels, query by query.
        pool_sizes: int64 ``[Q]``: how many of ``pool_grades`` belong to each query.
        queries_without_qrels: Run queries with no qrels entry (left out, as trec_eval does).
        queries_without_run: Qrels queries the run did not retrieve for (left out, as trec_eval does without ``-c``).
    """

    queries: list[str]
    query_ids: Tensor
    grades: Tensor
    num_retrieved: Tensor
    pool_grades: Tensor
    pool_sizes: Tensor
    queries_without_qrels: list[str]
    queries_without_run: list[str]

    @property
    def ranked(self) -> Tensor:
        """The dense ``[Q, longest ranking]`` table of :func:`ranking_metrics` (NaN padding); its memory is Q times
        the longest ranking: :meth:`metrics` evaluates without it."""
        return _dense(self.grades, self.num_retrieved, torch.arange(len(self.queries)))

    @property
    def pool(self) -> Tensor:
        """The dense ``[Q, most judged]`` table of every judged grade per query (NaN padding)."""
        return _dense(self.pool_grades, self.pool_sizes, torch.arange(len(self.queries)))

    def groups(self, max_cells: int = 1 << 20) -> Iterator[tuple[Tensor, Tensor, Tensor, Tensor]]:
        """``(rows, ranked, num_retrieved, pool)`` for groups of queries (``rows``: their positions) ordered by row
        width (ranking plus judged grades), each group's two tables together at most ``max_cells`` cells unless one
        query alone is wider."""
        widths = self.num_retrieved + self.pool_sizes
        order = torch.argsort(widths, stable=True)
        start = 0
        sizes = widths[order].tolist()
        while start < len(sizes):
            stop = start + 1
            while stop < len(sizes) and (stop + 1 - start) * sizes[stop] <= max_cells:
                stop += 1
            rows = order[start:stop]
            ranked = _dense(self.grades, self.num_retrieved, rows)
            yield rows, ranked, self.num_retrieved[rows], _dense(self.pool_grades, self.pool_sizes, rows)
            start = stop

    def metrics(
        self, *, ks: Sequence[int] = (5, 10), relevance_level: int = 1, max_cells: int = 1 << 20
    ) -> dict[str, Any]:
        """:func:`ranking_metrics` of the run, its queries evaluated in the groups of :meth:`groups` (peak memory
        bounded by ``max_cells``); the per-query values and the means are those of one dense table."""
        max_cells = check_positive_int(max_cells, "max_cells")
        per_query: dict[str, Tensor] = {}
        for rows, ranked, num_retrieved, pool in self.groups(max_cells):
            values = ranking_per_query(ranked, num_retrieved, pool, ks=ks, relevance_level=relevance_level)
            for key, value in values.items():
                if key not in per_query:
                    per_query[key] = torch.full((len(self.queries),), math.nan, dtype=value.dtype)
                per_query[key][rows] = value
        return aggregate_ranking(per_query, ks, self.query_ids)


def _dense(values: Tensor, lengths: Tensor, rows: Tensor) -> Tensor:
    """The rows ``rows`` of the ragged rows ``values`` (row i: ``lengths[i]`` values, rows one after the other) as a
    dense table padded with NaN, as wide as its longest row."""
    offsets = torch.cumsum(lengths, 0) - lengths
    picked = lengths[rows]
    width = int(picked.max()) if picked.numel() else 0
    column = torch.arange(width)
    inside = column.unsqueeze(0) < picked.unsqueeze(1)
    index = (offsets[rows].unsqueeze(1) + column).clamp(max=max(values.numel() - 1, 0))
    if values.numel() == 0:
        return torch.full((rows.numel(), width), math.nan, dtype=torch.float64)
    return torch.where(inside, values[index], math.nan)


def _ranked_docs(query: str, docs: Any) -> list[str]:
    if isinstance(docs, Mapping):
        for doc, score in docs.items():
            if not is_number(score) or math.isnan(score):
                raise ValueError(f"run: query {query!r}, document {doc!r} has score {score!r}; scores must be numbers.")
        # score descending, ties by document id descending (trec_eval): sort by id descending, then stable by score
        by_id = sorted(docs, key=str, reverse=True)
        return sorted(by_id, key=lambda d: -float(docs[d]))
    if isinstance(docs, (list, tuple)):
        ranked = [str(d) for d in docs]
        if len(set(ranked)) != len(ranked):
            seen: set[str] = set()
            dup = next(d for d in ranked if d in seen or seen.add(d))  # type: ignore[func-returns-value]
            raise ValueError(f"run: query {query!r} lists document {dup!r} twice; a ranking holds each document once.")
        return ranked
    raise ValueError(
        f"run: query {query!r} must map to {{doc: score}} or a list of docs in rank order, got {type(docs).__name__}."
    )


def _judged_grades(query: str, judgements: Any) -> dict[str, float]:
    if not isinstance(judgements, Mapping):
        raise ValueError(f"qrels: query {query!r} must map to {{doc: grade or None}}, got {type(judgements).__name__}.")
    grades: dict[str, float] = {}
    for doc, grade in judgements.items():
        if grade is None:
            continue
        if not is_number(grade) or not math.isfinite(grade) or float(grade) != int(grade):
            raise ValueError(
                f"qrels: query {query!r}, document {doc!r} has grade {grade!r}; grades are ints (negative: pooled but "
                "not judged, as in trec_eval) or None (unjudged)."
            )
        grades[str(doc)] = float(grade)
    return grades


def judge_run(
    run: Mapping[str, Mapping[str, float] | Sequence[str]],
    qrels: Mapping[str, Mapping[str, int | None]],
    *,
    depth: int | None = None,
) -> JudgedRun:
    """Align a run with its qrels (ordering rule: the module docstring), in time linear in the run and the qrels.

    Args:
        run: ``{query: {doc: score}}`` or ``{query: [doc, ...]}`` in rank order.
        qrels: ``{query: {doc: grade or None}}``; int grades, negative ones included (the module docstring).
        depth: Keep only the top ``depth`` documents of each ranking (default: all).

    Raises:
        ValueError: for malformed runs (non-numeric scores, repeated documents), non-integer grades, or
            when no query is in both the run and the qrels.

    Examples:
        >>> j = judge_run({"1": {"a": 0.9, "b": 0.5, "z": 0.9}, "2": ["x"]}, {"1": {"a": 1, "b": None}, "3": {"c": 1}})
        >>> j.queries, j.ranked.tolist(), j.queries_without_qrels, j.queries_without_run
        (['1'], [[nan, 1.0, nan]], ['2'], ['3'])
    """
    if not isinstance(run, Mapping) or not isinstance(qrels, Mapping):
        raise ValueError("`run` and `qrels` must be dicts keyed by query id (see beyondlabels.io.qrels for loaders).")
    if depth is not None:
        depth = check_positive_int(depth, "depth", hint="or None: every document")
    qrels_s = {str(q): judgements for q, judgements in qrels.items()}
    run_s = {str(q): docs for q, docs in run.items()}
    queries = [q for q in run_s if q in qrels_s]
    without_qrels = [q for q in run_s if q not in qrels_s]
    without_run = [q for q in qrels_s if q not in run_s]
    if not queries:
        raise ValueError(
            f"no query is in both the run ({len(run)} queries, e.g. {list(run)[:3]}) and the qrels ({len(qrels)}, e.g. "
            f"{list(qrels)[:3]}); check that both files use the same query ids."
        )
    ranked: list[float] = []
    pooled: list[float] = []
    lengths, pool_sizes = [], []
    for query in queries:
        grades = _judged_grades(query, qrels_s[query])
        docs = _ranked_docs(query, run_s[query])
        if depth is not None:
            docs = docs[:depth]
        ranked.extend(grades.get(d, math.nan) for d in docs)
        pooled.extend(grades.values())
        lengths.append(len(docs))
        pool_sizes.append(len(grades))
    ids = torch.tensor([query_code(q) for q in queries], dtype=torch.long)
    return JudgedRun(
        queries,
        ids,
        torch.tensor(ranked, dtype=torch.float64),
        torch.tensor(lengths, dtype=torch.long),
        torch.tensor(pooled, dtype=torch.float64),
        torch.tensor(pool_sizes, dtype=torch.long),
        without_qrels,
        without_run,
    )


# ---- multi-term queries --------------------------------------------------------------------------------------------


def _scores(scores: Any) -> Tensor:
    s = scores if isinstance(scores, Tensor) else torch.as_tensor(scores, dtype=torch.float64)
    if s.dim() not in (1, 2) or s.is_complex() or s.dtype == torch.bool:
        raise ValueError(
            f"`scores` must be per-term scores [T] or [Q, T] (NaN = no such term), got shape {tuple(s.shape)}."
        )
    s = s.to(torch.float64)
    if bool(((s < 0) | (s > 1)).any()):
        raise ValueError("`scores` must lie in [0, 1] (NaN marks absent terms); rescale them first.")
    return s


def term_satisfaction(scores: Any, threshold: float = 0.15) -> Tensor:
    """Share of a query's terms whose score is ``>= threshold`` (NaN scores = absent terms, left out).

    Examples:
        >>> term_satisfaction(torch.tensor([[0.9, 0.1, 0.2], [0.05, float("nan"), 0.5]]))
        tensor([0.6667, 0.5000], dtype=torch.float64)
    """
    check_number(threshold, "threshold", at_least=0.0, at_most=1.0, hint="default 0.15")
    s = _scores(scores)
    present = ~torch.isnan(s)
    met = (present & (s >= threshold)).sum(dim=-1).to(torch.float64)
    count = present.sum(dim=-1).to(torch.float64)
    return torch.where(count > 0, met / count.clamp(min=1), float("nan"))


def fuse_term_scores(scores: Any, weights: Any = None, *, method: str = "arithmetic", eps: float = 1e-3) -> Tensor:
    """Weighted fusion of per-term scores into one score per query (definitions: the module docstring).

    Args:
        scores: ``[T]`` or ``[Q, T]`` in [0, 1]; NaN = absent term.
        weights: ``[T]`` or ``[Q, T]`` non-negative (default: equal weights).
        method: ``"arithmetic"`` or ``"geometric"``.
        eps: Floor of the scores before the log (geometric).

    Examples:
        >>> s, w = torch.tensor([1.0, 0.0]), torch.tensor([0.8, 1.0])
        >>> (round(100 * fuse_term_scores(s, w).item(), 1),
        ...  round(100 * fuse_term_scores(s, w, method="geometric").item(), 1))
        (44.4, 2.2)
    """
    check_choice(method, "method", ("arithmetic", "geometric"))
    check_number(eps, "eps", above=0.0, below=1.0, hint="default 1e-3")
    s = _scores(scores)
    w = torch.ones_like(s) if weights is None else torch.as_tensor(weights, dtype=torch.float64, device=s.device)
    try:
        w = torch.broadcast_to(w, s.shape)
    except RuntimeError as exc:
        raise ValueError(f"`weights` of shape {tuple(w.shape)} do not fit the scores {tuple(s.shape)}.") from exc
    if bool((w < 0).any()) or bool(torch.isnan(w).any()):
        raise ValueError("`weights` must be numbers >= 0.")
    present = ~torch.isnan(s)
    w = torch.where(present, w, 0.0)
    total = w.sum(dim=-1)
    if method == "arithmetic":
        value = (w * torch.where(present, s, 0.0)).sum(dim=-1)
    else:
        value = (w * torch.log(torch.where(present, s, 1.0).clamp(min=eps))).sum(dim=-1)
    mean = value / total.clamp(min=1e-300)
    mean = mean if method == "arithmetic" else torch.exp(mean)
    return torch.where(total > 0, mean, float("nan"))
