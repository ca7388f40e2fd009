"""The HTML report of a run folder or a multirun (beyondlabels.reporting.html_report), read back as a person and a
browser would: the HTML parsed with html.parser, the values compared with the history read by json, every picture
decoded by Pillow, and the page opened in headless Chromium."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from beyondlabels.reporting.html_report import write_report

EVIL = '<script>alert("x")</script>&amp;'
KEYS = ["precision@1", "precision@5", "map@r"]


class _Page(HTMLParser):
    """Elements and text of an HTML document: every start tag with its attributes, in order, and the text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self._cell: dict[str, str] | None = None
        self.cells: list[tuple[dict[str, str], str]] = []  # (attributes of a <td>, its text)
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attributes = {k: v or "" for k, v in attrs}
        self.tags.append((tag, attributes))
        if tag == "td":
            self._cell = attributes
            self.cells.append((attributes, ""))

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            attributes, text = self.cells[-1]
            self.cells[-1] = (attributes, text + data)

    def images(self) -> list[bytes]:
        out = []
        for tag, attributes in self.tags:
            if tag == "img":
                src = attributes["src"]
                assert src.startswith("data:image/png;base64,"), src[:60]
                out.append(base64.b64decode(src.split(",", 1)[1], validate=True))
        return out


def _png(path: Path, color: tuple[int, int, int], size: tuple[int, int] = (24, 16)) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", size, color)
    image.putpixel((1, 1), (255 - color[0], 255 - color[1], 255 - color[2]))
    image.save(path, format="PNG")
    return path.read_bytes()


def _history(folder: Path, seed: int, steps=(10, 20, 30), failed_last: bool = True) -> list[dict]:
    rng = np.random.default_rng(seed)
    records = []
    for step in steps:
        record = {"step": step, "epoch": step // 10}
        for key in KEYS:
            value = float(rng.uniform(0.2, 0.8))
            record[key] = value
            record[f"{key}_ci_low"] = value - float(rng.uniform(0.01, 0.1))
            record[f"{key}_ci_high"] = value + float(rng.uniform(0.01, 0.1))
        record["num_queries"] = 64
        records.append(record)
    lines = [json.dumps(r) for r in records]
    if failed_last:
        lines.append(json.dumps({"step": steps[-1] + 10, "epoch": 9, "error": "RuntimeError: out of memory"}))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "history.jsonl").write_text("\n".join(lines) + "\n")
    spec = {"kind": "scalar", "higher_is_better": True, "count": False}
    schema = {k: spec for key in KEYS for k in (key, f"{key}_ci_low", f"{key}_ci_high")}
    schema["num_queries"] = {"kind": "scalar", "higher_is_better": None, "count": True}
    per_query = {key: {"kind": "per_query", "higher_is_better": True, "count": False} for key in KEYS}
    (folder / "schema.json").write_text(json.dumps({"keys": schema, "per_query": per_query}))
    return records


def _manifest(family: Path) -> dict[str, bytes]:
    """A media manifest written by hand as the contract says (tables with image cells, figures, curves); returns
    the bytes of each PNG it names, by its path relative to media/."""
    media = family / "media"
    files = {
        "embedding_projection.png": _png(media / "embedding_projection.png", (20, 120, 200), (40, 30)),
        "tables/worst_mismatches/r000_query_image.png": _png(
            media / "tables/worst_mismatches/r000_query_image.png", (200, 30, 30)
        ),
        "tables/worst_mismatches/r000_retrieved_image.png": _png(
            media / "tables/worst_mismatches/r000_retrieved_image.png", (30, 200, 30)
        ),
        "tables/worst_mismatches/r001_query_image.png": _png(
            media / "tables/worst_mismatches/r001_query_image.png", (30, 30, 200)
        ),
    }
    manifest = {
        "format": 1,
        "prefix": family.name,
        "step": 30,
        "epoch": 3,
        "figures": [{"name": "embedding_projection", "file": "embedding_projection.png", "caption": f"PCA {EVIL}"}],
        "tables": [
            {
                "name": "worst_mismatches",
                "columns": ["query_image", "query_label", "retrieved_image", "similarity"],
                "rows": [
                    [
                        {"image": "tables/worst_mismatches/r000_query_image.png"},
                        "circle",
                        {"image": "tables/worst_mismatches/r000_retrieved_image.png"},
                        0.25,
                    ],
                    [{"image": "tables/worst_mismatches/r001_query_image.png"}, EVIL, None, 3],
                ],
            },
            {
                "name": "confusion_matrix",
                "columns": ["true", "circle", "star"],
                "rows": [["circle", 5, 1], ["star", 0, 6]],
            },
        ],
        "curves": [{"name": "precision_curve", "xname": "k", "x": [1, 2, 3], "y": [0.9, 0.85, 0.8]}],
    }
    (media / "media.json").write_text(json.dumps(manifest), encoding="utf-8")
    return files


