"""Every config group composes, and the composed configs instantiate what they name; the project's conf/ and the
package's configs hold each config once."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import hydra
import pytest
import pytorch_lightning as pl
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from tests.entrypoints.helpers import EVALUATE_CONF, REPO_ROOT, TRAIN_CONF

CONF = TRAIN_CONF
PACKAGE_CONF = REPO_ROOT / "src" / "beyondlabels" / "conf"
# where train.yaml's configs are found: conf/, then its search path (the package's configs, and evaluate's tree for
# the paths/ and hydra/ groups train.py shares with evaluate.py)
ROOTS = (CONF, PACKAGE_CONF, EVALUATE_CONF)
GROUPS = ["data", "model", "callbacks", "logger", "trainer", "experiment", "hparams_search", "debug", "paths", "hydra"]


def _has_optuna_sweeper() -> bool:
    try:
        return importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None
    except ModuleNotFoundError:
        return False


HAS_OPTUNA = _has_optuna_sweeper()


def _options(group: str) -> list[str]:
    return sorted({p.stem for root in ROOTS for p in (root / group).glob("*.yaml")})


def _file(path: str) -> Path:
    """The config file ``path`` (``callbacks/retrieval``, ``beyondlabels/callbacks/options/retrieval``) of the first
    root that has it, as Hydra finds it."""
    for root in ROOTS:
        if (root / f"{path}.yaml").is_file():
            return root / f"{path}.yaml"
    raise FileNotFoundError(f"no config {path}.yaml under {[str(r) for r in ROOTS]}")


def _compose(config_name: str, overrides: list[str]):
    GlobalHydra.instance().clear()
    root = EVALUATE_CONF if config_name == "evaluate" else CONF
    with initialize_config_dir(version_base="1.3", config_dir=str(root)):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


@pytest.fixture(autouse=True)
def _restore_hydra_config():
    """`_compose` sets the global HydraConfig, as a Hydra run does; put back what was there before the test."""
    before = HydraConfig.instance().cfg
    yield
    HydraConfig.instance().cfg = before


def test_every_group_has_options():
    for group in GROUPS:
        assert _options(group), f"conf/{group}/ is empty"


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in _options(g)])
def test_group_option_composes(group: str, option: str, tmp_path: Path):
    if group == "hparams_search" and not HAS_OPTUNA:
        pytest.skip("hydra-optuna-sweeper is an optional extra (pip install 'beyondlabels[sweep]')")
    cfg = _compose("train", [f"{group}={option}", f"paths.log_dir={tmp_path}"])
    raw = OmegaConf.to_container(cfg, resolve=False)  # interpolations as written, the hydra node included
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path)  # ${hydra:runtime.output_dir} exists only inside a run
        del cfg["hydra"]
    container = OmegaConf.to_container(cfg, resolve=True)
    # every value the option file sets, and every value of a config in its defaults list (a same-group option, or a
    # config the package ships, at its @package) that it does not set itself, is in the composed config where its
    # package puts it: plain values resolved, interpolations as written (the hydra node is only resolved inside a run)
    text = _file(f"{group}/{option}").read_text()
    expected = list(_leaves(_merged(f"{group}/{option}", keep_hydra=group == "hydra")))
    packaged = "@package _global_" in text
    if not expected:  # an empty option: the group composes to nothing
        assert container[group] in (None, {}), (group, option, container[group])
        return
    for path, value in expected:
        full = (*([] if packaged else [group]), *path)
        if full in (("paths", "log_dir"), ("paths", "output_dir")):
            continue  # set above
        interpolated = isinstance(value, str) and "${" in value
        node = raw if interpolated or group == "hydra" else container
        for part in full:
            node = node[part]
        assert node == value, (group, option, path)


def _merge(base: dict, other: dict) -> dict:
    """``other`` merged into ``base`` as OmegaConf merges configs: mappings key by key, any other value replaced."""
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _merged(path: str, keep_hydra: bool = False) -> dict:
    """What the config file ``path`` puts under its own package: the configs of its defaults list (``_self_`` where
    listed, else last) merged in order, each at its ``@package`` relative to this config (``_here_``: the same node),
    the file's own content at ``_self_``. Group defaults (``override /model: null``, ``hydra_logging``) are the
    concern of their own group's options."""
    data = yaml.safe_load(_file(path).read_text()) or {}
    defaults = data.pop("defaults", None) or []
    if not keep_hydra:
        data.pop("hydra", None)  # a hydra node of an option exists only inside a run
    group = path.rpartition("/")[0]
    merged: dict = {}
    for entry in defaults if "_self_" in defaults else [*defaults, "_self_"]:
        if entry == "_self_":
            _merge(merged, data)
        elif isinstance(entry, str):
            name, _, package = entry.partition("@")
            if name.startswith("/"):  # a config of another group: where its header would put it is not read here
                name = name[1:]
                assert package or "# @package" not in _file(name).read_text(), f"{path}: give {entry} its @package"
            else:  # an option of the same group, in the same package
                name = f"{group}/{name}"
            content = _merged(name)
            for key in reversed(package.split(".") if package not in ("", "_here_") else []):
                content = {key: content}
            _merge(merged, content)
    return merged


