"""Terminal output shared by the reporting tables (internal: not part of the public API)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def print_fitting(console: Console, table: Any, needed: int) -> None:
    """Print ``table``; when it cannot fit the console, print it at its full width, uncropped."""
    if needed > console.width:
        table.width = needed
        console.print(table, crop=False)
    else:
        console.print(table)
