"""The base of every per-sample metric: "cat" states, gathered across processes, deduplicated by sample id.

Every family (retrieval, hierarchy, profiles, text-to-image, ...) stores one row per sample and computes from the
whole set at :meth:`compute`. This base owns what they share:

- one ``ids`` state plus the family's per-sample states, all with ``dist_reduce_fx="cat"``;
- deduplication after gathering: Lightning's ``DistributedSampler`` repeats samples to even out ranks, so one copy
  per id is kept (the first one gathered; samples come out in ascending id order), copies whose *agreeing* states
  (labels, ...) differ raise, and ``num_duplicates`` counts the copies dropped — with a warning when they copy more
  items than the padding a sampler adds (``world_size - 1``; an item is a sample, or what ``item_state`` names: an
  image with its captions);
- ids are optional on one process: without them every sample's id is its position in the order samples arrived
  (ids are resolved at :meth:`compute`, so ``forward``, ``reset`` and split updates never reuse an id);
- ``forward``: a gallery metric has no per-batch value (one batch is not a gallery), so by default ``metric(x, y)``
  only accumulates and returns None — exactly what ``update(x, y)`` does, unlike torchmetrics' ``forward``, which
  returns the batch's own value; read the values from ``compute()``. Families with a meaningful batch value set
  ``batch_value = True`` and get torchmetrics' forward;
- argument checks that need the values (finite, ...) and so a host sync run only when ``validate_args=True``;
- gathering when a process has no samples: before the "cat" gather every process tells the others the dtype and
  trailing shape of each state (torchmetrics stands in an empty 1-D float32 tensor for an empty state, which no
  collective can gather with ``[n, D]`` float rows or int64 ids), so a process without samples contributes an empty
  tensor of the right shape and dtype and the others' samples are computed as if it were not there; and the kinds of
  labels each process saw (integer class ids, or names): integer ids on one process and names on another would be
  coded differently (:mod:`beyondlabels.functional.labels`) and silently compared, so that is an error raised on
  every process before the gather;
- the output schema (:meth:`output_schema`), which callbacks, reports and comparison read, and :meth:`scalars`: the
  scalar entries of one result, the dict ``LightningModule.log_dict`` accepts (a result also holds curves, per-query
  vectors and tables, which ``log_dict`` refuses);
- ``plot()`` (torchmetrics' API): the headline values of one result as bars, of several results as lines over the
  evaluations, or a curve key of one result as a line.

Nothing here imports Lightning.
"""

from __future__ import annotations

import copy
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat, rank_zero_warn
from torchmetrics.utilities.distributed import gather_all_tensors

from beyondlabels._internal.checks import (
    check_bool,
    check_index_vector,
    check_ks,
    check_non_negative_int,
    check_positive_int,
    check_precision,
)
from beyondlabels._internal.memory import release_free_memory
from beyondlabels.schema import KeySpec, OutputSchema

__all__ = ["GatheredSamples", "PerSampleMetric", "ProcessExchange"]

_NO_ID = torch.iinfo(torch.int64).min

# Bytes of each process's buffer gathered at a time (`ProcessExchange.rows_by_rank`). gloo's gather of a list of
# tensors goes through one flat buffer of every process's part and then copies it out, so one gather of the whole set
# held it twice beside the process's own share: gathering 50,000 x 256 fp32 rows a rank at W = 4 added 441 MB in one
# gather and 305 MB in pieces of 16 MB (each piece a collective: 4 of them here).
_GATHER_PIECE_BYTES = 16 * 2**20