def _run(root: Path, seed: int = 0, overrides=("model.lr=0.001",)) -> dict:
    """A run folder as train.py leaves it: .hydra/, a retrieval family with PNGs and no media/ (what the callbacks
    write today), a hierarchy family with a media manifest."""
    (root / ".hydra").mkdir(parents=True)
    (root / ".hydra" / "config.yaml").write_text(f"seed: {seed}\ntags:\n- '{EVIL}'\n")
    (root / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides) + f"- 'tags=[{EVIL}]'\n")
    retrieval = _history(root / "retrieval", seed)
    files = {
        "confidence_intervals": _png(root / "retrieval" / "confidence_intervals.png", (250, 200, 10)),
        "projection_old": _png(root / "retrieval" / "embedding_projection" / "step_000000010.png", (1, 2, 3)),
        "projection_last": _png(root / "retrieval" / "embedding_projection" / "step_000000030.png", (90, 10, 160)),
    }
    hierarchy = _history(root / "hierarchy", seed + 100, failed_last=False)
    media = _manifest(root / "hierarchy")
    (root / "csv").mkdir()
    (root / "csv" / "metrics.csv").write_text("step\n")
    return {"retrieval": retrieval, "hierarchy": hierarchy, "files": files, "media": media}


def _report(tmp_path: Path, *runs: Path) -> tuple[str, _Page]:
    output = write_report(list(runs), tmp_path / "out" / "report.html")
    text = output.read_text(encoding="utf-8")
    return text, _Page(text)


def test_pictures_are_inline_pngs_and_nothing_is_fetched(tmp_path: Path):
    made = _run(tmp_path / "run")
    text, page = _report(tmp_path, tmp_path / "run")
    images = page.images()
    for data in images:
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "PNG"
            image.load()
    inlined = set(images)
    assert made["files"]["confidence_intervals"] in inlined
    assert made["files"]["projection_last"] in inlined and made["files"]["projection_old"] not in inlined
    assert set(made["media"].values()) <= inlined, "every figure and thumbnail of the manifest is shown"
    # no reference leaves the file: no URL anywhere, no external stylesheet, script or frame
    assert not re.search(r"https?://", text)
    assert "url(" not in text and "@import" not in text
    for tag, attributes in page.tags:
        assert tag not in ("link", "iframe", "object", "embed")
        for name in ("src", "href"):
            if name in attributes:
                assert attributes[name].startswith(("data:image/png;base64,", "#")), (tag, attributes[name][:60])
        if tag == "script":
            assert "src" not in attributes
    ids = {a["id"] for _, a in page.tags if "id" in a}
    links = [a["href"][1:] for tag, a in page.tags if tag == "a"]
    assert links and set(links) <= ids, "every link goes to a section of the page"


