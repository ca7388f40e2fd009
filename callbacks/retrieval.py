"""Periodic leave-one-out retrieval evaluation of a LightningModule's embeddings."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from beyondlabels._internal.checks import check_distance, check_int_at_least
from beyondlabels.callbacks.base import EvaluationCore, LightningModule, Trainer, check_method_paths, check_names
from beyondlabels.callbacks.files import EvaluationFiles
from beyondlabels.callbacks.media import EvaluationMedia
from beyondlabels.functional.audit import AuditSettings, suspect_overlap
from beyondlabels.functional.relevance import ClassGains
from beyondlabels.metrics import EmbeddingRetrieval, RetrievalWithMismatch, retrieval_metric

log = logging.getLogger(__name__)

__all__ = ["RetrievalEvalCore"]


class RetrievalEvalCore(EvaluationCore):
    """Every few epochs or steps, embed a fixed evaluation set and log P@k, R-precision, MAP@R, nDCG, ...

    Each evaluation walks the evaluation loader (by default the datamodule's ``val_dataloader``), calls
    ``pl_module.<encode_method>(inputs)`` in eval mode without gradients, and feeds
    :class:`~beyondlabels.metrics.EmbeddingRetrieval` on every rank. Every scalar is logged as ``<prefix>/<name>``
    (e.g. ``retrieval/precision@1``) at the trainer's global step; on rank 0 every logger with media (W&B, TensorBoard,
    MLflow) and the ``media/`` folder also get the precision@k curve and a table of the most confident label mismatches
    (query and retrieved thumbnails, labels, and the pair's ``cosine``, or its ``distance`` / ``dot`` under
    ``distance``). Schedule, loader sharding, failures, files and resume:
    :class:`~beyondlabels.callbacks.base.EvaluationCore`.

    Batches: dicts (read with ``input_key``, ``label_key`` and ``id_key``; without an ``id_key`` entry the sample
    position is the id), ``(inputs, labels, ids)`` or ``(inputs, labels)`` tuples. Labels may be integer tensors,
    numpy arrays, lists of ints or lists of strings. Without ids, a sample's id is its dataset index under DDP (the
    evaluation rebuilds the loader with a non-shuffling sampler) and its position in the evaluation order otherwise.

    Args:
        encode_method: The LightningModule method mapping inputs to embeddings ``[B, D]``: its name, or a dotted path
            to a submodule's method or to a submodule (``"model.encode_image"``, ``"backbone"``: its ``forward``).
        input_key: Batch key of the inputs (dict batches).
        label_key: Batch key of the labels.
        id_key: Batch key of the global sample ids.
        ks: The k of every ``@k`` metric.
        chunk_size: Passed to the metric (queries per search block).
        precision: Passed to the metric (``"fp32"`` or a fast mode).
        distributed_search: Passed to the metric (split the search between ranks).
        curve_max_k: Length of the logged precision@k curve (default ``max(ks)``).
        graded: Class-gain matrices for graded credit (``<name>_precision@k``, ``<name>_ndcg@k``).
        max_queries: Evaluate a fixed, seeded sample of at most this many queries (the same ids at every
            evaluation) against the whole gallery, for galleries too large to search whole; standard errors are
            logged beside the means (``<key>_se``).
        query_seed: The seed of that sample.
        distance: Passed to the metric: how neighbours are ranked, ``"cosine"`` (default), ``"euclidean"`` (ascending
            L2 distance of the raw embeddings, as pytorch-metric-learning's ``AccuracyCalculator`` by default) or
            ``"dot"`` (descending inner product); not with ``audit``, whose thresholds are cosines.
        deep_metrics: Passed to the metric: False skips ``r_precision``, ``map@r`` and the first-relevant ranks
            (shallow mode: each query is searched only to ``max(ks)``, much faster when classes are large).
        num_mismatches: Rows of the worst-mismatch table (0 turns it off).
        class_names: Label → display name for tables (default: the datamodule's ``class_names``, or the names of
            string labels).
        profiles: Feature profiles (:class:`~beyondlabels.profiles.FeatureProfiles`, a file path or a mapping) or a
            :class:`~beyondlabels.functional.relevance.ClassGains`: adds graded credit (``profile_precision@k``,
            ``profile_ndcg@k``) and the label-mismatch analysis of the top-1 neighbours (``mismatch_<key>``: mean
            similarity, percentile ranks, frequency-aware null, ``mismatch_p_value``; see
            :class:`~beyondlabels.metrics.RetrievalWithMismatch`) with ``mismatch_spearman_rho`` /
            ``mismatch_spearman_p`` between the profile similarity and the mean embedding cosine of each class pair;
            on rank 0 the media also hold the similarity heatmap, the observed-vs-null histogram, a table of the most
            frequent mismatch pairs and the embedding projection (``projection_points``).
        profile_labels: The label each profiled class carries: None (the class names), ``"index"`` (class ``i`` of
            the profiles file is label ``i``) or one label per class.
        mismatch_trials: Trials of the mismatch null.
        mismatch_seed: Seed of the mismatch null.
        projection_points: With ``profiles``: on rank 0, a 2-D PCA projection of at most this many evaluation
            embeddings (a fixed sample chosen by id, the same ids at every evaluation; the PCA is fitted on the
            sample, so huge galleries stay cheap), coloured by class, with each axis's explained variance in the
            title (:func:`~beyondlabels.functional.projection.pca_projection`); logged as the figure
            ``<prefix>/embedding_projection`` and written to ``<save_dir>/embedding_projection/step_<step>.png``.
            0 turns it off; without ``profiles`` it has no effect.
        audit: Audit the evaluation set's labels from the same search (None: off):
            :class:`~beyondlabels.functional.audit.AuditSettings` or a mapping of its fields (``k``, thresholds,
            ``top``, ``exclude_suspects``). Logs ``audit_num_suspects``, ``audit_num_cross_label_duplicates``,
            ``audit_num_same_label_duplicates``, ``audit_num_outliers`` and ``audit_suspect_overlap`` (the share of
            the top ``top`` suspects shared with the previous evaluation; kept in the checkpoint for resume); the
            per-item values go to the per-query files; on rank 0 the media hold the table ``audit_suspects``
            (thumbnail, id, given and suggested label, the suggested label's share, the label quality) and
            ``audit_duplicates`` (cross-label pairs). ``exclude_suspects`` also logs ``clean/<key>``: the retrieval
            metrics without the items of cross-label duplicate pairs. Needs ``max_queries=None``.
        metric: The metric itself, instead of its options (as torchmetrics' ``MetricTracker`` takes one): an
            :class:`~beyondlabels.metrics.EmbeddingRetrieval` or :class:`~beyondlabels.metrics.RetrievalWithMismatch`
            (the callback evaluates its own copy). It then brings every metric option (``ks`` to
            ``projection_points`` above, ``profiles`` as its gains); giving one to the callback too is an error.
        kwargs: The schedule, loader, files and failure options of
            :class:`~beyondlabels.callbacks.base.EvaluationCore`.

    Examples:
        >>> from beyondlabels.callbacks import RetrievalEvalCallback
        >>> callback = RetrievalEvalCallback(every_n_steps=500, ks=(1, 10), prog_bar=["precision@1"])
        >>> callback.schema.mode("r_precision"), callback.schema.mode("mean_first_relevant_rank")
        ('max', 'min')
        >>> from beyondlabels.metrics import EmbeddingRetrieval
        >>> RetrievalEvalCallback(metric=EmbeddingRetrieval(ks=(1, 10), deep_metrics=False)).ks
        (1, 10)
    """

    def __init__(
        self,
        encode_method: str = "encode_image",
        input_key: str = "image",
        label_key: str = "label",
        id_key: str = "id",
        ks: Sequence[int] = (1, 5, 10),
        chunk_size: int = 1024,
        precision: str = "fp32",
        distributed_search: bool = True,
        curve_max_k: int | None = None,
        graded: Sequence[ClassGains] = (),
        max_queries: int | None = None,
        query_seed: int = 0,
        num_mismatches: int = 16,
        class_names: Sequence[str] | None = None,
        profiles: Any = None,
        profile_labels: Any = None,
        mismatch_trials: int = 10_000,
        mismatch_seed: int = 0,
        projection_points: int = 5000,
        deep_metrics: bool = True,
        audit: Any = None,
        metric: EmbeddingRetrieval | None = None,
        distance: str = "cosine",
        *,
        every_n_epochs: int | None = None,
        every_n_steps: int | None = None,
        dataloader: str | DataLoader | Callable[[], DataLoader] = "val_dataloader",
        prefix: str = "retrieval",
        **kwargs: Any,
    ) -> None:
        check_int_at_least(num_mismatches, "num_mismatches", 0)
        check_int_at_least(projection_points, "projection_points", 0, hint="0 turns the projection off")
        check_method_paths(encode_method=encode_method)
        check_names(input_key=input_key, label_key=label_key, id_key=id_key)
        self.encode_method = encode_method
        self.input_key, self.label_key, self.id_key = input_key, label_key, id_key
        self.num_mismatches = num_mismatches
        self.class_names = list(class_names) if class_names is not None else None
        options = dict(
            ks=ks,
            chunk_size=chunk_size,
            precision=precision,
            distributed_search=distributed_search,
            curve_max_k=curve_max_k,
            graded=graded,
            max_queries=max_queries,
            query_seed=query_seed,
            deep_metrics=deep_metrics,
            audit=audit,
            profiles=profiles,
            profile_labels=profile_labels,
            mismatch_trials=mismatch_trials,
            mismatch_seed=mismatch_seed,
            projection_points=projection_points,
            distance=distance,
        )
        self._given_metric = None if metric is None else _own_copy(metric, options, num_mismatches)
        self._take_metric_options(options if self._given_metric is None else _options_of(self._given_metric))
        self._projection_file: tuple[int, Path] | None = (
            None  # (step, PNG) written by write_step_files for describe_media
        )
        self._heatmap_logged = False  # the profile similarity heatmap is the same at every evaluation: once per fit
        self._heatmap_png: bytes | None = None
        self.previous_suspects: torch.Tensor | None = None  # ids of the last evaluation's top audit suspects
        super().__init__(
            every_n_epochs=every_n_epochs, every_n_steps=every_n_steps, dataloader=dataloader, prefix=prefix, **kwargs
        )

    def _take_metric_options(self, options: dict[str, Any]) -> None:
        """The metric options (the callback's, or those of the given metric) as attributes."""
        self.ks = tuple(options["ks"]) if isinstance(options["ks"], (list, tuple)) else options["ks"]
        self.chunk_size, self.precision = options["chunk_size"], options["precision"]
        self.distributed_search, self.curve_max_k = options["distributed_search"], options["curve_max_k"]
        self.graded = tuple(options["graded"])
        self.max_queries, self.query_seed = options["max_queries"], options["query_seed"]
        self.deep_metrics = options["deep_metrics"]
        self.distance = check_distance(options["distance"])
        self.audit = AuditSettings.of(options["audit"])
        given_gains = options.get("profile_gains")
        self.profile_gains = given_gains or _profile_gains(options["profiles"], options["profile_labels"])
        self.mismatch_trials, self.mismatch_seed = options["mismatch_trials"], options["mismatch_seed"]
        self.projection_points = options["projection_points"]

    def build_metric(self) -> EmbeddingRetrieval:
        """The given metric (the callback's own copy), else the one the options describe, chosen where
        ``task=retrieval`` chooses it (:func:`~beyondlabels.metrics.retrieval_metric`)."""
        if self._given_metric is not None:
            return self._given_metric
        return retrieval_metric(
            self.profile_gains,
            num_trials=self.mismatch_trials,
            seed=self.mismatch_seed,
            projection_points=self.projection_points,
            ks=self.ks,
            chunk_size=self.chunk_size,
            precision=self.precision,
            curve_max_k=self.curve_max_k,
            graded=self.graded,
            max_queries=self.max_queries,
            query_seed=self.query_seed,
            return_neighbors=1 if self.num_mismatches else 0,
            distributed_search=self.distributed_search,
            deep_metrics=self.deep_metrics,
            audit=self.audit,
            distance=self.distance,
        )

    def after_compute(self, results: dict[str, Any]) -> dict[str, Any]:
        """With the audit: ``audit_suspect_overlap``, the share of the previous evaluation's top ``audit.top``
        suspects among this one's (:func:`~beyondlabels.functional.audit.suspect_overlap`; NaN the first time);
        this evaluation's top suspects become the previous ones (checkpointed)."""
        if self.audit is None or "audit" not in results:
            return results
        top = results["audit"]["suspects"]["ids"][: self.audit.top].cpu()
        previous = self.previous_suspects
        overlap = float("nan") if previous is None else suspect_overlap(previous, top, self.audit.top)
        results["audit_suspect_overlap"] = torch.tensor(overlap, dtype=torch.float64, device=results["audit_k"].device)
        self.previous_suspects = top
        return results

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        previous = self.previous_suspects
        if self.audit is not None:
            state["audit_previous_suspects"] = None if previous is None else [int(i) for i in previous]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        previous = state_dict.get("audit_previous_suspects")
        if self.audit is not None and isinstance(previous, list) and all(isinstance(i, int) for i in previous):
            self.previous_suspects = torch.tensor(previous, dtype=torch.long)

    @classmethod
    def examples(cls) -> list[dict[str, Any]]:
        return [{}, {"encode_method": "encode_text"}, {"distance": "euclidean"}]

    def state_key_parts(self) -> dict[str, Any]:
        # the default distance is left out: the checkpoints of earlier versions keep their key
        return {
            "encode_method": self.encode_method,
            **({"distance": self.distance} if self.distance != "cosine" else {}),
        }

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._heatmap_logged, self._heatmap_png = False, None  # a new fit may log to new logger runs

    def check_module(self, pl_module: LightningModule) -> None:
        self.check_methods(pl_module, encode_method="returns embeddings [B, D]")

    def feed(self, pl_module: LightningModule, batch: Any) -> None:
        inputs, labels, given_ids = self.to_device(self.unpack(batch), pl_module)
        embeddings = self.embed(pl_module, self.encode_method, inputs)
        self.metric.update(embeddings, labels, self.take_ids(embeddings.shape[0], given_ids))

    # ---- media ---------------------------------------------------------------------------------------------------
    def describe_media(self, trainer: Trainer, results: dict[str, Any], media: EvaluationMedia) -> None:
        if self.num_mismatches and "neighbors" in results:
            columns = [
                "query_image",
                "query_label",
                "retrieved_image",
                "retrieved_label",
                self._score_column,
                "query_id",
                "retrieved_id",
            ]
            media.table("worst_mismatches", columns, self._mismatch_rows(trainer, results))
        if self.profile_gains is not None:
            self._describe_profile_media(results, media, trainer)
        if self.audit is not None and "audit" in results:
            columns = ["image", "id", "given_label", "suggested_label", "share", "label_quality"]
            media.table("audit_suspects", columns, self._suspect_rows(trainer, results))
            columns = ["image_a", "image_b", "id_a", "id_b", "label_a", "label_b", "cosine"]
            media.table("audit_duplicates", columns, self._duplicate_rows(trainer, results))

    def _suspect_rows(self, trainer: Trainer, results: dict[str, Any]) -> list[dict[str, Any]]:
        """The top suspects of the audit, with thumbnails looked up by id."""
        found = {
            key: torch.atleast_1d(v) for key, v in results["audit"]["suspects"].items()
        }  # one-element lists come 0-d
        rows = []
        for i in range(min(self.audit.top, found["ids"].numel())):
            sid = int(found["ids"][i])
            rows.append(
                {
                    "image": self.thumbnail(sid),
                    "id": sid,
                    "given_label": self._label_name(trainer, results, int(found["labels"][i])),
                    "suggested_label": self._label_name(trainer, results, int(found["suggested_labels"][i])),
                    "share": float(found["suggested_shares"][i]),
                    "label_quality": float(found["label_quality"][i]),
                }
            )
        return rows

    def _duplicate_rows(self, trainer: Trainer, results: dict[str, Any]) -> list[dict[str, Any]]:
        """The cross-label near-duplicate pairs (at most ``top``), most similar first."""
        pairs = {key: torch.atleast_1d(v) for key, v in results["audit"]["duplicates"].items()}  # one pair comes 0-d
        pairs["ids"], pairs["labels"] = pairs["ids"].reshape(-1, 2), pairs["labels"].reshape(-1, 2)
        cross = torch.nonzero(pairs["cross_label"]).flatten()
        cross = cross[pairs["scores"][cross].argsort(descending=True, stable=True)][: self.audit.top]
        rows = []
        for p in cross.tolist():
            a, b = (int(v) for v in pairs["ids"][p])
            la, lb = (int(v) for v in pairs["labels"][p])
            rows.append(
                {
                    "image_a": self.thumbnail(a),
                    "image_b": self.thumbnail(b),
                    "id_a": a,
                    "id_b": b,
                    "label_a": self._label_name(trainer, results, la),
                    "label_b": self._label_name(trainer, results, lb),
                    "cosine": float(pairs["scores"][p]),
                }
            )
        return rows

    def _describe_profile_media(
        self, results: dict[str, Any], media: EvaluationMedia, trainer: Trainer | None = None
    ) -> None:
        """Rank 0: similarity heatmap (drawn once per fit, sent to the loggers once), observed-vs-null histogram,
        embedding projection and the most frequent mismatch pairs."""
        import tempfile

        from beyondlabels.functional.mismatch import mismatch_pair_table
        from beyondlabels.reporting.heatmap import save_null_histogram_png, save_similarity_heatmap_png

        gains = self.profile_gains
        names = [str(c) for c in gains.classes]
        with tempfile.TemporaryDirectory() as tmp:
            if self._heatmap_png is None:
                self._heatmap_png = save_similarity_heatmap_png(gains.gains, names, f"{tmp}/heatmap.png").read_bytes()
            media.figure(
                "profile_similarity",
                self._heatmap_png,
                caption="class similarity of the feature profiles",
                to_loggers=not self._heatmap_logged,
            )
            self._heatmap_logged = True
            if int(results["mismatch_num_mismatches"]) > 0:
                path = save_null_histogram_png(
                    results["null_distribution"],
                    float(results["mismatch_mean_similarity"]),
                    f"{tmp}/null.png",
                    p_value=float(results["mismatch_p_value"]),
                )
                media.figure("mismatch_null", path, caption="mean similarity of the mismatches against the null")
            path = self._projection_png(trainer, results, media.step, Path(tmp) / "projection.png")
            if path is not None:
                media.figure("embedding_projection", path, caption=f"PCA of the embeddings at step {media.step}")
        pairs = results["mismatch_pairs"]
        rows = mismatch_pair_table(pairs["query"], pairs["retrieved"], gains.gains, names, top=20)
        media.table("mismatch_pairs", ["query", "retrieved", "count", "share", "similarity"], rows)

    # ---- embedding projection (rank 0) --------------------------------------------------------------------------
    def write_step_files(self, trainer: Trainer, results: dict[str, Any], step: int, files: EvaluationFiles) -> None:
        """``embedding_projection/step_<step>.png`` beside the base's files (with a logger or without)."""
        self._projection_file = None
        path = self._save_projection_png(trainer, results, step, files.step_path("embedding_projection", step, ".png"))
        self._projection_file = None if path is None else (step, path)

    def _projection_png(
        self, trainer: Trainer | None, results: dict[str, Any], step: int, fallback: Path
    ) -> Path | None:
        """The projection PNG of ``step``: the one in the evaluation folder, else drawn into ``fallback``."""
        if self._projection_file is not None and self._projection_file[0] == step:
            return self._projection_file[1]
        return self._save_projection_png(trainer, results, step, fallback)

    def _save_projection_png(
        self, trainer: Trainer | None, results: dict[str, Any], step: int, path: Path
    ) -> Path | None:
        """Draw the PCA projection of the metric's ``projection_sample`` into ``path`` (None when there is no sample
        or it is too small to project: fewer than 2 rows or dimensions)."""
        from beyondlabels.functional.projection import class_projection
        from beyondlabels.reporting.plots import save_embedding_projection_png

        sample = results.get("projection_sample") if self.projection_points else None
        if sample is None or min(sample["embeddings"].shape) < 2:
            return None
        projection = class_projection(sample["embeddings"], sample["labels"])
        names = [self._label_name(trainer, results, int(c)) for c in projection.classes]
        title = f"{self.prefix}: embeddings at step {step} (PCA of {sample['embeddings'].shape[0]} points)"
        return save_embedding_projection_png(
            projection.coords, projection.class_index, names, projection.explained, path, title=title
        )

    def _label_name(self, trainer: Trainer | None, results: dict[str, Any], label: int) -> str:
        names = self.class_names or getattr(getattr(trainer, "datamodule", None), "class_names", None)
        if names is not None and 0 <= label < len(names):
            return str(names[label])
        return results.get("label_names", {}).get(label, str(label))

    @property
    def _score_column(self) -> str:
        """The mismatch table's column of the pair's score: ``cosine``, ``dot``, or ``distance`` (Euclidean)."""
        return "distance" if self.distance == "euclidean" else self.distance

    def _mismatch_rows(self, trainer: Trainer, results: dict[str, Any]) -> list[dict[str, Any]]:
        """The most confident wrong top-1 neighbours (the nearest first), with thumbnails looked up by id in the
        dataset."""
        per_query, neighbors = results["per_query"], results["neighbors"]
        query_ids, query_labels = per_query["query_id"], per_query["label"]
        wrong = (neighbors["labels"][:, 0] != query_labels).nonzero().flatten()
        scores = neighbors["scores"]
        order = wrong[scores[wrong, 0].argsort(descending=True, stable=True)][: self.num_mismatches]
        rows = []
        for q in order.tolist():
            qid, nid = int(query_ids[q]), int(neighbors["ids"][q, 0])
            rows.append(
                {
                    "query_id": qid,
                    "query_label": self._label_name(trainer, results, int(query_labels[q])),
                    "retrieved_id": nid,
                    "retrieved_label": self._label_name(trainer, results, int(neighbors["labels"][q, 0])),
                    # Euclidean scores are minus the distances
                    self._score_column: float(scores[q, 0]) * (-1.0 if self.distance == "euclidean" else 1.0),
                    "query_image": self.thumbnail(qid),
                    "retrieved_image": self.thumbnail(nid),
                }
            )
        return rows


def _profile_gains(profiles: Any, labels: Any) -> ClassGains | None:
    """The class gains of the ``profiles`` option (None when it is not set)."""
    if profiles is None:
        if labels is not None:
            raise ValueError("`profile_labels` needs `profiles`; set both or neither.")
        return None
    if isinstance(profiles, ClassGains):
        return profiles
    from beyondlabels.functional.profiles import profile_class_gains
    from beyondlabels.io.profiles_files import load_profiles

    profiles = load_profiles(profiles)  # a path or a mapping in the profiles file format (FeatureProfiles as is)
    return profile_class_gains(profiles, name="profile", labels=labels)


# The metric options of the retrieval callback and their defaults (a metric given as `metric=` brings its own).
_METRIC_OPTIONS = {
    "ks": (1, 5, 10),
    "chunk_size": 1024,
    "precision": "fp32",
    "distributed_search": True,
    "curve_max_k": None,
    "graded": (),
    "max_queries": None,
    "query_seed": 0,
    "deep_metrics": True,
    "audit": None,
    "profiles": None,
    "profile_labels": None,
    "mismatch_trials": 10_000,
    "mismatch_seed": 0,
    "projection_points": 5000,
    "distance": "cosine",
}


def _own_copy(metric: Any, options: dict[str, Any], num_mismatches: int) -> EmbeddingRetrieval:
    """The callback's copy of a given metric (``metric=``), which then brings every metric option: options also
    given to the callback are an error naming them. The copy returns the neighbours the mismatch table needs."""
    if not isinstance(metric, EmbeddingRetrieval):
        raise ValueError(
            f"`metric` must be an EmbeddingRetrieval (or RetrievalWithMismatch), got {type(metric).__name__}; "
            "or leave it None and give the metric's options to the callback."
        )
    both = [name for name, value in options.items() if not _same(value, _METRIC_OPTIONS[name])]
    if both:
        raise ValueError(
            f"`metric` brings its own options; {both} were given to the callback too. Set them on the metric "
            "(e.g. EmbeddingRetrieval(ks=...)) or drop `metric`."
        )
    own = metric.clone()
    own.reset()
    if num_mismatches and not own.return_neighbors:
        own.return_neighbors = 1  # the worst-mismatch table (num_mismatches=0 turns it off)
    return own


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, tuple) and isinstance(value, (list, tuple)):
        return tuple(value) == default
    return value is default or (type(value) is type(default) and value == default)


def _options_of(metric: EmbeddingRetrieval) -> dict[str, Any]:
    """The callback's metric options as ``metric`` holds them."""
    mismatch = isinstance(metric, RetrievalWithMismatch)
    return {
        "ks": metric.ks,
        "chunk_size": metric.chunk_size,
        "precision": metric.precision,
        "distributed_search": metric.distributed_search,
        "curve_max_k": metric.curve_max_k,
        "graded": metric.graded,
        "max_queries": metric.max_queries,
        "query_seed": metric.query_seed,
        "deep_metrics": metric.deep_metrics,
        "audit": metric.audit,
        "profiles": None,
        "profile_labels": None,
        "profile_gains": metric.mismatch_gains if mismatch else None,
        "mismatch_trials": metric.num_trials if mismatch else 10_000,
        "mismatch_seed": metric.seed if mismatch else 0,
        "projection_points": metric.projection_points if mismatch else 0,
        "distance": metric.distance,
    }
