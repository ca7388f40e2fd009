"""Sequential convergence decisions over a training curve: a downturn and a plateau with a false-alarm rate per run.

Pure torch (float64 on the CPU), no Lightning. A run's values arrive one evaluation at a time; after each one
:meth:`ConvergenceRule.observe` decides, from the values so far, whether the curve has turned down and whether it
has stopped improving. ``u = v`` for ``mode="max"`` and ``u = -v`` for ``"min"``, so "better" is "larger ``u``";
``w`` is the window, ``t`` the number of values so far, ``m_j`` the mean of ``u[j : j + w]``.

Definitions (stated once; the derivation is in ``docs/convergence.md``)
    - **Noise scale** ``s``: the root mean square successive difference, ``s^2 = sum_i (u[i+1] - u[i])^2 / (2 (t-1))``
      (von Neumann). For independent noise of sd ``sigma`` around any mean, ``E[s^2] = sigma^2`` plus half the squared
      change per evaluation (a linear trend of slope ``b`` adds only ``b^2/2``). It is used with the Student t
      reference of ``nu = 2 (t-1)^2 / (3t - 4)`` degrees of freedom (the chi-square with the variance of ``s^2``).
      ``noise=`` gives ``sigma`` instead (then ``nu`` is infinite: the normal reference).
      ``noise_estimate="windows"`` takes the larger of ``s`` and ``s_w``, ``s_w^2 = w sum_b (M_(b+1) - M_b)^2 /
      (2 (n_w - 1))`` over the means ``M_b`` of the ``n_w = floor(t / w)`` consecutive windows from the start (the
      batch-means scale, which also sees noise correlated over fewer than ``w`` evaluations), with the same ``nu``.
    - **Look**: an evaluation at which a test is made: the plateau and the downturn at every evaluation from
      ``t = 2w`` on. Each look spends ``alpha / max_looks`` of the level, so a run of up to ``max_looks`` looks
      spends at most ``alpha`` (Bonferroni over the looks); after ``max_looks`` looks nothing more is flagged.
    - **Downturn (series)**: the last window ``L = m_(t-w)`` against the best earlier window that does not overlap it,
      ``B = max_(j <= t-2w) m_j`` (the first of equal means is the one reported), over ``k = t - 2w + 1``
      candidates: ``T = (B - L - min_delta) / (s sqrt(2/w))``, ``p = min(1, k * max_looks * P(t_nu > T))``
      (Bonferroni over the candidates too, so picking the best one is paid for).
    - **Paired confirmation**, when the evaluation gives per-query values (the same queries every time): the latest
      evaluation against the best earlier one (the largest mean of ``u`` over its queries, among the earlier
      evaluations with per-query values), paired by query id: ``d_i = u_best,i - u_latest,i - min_delta`` (pairs
      with a NaN left out), ``S = sum d_i``, ``p_paired = exp(-S^2 / (2 sum d_i^2))`` for ``S > 0`` (1 otherwise):
      the sign-flip (Hoeffding) bound of this one comparison, with ``min_delta = 0`` valid for any per-query
      distribution whose pairs are exchangeable (with ``min_delta > 0``: a test of a mean decline above
      ``min_delta``, not exact). It asks whether the latest model is worse than the best one on these queries, not
      whether the expected curve fell: model-level noise (a checkpoint a bit better or worse on every query) is a
      real difference on a fixed query set. It therefore only confirms the series rule, never flags on its own. Without query ids the values are
      paired by position.
    - **Downturn** at a look: the series rule, and with per-query values the paired confirmation too, must reject
      (an intersection-union rule): ``p = max(p_series, p_paired)``, a downturn when ``p <= alpha``.
    - **Plateau**: the last window no better than the one before it by ``min_delta``: ``D = m_(t-w) - m_(t-2w)``,
      ``T = (min_delta - D) / (s sqrt(2/w))``, ``p = min(1, max_looks * P(t_nu > T))``, a plateau when
      ``p <= alpha``. The rate of calling flat a curve that still gains ``min_delta`` or more per window is at most
      ``alpha`` per run. With ``min_delta = 0`` any gain counts, so only a significant fall reads as a plateau.
    - **min_delta**: the smallest change between window means (or per-query means) that matters; never a noise guard.
    - **Window band**: the mean of the last ``w`` values with a seeded percentile bootstrap interval
      (:func:`~beyondlabels.functional.bootstrap.bootstrap_ci`); descriptive, it decides nothing.
    - **Event**: the evaluation at which a flag goes from 0 to 1.

Guarantee and assumptions: when the values are independent normal noise around a flat mean, a run of up to
``max_looks`` looks flags a downturn with probability at most ``alpha`` (up to the t approximation of ``s``), at any
noise level: the statistics do not change when the values are shifted or scaled. The paired confirmation can only
remove flags of the series rule, so the rate with per-query values is at most the series rule's whatever the
per-query structure (noise per query, per model, or both). Positively autocorrelated noise (a slowly wandering curve)
makes successive differences understate the scatter of window means, and the rate exceeds ``alpha`` (measured:
22% of flat runs of 150 evaluations at lag-1 correlation 0.3). ``noise_estimate="windows"`` takes it into account
as measured, not as proved (``s_w`` has ``n_w - 1`` degrees of freedom but is referred to the t with ``nu``: 2.5%
and 4.5% of such runs at lag-1 correlation 0.3 and 0.5); ``noise=`` (the sd of a window mean times ``sqrt(w)``)
keeps the bound when the given sd is right.

Example:
    >>> rule = ConvergenceRule(window=3, min_delta=0.01)
    >>> state = rule.new_state()
    >>> curve = [0.5 + 0.01 * (-1) ** i for i in range(30)] + [0.45 - 0.05 * i for i in range(6)]  # flat, then falls
    >>> flags = [rule.observe(state, step, v)["downturn"] for step, v in enumerate(curve)]
    >>> flags.index(1.0), [(e["event"], e["step"]) for e in state["events"]]
    (32, [('plateau', 31), ('downturn', 32)])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from beyondlabels.functional._stats import check_confidence, check_rounds, check_seed, vector
from beyondlabels.functional.abtest import paired_differences
from beyondlabels.functional.bootstrap import bootstrap_ci

__all__ = ["STATE_VERSION", "ConvergenceRule", "noise_scale", "noise_df", "sign_flip_bound"]

STATE_VERSION = 2
EVENTS = ("plateau", "downturn")
NOISE_ESTIMATES = ("differences", "windows")


def noise_scale(values: Any) -> float:
    """Root mean square successive difference ``sqrt(sum (v[i+1] - v[i])^2 / (2 (n-1)))`` (NaN below 2 values).

    Example:
        >>> noise_scale([0.0, 1.0, 0.0, 1.0])  # successive differences of 1: s^2 = 3 / 6
        0.7071067811865476
    """
    v = vector(values, "values")
    if v.numel() < 2:
        return math.nan
    return math.sqrt(float((v.diff() ** 2).sum()) / (2 * (v.numel() - 1)))


def noise_df(n: Any) -> Any:
    """Degrees of freedom of :func:`noise_scale` over ``n`` values: ``2 (n-1)^2 / (3n - 4)``.

    Example:
        >>> noise_df(20)
        12.892857142857142
    """
    return 2.0 * (n - 1) ** 2 / (3 * n - 4)


def sign_flip_bound(differences: Any) -> float:
    """``exp(-S^2 / (2 sum d^2))`` for ``S = sum d > 0``, else 1: a bound on ``P(sum eps_i |d_i| >= S)`` over random
    signs ``eps_i`` (NaN left out; no differences or all zero give 1).

    Example:
        >>> round(sign_flip_bound([1.0, 1.0, 1.0, 1.0]), 6)  # exp(-16 / 8)
        0.135335
    """
    d = vector(differences, "differences")
    d = d[~torch.isnan(d)]
    total, squares = float(d.sum()), float((d**2).sum())
    if total <= 0 or squares == 0:
        return 1.0
    return math.exp(-(total**2) / (2.0 * squares))


def _t_sf(statistic: Tensor, df: Tensor | float) -> Tensor:
    """``P(t_df > statistic)`` elementwise; an infinite ``df`` is the normal."""
    from scipy import special

    stat = statistic.numpy()
    dfs = torch.as_tensor(df, dtype=torch.float64).expand_as(statistic).numpy()
    out = special.stdtr(dfs, -stat)
    normal = special.ndtr(-stat)
    return torch.where(torch.isinf(torch.as_tensor(dfs)), torch.as_tensor(normal), torch.as_tensor(out))


def _number(value: Any, name: str, low: float, high: float | None, what: str) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= low
    if not ok or (high is not None and value >= high):
        raise ValueError(f"`{name}` must be {what}, got {value!r}.")
    return float(value)


@dataclass(frozen=True)
class ConvergenceRule:
    """The settings of the convergence decisions (definitions: the module docstring).

    Args:
        window: Values per window (evaluations), at least 2.
        mode: ``"max"`` (higher is better) or ``"min"``.
        min_delta: The smallest change that matters, in the metric's units (default 0: any real change).
        alpha: False-alarm rate per run, of each of downturn and plateau.
        max_looks: Looks (evaluations tested) the level ``alpha`` is spent over.
        noise: The sd of the values' noise when known; None (default) estimates it from the series.
        noise_estimate: ``"differences"`` (default) or ``"windows"`` (also from successive windows' means, for
            autocorrelated noise).
        confidence: Level of the descriptive window band.
        rounds: Bootstrap resamples of the window band.
        seed: Seed of the window band's bootstrap.

    Example:
        >>> ConvergenceRule(window=5).per_look_level()
        5e-05
    """

    window: int = 10
    mode: str = "max"
    min_delta: float = 0.0
    alpha: float = 0.05
    max_looks: int = 1000
    noise: float | None = None
    noise_estimate: str = "differences"
    confidence: float = 0.95
    rounds: int = 2000
    seed: int = 11

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 2:
            raise ValueError(f"`window` must be an int >= 2 (values per window), got {self.window!r}.")
        if self.mode not in ("max", "min"):
            raise ValueError(f"`mode` must be 'max' (higher is better) or 'min', got {self.mode!r}.")
        _number(self.min_delta, "min_delta", 0.0, None, "a number >= 0")
        _number(self.alpha, "alpha", 0.0, 1.0, "a false-alarm rate strictly between 0 and 1 (e.g. 0.05)")
        if self.alpha == 0:
            raise ValueError(f"`alpha` must be a false-alarm rate strictly between 0 and 1 (e.g. 0.05), got {self.alpha!r}.")
        if isinstance(self.max_looks, bool) or not isinstance(self.max_looks, int) or self.max_looks < 1:
            raise ValueError(f"`max_looks` must be a positive int (the most evaluations a run tests, e.g. 1000), got {self.max_looks!r}.")
        if self.noise is not None and (
            isinstance(self.noise, bool) or not isinstance(self.noise, (int, float)) or not 0 < self.noise < math.inf
        ):
            raise ValueError(f"`noise` must be None (estimated from the series) or the noise sd, a number > 0, got {self.noise!r}.")
        if self.noise_estimate not in NOISE_ESTIMATES:
            raise ValueError(f"`noise_estimate` must be one of {list(NOISE_ESTIMATES)}, got {self.noise_estimate!r}.")
        check_confidence(self.confidence)
        check_rounds(self.rounds)
        check_seed(self.seed)

    @property
    def sign(self) -> float:
        return 1.0 if self.mode == "max" else -1.0

    def per_look_level(self) -> float:
        """The level each look spends, ``alpha / max_looks``."""
        return self.alpha / self.max_looks

    # ---- the series rule, every look of many runs at once -------------------------------------------------------------
    def series_tests(self, values: Any) -> dict[str, Tensor]:
        """The series rule at every look of every run: ``values`` ``[runs, t]`` (or ``[t]``) -> tensors ``[runs, L]``
        for the looks ``t' = 2w .. t`` (``L = t - 2w + 1``, empty below ``2w`` values): ``downturn_p``,
        ``plateau_p``, ``downturn`` and ``plateau`` (0/1, also 0 past ``max_looks``), ``noise`` (``s``), ``best``
        (``B`` in the metric's units), ``best_index`` (start of the best window) and ``candidates`` (``k``).

        Example:
            >>> curve = [0.5 + 0.01 * (-1) ** i for i in range(30)] + [0.45 - 0.05 * i for i in range(6)]
            >>> out = ConvergenceRule(window=3).series_tests(curve)
            >>> out["downturn"].shape, out["downturn"][0].nonzero().flatten().tolist()  # looks 0 .. 30 (values 6 .. 36)
            (torch.Size([1, 31]), [27, 28, 29, 30])
        """
        v = torch.as_tensor(values, dtype=torch.float64)
        if v.dim() == 1:
            v = v.unsqueeze(0)
        if v.dim() != 2 or not bool(torch.isfinite(v).all()):
            raise ValueError(f"`values` must be finite numbers [runs, evaluations], got shape {tuple(v.shape)}.")
        return self._series(v, torch.arange(2 * self.window, max(2 * self.window, v.shape[1] + 1)))

    def _series(self, v: Tensor, ends: Tensor) -> dict[str, Tensor]:
        """The series rule of ``v`` ``[runs, t]`` at the looks that have seen ``ends`` values (each ``2w .. t``)."""
        w, runs, t = self.window, v.shape[0], v.shape[1]
        looks = ends.numel()
        if looks == 0:
            empty = torch.zeros(runs, 0, dtype=torch.float64)
            return {k: empty for k in ("downturn_p", "plateau_p", "downturn", "plateau", "noise", "best", "best_index", "candidates")}
        u = v * self.sign
        sums = torch.nn.functional.pad(u.cumsum(1), (1, 0))
        means = (sums[:, w:] - sums[:, :-w]) / w  # m_j, j = 0 .. t-w
        last = means[:, ends - w]
        previous = means[:, ends - 2 * w]
        candidate_means = means[:, : t - 2 * w + 1]
        running = torch.cummax(candidate_means, dim=1).values  # best over j <= t' - 2w
        # the first window of the best mean: the last position where the running best rose strictly
        rose = torch.ones_like(running, dtype=torch.bool)
        rose[:, 1:] = candidate_means[:, 1:] > running[:, :-1]
        best_index = torch.where(rose, torch.arange(running.shape[1]), 0).cummax(dim=1).values[:, ends - 2 * w]
        best = running[:, ends - 2 * w]
        squares = torch.nn.functional.pad((u.diff(dim=1) ** 2).cumsum(1), (1, 0))[:, ends - 1]
        if self.noise is None:
            scale = torch.sqrt(squares / (2 * (ends - 1)))
            df = noise_df(ends.to(torch.float64)).expand(runs, looks)
            if self.noise_estimate == "windows":
                blocks = u[:, : (t // w) * w].reshape(runs, t // w, w).mean(dim=2)  # consecutive windows from the start
                block_squares = torch.nn.functional.pad((blocks.diff(dim=1) ** 2).cumsum(1), (1, 0))
                count = ends // w  # whole windows seen at each look (>= 2)
                scale = torch.maximum(scale, torch.sqrt(w * block_squares[:, count - 1] / (2 * (count - 1))))
        else:
            scale = torch.full((runs, looks), float(self.noise), dtype=torch.float64)
            df = torch.full((runs, looks), math.inf, dtype=torch.float64)
        se = scale * math.sqrt(2.0 / w)
        candidates = (ends - 2 * w + 1).to(torch.float64).expand(runs, looks)
        down_t = _ratio(best - last - self.min_delta, se)
        plateau_t = _ratio(self.min_delta - (last - previous), se)
        downturn_p = (candidates * self.max_looks * _t_sf(down_t, df)).clamp(max=1.0)
        plateau_p = (self.max_looks * _t_sf(plateau_t, df)).clamp(max=1.0)
        within = (ends - 2 * w + 1 <= self.max_looks).expand(runs, looks)
        return {
            "downturn_p": downturn_p,
            "plateau_p": plateau_p,
            "downturn": ((downturn_p <= self.alpha) & within).to(torch.float64),
            "plateau": ((plateau_p <= self.alpha) & within).to(torch.float64),
            "noise": scale,
            "best": best * self.sign,
            "best_index": best_index.to(torch.float64),
            "candidates": candidates,
        }

    # ---- one run, one evaluation at a time ----------------------------------------------------------------------------
    def new_state(self) -> dict[str, Any]:
        """The state of a run before its first value: plain data (lists, numbers), what a checkpoint saves.

        ``series`` ``[[step, value], ...]``; ``looks`` (downturn looks made; the level spent is
        ``looks * alpha / max_looks``); ``plateau_looks``; ``flags`` (the last plateau / downturn flags); ``best``
        (the best evaluation with per-query values: ``step``, ``mean``, ``ids``, ``values``; None before one);
        ``events``; ``version``."""
        return {"version": STATE_VERSION, "series": [], "looks": 0, "plateau_looks": 0, "flags": {e: 0.0 for e in EVENTS},
                "best": None, "events": []}  # fmt: skip

    def observe(self, state: dict[str, Any], step: int, value: float, per_query: tuple[Any, Any] | None = None) -> dict[str, float]:
        """Add one evaluation to ``state`` (updated in place) and return what is logged: ``window_mean``,
        ``window_ci_low``, ``window_ci_high``, ``noise``, ``plateau``, ``plateau_p``, ``downturn``, ``downturn_p``,
        ``paired_p`` (the paired confirmation's p-value), ``spent`` (level spent on downturn looks so far) and
        ``paired`` (1 when the downturn p-value is the paired confirmation's, the larger of the two).

        Args:
            state: From :meth:`new_state` (or a checkpoint).
            step: The training step of the evaluation.
            value: The monitored value.
            per_query: ``(query_ids, values)`` of this evaluation (ids None: matched by position), or None.
        """
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"`value` must be a finite number (the monitored metric), got {value!r}.")
        paired, evaluation = self._paired(state, step, per_query) if per_query is not None else (None, None)
        state["series"].append([int(step), float(value)])
        values = torch.tensor([v for _, v in state["series"]], dtype=torch.float64)
        w, t = self.window, values.numel()
        band = bootstrap_ci(values[-w:], rounds=self.rounds, confidence=self.confidence, seed=self.seed)
        out = {"window_mean": band.estimate, "window_ci_low": band.low, "window_ci_high": band.high,
               "noise": self.noise if self.noise is not None else noise_scale(values),  # the look's scale below
               "plateau": 0.0, "plateau_p": math.nan, "downturn": 0.0, "downturn_p": math.nan, "paired_p": math.nan,
               "paired": 0.0}  # fmt: skip
        best_record: dict[str, Any] | None = None
        last = self._series_last_look(values) if t >= 2 * w else {}
        if last:
            out["noise"] = last["noise"]
        if last and state["plateau_looks"] < self.max_looks:
            state["plateau_looks"] += 1
            out["plateau_p"] = float(last["plateau_p"])
            out["plateau"] = float(out["plateau_p"] <= self.alpha)
        if paired is not None:
            out["paired_p"] = paired[0]
        if evaluation is not None:
            best = state["best"]
            if math.isfinite(evaluation["mean"]) and (best is None or self.sign * evaluation["mean"] > self.sign * best["mean"]):
                state["best"] = evaluation
        if last and state["looks"] < self.max_looks:
            state["looks"] += 1
            start = int(last["best_index"])
            tests = [(float(last["downturn_p"]), {"best_mean": float(last["best"]), "best_step": state["series"][start + w - 1][0]}, "series")]
            if paired is not None:
                tests.append((paired[0], paired[1], "paired"))
            p, best_record, test = max(tests, key=lambda item: item[0])  # both must reject; equal p: the series test is named
            out["downturn_p"] = p
            out["paired"] = float(test == "paired")
            out["downturn"] = float(p <= self.alpha)
        out["spent"] = state["looks"] * self.per_look_level()
        for event in EVENTS:
            if out[event] == 1.0 and state["flags"].get(event, 0.0) != 1.0:
                record = {"step": int(step), "event": event, "window_mean": band.estimate, "p": out[f"{event}_p"]}
                if event == "downturn" and best_record is not None:
                    record.update(best_record, test="paired" if out["paired"] else "series")
                state["events"].append(record)
        state["flags"] = {e: out[e] for e in EVENTS}
        return out

    def _series_last_look(self, values: Tensor) -> dict[str, float]:
        """The series rule at the last look only."""
        tests = self._series(values.unsqueeze(0), torch.tensor([values.numel()]))
        return {k: float(v[0, -1]) for k, v in tests.items()}

    def _paired(self, state: dict[str, Any], step: int, per_query: tuple[Any, Any]) -> tuple[tuple[float, dict[str, Any]] | None, dict[str, Any]]:
        """The paired downturn test of this evaluation against the best earlier one (None before one) and this
        evaluation's record for the running best; ``state`` is not changed (a bad ``per_query`` raises first)."""
        ids, values = per_query
        current = vector(values, "per_query values")
        current_ids = None if ids is None else [int(i) for i in torch.as_tensor(ids).reshape(-1).tolist()]
        if current_ids is not None and (len(current_ids) != current.numel() or len(set(current_ids)) != len(current_ids)):
            raise ValueError(
                f"`per_query` must hold one distinct query id per value, got {len(current_ids)} ids "
                f"({len(set(current_ids))} distinct) for {current.numel()} values."
            )
        finite_values = current[~torch.isnan(current)]
        mean = float(finite_values.mean()) if finite_values.numel() else math.nan
        record = {"step": int(step), "mean": mean, "ids": current_ids, "values": current.tolist()}
        best = state.get("best")
        if best is None:
            return None, record
        best_values = torch.tensor(best["values"], dtype=torch.float64)
        if best["ids"] is None or current_ids is None:  # matched by position
            if best_values.numel() != current.numel():
                raise ValueError(
                    f"`per_query` without query ids must keep the order and number of queries ({best_values.numel()} at "
                    f"the best evaluation, {current.numel()} now); give the query ids to pair by id."
                )
            diff = best_values - current
        else:
            _, diff, _ = paired_differences(current, best_values, current_ids, best["ids"], intersect=True)
        diff = self.sign * diff - self.min_delta  # u_best - u_latest - min_delta
        p = sign_flip_bound(diff)
        return (p, {"best_mean": float(best["mean"]), "best_step": int(best["step"])}), record


def _ratio(numerator: Tensor, denominator: Tensor) -> Tensor:
    """``numerator / denominator`` with a zero scale read as: +inf for a positive numerator, -inf otherwise."""
    out = numerator / denominator
    zero = denominator == 0
    return torch.where(zero, torch.where(numerator > 0, math.inf, -math.inf), out)
