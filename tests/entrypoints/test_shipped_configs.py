"""The configs the package ships (pkg://beyondlabels.conf) as a user's own Hydra app meets them: every callback and
logger for either Lightning package, standing on its own, landing where its package puts it when included from the
user's primary config or from inside the user's callbacks/ group (lightning-hydra-template's layout), and never
shadowing the user's own groups."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import hydra
import lightning.pytorch as lpl
import pytest
import pytorch_lightning as pl
from hydra import compose, initialize_config_dir, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict, read_write

from beyondlabels.conf import SEARCHPATH
from beyondlabels.families import callback_families
from tests.entrypoints.helpers import REPO_ROOT

SHIPPED = REPO_ROOT / "src" / "beyondlabels" / "conf"
CALLBACKS = sorted([f.name for f in callback_families()] + ["convergence"])
LOGGERS = ["csv", "mlflow", "tensorboard", "wandb"]
# the folder of each Lightning package, its callback base class and the module its callbacks come from
PACKAGES = {
    "lightning": (lpl.Callback, "beyondlabels.callbacks.lightning", "lightning.pytorch.loggers"),
    "pytorch_lightning": (pl.Callback, "beyondlabels.callbacks.pytorch_lightning", "pytorch_lightning.loggers"),
}


@pytest.fixture(autouse=True)
def _fresh_hydra():
    """Each test composes from its own search path; the global Hydra state of other tests is put back."""
    before = HydraConfig.instance().cfg
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = before


def _shipped(name: str, *overrides: str):
    """The shipped config ``beyondlabels/<name>`` composed alone, as Hydra composes it from a user's tree."""
    with initialize_config_module(version_base="1.3", config_module="beyondlabels.conf"):
        return compose(config_name=f"beyondlabels/{name}", overrides=list(overrides))


def _options(node) -> dict:
    options = OmegaConf.to_container(node, resolve=False)
    options.pop("_target_")
    return options


