"""Feature-profile files: YAML (``.yaml``/``.yml``) or JSON (``.json``) in the format of
:meth:`~beyondlabels.profiles.FeatureProfiles.from_dict` (keys ``features``, ``classes``, optional ``ordinal_max``).

The suffix selects the parser; errors name the file; a key repeated in the file (a class listed twice) is an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from beyondlabels.io._mappings import read_mapping
from beyondlabels.profiles import FeatureProfiles

__all__ = ["load_profiles", "read_profiles"]


def read_profiles(path: str | os.PathLike[str]) -> FeatureProfiles:
    """:class:`FeatureProfiles` from a YAML or JSON file (format: the module docstring).

    Raises:
        ValueError: naming the file, for an unsupported suffix, a parse error, a key repeated in the file or invalid
            profiles.
        FileNotFoundError: if the file does not exist.

    Examples:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     file = pathlib.Path(tmp, "profiles.yaml")
        ...     _ = file.write_text("features: {ordinal: {size: big}}\\nclasses: {a: {size: 0}, b: {size: 2}}\\n")
        ...     read_profiles(file).classes
        ('a', 'b')
    """
    data = read_mapping(path, "profiles")
    try:
        return FeatureProfiles.from_dict(data)
    except ValueError as err:
        raise ValueError(f"profiles file '{path}': {err}") from err


def load_profiles(source: FeatureProfiles | Mapping[str, Any] | str | os.PathLike[str]) -> FeatureProfiles:
    """:class:`FeatureProfiles` from a file path, a mapping in the profiles format, or FeatureProfiles (returned as is).

    Raises:
        ValueError: if ``source`` is none of these, or the data is invalid.

    Examples:
        >>> load_profiles({"features": {"ordinal": {"size": "0 small, 2 big"}}, "classes": {"ant": {"size": 0}}})
        FeatureProfiles(classes=1, ordinal_features=1, set_groups=0, ordinal_max=2)
    """
    if isinstance(source, FeatureProfiles):
        return source
    if isinstance(source, Mapping):
        return FeatureProfiles.from_dict(source)
    if isinstance(source, (str, os.PathLike)):
        return read_profiles(source)
    raise ValueError(
        f"`source` must be FeatureProfiles, a mapping in the profiles format or a file path, "
        f"got {type(source).__name__}"
    )