def _world(group: Any = None) -> tuple[int, int]:
    """(rank, world size) of ``group`` (the default group), or (0, 1) outside distributed runs."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(group), torch.distributed.get_world_size(group)
    return 0, 1


def label_kinds(labels: Any) -> set[str]:
    """``{"int"}`` for integer class ids (an integer tensor or array, a list of ints), ``{"text"}`` for anything else
    (names), both for a list that mixes them.

    Examples:
        >>> label_kinds(torch.tensor([1, 2])), label_kinds(["a", "b"]), sorted(label_kinds([1, "b"]))
        ({'int'}, {'text'}, ['int', 'text'])
    """
    if isinstance(labels, Tensor):
        return {"int"} if not labels.is_floating_point() else {"text"}
    if getattr(getattr(labels, "dtype", None), "kind", None) in ("i", "u"):  # an integer numpy array
        return {"int"}
    kinds = set()
    for value in labels:
        if isinstance(value, Tensor) and value.numel() == 1:
            value = value.item()
        is_int = isinstance(value, int) or type(value).__name__.startswith(("int", "uint"))
        kinds.add("int" if is_int and not isinstance(value, bool) else "text")
        if len(kinds) == 2:
            break
    return kinds


def _state_layout(state: Any) -> tuple[str, tuple[int, ...]] | None:
    """``(dtype name, trailing shape)`` of a "cat" state, None when it holds no tensor yet."""
    tensors = state if isinstance(state, list) else [state]
    tensors = [t for t in tensors if isinstance(t, Tensor)]
    if not tensors or (isinstance(state, list) and sum(t.numel() for t in tensors) == 0 and tensors[0].dim() <= 1):
        return None
    first = tensors[0]
    return str(first.dtype).removeprefix("torch."), tuple(first.shape[1:])


def _common_layout(name: str, layouts: list[tuple[str, tuple[int, ...]] | None]) -> tuple[str, tuple[int, ...]] | None:
    """The one layout of the processes that hold samples (None when none does); ``ValueError`` when they differ."""
    known = {layout for layout in layouts if layout is not None}
    if len(known) > 1:
        shown = ", ".join(f"rank {r}: {lay[0]} {list(lay[1])}" for r, lay in enumerate(layouts) if lay is not None)
        raise ValueError(
            f"the `{name}` of different processes do not fit together ({shown}); every process must feed samples of "
            "one shape and dtype"
        )
    return known.pop() if known else None


def _check_label_kinds(kinds: list[set[str]]) -> None:
    """Raise when one process saw only integer class ids and another only names (the same on every process)."""
    only_int = [r for r, k in enumerate(kinds) if k == {"int"}]
    only_text = [r for r, k in enumerate(kinds) if k == {"text"}]
    if only_int and only_text:
        raise ValueError(
            f"labels of different kinds on different processes: integer class ids on rank(s) {only_int}, names "
            f"(strings) on rank(s) {only_text}. An int keeps its value and a name is hashed "
            "(beyondlabels.functional.labels), so 3 and '3' are two classes and the ranks' samples would be compared "
            "wrongly; give every process labels of one kind (e.g. map names to ids, or ids to str, in the dataset)."
        )


class ProcessExchange:
    """The :class:`~beyondlabels.functional._pair_shares.Exchange` of the processes of ``group`` (the default group
    when None): ``all_gather`` through ``torch.distributed.all_gather``, ``all_to_all`` through point-to-point sends
    and receives (parts of different shapes, empty ones skipped on both sides), which gloo and NCCL both offer."""

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.rank, self.world = _world(group)

    def all_gather(self, value: Tensor) -> list[Tensor]:
        value = value.contiguous()
        out = [torch.empty_like(value) for _ in range(self.world)]
        torch.distributed.all_gather(out, value, group=self.group)
        return out

    def all_to_all(self, parts: list[Tensor], shapes: list[tuple[int, ...]]) -> list[Tensor]:
        mine = parts[self.rank]
        got: list[Tensor] = []
        ops = []
        for k, part in enumerate(parts):
            if k == self.rank:
                got.append(mine)
                continue
            peer = k if self.group is None else torch.distributed.get_global_rank(self.group, k)
            buf = torch.empty(shapes[k], dtype=mine.dtype, device=mine.device)
            got.append(buf)
            if part.numel():
                ops.append(torch.distributed.P2POp(torch.distributed.isend, part.contiguous(), peer, self.group))
            if buf.numel():
                ops.append(torch.distributed.P2POp(torch.distributed.irecv, buf, peer, self.group))
        if ops:
            for request in torch.distributed.batch_isend_irecv(ops):
                request.wait()
        return got

    def concat_rows(self, rows: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Every process's tensor of each key of ``rows`` concatenated along dim 0, rank by rank (`rows_by_rank`)."""
        return {key: torch.cat(parts) for key, parts in self.rows_by_rank(rows).items()}

    def rows_by_rank(self, rows: Mapping[str, Tensor]) -> dict[str, list[Tensor]]:
        """Every process's tensor of each key of ``rows``, in rank order, in gathers whose number does not depend on
        the number of keys: the row counts, then every tensor's bytes in one buffer (the tensors returned are views
        of the gathered buffers; in a group of one process, the tensors given, uncopied), in pieces of
        ``_GATHER_PIECE_BYTES``, each a gather, so the collective's own flat buffer holds one piece of every process,
        not the whole set (two gathers for a buffer of at most one piece). Row counts may differ between processes; the
        keys (in one order), dtypes and trailing shapes are those of one kernel's rows on every process, and a row
        size that differs raises ``ValueError`` naming the key."""
        keys = list(rows)
        if self.world == 1:
            return {key: [rows[key]] for key in keys}  # nothing to gather: no copy (as torchmetrics' gather)
        if not keys:
            return {}
        tensors = [rows[key].contiguous() for key in keys]
        device = tensors[0].device
        row_bytes = [math.prod(t.shape[1:]) * t.element_size() for t in tensors]
        header = torch.tensor([[t.shape[0] for t in tensors], row_bytes], dtype=torch.int64, device=device)
        every = [h.tolist() for h in self.all_gather(header)]
        for rank, (_, theirs) in enumerate(every):
            for key, a, b in zip(keys, theirs, row_bytes):
                if a != b:
                    raise ValueError(
                        f"the rows `{key}` of rank {rank} hold {a} bytes each and this process's {b}: every process "
                        "must give rows of one dtype and trailing shape"
                    )
        starts = [_byte_starts(counts, row_bytes) for counts, _ in every]
        mine = torch.zeros(max(s[-1] for s in starts), dtype=torch.uint8, device=device)
        for t, a in zip(tensors, starts[self.rank]):
            mine[a : a + t.numel() * t.element_size()] = t.reshape(-1).view(torch.uint8)
        del tensors
        gathered = [torch.empty_like(mine) for _ in range(self.world)]
        for a in range(0, mine.numel(), _GATHER_PIECE_BYTES):
            b = min(a + _GATHER_PIECE_BYTES, mine.numel())
            torch.distributed.all_gather([got[a:b] for got in gathered], mine[a:b], group=self.group)
        del mine
        out: dict[str, list[Tensor]] = {}
        for i, key in enumerate(keys):
            like = rows[key]
            out[key] = [
                got[s[i] : s[i] + counts[i] * row_bytes[i]].view(like.dtype).view(counts[i], *like.shape[1:])
                for (counts, _), s, got in zip(every, starts, gathered)
            ]
        return out