def _leaves(tree, prefix=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, (*prefix, key))
    else:
        yield prefix, tree


def test_each_config_is_in_one_place():
    """The package holds the configs train.py shares with evaluate.py and the beyondlabels command (evaluate's tree:
    evaluate.yaml, task/, eval/, paths/, hydra/default.yaml) and every callback's and logger's options; conf/ holds
    none of them again (a file there would shadow the package's for train.py alone)."""
    shipped = {p.relative_to(EVALUATE_CONF) for p in EVALUATE_CONF.rglob("*.yaml")}
    shipped |= {p.relative_to(PACKAGE_CONF) for p in PACKAGE_CONF.rglob("*.yaml")}
    assert {Path("evaluate.yaml"), Path("hydra/default.yaml"), Path("paths/default.yaml")} <= shipped
    twice = sorted(str(p.relative_to(CONF)) for p in CONF.rglob("*.yaml") if p.relative_to(CONF) in shipped)
    assert not twice, f"conf/ repeats configs the package ships (src/beyondlabels/conf/): {twice}"
    for group in ("task", "eval", "paths"):
        assert not (CONF / group).exists(), f"conf/{group}/ is evaluate's: its options live in {EVALUATE_CONF / group}"


def test_evaluate_config_composes(tmp_path: Path):
    cfg = _compose("evaluate", ["task=retrieval", "input=x.npz", f"paths.log_dir={tmp_path}"])
    assert cfg.k == [1, 5, 10] and cfg.eval.precision == "fp32"


def test_every_evaluate_task_has_its_config_group_option(tmp_path: Path):
    from hydra.errors import ConfigCompositionException

    from beyondlabels.tasks import TASKS

    assert sorted(TASKS) == _options("task")
    for name in TASKS:
        cfg = _compose("evaluate", [f"task={name}", f"paths.log_dir={tmp_path}"])
        assert cfg.hydra.runtime.choices.task == name and "task" not in cfg
    # a task's keys exist only under that task: abtest's guardrail tolerance is no key of task=compare
    with pytest.raises(ConfigCompositionException, match="tolerance"):
        _compose("evaluate", ["task=compare", "tolerance=0.1", f"paths.log_dir={tmp_path}"])


def test_default_train_config_instantiates_everything(tmp_path: Path):
    cfg = _compose("train", [f"paths.log_dir={tmp_path}"])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path)
    assert cfg.logger.wandb.offline is True, "W&B must be offline by default"
    assert set(cfg.logger) == {"wandb", "csv"}
    datamodule = hydra.utils.instantiate(cfg.data)
    model = hydra.utils.instantiate(cfg.model)
    assert callable(model.encode_image) and callable(model.encode_text)
    assert len(datamodule.class_names) >= 12
    for name, callback in cfg.callbacks.items():
        assert isinstance(hydra.utils.instantiate(callback), pl.Callback), name


def test_strict_reaches_every_evaluation_callback(tmp_path: Path):
    """train.yaml's `strict` is every evaluation callback's (the shipped configs default to false on their own)."""
    overrides = ["callbacks=[default,convergence,rprecision]", f"paths.log_dir={tmp_path}"]
    for strict in (True, False):
        cfg = _compose("train", [f"strict={strict}", *overrides])
        evaluations = {name for name, node in cfg.callbacks.items() if "strict" in node}
        assert evaluations == {"retrieval", "crossmodal", "zeroshot", "hierarchy", "rprecision"}
        assert all(cfg.callbacks[name].strict is strict for name in evaluations)
    # a callback's own setting still wins
    cfg = _compose("train", ["strict=true", "callbacks.retrieval.strict=false", f"paths.log_dir={tmp_path}"])
    assert cfg.callbacks.retrieval.strict is False and cfg.callbacks.hierarchy.strict is True
