"""Charts whose labels come from data: text drawn as text (internal: shared by the figures of ``reporting`` and of
the callbacks' media, not part of the public API).

Matplotlib reads a label with two ``$`` as mathtext (a class named ``$\\sqrt{...}$`` nested 60 deep is a
``RecursionError`` when the figure is drawn), and with ``text.usetex`` in a user's matplotlibrc it sends every label
to TeX. Every function that draws a figure from names, keys, captions or class names of a file runs under
:func:`plain_text`: matplotlib's ``text.parse_math`` and ``text.usetex`` are off while it builds *and* renders the
figure (tick labels are made at render time), so a ``$`` is a dollar sign, and the user's settings are back as they
were when it returns.

Examples:
    >>> import matplotlib
    >>> @plain_text
    ... def parses() -> bool:
    ...     return matplotlib.rcParams["text.parse_math"]
    >>> parses(), matplotlib.rcParams["text.parse_math"]
    (False, True)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["PLAIN_TEXT", "plain_text"]

PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}

F = TypeVar("F", bound=Callable[..., Any])


def plain_text(function: F) -> F:
    """Run ``function`` with matplotlib's mathtext and TeX off (:data:`PLAIN_TEXT`, restored afterwards)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import matplotlib

        with matplotlib.rc_context(PLAIN_TEXT):
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
