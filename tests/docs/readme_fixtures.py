"""What each README block needs that the README leaves to its reader, for tests/docs/test_readme.py.

A block names its fixture in its marker (``<!-- readme-test: run fixture=NAME -->``). A Python fixture is source run
in the block's namespace before it (the objects the prose says the reader has: embeddings, a run folder, ...) and a
check after it. A shell fixture writes the files the commands read, rewrites a command onto the smoke
configuration (``experiment=shapes_smoke``: seconds instead of minutes, the same code), or says why a command is not
run here (:class:`Skip`). Every command runs in a folder laid out as the repository's root (its files linked, a
``logs/`` of its own), so the commands and the folders they make (``logs/train/runs/<time>``) are the README's;
placeholders such as ``<run>`` or ``logs/train/multiruns/<time>`` become the folders of the smoke run and the smoke
sweep that the README itself shows (:data:`RUN_COMMAND`, :data:`SWEEP_COMMAND`).

To extend: a new block runs as written when it needs nothing; else give it ``fixture=NAME`` and add NAME to
:data:`PYTHON` or :data:`SHELL` below; a command quoted inline in prose goes into :data:`INLINE`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from tests.entrypoints.helpers import REPO_ROOT, script_env

SMOKE = "experiment=shapes_smoke"
# the smoke run the README's `python train.py` / `make train` stand for, and the sweep its Sweeps table shows
RUN_COMMAND = ["python", "train.py", SMOKE]
SWEEP_COMMAND = "python train.py -m experiment=shapes_smoke seed=1,2,3 model.lr=0.001,0.01"
# top-level entries of the repository that are not linked into the work folder
_NOT_LINKED = {".git", ".venv", "logs", "build", "dist", ".pytest_cache", "__pycache__"}


@dataclass(frozen=True)
class Skip:
    """A command not run here, and why; ``covered`` names the test that runs it instead (``path::test``)."""

    reason: str
    covered: str | None = None


@dataclass
class Ran:
    argv: list[str]
    stdout: str
    stderr: str


class Workdir:
    """A folder laid out as the repository's root, where the README's commands run as a reader types them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        for entry in REPO_ROOT.iterdir():
            linked = entry.name not in _NOT_LINKED and not entry.name.endswith(".egg-info")
            if linked and not (root / entry.name).exists():
                (root / entry.name).symlink_to(entry)
        self.env = script_env()
        self.env["COLUMNS"] = "200"  # rich tables as wide as the README shows them
        self.env["BEYONDLABELS_ROOT"] = str(root)  # paths.root_dir: logs/ under this folder
        self._run: str | None = None
        self._sweep: str | None = None
        self.logger_run: Path | None = None  # the run of `logger=[tensorboard,mlflow]` (_logger_run)

    # ---- the folders the README's placeholders stand for ---------------------------------------------------------
    def run_folder(self) -> str:
        """``logs/train/runs/<time>`` of the smoke run (made on first use)."""
        if self._run is None:
            self._run = self._new_folder("logs/train/runs", lambda: self.run(RUN_COMMAND))
        return self._run

    def sweep_folder(self) -> str:
        """``logs/train/multiruns/<time>`` of the README's smoke sweep (made on first use)."""
        if self._sweep is None:
            self._sweep = self._new_folder("logs/train/multiruns", lambda: self.run(SWEEP_COMMAND.split()))
        return self._sweep

    def _new_folder(self, parent: str, make: Callable[[], Ran]) -> str:
        before = set((self.root / parent).glob("*"))
        make()
        (new,) = set((self.root / parent).glob("*")) - before
        return str(new.relative_to(self.root))

    def placeholders(self) -> dict[str, Callable[[], str]]:
        return {
            "logs/train/runs/<date>": self.run_folder,
            "logs/train/runs/<time>": self.run_folder,
            "<run folder>": lambda: str(self.root / self.run_folder()),
            "<run>": self.run_folder,
            "logs/train/multiruns/2026-11-29_12-00-00": self.sweep_folder,
            "logs/train/multiruns/<date>": self.sweep_folder,
            "logs/train/multiruns/<time>": self.sweep_folder,
        }

    def fill(self, argv: list[str]) -> list[str]:
        out = []
        for word in argv:
            for key, value in sorted(self.placeholders().items(), key=lambda kv: -len(kv[0])):
                if key in word:
                    word = word.replace(key, value())
            out.append(word)
        return out

    # ---- running -------------------------------------------------------------------------------------------------
    def run(self, argv: list[str], timeout: int = 900) -> Ran:
        """Run ``argv`` here (``python`` is this interpreter, ``beyondlabels`` its console script; leading
        ``NAME=value`` words set the environment)."""
        env, argv = dict(self.env), list(argv)
        while argv and re.fullmatch(r"[A-Z][A-Z0-9_]*=\S*", argv[0]):
            key, _, value = argv.pop(0).partition("=")
            env[key] = value
        if argv[0] == "python":
            argv[0] = sys.executable
        elif argv[0] == "beyondlabels":
            argv[0] = str(Path(sys.executable).with_name("beyondlabels"))
        proc = subprocess.run(argv, cwd=self.root, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            output = f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
            raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}):\n{output}")
        return Ran(argv, proc.stdout, proc.stderr)


