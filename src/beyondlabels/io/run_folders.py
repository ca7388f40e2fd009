"""A training run's folder read whole, for reports: every evaluation family's history and schema, the PNGs it wrote,
its media manifest, and the run's Hydra config; a Hydra multirun folder as its jobs.

A *run folder* (``logs/train/runs/<date>/``) holds ``.hydra/`` (``config.yaml``, ``overrides.yaml``) and one folder
per evaluation callback (``retrieval/``, ``hierarchy/``, ...: see :mod:`beyondlabels.io.run_files`); the run of a
Trainer of one's own, without Hydra, is its ``default_root_dir``, which holds the callbacks' folders alone. A family
folder may hold PNGs (``confidence_intervals.png``; a series ``embedding_projection/step_000000384.png``, of which the
last is read) and ``media/media.json``, the media of the family's last evaluation::

    {"format": 1, "prefix": "retrieval", "step": 384, "epoch": 7,
     "figures": [{"name": "embedding_projection", "file": "embedding_projection.png", "caption": "..."}],
     "tables":  [{"name": "worst_mismatches", "columns": ["query_image", "query_label"],
                  "rows": [[{"image": "tables/worst_mismatches/r000_query_image.png"}, "circle"]]}],
     "curves":  [{"name": "precision_curve", "xname": "k", "x": [1, 2], "y": [0.9, 0.85]}]}

Paths are relative to ``media/``; a table cell is a JSON scalar, null or ``{"image": path}`` (a PNG). A *multirun
folder* holds Hydra's ``multirun.yaml`` and numbered job folders ``0/``, ``1/``, ...

Reading never fails on a broken family: what is missing or malformed is listed in ``problems`` (the history
unreadable, no schema, a manifest entry naming a missing file, ...) and the rest is read.

Nothing outside the folder given is read (:func:`beyondlabels.io.paths.inside`): a file, a family's ``media/`` or a
job folder that is a symbolic link out of it, a manifest entry with ``..`` or an absolute path, is a problem and is
not read. A PNG is read only up to :data:`MAX_PNG_BYTES` and :data:`MAX_PNG_PIXELS`, a config text up to
:data:`MAX_TEXT_BYTES` (longer ones are cut, and say so).

Examples:
    >>> import json, tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> (run / "retrieval").mkdir()
    >>> _ = (run / "retrieval" / "history.jsonl").write_text(json.dumps({"step": 8, "epoch": 0, "map@r": 0.5}) + "\\n")
    >>> folder = read_run_folder(run)
    >>> [(f.prefix, f.run.final(), f.problems) for f in folder.families]
    [('retrieval', {'map@r': 0.5}, ['retrieval/schema.json is missing: the directions of the values are unknown'])]
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beyondlabels._internal.files import open_file, read_file
from beyondlabels._internal.parse import read_json
from beyondlabels.io.paths import inside, is_inside
from beyondlabels.io.run_files import (
    HISTORY_FILE,
    LEGACY_HISTORY_FILE,
    SCHEMA_FILE,
    EvaluationRun,
    read_evaluation_run,
    run_overrides,
)

__all__ = [
    "MANIFEST_FILE",
    "MEDIA_FOLDER",
    "FamilyFolder",
    "MediaCurve",
    "MediaFigure",
    "MediaImage",
    "MediaManifest",
    "MediaTable",
    "MultirunFolder",
    "RunFolder",
    "is_multirun_folder",
    "is_run_folder",
    "read_png",
    "read_media_manifest",
    "read_multirun_folder",
    "read_run_folder",
]

log = logging.getLogger(__name__)

MEDIA_FOLDER = "media"
MANIFEST_FILE = "media.json"
MANIFEST_FORMAT = 1
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PNG_BYTES = 32 << 20  # a PNG is embedded up to 32 MiB of file (the project's own are below 1 MiB)
MAX_PNG_PIXELS = 40_000_000  # and 40 megapixels (160 MB decoded as RGBA)
MAX_TEXT_BYTES = 1 << 20  # a config text is shown up to 1 MiB
MAX_MANIFEST_BYTES = 64 << 20  # a media manifest is read up to 64 MiB (the project's own are a few KiB)
# Folders of a run folder that are not evaluation families.
_NOT_FAMILIES = frozenset({"csv", "checkpoints", "wandb", "tensorboard", "mlruns", "per_query"})
_STEP_FILE = re.compile(r"step_(\d+)\.png$")


@dataclass
class MediaImage:
    """A PNG named by a manifest: ``path`` inside the media folder, or None when the file is missing (then
    ``missing`` holds the name the manifest gave)."""

    path: Path | None
    missing: str = ""


@dataclass
class MediaFigure:
    name: str
    image: MediaImage
    caption: str = ""


@dataclass
class MediaTable:
    """A table of the last evaluation: each cell is a JSON scalar, None or a :class:`MediaImage`."""

    name: str
    columns: list[str]
    rows: list[list[Any]]


@dataclass
class MediaCurve:
    name: str
    xname: str
    x: list[float]
    y: list[float]


@dataclass
class MediaManifest:
    """``media/media.json`` of a family folder: the media of its last evaluation."""

    path: Path
    prefix: str
    step: int | None
    epoch: int | None
    figures: list[MediaFigure] = field(default_factory=list)
    tables: list[MediaTable] = field(default_factory=list)
    curves: list[MediaCurve] = field(default_factory=list)


@dataclass
class FamilyFolder:
    """One evaluation callback's folder.

    Attributes:
        prefix: The folder's name (what its keys are logged under).
        path: The folder.
        run: Its evaluations (None when the history is missing or unreadable).
        images: ``(label, path)`` of the PNGs in the folder, and of the last file of each ``<name>/step_*.png`` series
            (label ``"<name> (step N)"``), in name order; the media folder's files are in ``manifest``.
        manifest: The media manifest, None when there is none (or it is unreadable: see ``problems``).
        problems: What is missing or malformed, one sentence each.
    """

    prefix: str
    path: Path
    run: EvaluationRun | None = None
    images: list[tuple[str, Path]] = field(default_factory=list)
    manifest: MediaManifest | None = None
    problems: list[str] = field(default_factory=list)


@dataclass
class RunFolder:
    """A training run's folder: its Hydra config and overrides and its evaluation families.

    Attributes:
        path: The folder.
        name: Its name (a multirun job's number).
        overrides: The Hydra overrides (``.hydra/overrides.yaml``).
        config: The text of ``.hydra/config.yaml`` (None when there is none).
        families: One per evaluation folder, in name order.
        problems: What is missing at the run level.
    """

    path: Path
    name: str
    overrides: list[str] = field(default_factory=list)
    config: str | None = None
    families: list[FamilyFolder] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class MultirunFolder:
    """A Hydra multirun folder: ``multirun.yaml`` (its text in ``config``) and its numbered jobs in numeric order;
    ``problems``: job folders not read (a symbolic link out of the folder)."""

    path: Path
    config: str | None
    jobs: list[RunFolder] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _is_family_folder(folder: Path) -> bool:
    if folder.name.startswith(".") or folder.name in _NOT_FAMILIES or folder.is_symlink():
        return False
    names = (HISTORY_FILE, LEGACY_HISTORY_FILE, SCHEMA_FILE, MEDIA_FOLDER)
    return any((folder / name).exists() for name in names)


def _job_folders(folder: Path, problems: list[str] | None = None) -> list[Path]:
    jobs = []
    for p in folder.iterdir():
        if not (p.name.isdigit() and p.is_dir()):
            continue
        if is_inside(folder, p.name):
            jobs.append(p)
        elif problems is not None:
            problems.append(f"job folder {p.name}/ is a symbolic link out of {folder}: not read")
    return sorted(jobs, key=lambda p: int(p.name))


def _linked_folders(folder: Path) -> list[str]:
    """A problem for each sub-folder of a run folder that is a symbolic link and would be an evaluation family (not a
    hidden one, nor ``checkpoints/``, ``wandb/``, ...: a scratch disk linked in is common): it is not read."""
    problems = []
    for entry in sorted(folder.iterdir()):
        if entry.is_symlink() and entry.is_dir() and not entry.name.startswith(".") and entry.name not in _NOT_FAMILIES:
            where = "out of the run folder" if not is_inside(folder, entry.name) else "within the run folder"
            problems.append(
                f"{entry.name}/ is a symbolic link ({where}): an evaluation folder is read only where it is, not read"
            )
    return problems


def is_multirun_folder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a Hydra multirun folder: it holds ``multirun.yaml`` and numbered job folders."""
    folder = Path(path)
    return (folder / "multirun.yaml").is_file() and bool(_job_folders(folder))


def is_run_folder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a run folder: it holds ``.hydra/`` or at least one evaluation family's folder."""
    folder = Path(path)
    if not folder.is_dir():
        return False
    return (folder / ".hydra").is_dir() or any(_is_family_folder(p) for p in folder.iterdir() if p.is_dir())


def _read_text(folder: Path, relative: str) -> str | None:
    """The text of ``folder / relative`` (undecodable bytes replaced, cut at :data:`MAX_TEXT_BYTES`); None when it
    is missing, unreadable, not a regular file (a named pipe never blocks it) or leads out of ``folder``."""
    try:
        with open_file(inside(folder, relative), relative, max_bytes=None) as handle:
            data = handle.read(MAX_TEXT_BYTES + 1)
    except (OSError, ValueError):
        return None
    text = data[:MAX_TEXT_BYTES].decode("utf-8", errors="replace").removeprefix("\ufeff")
    return text + (f"\n... (cut at {MAX_TEXT_BYTES} bytes)" if len(data) > MAX_TEXT_BYTES else "")


def read_run_folder(path: str | os.PathLike[str]) -> RunFolder:
    """Read a run folder (see the module's description); a broken family is read as far as it goes.

    Raises:
        FileNotFoundError: if ``path`` is not a folder.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder; expected a run folder (logs/train/runs/<date>/)")
    run = RunFolder(path=folder, name=folder.name or str(folder), overrides=run_overrides(folder))
    run.config = _read_text(folder, ".hydra/config.yaml")
    if run.config is None and (folder / ".hydra").exists():  # a Trainer's own run (no Hydra) has no config to show
        run.problems.append(
            ".hydra/config.yaml is missing, unreadable or outside the folder: the run's config is not shown"
        )
    run.families = [read_family_folder(p) for p in sorted(folder.iterdir()) if p.is_dir() and _is_family_folder(p)]
    run.problems.extend(_linked_folders(folder))
    if not run.families:
        run.problems.append(
            "no evaluation folder (a folder with history.jsonl, schema.json or media/): nothing was evaluated"
        )
    return run


def read_multirun_folder(path: str | os.PathLike[str]) -> MultirunFolder:
    """Read a multirun folder and each of its job folders (:func:`read_run_folder`).

    Raises:
        FileNotFoundError: if ``path`` is not a multirun folder (no ``multirun.yaml`` or no numbered job folder).
    """
    folder = Path(path)
    if not is_multirun_folder(folder):
        raise FileNotFoundError(
            f"{folder} is not a Hydra multirun folder (multirun.yaml and numbered job folders 0/, 1/, ...)"
        )
    problems: list[str] = []
    jobs = [read_run_folder(p) for p in _job_folders(folder, problems)]
    return MultirunFolder(path=folder, config=_read_text(folder, "multirun.yaml"), jobs=jobs, problems=problems)


def read_family_folder(path: str | os.PathLike[str]) -> FamilyFolder:
    """Read one evaluation family's folder: history, schema, PNGs and media manifest (see :class:`FamilyFolder`)."""
    folder = Path(path)
    family = FamilyFolder(prefix=folder.name, path=folder)
    has_history = any((folder / name).is_file() for name in (HISTORY_FILE, LEGACY_HISTORY_FILE))
    if not has_history:
        family.problems.append(f"{folder.name}/{HISTORY_FILE} is missing: no values to show")
    else:
        try:
            family.run = read_evaluation_run(folder)
        except (OSError, ValueError) as exc:
            family.problems.append(f"{folder.name}/{HISTORY_FILE} is unreadable: {exc}")
        else:
            if family.run.schema is None:
                family.problems.append(
                    f"{folder.name}/{SCHEMA_FILE} is missing: the directions of the values are unknown"
                )
            if not family.run.records:
                family.problems.append(f"{folder.name}: no successful evaluation in the history")
    family.images = _family_images(folder, family.problems)
    if (folder / MEDIA_FOLDER / MANIFEST_FILE).exists() or (folder / MEDIA_FOLDER).is_symlink():
        try:
            inside(folder, f"{MEDIA_FOLDER}/{MANIFEST_FILE}", f"{folder.name}/{MEDIA_FOLDER}/{MANIFEST_FILE}")
            family.manifest = read_media_manifest(folder / MEDIA_FOLDER, family.problems)
        except ValueError as exc:
            family.problems.append(f"{exc}; not read")
    return family


def _family_images(folder: Path, problems: list[str]) -> list[tuple[str, Path]]:
    """The folder's PNGs and the last PNG of each ``<name>/step_*.png`` series; one that leads out of the folder (a
    symbolic link) is a problem, not an image."""
    images: list[tuple[str, Path]] = []

    def keep(relative: str, label: str) -> None:
        try:
            images.append((label, inside(folder, relative, f"{folder.name}/{relative}")))
        except ValueError as exc:
            problems.append(f"{exc}; not shown")

    for entry in sorted(folder.iterdir()):
        if entry.suffix.lower() == ".png" and entry.is_file():
            keep(entry.name, entry.stem)
        elif entry.is_dir() and entry.name not in (MEDIA_FOLDER, "per_query") and not entry.is_symlink():
            series = sorted((int(m.group(1)), p) for p in entry.glob("step_*.png") if (m := _STEP_FILE.search(p.name)))
            if series:
                step, last = series[-1]
                keep(f"{entry.name}/{last.name}", f"{entry.name} (step {step})")
    return images


def _media_image(media: Path, name: Any, where: str, problems: list[str]) -> MediaImage:
    """The file a manifest names, kept inside ``media``; a missing file is a problem, not an error."""
    try:
        file = inside(media, name, f"{where}: the file")
    except ValueError as exc:
        problems.append(f"{exc}; not shown")
        return MediaImage(None, str(name)[:200])
    if not file.is_file():
        problems.append(f"{where}: {media.name}/{name} is missing")
        return MediaImage(None, name)
    return MediaImage(file)


def _entries(data: dict[str, Any], key: str, file: Path) -> list[dict[str, Any]]:
    entries = data.get(key, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{file}: malformed media manifest: {key!r} must be a list of objects")
    return entries


def read_media_manifest(media: str | os.PathLike[str], problems: list[str] | None = None) -> MediaManifest:
    """Read ``<media>/media.json`` (the format in the module's description).

    Args:
        media: The family's ``media/`` folder.
        problems: Where entries that name a missing or outside file are reported (the entry is kept, its image
            ``path`` None); a figure or table without a name, a table whose rows do not match its columns, or a curve
            whose ``x`` and ``y`` differ in length is reported there and left out.

    Raises:
        ValueError: if the manifest is not valid JSON, not an object of format 1, or one of its lists is not a list of
            objects (the message names the file).
    """
    media = Path(media)
    problems = [] if problems is None else problems
    file = media / MANIFEST_FILE
    where = f"{media.parent.name}/{MEDIA_FOLDER}/{MANIFEST_FILE}"
    try:
        data = read_json(inside(media, MANIFEST_FILE, where), f"{where} is unreadable", max_bytes=MAX_MANIFEST_BYTES)
    except OSError as exc:
        raise ValueError(f"{where} is unreadable: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: not a media manifest of format {MANIFEST_FORMAT} (got {got!r})")
    step, epoch = data.get("step"), data.get("epoch")
    manifest = MediaManifest(
        path=file,
        prefix=str(data.get("prefix", media.parent.name)),
        step=step if isinstance(step, int) else None,
        epoch=epoch if isinstance(epoch, int) else None,
    )
    for entry in _entries(data, "figures", file):
        name = entry.get("name")
        if not isinstance(name, str):
            problems.append(f"{where}: a figure without a name is left out")
            continue
        image = _media_image(media, entry.get("file"), f"{where}, figure {name!r}", problems)
        manifest.figures.append(MediaFigure(name, image, str(entry.get("caption") or "")))
    for entry in _entries(data, "tables", file):
        name, columns, rows = entry.get("name"), entry.get("columns"), entry.get("rows")
        if not isinstance(name, str) or not isinstance(columns, list) or not isinstance(rows, list):
            problems.append(f"{where}: table {name!r} needs a name, columns and rows; left out")
            continue
        if not all(isinstance(row, list) and len(row) == len(columns) for row in rows):
            problems.append(
                f"{where}: table {name!r} has a row whose length is not that of its {len(columns)} columns; left out"
            )
            continue
        table_rows = []
        for r, row in enumerate(rows):
            cells = []
            for c, cell in enumerate(row):
                if isinstance(cell, dict):
                    cell = _media_image(
                        media, cell.get("image"), f"{where}, table {name!r} row {r} column {columns[c]!r}", problems
                    )
                cells.append(cell)
            table_rows.append(cells)
        manifest.tables.append(MediaTable(name, [str(c) for c in columns], table_rows))
    for entry in _entries(data, "curves", file):
        name, x, y = entry.get("name"), entry.get("x"), entry.get("y")
        numbers = isinstance(x, list) and isinstance(y, list) and all(isinstance(v, (int, float)) for v in [*x, *y])
        if not isinstance(name, str) or not numbers or len(x) != len(y):
            problems.append(f"{where}: curve {name!r} needs a name and numeric x and y of one length; left out")
            continue
        manifest.curves.append(
            MediaCurve(name, str(entry.get("xname") or "x"), [float(v) for v in x], [float(v) for v in y])
        )
    return manifest


def read_png(path: str | os.PathLike[str], max_bytes: int = MAX_PNG_BYTES, max_pixels: int = MAX_PNG_PIXELS) -> bytes:
    """The bytes of a PNG file, checked to decode (Pillow, when installed; else the PNG signature), of at most
    ``max_bytes`` bytes and ``max_pixels`` pixels (checked before decoding).

    Raises:
        ValueError: if the file is unreadable, larger than the bounds, or not a whole PNG (the message names the file).
    """
    path = Path(path)
    try:
        data = read_file(path, "the picture", max_bytes)
    except OSError as exc:
        raise ValueError(f"{path} is unreadable: {exc}") from exc
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError(f"{path} is not a PNG (no PNG signature)")
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with matplotlib
        return data
    import io
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the bound below is ours
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                if width * height <= max_pixels:
                    image.load()
    except Exception as exc:  # Pillow raises OSError, SyntaxError, DecompressionBombError, ... for broken files
        raise ValueError(f"{path} is not a whole PNG: {exc}") from exc
    if width * height > max_pixels:
        raise ValueError(f"{path} has {width}x{height} pixels, more than the {max_pixels} a picture may have here")
    return data
