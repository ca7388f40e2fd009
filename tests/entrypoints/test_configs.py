"""Every config group composes, and the composed configs instantiate what they name."""

from __future__ import annotations

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

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ["data", "model", "callbacks", "logger", "trainer", "experiment", "hparams_search", "debug", "paths", "hydra"]


def _has_optuna_sweeper() -> bool:
    try:
        return importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None
    except ModuleNotFoundError:
        return False


HAS_OPTUNA = _has_optuna_sweeper()


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _compose(config_name: str, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
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
    # every value the option file sets, and every value of a same-group config in its defaults list that it does
    # not set itself, is in the composed config where its package puts it: plain values resolved, interpolations
    # as written (the hydra node is only resolved inside a run)
    text = (CONF / group / f"{option}.yaml").read_text()
    content = _content(group, option)
    inherited = [d for d in (yaml.safe_load(text) or {}).get("defaults") or [] if isinstance(d, str) and d != "_self_"]
    own = {path for path, _ in _leaves(content)}
    expected = list(_leaves(content))
    for name in inherited:
        expected += [
            (path, value) for path, value in _leaves(_content(group, name)) if not any(_nested(path, o) for o in own)
        ]
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


def _nested(a: tuple, b: tuple) -> bool:
    """One key path lies inside the other (an option's own value replaces the inherited subtree)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _content(group: str, option: str) -> dict:
    content = yaml.safe_load((CONF / group / f"{option}.yaml").read_text()) or {}
    content.pop("defaults", None)
    if group != "hydra":
        content.pop("hydra", None)  # a hydra node of an option exists only inside a run
    return content


def _leaves(tree, prefix=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, (*prefix, key))
    else:
        yield prefix, tree


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