# ---- Python blocks --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PythonFixture:
    """``prelude`` runs in the block's namespace before the block, ``check`` after it. With ``script`` (a file name)
    the block is no snippet but a whole program: it runs as that file in an empty folder, by an interpreter that sees
    only the package and its dependencies (tests/docs/script_runner.py), and ``check`` gets ``{"run": ScriptRun}``."""

    prelude: str = ""
    check: Callable[[dict, Path], None] = lambda namespace, cwd: None
    script: str | None = None


def _check_resume_ids(ns: dict, cwd: Path) -> None:
    assert ns["run_id"] is None  # no checkpoint: a new run
    assert json.loads((cwd / "wandb_run.json").read_text())["id"] == ns["logger"].experiment.id


def doc_pages() -> list[Path]:
    """README.md and the pages of docs/, the files whose blocks the tests run."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def _docs_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in doc_pages())


def _check_text_to_node(ns: dict) -> None:
    """The mapping of the snippet's answers, as the output block below the snippet prints it."""
    shown = re.findall(r"^'(.+?)'\s+-> (\S+)\s+(\S+)\s+abstained=(True|False)$", _docs_text(), re.M)
    got = [(m.text, m.node, m.rule, str(m.abstained)) for m in ns["mapper"].map([t for t, *_ in shown])]
    assert shown and got == shown, f"the docs show {shown}; the mapper gives {got}"


def _check_hierarchy_callback(ns: dict) -> None:
    callback = ns["callback"]
    assert {"hP", "hR", "hF", "abstentions"} <= set(callback.schema)


def _check_metric(ns: dict, cwd: Path) -> None:
    results = ns["results"]
    assert set(results) >= {"precision@1", "r_precision", "map@r", "per_query"}
    assert repr(ns["metric"].output_schema()["map@r"]) == "KeySpec(kind='scalar', higher_is_better=True, count=False)"
    logged = ns["self"].logged  # what self.log_dict received: the scalar entries, each a 0-d tensor
    assert "val/precision@1" in logged and "val/per_query" not in logged and "val/precision_curve" not in logged
    assert all(torch.is_tensor(v) and v.ndim == 0 for v in logged.values()), logged
    import matplotlib.pyplot as plt

    plt.close("all")


PYTHON: dict[str, PythonFixture] = {
    # "Outside train.py, keep logger.experiment.id beside your checkpoints": a run folder, no checkpoint yet
    "resume_ids": PythonFixture(
        prelude="from pytorch_lightning.loggers import WandbLogger\nrun_dir, ckpt_path = '.', None\n",
        check=_check_resume_ids,
    ),
    # graded credit continues the snippet above it, which imported the callback
    "graded": PythonFixture(
        prelude="from beyondlabels.callbacks import RetrievalEvalCallback\n",
        check=lambda ns, cwd: ns["callback"].schema["shape_precision@1"],
    ),
    # "the metric and the kernels work on their own": a batch of embeddings and two evaluations to plot
    "metric": PythonFixture(
        prelude=(
            "import torch\n"
            "from beyondlabels.metrics import EmbeddingRetrieval as _Metric\n"
            "embeddings = torch.randn(60, 8, generator=torch.Generator().manual_seed(0))\n"
            "labels, ids = torch.arange(60) % 6, torch.arange(60)\n"
            "def _evaluate(x):\n"
            "    m = _Metric(ks=(1, 5, 10))\n"
            "    m.update(x, labels, ids)\n"
            "    return m.compute()\n"
            "results_1, results_2 = _evaluate(embeddings), _evaluate(embeddings + 0.3 * torch.randn(60, 8))\n"
            "class _Module:  # stands for the user's LightningModule: log_dict records what it is given\n"
            "    logged = {}\n"
            "    def log_dict(self, values):\n"
            "        self.logged.update(values)\n"
            "self = _Module()\n"
        ),
        check=_check_metric,
    ),
    # free text -> node with MiniLM: what the block prints is the README's output block below it, line for line
    "text_to_node": PythonFixture(check=lambda ns, cwd: _check_text_to_node(ns)),
    # the callback with a WordNet subtree and a sentence-transformers encoder: built as written (nothing loaded yet)
    "hierarchy_callback": PythonFixture(
        prelude="from beyondlabels.callbacks import HierarchyEvalCallback\n",
        check=lambda ns, cwd: _check_hierarchy_callback(ns),
    ),
    # the other families: a taxonomy file named tree.yaml (the demo's)
    "families": PythonFixture(
        prelude=(
            "import shutil\n"
            f"shutil.copy({str(REPO_ROOT / 'src/beyondlabels/demo/data/taxonomy.yaml')!r}, 'tree.yaml')\n"
        ),
    ),
}


