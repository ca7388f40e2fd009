"""Class feature profiles: validated per-class attributes as dense tensors.

Definitions used throughout this module (stated once here; the methods refer to them):

Ordinal feature
    A named feature whose value for each class is an integer *level* in ``0 .. ordinal_max`` (``L``, default 2).
    Each has a free-text description of what its levels mean.

Set group (set-valued feature)
    A named feature whose value for each class is a subset of the group's *allowed values* (a list of distinct
    strings, in a fixed order). A class may have the empty set.

Profile
    The values of every feature for one class: each ordinal feature and each set group exactly once.

Class order
    :attr:`FeatureProfiles.classes` keeps the order in which the classes were given (file order); rows of every
    tensor follow it. Columns follow :attr:`FeatureProfiles.ordinal_features` (given order) or, for a set group,
    the group's allowed values (given order). Set values are stored and returned in allowed order.

Data format (:meth:`FeatureProfiles.from_dict`; the YAML / JSON files of :mod:`beyondlabels.io.profiles_files`)::

    ordinal_max: 2                 # optional, default 2
    features:
      ordinal: {symmetry: "0 = none, ...", corners: "..."}
      sets: {edge_kinds: [straight, curved]}
    classes:
      square: {symmetry: 2, corners: 1, edge_kinds: [straight]}

Examples:
    >>> profiles = FeatureProfiles(
    ...     {"square": {"corners": 1, "edges": ["straight"]}, "circle": {"corners": 0, "edges": ["curved"]}},
    ...     ordinal={"corners": "0 = none, 1 = four, 2 = more"},
    ...     sets={"edges": ["straight", "curved"]},
    ... )
    >>> profiles.ordinal_matrix()
    tensor([[1],
            [0]])
    >>> profiles.set_membership("edges")
    tensor([[ True, False],
            [False,  True]])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_positive_int, is_int
from beyondlabels._internal.names import check_name as _check_name
from beyondlabels._internal.names import listing as _listing

_MAX_PROBLEMS = 10  # how many per-class problems one error lists


class FeatureProfiles:
    """Validated feature profiles of a set of classes (see the module docstring for every definition).

    Args:
        classes: ``{class name: profile}``, a profile being ``{ordinal feature: level, set group: [values]}``.
        ordinal: the ordinal features, as ``{name: description}`` or a sequence of names (empty descriptions).
        sets: ``{group: [allowed values]}``; each list non-empty, without repeats.
        ordinal_max: ``L``, the largest ordinal level (an int >= 1).

    Raises:
        ValueError: naming the class and feature, when a class lacks a feature or has an unknown one, an ordinal level
            is not an int in ``0..L``, a set value is not in the group's allowed values or is repeated; and for an
            empty ``classes``, no features at all, a name used both as ordinal feature and set group, an empty or
            repeating allowed list, a bad ``ordinal_max``, or a name that is not a non-empty string.

    Examples:
        >>> profiles = FeatureProfiles({"a": {"size": 1}, "b": {"size": 2}}, ordinal=["size"], sets={})
        >>> profiles.classes, profiles.ordinal_features, profiles.ordinal_max, len(profiles)
        (('a', 'b'), ('size',), 2, 2)
        >>> FeatureProfiles({"a": {"size": 3}}, ordinal=["size"], sets={})
        Traceback (most recent call last):
        ...
        ValueError: invalid feature profiles: class 'a', ordinal feature 'size': level 3 is outside 0..2 (ordinal_max)
    """

    def __init__(
        self,
        classes: Mapping[str, Mapping[str, Any]],
        ordinal: Mapping[str, str] | Sequence[str],
        sets: Mapping[str, Sequence[str]],
        ordinal_max: int = 2,
    ) -> None:
        self._ordinal_max = check_positive_int(ordinal_max, "ordinal_max", hint="the largest ordinal level")
        self._descriptions = self._check_ordinal(ordinal)
        self._ordinal: tuple[str, ...] = tuple(self._descriptions)
        self._sets = self._check_sets(sets)
        clash = [name for name in self._ordinal if name in self._sets]
        if clash:
            raise ValueError(
                f"feature name(s) {_listing(clash)} are both an ordinal feature and a set group; rename one of them"
            )
        if not self._ordinal and not self._sets:
            raise ValueError("no features: give at least one ordinal feature or set group")
        if not isinstance(classes, Mapping):
            raise ValueError(f"`classes` must be a mapping {{class: profile}}, got {type(classes).__name__}")
        if not classes:
            raise ValueError("`classes` is empty: give the profile of at least one class")

        problems: list[str] = []
        profiles: dict[str, dict[str, Any]] = {}
        for name, raw in classes.items():
            _check_name(name, "a class name (key of `classes`)")
            profiles[name] = self._check_profile(name, raw, problems)
        if problems:
            more = len(problems) - _MAX_PROBLEMS
            raise ValueError(
                "invalid feature profiles: "
                + "; ".join(problems[:_MAX_PROBLEMS])
                + (f"; ... and {more} more problem(s)" if more > 0 else "")
            )
        self._profiles = profiles
        self._classes: tuple[str, ...] = tuple(profiles)
        self._index = {name: i for i, name in enumerate(self._classes)}
        self._levels = torch.tensor(
            [[profiles[c][f] for f in self._ordinal] for c in self._classes], dtype=torch.long
        ).reshape(len(self._classes), len(self._ordinal))
        self._membership = {
            group: torch.tensor(
                [[value in profiles[c][group] for value in allowed] for c in self._classes], dtype=torch.bool
            ).reshape(len(self._classes), len(allowed))
            for group, allowed in self._sets.items()
        }

    @staticmethod
    def _check_ordinal(ordinal: Mapping[str, str] | Sequence[str]) -> dict[str, str]:
        if ordinal is None:
            return {}
        if isinstance(ordinal, Mapping):
            out = {}
            for name, description in ordinal.items():
                _check_name(name, "an ordinal feature name")
                if description is not None and not isinstance(description, str):
                    raise ValueError(
                        f"the description of ordinal feature {name!r} must be a string, got {description!r}"
                    )
                out[name] = description or ""
            return out
        if isinstance(ordinal, str) or not isinstance(ordinal, Sequence):
            raise ValueError(
                f"`ordinal` must be a mapping {{feature: description}} or a list of names, got {ordinal!r}"
            )
        names = [_check_name(n, "an ordinal feature name") for n in ordinal]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"ordinal feature(s) {_listing(repeated)} are listed more than once in `ordinal`")
        return dict.fromkeys(names, "")

    @staticmethod
    def _check_sets(sets: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
        if sets is None:
            return {}
        if not isinstance(sets, Mapping):
            raise ValueError(f"`sets` must be a mapping {{group: [allowed values]}}, got {type(sets).__name__}")
        out = {}
        for group, allowed in sets.items():
            _check_name(group, "a set group name")
            if isinstance(allowed, str) or not isinstance(allowed, Sequence) or not allowed:
                raise ValueError(
                    f"the allowed values of set group {group!r} must be a non-empty list of strings, got {allowed!r}"
                )
            values = [_check_name(v, f"an allowed value of set group {group!r}") for v in allowed]
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"set group {group!r} lists allowed value(s) {_listing(repeated)} more than once")
            out[group] = tuple(values)
        return out

    def _check_profile(self, name: str, raw: Any, problems: list[str]) -> dict[str, Any]:
        """The canonical profile of class ``name``; appends every problem found to ``problems``."""
        where = f"class {name!r}"
        if not isinstance(raw, Mapping):
            problems.append(f"{where}: the profile must be a mapping {{feature: value}}, got {raw!r}")
            return {}
        missing = [f for f in (*self._ordinal, *self._sets) if f not in raw]
        unknown = [f for f in raw if f not in self._descriptions and f not in self._sets]
        if missing:
            problems.append(f"{where}: missing feature(s) {_listing(missing)}")
        if unknown:
            problems.append(
                f"{where}: unknown feature(s) {_listing(unknown)} (known: {_listing((*self._ordinal, *self._sets))})"
            )
        profile: dict[str, Any] = {}
        for feature in self._ordinal:
            if feature not in raw:
                continue
            level = raw[feature]
            if not is_int(level):
                problems.append(
                    f"{where}, ordinal feature {feature!r}: level {level!r} ({type(level).__name__}) is not an int"
                )
            elif not 0 <= level <= self._ordinal_max:
                problems.append(
                    f"{where}, ordinal feature {feature!r}: level {level} is outside 0..{self._ordinal_max} "
                    "(ordinal_max)"
                )
            profile[feature] = level
        for group, allowed in self._sets.items():
            if group not in raw:
                continue
            values = raw[group]
            if values is None:
                values = []
            if isinstance(values, str) or not isinstance(values, Sequence):
                problems.append(
                    f"{where}, set group {group!r}: the value must be a list of allowed values, got {values!r}"
                )
                continue
            outside = [v for v in values if v not in allowed]
            repeated = sorted({v for v in values if v in allowed and list(values).count(v) > 1})
            if outside:
                problems.append(
                    f"{where}, set group {group!r}: value(s) {_listing(outside)} not in the allowed values "
                    f"{list(allowed)}"
                )
            if repeated:
                problems.append(f"{where}, set group {group!r}: value(s) {_listing(repeated)} repeated")
            profile[group] = [v for v in allowed if v in values]
        return profile

    # ------------------------------------------------------------------------------------------------------------
    # construction from data
    # ------------------------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureProfiles:
        """Build from the data format (see the module docstring): ``features``, ``classes``, optional ``ordinal_max``.

        Raises:
            ValueError: for missing or unknown keys, or invalid profiles.

        Examples:
            >>> data = {"features": {"sets": {"color": ["red", "blue"]}}, "classes": {"sky": {"color": ["blue"]}}}
            >>> FeatureProfiles.from_dict(data).profile("sky")
            {'color': ['blue']}
        """
        if not isinstance(data, Mapping):
            raise ValueError(
                f"profiles data must be a mapping {{features: ..., classes: ...}}, got {type(data).__name__}"
            )
        allowed_keys = ("features", "classes", "ordinal_max")
        missing = [k for k in ("features", "classes") if k not in data]
        unknown = [k for k in data if k not in allowed_keys]
        if missing or unknown:
            raise ValueError(
                "profiles data must have the keys 'features' and 'classes' (and optionally 'ordinal_max')"
                + (f"; missing {_listing(missing)}" if missing else "")
                + (f"; unknown {_listing(unknown)}" if unknown else "")
            )
        features = data["features"]
        if not isinstance(features, Mapping):
            raise ValueError(f"'features' must be a mapping {{ordinal: ..., sets: ...}}, got {type(features).__name__}")
        unknown = [k for k in features if k not in ("ordinal", "sets")]
        if unknown:
            raise ValueError(f"'features' has unknown key(s) {_listing(unknown)}; use 'ordinal' and 'sets'")
        return cls(
            data["classes"],
            ordinal=features.get("ordinal") or {},
            sets=features.get("sets") or {},
            ordinal_max=data.get("ordinal_max", 2),
        )

    def to_dict(self) -> dict[str, Any]:
        """The :meth:`from_dict` format, set values in allowed order (a fresh copy).

        Examples:
            >>> FeatureProfiles({"a": {"n": 1}}, ordinal={"n": "count"}, sets={}).to_dict()
            {'ordinal_max': 2, 'features': {'ordinal': {'n': 'count'}, 'sets': {}}, 'classes': {'a': {'n': 1}}}
        """
        return {
            "ordinal_max": self._ordinal_max,
            "features": {
                "ordinal": dict(self._descriptions),
                "sets": {group: list(allowed) for group, allowed in self._sets.items()},
            },
            "classes": {name: self.profile(name) for name in self._classes},
        }

    # ------------------------------------------------------------------------------------------------------------
    # names and lookups
    # ------------------------------------------------------------------------------------------------------------

    @property
    def classes(self) -> tuple[str, ...]:
        """The class names, in class order."""
        return self._classes

    @property
    def ordinal_features(self) -> tuple[str, ...]:
        """The ordinal feature names, in given order (the columns of :meth:`ordinal_matrix`)."""
        return self._ordinal

    @property
    def ordinal_descriptions(self) -> dict[str, str]:
        """``{ordinal feature: description}`` (a fresh copy)."""
        return dict(self._descriptions)

    @property
    def set_groups(self) -> dict[str, tuple[str, ...]]:
        """``{set group: allowed values}`` (a fresh dict; the columns of :meth:`set_membership`)."""
        return dict(self._sets)

    @property
    def ordinal_max(self) -> int:
        """``L``, the largest ordinal level."""
        return self._ordinal_max

    def ordinal_matrix(self) -> Tensor:
        """LongTensor ``[C, F]``: the level of each class (rows, class order) on each ordinal feature (columns).

        Examples:
            >>> FeatureProfiles({"a": {"x": 0, "y": 2}}, ordinal=["x", "y"], sets={}).ordinal_matrix()
            tensor([[0, 2]])
        """
        return self._levels.clone()

    def set_membership(self, group: str) -> Tensor:
        """Bool tensor ``[C, len(allowed)]``: ``M[c, j]`` true when class ``c`` has the ``j``-th allowed value of
        ``group``.

        Raises:
            ValueError: if ``group`` is not a set group.

        Examples:
            >>> p = FeatureProfiles({"a": {"g": ["v"]}, "b": {"g": []}}, ordinal=[], sets={"g": ["u", "v"]})
            >>> p.set_membership("g")
            tensor([[False,  True],
                    [False, False]])
        """
        if group not in self._membership:
            raise ValueError(f"unknown set group {group!r}; the set groups are {_listing(self._sets, 20)}")
        return self._membership[group].clone()

    def profile(self, name: str) -> dict[str, Any]:
        """The profile of class ``name``: ordinal features then set groups (a fresh copy).

        Raises:
            ValueError: if ``name`` is not a class.

        Examples:
            >>> FeatureProfiles({"a": {"x": 1, "g": ["v"]}}, ordinal=["x"], sets={"g": ["u", "v"]}).profile("a")
            {'x': 1, 'g': ['v']}
        """
        self.require_classes([name])
        return {k: list(v) if isinstance(v, list) else v for k, v in self._profiles[name].items()}

    def require_classes(self, names: Iterable[str]) -> Tensor:
        """Check that every name in ``names`` has a profile; return their row indices (LongTensor ``[len(names)]``).

        Raises:
            ValueError: naming the classes that have no profile.

        Examples:
            >>> p = FeatureProfiles({"a": {"x": 1}, "b": {"x": 0}}, ordinal=["x"], sets={})
            >>> p.require_classes(["b", "a"])
            tensor([1, 0])
            >>> p.require_classes(["a", "zebra"])
            Traceback (most recent call last):
            ...
            ValueError: the feature profiles have no class 'zebra' (1 of 2 name(s) given); profiled classes: 'a', 'b'
        """
        if isinstance(names, str):
            raise ValueError(f"`names` must be a sequence of class names, got the string {names!r}")
        names = list(names)
        out = [self._index.get(n, -1) if isinstance(n, str) else -1 for n in names]
        if -1 in out:
            unknown = list(dict.fromkeys(n for n, i in zip(names, out, strict=True) if i == -1))
            raise ValueError(
                f"the feature profiles have no class {_listing(unknown)} ({len(unknown)} of {len(names)} name(s) "
                f"given); profiled classes: {_listing(self._classes)}"
            )
        return torch.tensor(out, dtype=torch.long)

    def __len__(self) -> int:
        return len(self._classes)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FeatureProfiles):
            return NotImplemented
        return (
            self._classes == other._classes
            and self._ordinal == other._ordinal
            and tuple(self._sets.items()) == tuple(other._sets.items())
            and self.to_dict() == other.to_dict()
        )

    __hash__ = None  # type: ignore[assignment]  # equal objects would need equal hashes of nested dicts

    def __repr__(self) -> str:
        return (
            f"FeatureProfiles(classes={len(self)}, ordinal_features={len(self._ordinal)}, "
            f"set_groups={len(self._sets)}, ordinal_max={self._ordinal_max})"
        )
