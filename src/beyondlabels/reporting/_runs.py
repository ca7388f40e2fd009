"""The evaluations of a folder as the reports read them: every history found, an unreadable one set aside with its
error rather than ending the report (internal to ``reporting``)."""

from __future__ import annotations

import os
from pathlib import Path

from beyondlabels.io.run_files import EvaluationRun, find_evaluation_runs, read_evaluation_run


def read_folder_runs(folder: str | os.PathLike[str]) -> tuple[list[EvaluationRun], list[tuple[Path, Exception]]]:
    """Every evaluation history below ``folder`` (:func:`~beyondlabels.io.run_files.find_evaluation_runs`) read,
    in order, and ``(history file, error)`` of each one that could not be read (an ``OSError`` or ``ValueError``).

    Raises:
        FileNotFoundError: when ``folder`` holds no evaluation history.
    """
    runs: list[EvaluationRun] = []
    unread: list[tuple[Path, Exception]] = []
    for file in find_evaluation_runs(folder):
        try:
            runs.append(read_evaluation_run(file))
        except (OSError, ValueError) as exc:
            unread.append((file, exc))
    return runs, unread