# docs/adding_a_metric_family.md: the family's callback class is written inside callbacks/pytorch_lightning.py
PYTHON["family_callback"] = PythonFixture(
    prelude="from beyondlabels.callbacks.pytorch_lightning import EvaluationCallback\n",
    check=lambda ns, cwd: issubclass(ns["MyFamilyEvalCallback"], ns["EvaluationCallback"]) or _fail("not a callback"),
)

# A fresh process: the doc's toy family module registered, a Trainer with its callback, evaluate.py with its task.
_TOY_RUN = """
import json, runpy, sys
from pathlib import Path
import numpy as np, torch
cwd, repo = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(cwd))
torch.set_num_threads(1)
import agreement_family
from beyondlabels.families import register
register(agreement_family.AGREEMENT)
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset
from beyondlabels.callbacks import AgreementEvalCallback, __all__ as exported
from beyondlabels.callbacks.lightning import AgreementEvalCallback as for_lightning
from beyondlabels.reporting.prefixes import FAMILY_PREFIXES
from beyondlabels.tasks import TASKS
assert "AgreementEvalCallback" in exported and "agreement" in FAMILY_PREFIXES and "agreement" in TASKS
keys = {AgreementEvalCallback(**kw).state_key for kw in agreement_family.AgreementCore.examples()}
assert len(keys) == 2 and {for_lightning(**kw).state_key for kw in agreement_family.AgreementCore.examples()} == keys
x = torch.randn(24, 4, generator=torch.Generator().manual_seed(0))
y = torch.arange(24) % 3

class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)
    def training_step(self, batch, index):
        return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])
    def predict_labels(self, inputs):
        return self.layer(inputs).argmax(1)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
    def train_dataloader(self):
        return DataLoader(TensorDataset(x, y), batch_size=8)
    def val_dataloader(self):
        return DataLoader(TensorDataset(x, y), batch_size=8)

module = Module()
callback = AgreementEvalCallback(strict=True, bootstrap_rounds=50)
trainer = pl.Trainer(max_epochs=1, limit_val_batches=0, callbacks=[callback], default_root_dir=str(cwd / "fit"),
                     logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(module)
with torch.no_grad():
    expected = float((module.predict_labels(x) == y).double().mean())
assert callback.history and abs(callback.history[-1]["accuracy"] - expected) < 1e-12, (callback.history, expected)
assert (cwd / "fit" / "agreement" / "history.jsonl").is_file()
predictions = np.array([0, 1, 2, 2, 1, 0]); labels = np.array([0, 1, 1, 2, 1, 2])
np.savez(cwd / "predictions.npz", predictions=predictions, labels=labels)
(cwd / "conf" / "task").mkdir(parents=True, exist_ok=True)
(cwd / "conf" / "task" / "agreement.yaml").write_text("# @package _global_\\ninput: null\\n")
sys.argv = ["evaluate.py", "task=agreement", f"input={cwd / 'predictions.npz'}", f"output={cwd / 'report.json'}",
            f"hydra.searchpath=[file://{cwd / 'conf'}]", f"hydra.run.dir={cwd / 'job'}", "bootstrap_rounds=50"]
runpy.run_path(str(repo / "evaluate.py"), run_name="__main__")
report = json.loads((cwd / "report.json").read_text())
assert report["accuracy"] == 4 / 6 and report["num_samples"] == 6, report
print("toy family ok")
"""