def _byte_starts(counts: list[int], row_bytes: list[int], align: int = 16) -> list[int]:
    """Where each tensor of ``counts[i]`` rows of ``row_bytes[i]`` bytes starts in one buffer (each at a multiple of
    ``align`` bytes, so it can be viewed as its dtype), then the buffer's size."""
    starts = [0]
    for count, size in zip(counts, row_bytes):
        starts.append(starts[-1] + -(-count * size // align) * align)
    return starts


@dataclass(frozen=True)
class GatheredSamples:
    """All samples after gathering and deduplication, in ascending id order.

    Attributes:
        ids: int64 ``[N]`` unique sample ids.
        values: the family's per-sample states, each ``[N, ...]``, aligned with ``ids``.
        num_duplicates: copies dropped (gathered rows minus ``N``).
    """

    ids: Tensor
    values: dict[str, Tensor]
    num_duplicates: int


class PerSampleMetric(Metric):
    """Base class of per-sample metrics (see the module docstring). Subclasses call :meth:`add_sample_state` for each
    per-sample state, :meth:`append_samples` in ``update``, :meth:`gathered_samples` in ``compute``, and implement
    :meth:`output_schema`.

    Args:
        validate_args: Check values (finite embeddings, ...) in ``update``; costs a host sync per batch.
        kwargs: Passed to :class:`torchmetrics.Metric` (``sync_on_compute``, ``process_group``, ...).
    """

    is_differentiable = False
    higher_is_better: bool | None = None  # outputs mix directions: read `output_schema()` per key
    full_state_update = False
    batch_value = False
    # The per-sample state that names the data set item a sample belongs to (None: the sample is the item). A
    # DistributedSampler repeats items, so the warning about copies counts the items repeated, not the samples.
    item_state: str | None = None

    ids: list[Tensor]

    def __init__(self, validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_bool(validate_args, "validate_args")
        self.validate_args = validate_args
        self._sample_states: list[str] = []
        self._agreeing_states: list[str] = []
        self._states_gathered = False  # set by `sync`: the states now hold every process's samples
        self._copies_dropped = 0  # copies `gathered_samples` dropped from the gathered states (until `unsync`)
        self._items_repeated = 0  # the items those copies belong to
        self._prepared: set[str] = set()  # gathered states `gathered_samples(prepare=...)` replaced (until `unsync`)
        self._label_kinds: set[str] = set()  # "int" and/or "text": the labels this process saw (note_label_kinds)
        self.add_state("ids", default=[], dist_reduce_fx="cat")

    # ---- declaration -------------------------------------------------------------------------------------------------
    def add_sample_state(self, name: str, agree: bool = False) -> None:
        """Declare a per-sample state (a list of ``[B, ...]`` tensors gathered with "cat").

        Args:
            name: Attribute name of the state.
            agree: Copies of one id must carry equal values (labels); :meth:`gathered_samples` raises otherwise.
        """
        self.add_state(name, default=[], dist_reduce_fx="cat")
        self._sample_states.append(name)
        if agree:
            self._agreeing_states.append(name)

    def keep_search_settings(
        self, ks: Any, chunk_size: Any, precision: Any, return_neighbors: Any, distributed_search: Any
    ) -> None:
        """The settings of the exact search a family runs at :meth:`compute`, checked now (the kernel checks them
        again; here a bad config fails at construction, not at compute()) and kept as ``ks`` (sorted distinct ints),
        ``chunk_size``, ``precision``, ``return_neighbors`` and ``distributed_search`` (a bool: each process searches
        its share of the queries)."""
        self.ks = check_ks(ks)
        check_positive_int(chunk_size, "chunk_size")
        check_precision(precision)
        check_non_negative_int(return_neighbors, "return_neighbors")
        self.chunk_size = chunk_size
        self.precision = precision
        self.return_neighbors = return_neighbors
        self.distributed_search = bool(distributed_search)

    @classmethod
    def example(cls) -> PerSampleMetric:
        """A small evaluation of this metric: an instance updated with a few seeded samples, ready for ``compute()``.
        Every family's metric defines one; the contract tests over the families of :mod:`beyondlabels.families` run
        it (``plot()``, intervals, headline keys), so a new family is checked the moment it is registered."""
        raise NotImplementedError(
            f"{cls.__name__} defines no example(): a family's metric returns a small updated instance"
        )

    def output_schema(self) -> OutputSchema:
        """Kind and direction of every key :meth:`compute` returns."""
        raise NotImplementedError

    # ---- update ------------------------------------------------------------------------------------------------------
    def check_ids(self, ids: Any, batch_size: int, device: torch.device) -> Tensor:
        """Validate a batch's ids (or make placeholders resolved at compute) as an int64 tensor on ``device``."""
        if ids is None:
            if _world(self.process_group)[1] > 1:
                raise ValueError(
                    "`ids` is required under distributed training: samples are deduplicated by id after gathering "
                    "(DistributedSampler repeats some). Pass each sample's global index, e.g. its dataset index."
                )
            return torch.full((batch_size,), _NO_ID, dtype=torch.long, device=device)
        ids = check_index_vector(
            ids,
            "ids",
            batch_size,
            device,
            items="integer sample ids",
            vector="a 1-D integer tensor [B] of global sample ids",
            rows=f"a batch of {batch_size}",
        )
        if self.validate_args and bool((ids == _NO_ID).any()):
            raise ValueError(f"`ids` may not hold {_NO_ID} (reserved for samples without ids).")
        return ids

    def check_embedding_batch(self, value: Any, name: str, state: str, *, same_width: str, finite: str) -> Tensor:
        """A batch of embeddings checked for ``update``: a 2-D float tensor ``[B, D]`` with ``D >= 1``, as wide as the
        rows already appended to the per-sample state ``state``, and (with ``validate_args``) finite; returned
        detached as fp32. ``same_width`` and ``finite`` end the messages of those two errors with what to check."""
        if not isinstance(value, Tensor) or value.dim() != 2 or not value.is_floating_point() or value.shape[1] == 0:
            shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ValueError(f"`{name}` must be a 2-D float tensor [B, D] with D >= 1, got {shape}.")
        earlier = getattr(self, state)
        if earlier and isinstance(earlier, list) and earlier[-1].shape[1] != value.shape[1]:
            raise ValueError(
                f"`{name}` has dimension {value.shape[1]} but earlier updates had {earlier[-1].shape[1]}; {same_width}"
            )
        if self.validate_args and not bool(torch.isfinite(value).all()):
            raise ValueError(f"`{name}` contains NaN or Inf values; {finite}")
        return value.detach().to(torch.float32)

    def append_samples(self, ids: Tensor, **values: Tensor) -> None:
        """Append one batch: ``ids`` from :meth:`check_ids` and a ``[B, ...]`` tensor for every declared state."""
        missing = set(self._sample_states) - set(values)
        if missing:
            raise TypeError(f"append_samples() lacks the states {sorted(missing)}")
        self.ids.append(ids)
        for name, value in values.items():
            getattr(self, name).append(value)

    def note_label_kinds(self, labels: Any) -> None:
        """Record what kind of labels an update brought: integer class ids (``"int"``) or anything else, such as names
        (``"text"``); checked across processes at gathering (see the module docstring)."""
        self._label_kinds |= label_kinds(labels)

    def reset(self) -> None:
        """torchmetrics' ``reset``; after a ``compute()`` that raised under a distributed sync (torchmetrics then
        leaves the gathered tensors in place of the process's lists, which its ``reset`` cannot clear), the process's
        own states are restored first."""
        if self._is_synced:
            self.unsync()
        super().reset()
        self._label_kinds = set()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Accumulate the batch; return its own value only for families with a per-batch value (``batch_value``)."""
        if self.batch_value:
            return super().forward(*args, **kwargs)
        self.update(*args, **kwargs)
        return None

    # ---- synchronisation -------------------------------------------------------------------------------------------
    def _copy_state_dict(self) -> dict[str, Any]:
        """torchmetrics' copy of the states (kept before a sync, restored by ``unsync``), without copying the
        per-sample tensors: nothing writes them in place (updates append batches; sync and compute set new tensors),
        so their lists are copied and the tensors shared. Under DDP that spares every rank a copy of its whole share
        in ``compute()``. Other states are copied as torchmetrics copies them."""
        samples = {"ids", *self._sample_states}
        cache: dict[str, Any] = {}
        for name in self._defaults:
            value = getattr(self, name)
            if name in samples:
                cache[name] = list(value) if isinstance(value, list) else value
            elif isinstance(value, Tensor):
                cache[name] = value.detach().clone()
            else:
                cache[name] = [v.detach().clone() if isinstance(v, Tensor) else copy.deepcopy(v) for v in value]
        return cache

    def sync(
        self,
        dist_sync_fn: Any = None,
        process_group: Any = None,
        should_sync: bool = True,
        distributed_available: Any = None,
    ) -> None:
        """torchmetrics' ``sync``, recording whether the states were gathered (:meth:`work_share` reads it)."""
        super().sync(
            dist_sync_fn=dist_sync_fn,
            process_group=process_group,
            should_sync=should_sync,
            distributed_available=distributed_available,
        )
        available = distributed_available if distributed_available is not None else self.distributed_available_fn
        if should_sync and callable(available) and available():
            self._states_gathered = True

    def _sync_dist(self, dist_sync_fn: Any = gather_all_tensors, process_group: Any = None) -> None:
        """torchmetrics' gather, after every process has told the others its states' dtypes and trailing shapes and
        its label kinds: an empty state is given an empty tensor of the shape and dtype of the others', and labels of
        different kinds on different processes raise the same ``ValueError`` on every process before any tensor is
        gathered."""
        group = process_group or self.process_group
        names = ["ids", *self._sample_states]
        mine = {"states": {name: _state_layout(getattr(self, name)) for name in names}, "labels": self._label_kinds}
        every: list[Any] = [None] * torch.distributed.get_world_size(group)
        torch.distributed.all_gather_object(every, mine, group=group)
        _check_label_kinds([entry["labels"] for entry in every])
        for name in names:
            layouts = [entry["states"][name] for entry in every]
            layout = _common_layout(name, layouts)
            if layout is not None and mine["states"][name] is None:
                dtype, trailing = layout
                setattr(self, name, [torch.empty((0, *trailing), dtype=getattr(torch, dtype), device=self.device)])
        self._join_batches(names)
        if dist_sync_fn is gather_all_tensors:  # torchmetrics' own: the per-sample states go together instead
            dist_sync_fn = self._sample_states_gathered(names, group)
        super()._sync_dist(dist_sync_fn, process_group)

    def _sample_states_gathered(self, names: list[str], group: Any) -> Callable[..., list[Tensor]]:
        """torchmetrics' ``dist_sync_fn`` for this sync: the states ``names`` (each one joined tensor) gathered
        together (`ProcessExchange.rows_by_rank`: the counts, then the bytes in pieces of 16 MB a process, where
        torchmetrics' gather takes a barrier and two or three gathers per state), any other tensor by torchmetrics'
        gather."""
        joined = {}
        for name in names:
            value = getattr(self, name)
            if isinstance(value, list) and len(value) == 1 and isinstance(value[0], Tensor):
                joined[name] = value[0]
        by_rank = ProcessExchange(group).rows_by_rank(joined)
        # Each state's tensor is held beside its parts, so its id cannot be another tensor's while it is served.
        served = {id(joined[name]): (joined[name], parts) for name, parts in by_rank.items()}
        del joined, by_rank

        def sync_fn(tensor: Tensor, group: Any = None) -> list[Tensor]:
            entry = served.pop(id(tensor), None)
            if entry is not None and entry[0] is tensor:
                return entry[1]
            return gather_all_tensors(tensor, group)

        return sync_fn

    def _join_batches(self, names: list[str]) -> None:
        """Each of the states ``names`` as one tensor, in the states and in torchmetrics' pre-sync cache alike (the
        same values, restored by ``unsync``). torchmetrics concatenates a list state before it gathers it; joined
        here, the batches are freed, so the gather does not hold a copy of the process's share beside them. Their
        pages go back to the system (`release_free_memory`): batches of a few MB each live in the C heap, which
        would otherwise keep them through the whole compute (50 MB a rank at N = 200,000, D = 256, W = 4)."""
        cache = getattr(self, "_cache", None)
        joined_any = False
        for name in names:
            batches = getattr(self, name)
            if not isinstance(batches, list) or len(batches) < 2:
                continue
            try:
                joined = torch.cat(batches)
            except RuntimeError:
                continue  # shapes that do not fit: torchmetrics' own concatenation raises
            setattr(self, name, [joined])
            cached = cache.get(name) if isinstance(cache, dict) else None
            if isinstance(cached, list) and len(cached) == len(batches) and all(map(operator.is_, cached, batches)):
                cache[name] = [joined]
            joined_any = True
        batches = joined = cached = None  # the last state's batches too (its cache list held them), before the trim
        if joined_any:
            release_free_memory(self.device)

    def unsync(self, should_unsync: bool = True) -> None:
        super().unsync(should_unsync=should_unsync)
        if should_unsync:
            self._states_gathered = False
            self._copies_dropped = self._items_repeated = 0
            self._prepared = set()

    # ---- compute -----------------------------------------------------------------------------------------------------
    def gathered_samples(self, prepare: Mapping[str, Callable[[Tensor], Tensor]] | None = None) -> GatheredSamples:
        """Concatenate (and, after a distributed sync, gather) the states; deduplicate by id; order by id.

        Args:
            prepare: ``{state: fn}``: return ``fn(rows)`` in place of the deduplicated rows of those states (for
                instance the unit rows a cosine search multiplies), so that a ``compute`` need not hold both. After a
                distributed sync the prepared rows also stand in for the gathered state until ``unsync`` (a later
                call in the same sync returns them again, and must ask for the same states to be prepared).

        Raises:
            ValueError: when nothing was seen, when some updates had ids and others not, when copies of one id
                disagree on an agreeing state (the ids are named), or when ``prepare`` names no per-sample state or
                leaves out one this sync already prepared.
        """
        prepare = dict(prepare or {})
        unknown = sorted(set(prepare) - set(self._sample_states))
        if unknown:
            raise ValueError(f"`prepare` names {unknown}, which are not per-sample states of {type(self).__name__}.")
        left_out = sorted(self._prepared - set(prepare))
        if left_out:
            raise ValueError(
                f"the gathered {left_out} of this sync were already replaced by prepared rows; ask for them "
                "prepared again, or call `unsync()` and `sync()` to gather them anew."
            )
        if isinstance(self.ids, list) and sum(t.numel() for t in self.ids) == 0:
            raise ValueError(f"{type(self).__name__}.compute() was called before any sample was passed to `update`.")
        ids = dim_zero_cat(self.ids)
        values = {}
        for name in self._sample_states:
            try:
                values[name] = dim_zero_cat(getattr(self, name))
            except RuntimeError as exc:
                raise ValueError(
                    f"the `{name}` of different updates do not fit together ({exc}); "
                    "every update must use the same shape."
                ) from exc
        placeholder = ids == _NO_ID
        if bool(placeholder.any()):
            if not bool(placeholder.all()):
                raise ValueError("some updates passed `ids` and others did not; pass ids in every update or in none.")
            ids = torch.arange(ids.numel(), device=ids.device)
        order = torch.argsort(ids, stable=True)
        ids_sorted = ids[order]
        first = torch.ones_like(ids_sorted, dtype=torch.bool)
        first[1:] = ids_sorted[1:] != ids_sorted[:-1]
        group = torch.cumsum(first, dim=0) - 1
        keep = order[first]
        for name in self._agreeing_states:
            value = values[name][order]
            kept = value[first][group]
            unequal = value != kept
            if value.is_floating_point():
                unequal &= ~(torch.isnan(value) & torch.isnan(kept))  # NaN in both copies agrees
            differ = unequal.reshape(value.shape[0], -1).any(dim=1)
            if bool(differ.any()):
                bad = torch.unique(ids_sorted[differ])[:5].tolist()
                raise ValueError(
                    f"`{name}` disagrees between copies of the same sample id (ids {bad}); every copy of an id must "
                    f"carry one {name} value. Check that ids are unique per sample."
                )
        num_duplicates = int(ids.numel() - keep.numel()) + self._copies_dropped
        dropped = order[~first]
        items = values[self.item_state][dropped].unique().numel() if self.item_state else dropped.numel()
        items += self._items_repeated
        samples = GatheredSamples(ids[keep], {name: v[keep] for name, v in values.items()}, num_duplicates)
        del values
        if self._states_gathered:
            # The gathered states are this compute's own copies (`unsync` restores the process's): holding the
            # deduplicated samples in their place frees the gathered ones now rather than after compute().
            self.ids = samples.ids
            for name, value in samples.values.items():
                setattr(self, name, value)
            self._copies_dropped, self._items_repeated = num_duplicates, items
        for name, fn in prepare.items():
            if name in self._prepared:
                continue  # the states already hold this sync's prepared rows
            samples.values[name] = fn(samples.values[name])  # the unprepared rows are freed here, not after compute
            if self._states_gathered:
                setattr(self, name, samples.values[name])
                self._prepared.add(name)
        world = _world(self.process_group)[1] if self._states_gathered else 1
        if items > world - 1:
            rank_zero_warn(
                f"{type(self).__name__}: {num_duplicates} samples repeated an id already seen and were dropped, "
                f"copies of {items} items (more than the at most {world - 1} a DistributedSampler repeats). Check "
                "that ids are unique per sample and that the evaluation set is not fed twice.",
                UserWarning,
            )
        return samples

    def work_share(self) -> tuple[int, int] | None:
        """``(rank, world_size)`` when :meth:`compute` should split work across the processes holding the same
        gathered samples (states were synced), else None."""
        rank, world = _world(self.process_group)
        if world > 1 and self._states_gathered:
            return rank, world
        return None

    def exchange(self) -> ProcessExchange | None:
        """The processes of :meth:`work_share` as an :class:`~beyondlabels.functional._pair_shares.Exchange` (what a
        kernel searching with them passes its tensors through), None when :meth:`compute` does not split work."""
        if self.work_share() is None:
            return None
        return ProcessExchange(self.process_group)

    def gather_rows(self, rows: dict[str, Tensor]) -> dict[str, Tensor]:
        """Concatenate every process's rows of per-query tensors (uneven counts allowed), rank by rank."""
        if self.work_share() is None:
            return rows
        return ProcessExchange(self.process_group).concat_rows(rows)

    def scalars(self, results: dict[str, Any], prefix: str = "") -> dict[str, Tensor]:
        """The scalar entries of ``results`` (one :meth:`compute`), each as a 0-d float tensor under
        ``<prefix><key>``, in schema order: what ``LightningModule.log_dict`` accepts. Curves, per-query vectors,
        tables and names are left out (:meth:`output_schema` says which key is which).

        Examples:
            >>> import torch
            >>> from beyondlabels.metrics import EmbeddingRetrieval
            >>> metric = EmbeddingRetrieval(ks=(1,))
            >>> metric.update(torch.eye(2)[[0, 0, 1, 1]], torch.tensor([0, 0, 1, 1]))
            >>> logged = metric.scalars(metric.compute(), prefix="val/")   # self.log_dict(logged) in a LightningModule
            >>> logged["val/precision@1"], "val/per_query" in logged, "val/precision_curve" in logged
            (tensor(1., dtype=torch.float64), False, False)
        """
        if not isinstance(prefix, str):
            raise ValueError(f"`prefix` must be a string (e.g. 'val/'), got {prefix!r}.")
        out = {}
        for key in self.output_schema().scalar_keys():
            if key in results:
                value = torch.as_tensor(results[key]).detach()
                out[f"{prefix}{key}"] = value if value.is_floating_point() else value.to(torch.float64)
        return out

    @staticmethod
    def count_spec() -> KeySpec:
        return KeySpec("scalar", None, count=True)

    # ---- plot --------------------------------------------------------------------------------------------------------
    def plot(self, val: Any = None, ax: Any = None, keys: Sequence[str] | None = None) -> tuple[Any, Any]:
        """Draw results of this metric with matplotlib, as torchmetrics' ``Metric.plot`` does.

        Args:
            val: One result of :meth:`compute` (default: ``compute()`` now) or a sequence of results (one per
                evaluation).
            ax: The matplotlib axes to draw into (default: a new figure).
            keys: The keys to draw. Default: every scalar key whose better direction is higher (the headline
                values). Name one curve key (e.g. ``["precision_curve"]``) to draw that curve of one result against k.

        Returns:
            ``(figure, axes)``. One result: horizontal bars, one per scalar key, with its value; several results:
            one line per key over the evaluations; a curve key: the curve against its position (1, 2, ...).

        Examples:
            >>> import torch
            >>> from beyondlabels.metrics import EmbeddingRetrieval
            >>> metric = EmbeddingRetrieval(ks=(1, 2))
            >>> metric.update(
            ...     torch.eye(4)[[0, 0, 1, 1]] + 0.01 * torch.arange(4.0)[:, None], torch.tensor([0, 0, 1, 1])
            ... )
            >>> fig, ax = metric.plot(keys=["precision@1", "r_precision"])
            >>> [t.get_text() for t in ax.get_yticklabels()]
            ['precision@1', 'r_precision']
        """
        from beyondlabels.metrics._plot import plot_results

        if val is None:
            val = self.compute()
        return plot_results(val, self.output_schema(), type(self).__name__, ax=ax, keys=keys)
