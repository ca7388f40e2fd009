"""What each output key of a metric is: its kind, its direction, and whether it is a count.

Every metric in :mod:`beyondlabels.metrics` describes its outputs with an :class:`OutputSchema`. Logging, W&B
``define_metric`` summaries, JSON reports, checkpoint-mode checks and run comparison read the schema instead of
guessing from key names. Pure Python: no torch, no torchmetrics, no Lightning.

Kinds
    ``"scalar"``: one number per evaluation (logged, compared). ``"curve"``: a 1-D sequence per evaluation (e.g.
    ``precision_curve[i] = precision@(i+1)``; plotted, stored in history, not logged as a scalar). ``"per_query"``: one
    value per query or sample (saved to the per-query files that statistics read; never logged as a scalar).

Direction
    ``higher_is_better`` is True, False, or None for keys that are neither better nor worse when larger (counts,
    settings). Per-query keys share the direction of the scalar they average.

Headline and notes
    ``headline`` names the few scalar keys a family is read by (retrieval: ``precision@1``, ``r_precision``,
    ``map@r``, ``ndcg@10``), in the order they are shown: the end-of-run summary prints them with their interval,
    best value and change (:mod:`beyondlabels.reporting.summary`); every other key is in the full table. ``notes``
    maps counts worth a line of their own (the label audit's suspects) to how they read: ``{value} {label}``. Both
    are declared where the family declares its schema and travel with it (``schema.json``), so a reader of a run
    folder needs no list of families.

Examples:
    >>> keys = {"precision@1": KeySpec("scalar", True), "num_queries": KeySpec("scalar", None, count=True)}
    >>> schema = OutputSchema(keys, headline=["precision@1"], notes={"num_queries": "queries"})
    >>> schema.scalar_keys(), schema["precision@1"].summary, schema["num_queries"].summary
    (['precision@1', 'num_queries'], 'max', 'last')
    >>> schema.mode("precision@1"), schema.prefixed("retrieval").headline
    ('max', ['retrieval/precision@1'])
    >>> OutputSchema.from_json(schema.to_json()) == schema
    True
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from beyondlabels._internal.checks import check_choice

__all__ = ["KeySpec", "OutputSchema"]

Kind = Literal["scalar", "curve", "per_query"]
_KINDS = ("scalar", "curve", "per_query")


@dataclass(frozen=True)
class KeySpec:
    """The description of one output key.

    Args:
        kind: ``"scalar"``, ``"curve"`` or ``"per_query"``.
        higher_is_better: True, False, or None when the key has no direction (counts, settings).
        count: True for integer counts (``num_queries``, ...): printed as integers, summarised by their last value.
    """

    kind: Kind
    higher_is_better: bool | None
    count: bool = False

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", _KINDS)
        check_choice(self.higher_is_better, "higher_is_better", (True, False, None), what="True, False or None")

    @property
    def summary(self) -> str:
        """The W&B summary of the key: ``"max"``, ``"min"`` or ``"last"`` (no direction)."""
        if self.higher_is_better is None:
            return "last"
        return "max" if self.higher_is_better else "min"


class OutputSchema(Mapping[str, KeySpec]):
    """An ordered, read-only mapping ``key -> KeySpec`` of everything a metric's ``compute()`` returns.

    Keys of per-query values are listed under their own names (``precision@1`` as a scalar and, inside the
    ``per_query`` dict of the output, ``precision@1`` as a per-query vector); :meth:`per_query` holds the latter.

    Args:
        keys: ``key -> KeySpec`` of every output, in output order.
        per_query: ``key -> KeySpec`` of the per-query vectors.
        headline: The scalar keys the family is read by, in display order (see the module docstring).
        notes: ``key -> label`` of scalar counts shown as ``{value} {label}`` on a line of their own.

    Raises:
        ValueError: if ``headline`` or ``notes`` names a key that is not a scalar of ``keys`` (or repeats one).
    """

    def __init__(
        self,
        keys: Mapping[str, KeySpec],
        per_query: Mapping[str, KeySpec] | None = None,
        headline: Sequence[str] = (),
        notes: Mapping[str, str] | None = None,
    ) -> None:
        self._keys = dict(keys)
        self._per_query = dict(per_query or {})
        for name, spec in [*self._keys.items(), *self._per_query.items()]:
            if not isinstance(spec, KeySpec):
                raise TypeError(f"schema entry {name!r} must be a KeySpec, got {type(spec).__name__}.")
        if isinstance(headline, str):
            raise ValueError(f"`headline` must be a list of scalar keys, got the string {headline!r}.")
        self._headline = list(headline)
        self._notes = dict(notes or {})
        scalars = set(self.scalar_keys())
        for what, names in (("headline", self._headline), ("notes", list(self._notes))):
            wrong = [k for k in names if not isinstance(k, str) or k not in scalars]
            if wrong:
                raise ValueError(
                    f"`{what}` names {wrong}, which are not scalar keys of the schema; scalars: {sorted(scalars)}."
                )
        if len(set(self._headline)) != len(self._headline):
            raise ValueError(f"`headline` repeats a key: {self._headline}.")
        bad = [k for k, label in self._notes.items() if not isinstance(label, str) or not label]
        if bad:
            raise ValueError(f"`notes` needs a non-empty label for each key (shown as '<value> <label>'), not {bad}.")

    def __getitem__(self, key: str) -> KeySpec:
        return self._keys[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OutputSchema):
            return NotImplemented
        return (self._keys, self._per_query, self._headline, self._notes) == (
            other._keys,
            other._per_query,
            other._headline,
            other._notes,
        )

    def __repr__(self) -> str:
        return f"OutputSchema({len(self._keys)} keys, {len(self._per_query)} per-query)"

    @property
    def per_query(self) -> dict[str, KeySpec]:
        """Specs of the per-query vectors (the ``per_query`` dict of the output)."""
        return dict(self._per_query)

    @property
    def headline(self) -> list[str]:
        """The headline keys, in display order (empty when the family declares none)."""
        return list(self._headline)

    @property
    def notes(self) -> dict[str, str]:
        """``key -> label`` of the counts shown on a note line."""
        return dict(self._notes)

    def scalar_keys(self) -> list[str]:
        """The keys logged as scalars, in schema order."""
        return [k for k, s in self._keys.items() if s.kind == "scalar"]

    def curve_keys(self) -> list[str]:
        return [k for k, s in self._keys.items() if s.kind == "curve"]

    def mode(self, key: str) -> str | None:
        """``"max"`` / ``"min"`` for a monitor on ``key`` (None when it has no direction or is unknown)."""
        spec = self._keys.get(key)
        if spec is None or spec.higher_is_better is None:
            return None
        return "max" if spec.higher_is_better else "min"

    def prefixed(self, prefix: str) -> OutputSchema:
        """The same schema with ``prefix/`` before every key (as the callbacks log them)."""
        return OutputSchema(
            {f"{prefix}/{k}": v for k, v in self._keys.items()},
            self._per_query,
            [f"{prefix}/{k}" for k in self._headline],
            {f"{prefix}/{k}": label for k, label in self._notes.items()},
        )

    def merged(self, other: OutputSchema) -> OutputSchema:
        """Both schemas' keys; ``other`` wins on a clash. The headline is this schema's, then ``other``'s new keys;
        a headline or note key that ``other`` turns into a non-scalar is dropped."""
        keys = {**self._keys, **other._keys}
        headline = [k for k in dict.fromkeys([*self._headline, *other._headline]) if keys[k].kind == "scalar"]
        notes = {k: v for k, v in {**self._notes, **other._notes}.items() if keys[k].kind == "scalar"}
        return OutputSchema(keys, {**self._per_query, **other._per_query}, headline, notes)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (written beside every run's ``history.jsonl`` as ``schema.json``)."""

        def spec(s: KeySpec) -> dict[str, Any]:
            return {"kind": s.kind, "higher_is_better": s.higher_is_better, "count": s.count}

        return {
            "keys": {k: spec(v) for k, v in self._keys.items()},
            "per_query": {k: spec(v) for k, v in self._per_query.items()},
            "headline": list(self._headline),
            "notes": dict(self._notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutputSchema:
        """Inverse of :meth:`to_json`. A schema written before headlines and notes existed reads with none.

        Raises:
            ValueError: if ``data`` is not a schema written by :meth:`to_json`.
        """
        try:
            keys = {
                k: KeySpec(v["kind"], v["higher_is_better"], bool(v.get("count", False)))
                for k, v in data["keys"].items()
            }
            per_query = {
                k: KeySpec(v["kind"], v["higher_is_better"], bool(v.get("count", False)))
                for k, v in data.get("per_query", {}).items()
            }
            headline, notes = data.get("headline") or [], data.get("notes") or {}
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"not an output schema (expected {{'keys': {{name: {{kind, higher_is_better, count}}}}}}): {exc}"
            ) from exc
        if not isinstance(headline, list) or not isinstance(notes, dict):
            raise ValueError(
                "not an output schema: 'headline' must be a list of keys and 'notes' an object, "
                f"got {headline!r} and {notes!r}"
            )
        return cls(keys, per_query, headline, notes)