def _check_toy_family(ns: dict, cwd: Path) -> None:
    """The doc's module, as written, registered in a fresh process and run through a Trainer and evaluate.py."""
    from tests.docs.readme_blocks import read_file

    doc = read_file(REPO_ROOT / "docs" / "adding_a_metric_family.md", REPO_ROOT)
    (block,) = [b for b in doc.blocks if b.marker is not None and b.marker.get("fixture") == "toy_family"]
    (cwd / "agreement_family.py").write_text(block.text, encoding="utf-8")
    (cwd / "toy_run.py").write_text(_TOY_RUN, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(cwd / "toy_run.py"), str(cwd), str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0 and "toy family ok" in result.stdout, result.stdout[-3000:] + result.stderr[-6000:]
    assert ns["AGREEMENT"].callback == "AgreementEvalCallback"


PYTHON["toy_family"] = PythonFixture(check=_check_toy_family)

# README's quick start: the shown output it prints (numbers within what another CPU's math kernels change) and the
# files the listing below it names
QUICKSTART_FOLDER = "/home/you/quickstart"  # the folder the README's output shows
QUICKSTART_TOLERANCE = 0.02
_NUMBER = re.compile(r"[-+]?\d+\.\d+")


def _quickstart_blocks() -> tuple[str, list[str]]:
    """The README's quick start output (the fence starting with ``run summary``) and its listing of ``run/`` paths."""
    from tests.docs.readme_blocks import read_file

    blocks = read_file(REPO_ROOT / "README.md", REPO_ROOT).blocks
    (output,) = [b.text for b in blocks if b.text.startswith("run summary")]
    (listing,) = [b.text for b in blocks if b.text.startswith("run/")]
    return output, [line.split()[0] for line in listing.splitlines() if line.strip()]


def same_output(shown: str, printed: str, tolerance: float) -> list[str]:
    """The lines where ``printed`` differs from ``shown``: other words, other spacing of words, or a number further
    than ``tolerance`` from the one shown. Empty when they agree.

    Example:
        >>> same_output("a ↑  0.7441  [0.7070]", "a ↑  0.7502  [0.7070]", 0.02)
        []
        >>> same_output("a ↑  0.7441", "b ↑  0.7441", 0.02)
        ["'a ↑ 0.7441' shown, 'b ↑ 0.7441' printed"]
    """
    shown_lines, printed_lines = shown.strip("\n").splitlines(), printed.strip("\n").splitlines()
    problems = [f"{len(shown_lines)} lines shown, {len(printed_lines)} printed"] * (
        len(shown_lines) != len(printed_lines)
    )
    for a, b in zip(shown_lines, printed_lines):
        words_a, words_b = _NUMBER.sub("#", " ".join(a.split())), _NUMBER.sub("#", " ".join(b.split()))
        numbers = zip(map(float, _NUMBER.findall(a)), map(float, _NUMBER.findall(b)))
        if words_a != words_b or any(abs(x - y) > tolerance for x, y in numbers):
            problems.append(f"{' '.join(a.split())!r} shown, {' '.join(b.split())!r} printed")
    return problems


def _check_quickstart(ns: dict, cwd: Path) -> None:
    run = ns["run"]
    shown, listed = _quickstart_blocks()
    start = run.stdout.index("run summary")
    printed = run.stdout[start:].replace(str(cwd), QUICKSTART_FOLDER)
    problems = same_output(shown, printed, QUICKSTART_TOLERANCE)
    assert not problems, "\n".join(problems) + f"\n\nthe script printed:\n{run.stdout[-3000:]}"
    missing = [path for path in listed if not list(cwd.glob(path.rstrip("/")))]
    assert not missing, f"the README lists {missing}, which the quick start did not write"
    history = (cwd / "run" / "retrieval" / "history.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(history) == 4 and all("precision@1" in json.loads(line) for line in history)


PYTHON["quickstart"] = PythonFixture(check=_check_quickstart, script="quickstart.py")


def _fail(message: str) -> None:
    raise AssertionError(message)


# ---- shell blocks ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShellFixture:
    prepare: Callable[[Workdir], None] = lambda wd: None
    rewrite: Callable[[list[str], Workdir], list[str] | Skip] = lambda argv, wd: argv
    check: Callable[[Workdir, list[Ran]], None] = lambda wd, ran: None


def write_saved_outputs(wd: Workdir) -> None:
    """The inputs of the `evaluate.py task=...` lines: small seeded files in each format the tasks read."""
    rng = np.random.default_rng(0)
    root = wd.root
    labels = np.repeat(np.arange(16), 8)  # class indices in profiles-file order (the demo's 16 classes)
    centres = rng.normal(size=(16, 16))
    np.savez(root / "embeddings.npz", embeddings=centres[labels] + rng.normal(scale=0.8, size=(128, 16)), labels=labels)
    images = rng.normal(size=(40, 16))
    texts = np.repeat(images, 2, axis=0) + rng.normal(scale=0.5, size=(80, 16))
    owners = np.repeat(np.arange(40), 2)  # two captions per image
    np.savez(root / "pairs.npz", image_embeddings=images, text_embeddings=texts, text_image_index=owners)
    shutil.copy(REPO_ROOT / "src/beyondlabels/demo/data/taxonomy.yaml", root / "tree.yaml")
    shutil.copy(REPO_ROOT / "src/beyondlabels/demo/data/profiles.yaml", root / "profiles.yaml")
    classes = ["square", "rectangle", "rhombus", "circle", "ellipse", "star", "cross", "right_triangle"]
    rows = [{"gt": classes[i % 8], "pred": classes[(i * 3) % 8]} for i in range(24)]
    rows += [{"gt": "circle", "pred_text": "a round ellipse"}, {"gt": "square", "pred_text": "a square"}]
    (root / "preds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    qrels = [f"q{q} 0 d{d} {int(rng.integers(0, 3))}" for q in range(6) for d in range(12)]
    run = [f"q{q} Q0 d{d} {r + 1} {1.0 - r / 20:.3f} sys" for q in range(6) for r, d in enumerate(rng.permutation(15))]
    (root / "qrels.txt").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    (root / "run.txt").write_text("\n".join(run) + "\n", encoding="utf-8")
    pairs = [f"{classes[i % 8]},{classes[(i * 5 + 1) % 8]}" for i in range(40)]
    (root / "pairs.csv").write_text("query_label,retrieved_label\n" + "\n".join(pairs) + "\n", encoding="utf-8")
    generated = rng.normal(size=(128, 16))
    prompts = generated + rng.normal(scale=0.7, size=(128, 16))
    np.savez(
        root / "gen.npz",
        image_embeddings=generated,
        text_embeddings=prompts,
        captions=np.array([f"caption {i}" for i in range(128)]),
        class_ids=np.arange(128) % 16,
    )


def _exists(*names: str) -> Callable[[Workdir, list[Ran]], None]:
    def check(wd: Workdir, ran: list[Ran]) -> None:
        missing = [n for n in names if not (wd.root / n).is_file()]
        assert not missing, f"the block's commands did not write {missing}"

    return check


def _make(argv: list[str], wd: Workdir) -> list[str] | Skip:
    """`make train` runs the Makefile's recipe with this interpreter (a stand-in venv, already "installed") on the
    smoke configuration; `make test` is this suite: dry-run (``make -n``), which prints its steps."""
    stub = wd.root / ".readme-venv"
    (stub / "bin").mkdir(parents=True, exist_ok=True)
    for name in ("bin/python", ".installed", ".installed-test"):
        (stub / name).touch()
    options = [f"PY={sys.executable}", f"VENV={stub}"]
    if argv == ["make", "train"]:
        return [*argv, *options, f"ARGS={SMOKE}"]
    if argv == ["make", "test"]:
        return ["make", "-n", "test", *options]
    raise AssertionError(f"no rule for {argv}")


def _check_make(wd: Workdir, ran: list[Ran]) -> None:
    train, test = ran
    assert list(wd.root.glob("logs/train/runs/*/retrieval/history.jsonl")), "make train made no evaluated run"
    assert "pytest" in test.stdout, "make -n test shows no test run"


def _sweeps(argv: list[str], wd: Workdir) -> list[str] | Skip:
    words = " ".join(argv)
    if words == "python train.py -m seed=1,2,3 model.lr=0.001,0.003 experiment=shapes_quick":
        wd.sweep_folder()
        return Skip(f"the same grid runs on the smoke configuration as `{SWEEP_COMMAND}`, the sweep of the table below")
    if "hparams_search=shapes_optuna" in argv:
        smoke = [SMOKE if a == "experiment=shapes_quick" else a for a in argv]
        return [
            *smoke,
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.sampler.n_startup_trials=2",
            "trainer.max_epochs=1",
            "logger=csv",
        ]
    return argv


def _check_sweeps(wd: Workdir, ran: list[Ran]) -> None:
    assert (wd.root / "sweep.json").is_file() and (wd.root / "sweep.md").is_file() and (wd.root / "sweep.tex").is_file()
    assert list(wd.root.glob("sweep.*.png")), "one picture per metric"


def declared_extras(pyproject: str) -> dict[str, list[str]]:
    """The ``[project.optional-dependencies]`` of a pyproject.toml's text (read without tomllib, which Python 3.10
    lacks): extra name -> its requirement strings.

    Example:
        >>> text = '[project.optional-dependencies]\\n# a comment\\nui = ["mlflow>=2.12",  # why\\n  "flask"]\\n'
        >>> text += '[tool.x]\\n'
        >>> declared_extras(text)
        {'ui': ['mlflow>=2.12', 'flask']}
    """
    section = re.search(r"^\[project\.optional-dependencies\][^\n]*\n(.*?)(?=^\[|\Z)", pyproject, re.M | re.S)
    body = re.sub(r"#[^\n]*", "", section.group(1) if section else "")
    lists = re.findall(r"^([\w.-]+)\s*=\s*\[(.*?)\]", body, re.M | re.S)
    return {name: re.findall(r'"([^"]+)"', items) for name, items in lists}


def _package_installed(package: str, why: str) -> Skip:
    """`pip install PACKAGE`: not run (it installs); the test environment has it (the test extra brings it)."""
    metadata.version(package)  # PackageNotFoundError: the test extra no longer brings it
    return Skip(f"installs {package}; {why}, and the test extra brings it")


def _extra_installed(extra: str) -> Skip:
    """`pip install 'beyondlabels[EXTRA]'`: not run (it installs); the extra exists and its packages are installed."""
    extras = declared_extras((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert extra in extras, f"pyproject.toml has no extra {extra!r}; it has {sorted(extras)}"
    for requirement in extras[extra]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        metadata.version(name)  # PackageNotFoundError: the test environment lacks what the extra brings
    return Skip(f"installs packages; the extra {extra!r} exists and what it brings is installed here")


_SUBMITIT = "tests/entrypoints/test_submitit.py"


def _cluster(argv: list[str], wd: Workdir) -> list[str] | Skip:
    if argv[:2] == ["pip", "install"]:
        return _extra_installed(re.search(r"\[(.+)\]", argv[-1]).group(1))
    if "hydra/launcher=submitit_local" in argv:
        return Skip(
            "a two-job submitit_local multirun on the smoke configuration runs in the suite",
            covered=f"{_SUBMITIT}::test_two_job_multirun_with_submitit_local",
        )
    if "hydra/launcher=slurm" in argv:
        return Skip(
            "needs a SLURM cluster (sbatch); the preset's config is tested without one",
            covered=f"{_SUBMITIT}::test_slurm_preset_extends_the_plugin_config",
        )
    raise AssertionError(f"no rule for {argv}")


def _write_wordnet_answers(wd: Workdir) -> None:
    """`predictions=answers.jsonl` of the WordNet line: free-text answers about vehicles, one with a node name."""
    rows = [
        {"gt": "fire_engine.n.01", "pred_text": "a fire engine"},
        {"gt": "ferry.n.01", "pred_text": "a boat that carries cars across a river"},
        {"gt": "airliner.n.01", "pred_text": "a large plane"},
        {"gt": "car.n.01", "pred": "motor_vehicle.n.01"},
    ]
    (wd.root / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _check_wordnet_answers(wd: Workdir, ran: list[Ran]) -> None:
    (out,) = [r.stdout for r in ran]
    assert "hierarchy" in out or "hF" in out, out[-2000:]


SHELL: dict[str, ShellFixture] = {
    "wordnet_answers": ShellFixture(prepare=_write_wordnet_answers, check=_check_wordnet_answers),
    "make": ShellFixture(rewrite=_make, check=_check_make),
    "report": ShellFixture(check=_exists("report.html")),
    "saved_outputs": ShellFixture(prepare=write_saved_outputs, check=_exists("report.json", "ab.json")),
    "profiles": ShellFixture(prepare=write_saved_outputs, check=_exists("profiles.json", "mismatch.json")),
    "rprecision": ShellFixture(prepare=write_saved_outputs, check=_exists("report.json")),
    "sweeps": ShellFixture(rewrite=_sweeps, check=_check_sweeps),
    "cluster": ShellFixture(rewrite=_cluster),
}


# ---- figures quoted from a run --------------------------------------------------------------------------------------
_SWEEP_TABLE_COMMAND = (
    "python evaluate.py task=compare runs=[logs/train/multiruns/<time>] \"baseline='model.lr=0.001'\" "
    "metric=retrieval/precision@1 guardrails=[retrieval/map@r] output=sweep.json"
)
_TOKENS = re.compile(r"[-+]?\d+\.\d+|\(n=\d+\)|cannot distinguish|better|worse|model\.lr=[\d.]+")


def figure_tokens(text: str) -> list[str]:
    """The numbers, counts, decisions and group names of a printed table, in order (its borders and column widths,
    which follow the terminal, left out).

    Example:
        >>> figure_tokens("│ model.lr=0.01 │ -0.0104 (n=3) │ 0.8878 │ cannot distinguish │")
        ['model.lr=0.01', '-0.0104', '(n=3)', '0.8878', 'cannot distinguish']
    """
    return _TOKENS.findall(text)


def sweep_table(wd: Workdir, readme: str) -> str:
    """The output the Sweeps table shows: the README's compare command (its Sweeps block) on the README's sweep."""
    flat = " ".join(readme.split())
    assert SWEEP_COMMAND in flat, "the Sweeps section no longer shows the sweep its table comes from"
    assert " ".join(_SWEEP_TABLE_COMMAND.split()).replace('"', "") in flat.replace(" \\ ", " ").replace('"', ""), (
        "the Sweeps block no longer holds the compare command whose output the table is"
    )
    return wd.run(wd.fill(shlex.split(_SWEEP_TABLE_COMMAND))).stdout


# the output fences and tables a run of the suite reproduces: name -> (work folder, README text) -> the run's output
OUTPUT: dict[str, Callable[[Workdir, str], str]] = {"sweep_table": sweep_table}


# ---- commands quoted inline in the prose ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Inline:
    """An inline command: ``run`` runs it in the work folder (rewritten onto the smoke configuration where needed)
    and checks what it made, or ``skip`` says why it is not run here (a callable: after a check of its own)."""

    run: Callable[[Workdir], object] | None = None
    skip: Skip | Callable[[], Skip] | None = None


_BENCHMARK = Skip("a benchmark (minutes on 2 cores); the figures beside it name the machine they were measured on")


def _the_smoke_run(wd: Workdir) -> None:
    run = wd.root / wd.run_folder()  # `python train.py` on the smoke configuration
    assert (run / "retrieval" / "history.jsonl").is_file() and (run / "checkpoints" / "last.ckpt").is_file()


def _resume_finished(wd: Workdir) -> None:
    """The smoke run resumed from its last checkpoint: it had finished, so there is nothing left to train."""
    ran = wd.run(["python", "train.py", f"ckpt_path={wd.run_folder()}/checkpoints/last.ckpt", SMOKE])
    assert "nothing left to train" in ran.stdout + ran.stderr


def _compare_one_run(wd: Workdir) -> None:
    """`evaluate.py task=compare runs=[<run>]` on the smoke run: the run's summary, headline keys per family."""
    ran = wd.run(["python", "evaluate.py", "task=compare", f"runs=[{wd.run_folder()}]"])
    assert "run summary" in ran.stdout and "retrieval/" in ran.stdout, ran.stdout[-2000:]


def _full_table_run(wd: Workdir) -> None:
    """`python train.py full_table=true` on the smoke configuration prints every key, not only the headline."""
    ran = wd.run(["python", "train.py", "full_table=true", SMOKE])
    assert "retrieval/num_queries" in ran.stdout or "num_queries" in ran.stdout, ran.stdout[-2000:]


def _logger_run(logger: str, made: str) -> Callable[[Workdir], None]:
    """`python train.py logger=NAME`: one smoke run serves the TensorBoard and the MLflow lines, as the README's
    "Several at once: "logger=[wandb,tensorboard]"" allows; each checks the files its logger wrote."""

    def run(wd: Workdir) -> None:
        if wd.logger_run is None:
            before = set((wd.root / "logs/train/runs").glob("*"))
            wd.run(["python", "train.py", "logger=[tensorboard,mlflow]", SMOKE])
            (wd.logger_run,) = set((wd.root / "logs/train/runs").glob("*")) - before
        assert (wd.logger_run / made).exists(), f"logger={logger} wrote no {made} into {wd.logger_run}"

    return run


def _audit(wd: Workdir) -> None:
    write_saved_outputs(wd)
    wd.run(["python", "evaluate.py", "task=audit", "input=embeddings.npz", "output=audit.json"])
    assert "audit" in json.loads((wd.root / "audit.json").read_text())


def _the_sweep(wd: Workdir) -> None:
    assert len(list((wd.root / wd.sweep_folder()).glob("[0-9]*"))) == 6  # 3 seeds x 2 learning rates


def _extra_declared(extra: str, package: str) -> Skip:
    """An extra the test environment does not install (a web UI): declared, and bringing ``package``."""
    extras = declared_extras((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert extra in extras, f"pyproject.toml has no extra {extra!r}; it has {sorted(extras)}"
    assert any(re.match(rf"{re.escape(package)}(?![\w-])", r) for r in extras[extra]), extras[extra]
    return Skip(f"installs the full {package} package (a web UI); the extra {extra!r} declares it")


INLINE: dict[str, Inline] = {
    'make train ARGS="..."': Inline(skip=Skip("the form of the next command; the `make` block runs make train ARGS=")),
    'make train ARGS="trainer.max_epochs=4 logger=csv"': Inline(
        skip=Skip("four epochs of the full demo (minutes); the `make` block passes ARGS the same way on the smoke run")
    ),
    "scripts/gpu_check.sh": Inline(skip=Skip("needs a CUDA device")),
    "BEYONDLABELS_GPU_DRY_RUN=1 scripts/gpu_check.sh": Inline(
        skip=Skip(
            "runs the GPU tests on the CPU, as the suite does",
            covered="tests/gpu/test_dry_run.py::test_gpu_check_dry_run_passes_every_gpu_test",
        )
    ),
    "make test": Inline(skip=Skip("runs the suite this test is part of; the `make` block dry-runs it")),
    "make lint": Inline(
        skip=Skip(
            "`make test` runs it first; the suite checks its configuration",
            covered="tests/test_code_shape.py::test_ruff_is_configured_for_the_whole_repository",
        )
    ),
    "make docs": Inline(
        skip=Skip(
            "the suite builds the same site with warnings as errors",
            covered="tests/docs/test_api_reference.py",
        )
    ),
    "python train.py": Inline(run=_the_smoke_run),
    "beyondlabels <key=value ...>": Inline(
        skip=Skip(
            "a template of every task's command line; the command is run from a folder outside the checkout",
            covered="tests/entrypoints/test_cli.py::test_the_console_script_runs_from_any_folder",
        )
    ),
    "python evaluate.py <key=value ...>": Inline(
        skip=Skip(
            "a template; each task's own command lines are run in its docs page",
            covered="tests/entrypoints/test_evaluate.py",
        )
    ),
    "beyondlabels task=<name> --cfg job": Inline(
        skip=Skip(
            "a template; `task=report --cfg job` is run from a folder outside the checkout",
            covered="tests/entrypoints/test_cli.py::test_the_console_script_runs_from_any_folder",
        )
    ),
    "beyondlabels --help": Inline(
        skip=Skip(
            "the console script's help is checked task by task",
            covered="tests/entrypoints/test_cli.py::test_help_lists_every_task",
        )
    ),
    "beyondlabels task=report runs=[<your Trainer's default_root_dir>]": Inline(
        skip=Skip(
            "a template: the report of a user's own Trainer run, without Hydra, is made from the installed wheel",
            covered="tests/entrypoints/test_cli.py::test_a_run_of_a_users_own_trainer_is_a_run_folder",
        )
    ),
    "make train": Inline(skip=Skip("the `make` block runs it")),
    "python train.py ckpt_path=<run>/checkpoints/last.ckpt": Inline(run=_resume_finished),
    "python evaluate.py task=compare runs=[<run>]": Inline(run=_compare_one_run),
    "python train.py full_table=true": Inline(run=_full_table_run),
    "wandb sync": Inline(skip=Skip("names the command; an upload needs an account and the network")),
    "wandb sync logs/train/runs/<time>/wandb/offline-run-*": Inline(skip=Skip("uploads: a W&B account, the network")),
    "python benchmarks/bench_callback_overhead.py": Inline(skip=_BENCHMARK),
    "python train.py logger=tensorboard": Inline(run=_logger_run("tensorboard", "tensorboard")),
    "pip install -e '.[tensorboard]'": Inline(skip=lambda: _extra_installed("tensorboard")),
    "tensorboard --logdir logs/train/runs/<time>/tensorboard": Inline(
        skip=Skip("starts a web server; `python train.py logger=tensorboard` is run and writes that folder")
    ),
    "python train.py logger=mlflow": Inline(run=_logger_run("mlflow", "mlflow.db")),
    "pip install -e '.[mlflow]'": Inline(skip=lambda: _extra_installed("mlflow")),
    "pip install -e '.[mlflow-ui]'": Inline(skip=lambda: _extra_declared("mlflow-ui", "mlflow")),
    "mlflow ui --backend-store-uri sqlite:///<run folder>/mlflow.db": Inline(
        skip=Skip("starts a web server (full mlflow package); `python train.py logger=mlflow` is run, writes the store")
    ),
    "python train.py callbacks.retrieval._target_=beyondlabels.callbacks.lightning.RetrievalEvalCallback ...": Inline(
        skip=Skip(
            "a template: needs your own lightning trainer and model configs",
            covered="tests/callbacks/test_lightning_packages.py",
        )
    ),
    "python benchmarks/bench_retrieval.py --deep": Inline(skip=_BENCHMARK),
    "python evaluate.py task=audit input=embeddings.npz output=audit.json": Inline(run=_audit),
    "pip install 'jsonargparse[signatures]'": Inline(
        skip=lambda: _package_installed("jsonargparse", "LightningCLI needs it for our callbacks' arguments")
    ),
    "pip install -e '.[sweep]'": Inline(skip=lambda: _extra_installed("sweep")),
    SWEEP_COMMAND: Inline(run=_the_sweep),
    "python benchmarks/bench_convergence.py": Inline(skip=_BENCHMARK),
    "python benchmarks/bench_selection.py": Inline(skip=_BENCHMARK),
    "beyondlabels task=select runs=[<run>]": Inline(
        skip=Skip(
            "a template: the selection of a finished run, from the installed wheel's console script",
            covered="tests/entrypoints/test_evaluate_select.py::test_select_writes_and_prints_the_kernel_s_selection",
        )
    ),
    "python benchmarks/bench_text_mapping.py": Inline(skip=_BENCHMARK),
    "python benchmarks/convergence_real_curves.py digits": Inline(skip=_BENCHMARK),
    "python benchmarks/convergence_real_curves.py history <run>/retrieval": Inline(
        skip=Skip("reads a long run's history (the demo evaluated every 2 steps); the table beside it names the run")
    ),
    "python benchmarks/bench_retrieval.py": Inline(skip=_BENCHMARK),
    "make bench": Inline(skip=_BENCHMARK),
    "python evaluate.py task=<name> ...": Inline(
        skip=Skip("the form of every task's command; docs/evaluate.md runs them")
    ),
    "python evaluate.py --tasks": Inline(
        skip=Skip(
            "prints the task list, which the suite checks against the registry",
            covered="tests/entrypoints/test_task_docs.py::test_evaluate_tasks_option_prints_every_task",
        )
    ),
    "python evaluate.py task=agreement input=predictions.npz": Inline(
        skip=Skip(
            "the task of the walkthrough's own family, run by its fixture in a fresh process",
            covered="tests/docs/readme_fixtures.py::_check_toy_family",
        )
    ),
    "python evaluate.py task=retrieval": Inline(skip=Skip("names the task; the saved_outputs block runs it")),
    "python evaluate.py task=crossmodal": Inline(skip=Skip("names the task; the saved_outputs block runs it")),
    "python evaluate.py task=hierarchy": Inline(skip=Skip("names the task; the saved_outputs block runs it")),
    "python evaluate.py task=ranking": Inline(skip=Skip("names the task; the saved_outputs block runs it")),
    "scripts/griffe_extensions.py": Inline(
        skip=Skip(
            "a module mkdocstrings loads, not a command; the suite builds the site with it",
            covered="tests/docs/test_api_reference.py::test_no_page_shows_a_raw_sphinx_role",
        )
    ),
}