def test_values_are_the_last_successful_evaluation_with_its_interval(tmp_path: Path):
    _run(tmp_path / "run", seed=4)
    text, _ = _report(tmp_path, tmp_path / "run")
    for prefix in ("retrieval", "hierarchy"):
        lines = (tmp_path / "run" / prefix / "history.jsonl").read_text().splitlines()
        last = [r for r in map(json.loads, lines) if "error" not in r][-1]
        assert text.count(f'data-prefix="{prefix}"') == 1
        start = text.index(f'data-prefix="{prefix}"')
        table = _Page(text[start : text.index("</table>", start)])
        cells = {a["data-key"]: (a, t) for a, t in table.cells if "data-key" in a}
        assert list(cells) == [*KEYS, "num_queries"]
        for key in KEYS:
            attributes, cell_text = cells[key]
            low, high = last[f"{key}_ci_low"], last[f"{key}_ci_high"]
            assert (float(attributes["data-value"]), float(attributes["data-low"]), float(attributes["data-high"])) == (
                last[key],
                low,
                high,
            )
            assert cell_text == f"{last[key]:.4f} [{low:.4f}, {high:.4f}]"
        assert cells["num_queries"][1] == "64"  # a count, no interval


def test_text_from_the_folders_is_escaped(tmp_path: Path):
    _run(tmp_path / "run")
    text, page = _report(tmp_path, tmp_path / "run")
    scripts = [a for tag, a in page.tags if tag == "script"]
    assert len(scripts) == 1, "only the page's own render check is a script"
    assert EVIL not in text and "<script>alert" not in text
    words = "".join(page.text)
    assert words.count('alert("x")') >= 4  # the config, the overrides, a table cell and a caption, shown as text
    assert EVIL in words


def test_manifest_tables_show_their_thumbnails_and_values(tmp_path: Path):
    made = _run(tmp_path / "run")
    text, page = _report(tmp_path, tmp_path / "run")
    names = [a["data-name"] for tag, a in page.tags if tag == "table" and "data-name" in a]
    assert names == ["worst_mismatches", "confusion_matrix"]
    start = text.index('data-name="worst_mismatches"')
    rows = _Page(text[start : text.index("</table>", start)])
    thumbnails = rows.images()
    media = made["media"]
    assert thumbnails == [
        media["tables/worst_mismatches/r000_query_image.png"],
        media["tables/worst_mismatches/r000_retrieved_image.png"],
        media["tables/worst_mismatches/r001_query_image.png"],
    ]
    cell_texts = [t for _, t in rows.cells]
    assert cell_texts == ["", "circle", "", "0.2500", "", EVIL, "—", "3"]
    start = text.index('data-name="confusion_matrix"')
    matrix = _Page(text[start : text.index("</table>", start)])
    assert [t for _, t in matrix.cells] == ["circle", "5", "1", "star", "0", "6"]


def test_a_broken_run_folder_still_gives_a_report_that_says_what_is_missing(tmp_path: Path):
    made = _run(tmp_path / "run")
    run = tmp_path / "run"
    (run / ".hydra" / "config.yaml").unlink()
    (run / "retrieval" / "confidence_intervals.png").write_bytes(
        made["files"]["confidence_intervals"][:40]
    )  # cut short
    (run / "hierarchy" / "media" / "tables" / "worst_mismatches" / "r000_retrieved_image.png").unlink()
    (run / "zeroshot").mkdir()
    (run / "zeroshot" / "history.jsonl").write_text('{"step": 1\n{"step": 2, "epoch": 0}\n')  # a broken first line
    (run / "crossmodal" / "media").mkdir(parents=True)
    (run / "crossmodal" / "media" / "media.json").write_text("{not json")
    text, page = _report(tmp_path, run)
    words = " ".join(page.text)
    assert ".hydra/config.yaml is missing" in words
    assert "confidence_intervals.png is not a whole PNG" in words
    assert "media/tables/worst_mismatches/r000_retrieved_image.png is missing" in words
    assert "zeroshot/history.jsonl is unreadable" in words and "line 1 is not valid JSON" in words
    assert "crossmodal/media/media.json is unreadable" in words and "crossmodal/history.jsonl is missing" in words
    # what is whole is still shown
    assert made["files"]["projection_last"] in set(page.images())
    assert any(a.get("data-prefix") == "retrieval" for tag, a in page.tags if tag == "table")


