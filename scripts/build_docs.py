"""Build the API reference (mkdocs + mkdocstrings) with warnings as errors: ``python scripts/build_docs.py [DIR]``.

The installed package maps the top-level ``callbacks/`` folder into ``beyondlabels.callbacks``; mkdocstrings reads
source trees, so the package is first laid out as installed under ``build/api_src/beyondlabels`` (links to
``src/beyondlabels/*`` and ``callbacks/``). The site goes to DIR (default ``site/``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lay_out_package(root: Path = ROOT) -> Path:
    """``build/api_src/beyondlabels``: links to every entry of ``src/beyondlabels`` and to ``callbacks/``."""
    package = root / "build" / "api_src" / "beyondlabels"
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for entry in sorted((root / "src" / "beyondlabels").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "callbacks").symlink_to(root / "callbacks")
    return package


def build(site_dir: Path, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``mkdocs build --strict`` into ``site_dir``; the completed process (its output holds every warning)."""
    lay_out_package(root)
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(root / "mkdocs.yml")]
    return subprocess.run(
        [*command, "--site-dir", str(site_dir)], cwd=root, capture_output=True, text=True, check=False
    )


def main(argv: list[str]) -> int:
    site_dir = Path(argv[0]).resolve() if argv else ROOT / "site"
    result = build(site_dir)
    sys.stderr.write(result.stdout + result.stderr)
    if result.returncode == 0:
        print(f"API reference: {site_dir / 'index.html'}")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