def _accepted(cls: type) -> tuple[set[str], bool]:
    """The keyword arguments ``cls`` and the bases its ``**kwargs`` reach take; whether it takes any keyword."""
    names, anything = set(), True
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)} - {"self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            anything = False
            break
    return names, anything


@pytest.mark.parametrize("package", sorted(PACKAGES))
@pytest.mark.parametrize("name", CALLBACKS)
def test_every_callback_ships_for_both_packages(name: str, package: str, tmp_path: Path):
    base, module, _ = PACKAGES[package]
    node = _shipped(f"callbacks/{package}/{name}").callbacks[name]
    cls = hydra.utils.get_class(node._target_)
    assert issubclass(cls, base) and cls is getattr(__import__(module, fromlist=["_"]), cls.__name__)
    # the options are one file for both packages, and each of them is an argument of the callback
    other = next(p for p in PACKAGES if p != package)
    assert _options(node) == _options(_shipped(f"callbacks/{other}/{name}").callbacks[name])
    accepted, _ = _accepted(cls)
    assert set(_options(node)) <= accepted, sorted(set(_options(node)) - accepted)
    # and it builds with the values only a user can give (a class tree; an evaluator that needs no download)
    if name == "hierarchy":
        node.taxonomy = {"_target_": "beyondlabels.demo.demo_taxonomy"}
    if name == "rprecision":
        from beyondlabels.io.evaluator import TINY_CONFIG

        node.evaluator = {"_target_": "beyondlabels.io.evaluator.ClipEvaluator", "model_cfg": dict(TINY_CONFIG)}
    callback = hydra.utils.instantiate(node)
    assert isinstance(callback, cls)


@pytest.mark.parametrize("package", sorted(PACKAGES))
@pytest.mark.parametrize("name", LOGGERS)
def test_every_logger_ships_for_both_packages(name: str, package: str):
    node = _shipped(f"logger/{package}/{name}").logger[name]
    cls = hydra.utils.get_class(node._target_)
    assert cls.__module__.startswith(PACKAGES[package][2].rsplit(".", 1)[0] + ".")
    accepted, anything = _accepted(cls)
    assert anything or set(_options(node)) <= accepted, sorted(set(_options(node)) - accepted)


def test_the_shipped_configs_stand_on_their_own(tmp_path: Path):
    """No callback or logger config interpolates a key of the user's config: the only interpolations are Hydra's
    own (the job's output folder), and every one of them composed in an app of nothing else resolves."""
    files = sorted((SHIPPED / "beyondlabels" / "callbacks").rglob("*.yaml"))
    files += sorted((SHIPPED / "beyondlabels" / "logger").rglob("*.yaml"))
    assert len(files) == 3 * (len(CALLBACKS) + len(LOGGERS))
    for file in files:
        for interpolation in re.findall(r"\$\{([^}]*)\}", file.read_text()):
            assert interpolation.startswith("hydra:"), f"{file.name}: ${{{interpolation}}}"
    entries = [f"beyondlabels/callbacks/lightning/{name}" for name in CALLBACKS]
    entries += [f"beyondlabels/logger/pytorch_lightning/{name}" for name in LOGGERS]
    (tmp_path / "app.yaml").write_text("defaults:\n" + "".join(f"  - {entry}\n" for entry in entries))
    with initialize_config_dir(version_base="1.3", config_dir=str(tmp_path)):
        cfg = compose(config_name="app", overrides=[f"hydra.searchpath=[{SEARCHPATH}]"], return_hydra_config=True)
    with read_write(cfg.hydra):
        cfg.hydra.runtime.output_dir = "/run"  # as inside a run
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert set(resolved) == {"callbacks", "logger"} and set(resolved["callbacks"]) == set(CALLBACKS)
    assert set(resolved["logger"]) == set(LOGGERS) and resolved["logger"]["wandb"]["save_dir"] == "/run"
    assert resolved["logger"]["mlflow"]["tracking_uri"] == "sqlite:////run/mlflow.db"
    assert resolved["callbacks"]["hierarchy"]["taxonomy"] == "???"  # required, as the callback's argument is


def test_the_package_adds_one_namespace():
    """pkg://beyondlabels.conf holds beyondlabels/ and nothing else, so none of its groups is one of the user's."""
    entries = {p.name for p in SHIPPED.iterdir() if p.name != "__pycache__"}
    assert entries == {"__init__.py", "beyondlabels"}


def _user_tree(root: Path) -> Path:
    """A user's config tree in lightning-hydra-template's layout, with groups of the names the package uses."""
    (root / "callbacks").mkdir(parents=True)
    (root / "logger").mkdir()
    (root / "train.yaml").write_text(
        f"defaults:\n  - _self_\n  - callbacks: default\n  - logger: csv\n\nhydra:\n  searchpath:\n    - {SEARCHPATH}\n"
    )
    (root / "callbacks" / "default.yaml").write_text(
        "defaults:\n"
        "  - model_checkpoint\n"
        "  - /beyondlabels/callbacks/lightning/retrieval@retrieval\n"
        "  - /beyondlabels/callbacks/lightning/zeroshot\n"  # no @: its header's callbacks.zeroshot
        "  - /beyondlabels/callbacks/lightning/retrieval@retrieval_test\n"
        "  - _self_\n\n"
        "retrieval:\n  encode_method: forward\n"
        "retrieval_test:\n  prefix: retrieval_test\n  dataloader: test_dataloader\n"
    )
    (root / "callbacks" / "model_checkpoint.yaml").write_text(
        "model_checkpoint:\n  _target_: lightning.pytorch.callbacks.ModelCheckpoint\n  monitor: retrieval/map@r\n"
        "  mode: max\n"
    )
    # options of the user's own named as the package's
    (root / "callbacks" / "retrieval.yaml").write_text("retrieval:\n  _target_: my_project.MyRetrieval\n")
    (root / "logger" / "csv.yaml").write_text(
        "csv:\n  _target_: lightning.pytorch.loggers.CSVLogger\n  save_dir: my_logs\n"
    )
    return root


def test_a_users_callbacks_group_includes_the_shipped_callbacks(tmp_path: Path):
    from beyondlabels.utils import instantiate_callbacks

    with initialize_config_dir(version_base="1.3", config_dir=str(_user_tree(tmp_path / "configs"))):
        cfg = compose(config_name="train")
    assert list(cfg.callbacks) == ["model_checkpoint", "retrieval", "zeroshot", "retrieval_test"]
    callbacks = instantiate_callbacks(cfg.callbacks)  # as the template's train.py: every entry with a _target_
    assert [type(c).__module__.split(".")[0] for c in callbacks] == ["lightning", "beyondlabels", *["beyondlabels"] * 2]
    checkpoint, retrieval, zeroshot, retrieval_test = callbacks
    assert retrieval.encode_method == "forward" and retrieval.prefix == "retrieval" and not retrieval.strict
    assert retrieval_test.prefix == "retrieval_test" and retrieval_test.encode_method == "encode_image"
    assert isinstance(zeroshot, lpl.Callback)
    lpl.Trainer(callbacks=callbacks, logger=False, enable_progress_bar=False)  # one package: no "Expected a parent"
    # the user's own options of the same names are theirs
    assert cfg.logger.csv.save_dir == "my_logs"


def test_the_shipped_configs_never_shadow_a_users_own(tmp_path: Path):
    with initialize_config_dir(version_base="1.3", config_dir=str(_user_tree(tmp_path / "configs"))):
        mine = compose(config_name="train", overrides=["callbacks=retrieval"])
        added = compose(config_name="train", overrides=["+beyondlabels/logger/lightning@logger.wandb=wandb"])
    assert OmegaConf.to_container(mine.callbacks) == {"retrieval": {"_target_": "my_project.MyRetrieval"}}
    assert list(added.logger) == ["csv", "wandb"] and added.logger.csv.save_dir == "my_logs"
    assert added.logger.wandb._target_ == "lightning.pytorch.loggers.WandbLogger" and added.logger.wandb.offline


def test_a_users_primary_config_includes_a_shipped_callback(tmp_path: Path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "config.yaml").write_text(
        "defaults:\n  - beyondlabels/callbacks/lightning/retrieval@callbacks.retrieval\n  - _self_\n\n"
        "callbacks:\n  retrieval:\n    encode_method: forward\n"
    )
    with initialize_config_dir(version_base="1.3", config_dir=str(configs)):
        cfg = compose(config_name="config", overrides=[f"hydra.searchpath=[{SEARCHPATH}]"])
    callback = hydra.utils.instantiate(cfg.callbacks.retrieval)
    assert isinstance(callback, lpl.Callback) and callback.encode_method == "forward"
    assert list(cfg) == ["callbacks"] and list(cfg.callbacks) == ["retrieval"]