def test_a_multirun_lists_its_jobs_with_links_to_their_sections(tmp_path: Path):
    sweep = tmp_path / "multirun"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    runs = {n: _run(sweep / str(n), seed=n, overrides=(f"model.lr={n}e-3", f"seed={n}")) for n in (0, 1, 2, 10)}
    text, page = _report(tmp_path, sweep)
    ids = {a["id"] for _, a in page.tags if "id" in a}
    start = text.index('<table class="sweep">')
    table = _Page(text[start : text.index("</table>", start)])
    links = [a["href"] for tag, a in table.tags if tag == "a"]
    assert len(links) == 4 and all(link[1:] in ids for link in links)
    rows = [t for _, t in table.cells]
    assert [rows[i * 9] for i in range(4)] == ["0", "1", "2", "10"]  # job, setting, overrides, 6 values per row
    for i, n in enumerate((0, 1, 2, 10)):
        assert rows[i * 9 + 1] == f"model.lr={n}e-3"  # the group it belongs to: what differs between the groups
        assert rows[i * 9 + 2].startswith(f"model.lr={n}e-3, seed={n}")
        values = {a["data-key"]: float(a["data-value"]) for a, _ in table.cells[i * 9 + 3 : i * 9 + 9]}
        retrieval = [r for r in runs[n]["retrieval"] if "error" not in r][-1]
        hierarchy = runs[n]["hierarchy"][-1]
        expected = {f"retrieval/{k}": retrieval[k] for k in KEYS} | {f"hierarchy/{k}": hierarchy[k] for k in KEYS}
        assert values == expected
    # above it, the grouped table: a group of one seed per learning rate, its mean the job's value


def _sweep(root: Path, lrs=("0.001", "0.003"), seeds=(1, 2, 3), seed_overrides: bool = True) -> dict[str, list[Path]]:
    """A multirun folder of ``lrs`` x ``seeds`` jobs written by :func:`_run`; the job folders of each learning rate."""
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    jobs: dict[str, list[Path]] = {lr: [] for lr in lrs}
    for n, (lr, seed) in enumerate((lr, seed) for lr in lrs for seed in seeds):
        extra = (f"seed={seed}",) if seed_overrides else (f"data.noise={seed}",)
        _run(root / str(n), seed=10 * n + seed, overrides=(f"model.lr={lr}", *extra))
        jobs[lr].append(root / str(n))
    return jobs


def _last(job: Path, prefix: str) -> dict:
    records = [json.loads(line) for line in (job / prefix / "history.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if "error" not in r][-1]


def _rows(text: str, css_class: str) -> list[list[tuple[dict[str, str], str]]]:
    """The cells of each body row of the table of ``css_class``."""
    start = text.index(f'<table class="{css_class}">')
    body = text[start : text.index("</table>", start)]
    return [_Page(row).cells for row in body.split("<tr")[2:]]


def test_a_multirun_opens_with_its_settings_across_seeds_and_their_pictures(tmp_path: Path):
    from scipy import stats

    jobs = _sweep(tmp_path / "multirun")
    text, page = _report(tmp_path, tmp_path / "multirun")
    assert text.index('<table class="sweep-groups">') < text.index('<table class="sweep">'), (
        "the grouped table comes first"
    )
    rows = _rows(text, "sweep-groups")
    assert [r[0][1] for r in rows] == ["model.lr=0.001", "model.lr=0.003"]  # named by what differs
    keys = [f"{p}/{k}" for p in ("hierarchy", "retrieval") for k in KEYS]
    for row, (_lr, folders) in zip(rows, jobs.items()):
        assert row[1][1] == "3"
        cells = {a["data-key"]: (a, t) for a, t in row[2:]}
        assert sorted(cells) == sorted(keys)
        for key in keys:
            prefix, name = key.split("/")
            values = np.array([_last(job, prefix)[name] for job in folders])
            half = stats.t.ppf(0.975, df=2) * values.std(ddof=1) / np.sqrt(3)
            attributes, cell_text = cells[key]
            assert float(attributes["data-mean"]) == pytest.approx(values.mean(), rel=1e-12)
            assert float(attributes["data-low"]) == pytest.approx(values.mean() - half, rel=1e-9)
            assert float(attributes["data-high"]) == pytest.approx(values.mean() + half, rel=1e-9)
            assert attributes["data-n"] == "3" and cell_text.startswith(f"{values.mean():.4f} [")
            assert "q —" in cell_text  # no per-query files: no pooled interval
    pictures = [a["data-key"] for tag, a in page.tags if tag == "figure" and a.get("class") == "sweep-picture"]
    assert sorted(pictures) == sorted(keys)
    start = text.index('class="sweep-picture"')
    for data in _Page(text[start : text.index("</div>", start)]).images():
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "PNG" and image.size[0] > 100
            image.load()
    # metrics= selects the columns of both tables
    chosen = write_report([tmp_path / "multirun"], tmp_path / "chosen.html", keys=["retrieval/map@r"]).read_text(
        encoding="utf-8"
    )
    assert [len(r) for r in _rows(chosen, "sweep-groups")] == [3, 3] and [len(r) for r in _rows(chosen, "sweep")] == [
        4
    ] * 6
    # against a baseline without per-query files: the test row says why there is no conclusion
    tested = write_report(
        [tmp_path / "multirun"], tmp_path / "t.html", baseline="model.lr=0.001", metric="retrieval/map@r"
    ).read_text(encoding="utf-8")
    words = " ".join(_Page(tested).text)
    assert "model.lr=0.001 (baseline)" in words and "no conclusion (no per-query values of retrieval/map@r" in words


def test_a_sweep_that_cannot_be_grouped_still_lists_its_jobs_and_says_why(tmp_path: Path):
    def notes(text: str) -> str:
        start = text.index('<div class="problems">')
        return " ".join(_Page(text[start : text.index("</div>", start)]).text)

    _sweep(tmp_path / "unseeded", seeds=(1, 2), seed_overrides=False)
    text, _ = _report(tmp_path, tmp_path / "unseeded")
    assert "sweep-groups" not in text and len(_rows(text, "sweep")) == 4
    assert "no job sets a seed key (seed_keys=['seed'])" in notes(text) and "pass seed_keys=" in notes(text)
    seeded = write_report([tmp_path / "unseeded"], tmp_path / "seeded.html", seed_keys=["data.noise"]).read_text(
        encoding="utf-8"
    )
    assert [r[1][1] for r in _rows(seeded, "sweep-groups")] == ["2", "2"]

    jobs = _sweep(tmp_path / "broken")
    (jobs["0.003"][0] / "retrieval" / "history.jsonl").write_text(
        '{"step": 1\n{"step": 2, "epoch": 0}\n'
    )  # line 1 broken
    text, _ = _report(tmp_path, tmp_path / "broken")
    assert "left out of the grouped table" in notes(text) and "history.jsonl" in notes(text)
    counts = {r[0][1]: {a["data-key"]: a["data-n"] for a, _ in r[2:]} for r in _rows(text, "sweep-groups")}
    assert counts["model.lr=0.003"]["retrieval/map@r"] == "2" and counts["model.lr=0.003"]["hierarchy/map@r"] == "3"
    assert len(_rows(text, "sweep")) == 6

    text = write_report(
        [tmp_path / "broken"], tmp_path / "b.html", baseline="model.lr=9", metric="retrieval/map@r"
    ).read_text(encoding="utf-8")
    assert "the test against baseline='model.lr=9' on metric='retrieval/map@r' failed" in notes(text)
    assert len(_rows(text, "sweep-groups")) == 2 and "sweep-tests" not in text
    text = write_report([tmp_path / "broken"], tmp_path / "c.html", keys=["retrieval/nope"]).read_text(encoding="utf-8")
    assert "grouping the jobs by setting failed: keys ['retrieval/nope'] are in none of the runs" in notes(text)
    assert "sweep-groups" not in text and len(_rows(text, "sweep")) == 6


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _browse(binary: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def _rendered(binary: str, page: Path, profile: Path) -> dict[str, str]:
    """The attributes the page's own script set on <html> once loaded, from the DOM Chromium dumps."""
    dom = _browse(binary, page, profile, "--virtual-time-budget=10000", "--dump-dom").stdout
    tag = re.search(r"<html[^>]*>", dom)
    assert tag, dom[:300]
    return dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', tag.group(0)))


@pytest.mark.skipif(
    _chromium() is None, reason="no chromium binary (Debian: apt-get install chromium; `make test` tries it)"
)
def test_the_report_renders_in_headless_chromium(tmp_path: Path):
    binary = _chromium()
    _run(tmp_path / "run")
    output = write_report([tmp_path / "run"], tmp_path / "report.html")
    count = len(_Page(output.read_text(encoding="utf-8")).images())
    assert _rendered(binary, output, tmp_path / "profile") == {
        "data-images": str(count),
        "data-images-broken": "0",
        "data-script-errors": "0",
    }
    shot = tmp_path / "shot.png"
    _browse(binary, output, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,1600")
    with Image.open(shot) as image:
        assert image.format == "PNG" and image.size == (1200, 1600)
        pixels = np.asarray(image.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50, "the screenshot is blank"
    assert (pixels.min(axis=2) < 100).mean() > 0.002, "no dark text or lines on the page"
    # the check itself sees a picture that does not decode
    broken = tmp_path / "broken.html"
    broken.write_text(
        output.read_text(encoding="utf-8").replace("data:image/png;base64,", "data:image/png;base64,AAAA", 1)
    )
    assert _rendered(binary, broken, tmp_path / "profile")["data-images-broken"] == "1"


def test_the_checkpoint_selection_section(tmp_path: Path):
    """A family folder with selection.json: its lines, the set drawn over the curve (a decodable PNG) and the table of
    the regressed classes; a malformed file is listed as broken and the rest of the report stands."""
    from beyondlabels.io import write_selection

    run = tmp_path / "run"
    history = _history(run / "retrieval", 0)
    steps = [int(r["step"]) for r in history if "error" not in r]
    data = {
        "key": "precision@1",
        "monitor": "retrieval/precision@1",
        "steps": steps,
        "means": [0.5 + 0.01 * i for i in range(len(steps))],
        "pvalues": [0.02] + [1.0] * (len(steps) - 1),
        "set_steps": steps[1:],
        "best_step": steps[-1],
        "best_value": 0.51,
        "estimate": 0.5,
        "ci_low": 0.45,
        "ci_high": 0.55,
        "latest_step": steps[-1],
        "size": 0.1,
        "confidence": 0.95,
        "mode": "max",
        "classes": {
            "label": [2],
            "n": [30],
            "reference_mean": [0.9],
            "current_mean": [0.5],
            "pvalue": [0.001],
            "adjusted": [0.001],
            "regressed": [True],
        },
    }
    write_selection(run / "retrieval", data)
    text, page = _report(tmp_path, run)
    assert f"steps as good as the best (90%): {', '.join(str(s) for s in steps[1:])}" in text
    assert any(a.get("class") == "selection" for _, a in page.tags)
    assert any(Image.open(io.BytesIO(png)).size[0] > 100 for png in page.images())
    assert [c for a, c in page.cells if a.get("class") == "num"][-6:] == [
        "2",
        "30",
        "0.9000",
        "0.5000",
        "0.0010",
        "0.0010",
    ]
    (run / "retrieval" / "selection.json").write_text("[1, 2]")
    text, _ = _report(tmp_path, run)
    assert "checkpoint selection not read" in text and "precision@1" in text
