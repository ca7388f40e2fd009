"""The demo's frozen text-to-image evaluator: a TinyCLIP trained on the demo shapes, without downloads.

Text-to-image R-precision needs a frozen image-text dual encoder. Real runs use an open_clip model with pretrained
weights; the demo (``python train.py experiment=t2i_demo``) has no hub to download from, so :func:`demo_evaluator`
trains the demo's own :class:`~beyondlabels.demo.model.TinyCLIP` on the demo shapes once, saves it, and returns it as
a :class:`~beyondlabels.io.evaluator.ClipEvaluator`.

Files
    ``path`` holds the CLIP's state dict (:func:`save_tiny_clip_evaluator`) and
    ``path`` with suffix ``.json`` (e.g. ``tiny_clip.json``) the :class:`ClipEvaluator` arguments that rebuild it plus
    how it was made (``"training"``). Both are written atomically, the JSON last: a checkpoint is complete when its
    JSON exists. The evaluator's identity records the checkpoint's SHA-256, so runs that share the file report one
    identity and their numbers compare.

Files from elsewhere
    The two files may be shared or downloaded, so they are data, never code: the weights are read with
    ``torch.load(weights_only=True)``; the JSON may hold only the TinyCLIP architecture arguments (ints, and the
    tower's name), ``mean`` and ``std``. Its ``model_factory`` entry, when present, must be the one factory a demo
    evaluator is built with (:func:`~beyondlabels.demo.model.tiny_clip_model`); any other is refused, never imported.
    The model the JSON describes is first built on PyTorch's meta device (no memory) and its parameter shapes must
    equal the checkpoint's, so a file cannot ask for more memory than the weights it ships.

Reuse
    When both files exist they are loaded, nothing is trained. An evaluator trained here must have been trained as asked
    (same epochs, seed, model and data settings); otherwise a ``ValueError`` says so instead of silently mixing
    evaluators: delete its files or choose another ``path``. One exported by the user (:func:`export_demo_evaluator`)
    is taken as it is, unless ``source_checkpoint`` names another source. A checkpoint without its JSON is refused.

Training
    ``TinyCLIP(**model)`` on ``ShapesDataModule(**data)`` (their defaults unless overridden), a plain
    :class:`pytorch_lightning.Trainer` for ``epochs`` epochs, no loggers, callbacks, checkpoints or validation. Seeded
    by ``seed`` inside :func:`torch.random.fork_rng`: the caller's torch random state is the same afterwards, so
    training the evaluator does not change the training of the model it evaluates. The same seed and settings give the
    same bytes, hence the same identity, on one machine with one torch version and thread count (float sums may round
    otherwise elsewhere: the reason the identity names the file's hash, not the recipe).

Your own TinyCLIP
    The default demo run (``python train.py``) trains a TinyCLIP for longer than the one epoch here. To evaluate under
    it, export it once with :func:`export_demo_evaluator`, in Python, or on the command line with
    ``python train.py experiment=t2i_demo t2i_evaluator.source_checkpoint=logs/train/runs/<time>/checkpoints/last.ckpt
    t2i_evaluator.path=logs/t2i_evaluator/my_clip.pt`` (the Lightning checkpoint is unpickled: only pass your own
    files).

Examples:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> tiny = dict(embed_dim=8, vision_width=16, vision_layers=1, vision_head_width=8, text_width=16, text_heads=2,
    ...             text_layers=1)
    >>> ev = demo_evaluator(folder / "clip.pt", epochs=1, model=tiny, data=dict(train_per_class=2, batch_size=16))
    >>> ev.identity["weights"].startswith("checkpoint sha256:"), sorted(p.name for p in folder.iterdir())
    (True, ['clip.json', 'clip.pt'])
    >>> import shutil; shutil.rmtree(folder)
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import torch

from beyondlabels._internal.checks import check_positive_int, check_seed, is_number
from beyondlabels._internal.convert import plain
from beyondlabels._internal.files import load_tensors
from beyondlabels._internal.parse import parse_json, read_text
from beyondlabels.demo.model import tiny_clip_model
from beyondlabels.io.atomic import atomic_file, save_torch, write_json
from beyondlabels.io.evaluator import ClipEvaluator

log = logging.getLogger(__name__)

__all__ = ["demo_evaluator", "export_demo_evaluator", "save_tiny_clip_evaluator"]

# Bumped whenever the demo's defaults (TinyCLIP architecture, data, captions) change what training produces: an
# evaluator trained under other defaults is then refused instead of silently reused.
_FORMAT = "beyondlabels demo evaluator 2"
# The one factory a demo evaluator file may name (a file never names code: this is what it is built with).
_TINY_FACTORY = "beyondlabels.demo.model.tiny_clip_model"


def _json_path(path: Path) -> Path:
    return path.with_suffix(".json")


def export_demo_evaluator(module: Any, path: str | os.PathLike[str], training: Mapping[str, Any] | None = None) -> Path:
    """Save a trained :class:`~beyondlabels.demo.model.TinyCLIP` as a demo evaluator: ``path`` and its ``.json``.

    Both files are written atomically (the JSON last), so :func:`demo_evaluator` with this ``path`` loads it.

    Args:
        module: A TinyCLIP (for one from a Lightning checkpoint: ``TinyCLIP.load_from_checkpoint(file)``).
        path: The state-dict file to write (its folder is created).
        training: How the module was made, recorded in the JSON (default: ``{"exported": True}``).

    Returns:
        The JSON file's path.

    Raises:
        ValueError: if ``module`` is not a TinyCLIP (from :func:`save_tiny_clip_evaluator`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Through a file object: torch.save then names the archive inside "archive", not after the (random) temporary
    # file, so equal weights give equal bytes and one SHA-256.
    with atomic_file(path) as fh:
        kwargs = save_tiny_clip_evaluator(module, fh)
    kwargs.pop("checkpoint")
    record = {
        "format": _FORMAT,
        "evaluator": kwargs,
        "training": plain(dict(training)) if training else {"exported": True},
    }
    write_json(_json_path(path), record, sort_keys=True)
    return _json_path(path)


def _train(epochs: int, seed: int, model: Mapping[str, Any], data: Mapping[str, Any], device: torch.device) -> Any:
    import pytorch_lightning as pl

    from beyondlabels.demo.datamodule import ShapesDataModule
    from beyondlabels.demo.model import TinyCLIP

    accelerator = "gpu" if device.type == "cuda" else device.type
    devices = [device.index or 0] if device.type == "cuda" else 1
    fork_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=fork_devices), tempfile.TemporaryDirectory() as root:
        torch.manual_seed(seed)
        datamodule = ShapesDataModule(**data)
        clip = TinyCLIP(**model)
        trainer = pl.Trainer(
            max_epochs=epochs,
            accelerator=accelerator,
            devices=devices,
            logger=False,
            callbacks=[],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            default_root_dir=root,
        )
        trainer.fit(clip, datamodule=datamodule)
    return clip.cpu().eval()


def demo_evaluator(
    path: str | os.PathLike[str] = "logs/t2i_evaluator/tiny_clip.pt",
    epochs: int = 1,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
    device: str | torch.device = "cpu",
    *,
    model: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    source_checkpoint: str | os.PathLike[str] | None = None,
    batch_size: int = 256,
) -> ClipEvaluator:
    """The demo's frozen TinyCLIP evaluator at ``path``: loaded when it exists, else trained (or exported) and saved.

    Behaviour (files, reuse, training, seeding): the module docstring.

    Args:
        path: The evaluator's state-dict file; its JSON lies beside it (``.json`` suffix).
        epochs: Training epochs of a new evaluator.
        seed: Seed of a new evaluator's initialisation and data order (the data come from ``data``'s ``data_seed``).
        cache_dir: Text-feature cache folder of the :class:`~beyondlabels.io.evaluator.ClipEvaluator` (None: off).
        device: Where the evaluator trains and runs.
        model: :class:`~beyondlabels.demo.model.TinyCLIP` arguments overriding its defaults.
        data: :class:`~beyondlabels.demo.datamodule.ShapesDataModule` arguments overriding its defaults.
        source_checkpoint: A Lightning checkpoint of a TinyCLIP (e.g. ``checkpoints/last.ckpt`` of the default demo
            run) to export to ``path`` instead of training one. Unpickled: only pass files you trust.
        batch_size: Images or texts the evaluator encodes per forward pass.

    Returns:
        The frozen evaluator; its identity names the checkpoint by SHA-256.

    Raises:
        ValueError: if ``epochs`` is not a positive int, ``seed`` not an int, ``path`` holds an evaluator made
            differently or a checkpoint without its JSON, the JSON is malformed, names a factory or an argument other
            than the TinyCLIP's, or does not match the checkpoint's shapes, or ``source_checkpoint`` does not exist.
    """
    epochs, seed = check_positive_int(epochs, "epochs"), check_seed(seed)
    for name, value in (("model", model), ("data", data)):
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(f"`{name}` must be a mapping of keyword arguments or None, got {type(value).__name__}.")
    path, device = Path(path), torch.device(device)
    if path.suffix == ".json":
        raise ValueError(
            f"`path` {path} must name the state-dict file (e.g. tiny_clip.pt); its JSON is written beside it."
        )
    training = _training_record(epochs, seed, model, data, source_checkpoint)
    json_path = _json_path(path)
    if _reusable(path, json_path, training, source_checkpoint):
        log.info("demo evaluator: reusing %s", path)
    elif source_checkpoint is not None:
        from beyondlabels.demo.model import TinyCLIP

        log.info("demo evaluator: exporting %s to %s", source_checkpoint, path)
        try:
            clip = TinyCLIP.load_from_checkpoint(str(source_checkpoint), map_location="cpu", weights_only=False)
        except (KeyError, TypeError, RuntimeError) as exc:
            raise ValueError(
                f"`source_checkpoint` {source_checkpoint} is not a Lightning checkpoint of a TinyCLIP: {exc}"
            ) from exc
        export_demo_evaluator(clip, path, training)
    else:
        log.info(
            "demo evaluator: training TinyCLIP for %d epoch(s) (seed %d) -> %s; later runs reuse it", epochs, seed, path
        )
        export_demo_evaluator(_train(epochs, seed, model or {}, data or {}, device), path, training)
    arguments = _evaluator_arguments(_read_record(json_path), json_path)
    _check_fits_checkpoint(arguments["model_cfg"], path, json_path)
    return ClipEvaluator(
        **arguments,
        model_factory=tiny_clip_model,
        checkpoint=path,
        cache_dir=cache_dir,
        batch_size=batch_size,
        device=device,
    )


def _training_record(
    epochs: int,
    seed: int,
    model: Mapping[str, Any] | None,
    data: Mapping[str, Any] | None,
    source_checkpoint: str | os.PathLike[str] | None,
) -> dict[str, Any]:
    """How the evaluator is made, as its JSON records it: exported from ``source_checkpoint``, or trained."""
    if source_checkpoint is not None:
        source = Path(source_checkpoint)
        if not source.is_file():
            raise ValueError(
                f"`source_checkpoint` {source} does not exist; "
                "pass a Lightning checkpoint of a TinyCLIP (e.g. checkpoints/last.ckpt)."
            )
        return {"source_checkpoint": str(source.resolve())}
    return {
        "epochs": epochs,
        "seed": seed,
        "model": plain(dict(model or {})),
        "data": plain(dict(data or {})),
        "defaults": _FORMAT,
    }


def _reusable(path: Path, json_path: Path, training: dict[str, Any], source_checkpoint: object) -> bool:
    """Whether ``path`` holds the evaluator asked for (False: none is there yet); a different one is an error."""
    if json_path.is_file() and path.is_file():
        made = _read_record(json_path).get("training", {})
        # An evaluator trained here must match the training asked for; one the user exported is taken as it is,
        # unless the request names a source checkpoint it was not made from.
        user_made = "epochs" not in made and source_checkpoint is None
        if made != training and not user_made:
            raise ValueError(
                f"`path` {path} holds a demo evaluator made with {made}, not {training}; numbers under different "
                "evaluators do not compare. Delete its two files to remake it, or choose another `path`."
            )
        return True
    if path.is_file():
        raise ValueError(
            f"`path` {path} exists without {json_path.name}, so its model config is unknown; write both with "
            "beyondlabels.demo.export_demo_evaluator(module, path), or delete the file to train a new evaluator there."
        )
    return False


def _read_record(json_path: Path) -> dict[str, Any]:
    """The evaluator JSON: an object with an ``evaluator`` object and a ``training`` object (errors name the file)."""
    where = f"demo evaluator file {json_path}"
    record = parse_json(read_text(json_path, where, 1 << 20), where)
    parts = (record.get("evaluator"), record.get("training", {})) if isinstance(record, dict) else (None, None)
    if not all(isinstance(part, dict) for part in parts):
        raise ValueError(
            f"demo evaluator file {json_path}: expected an object with an 'evaluator' and a 'training' object (as "
            "export_demo_evaluator writes it); delete the file and its checkpoint to train a new evaluator there."
        )
    return record


def _evaluator_arguments(record: Mapping[str, Any], json_path: Path) -> dict[str, Any]:
    """``model_cfg``, ``mean`` and ``std`` of the TinyCLIP the file describes, checked. The file is data: it names no
    code (the factory is always :func:`~beyondlabels.demo.model.tiny_clip_model`) and no other evaluator argument."""
    from beyondlabels.demo.model import ARCHITECTURE_KEYS

    where = f"demo evaluator file {json_path}"
    given = record["evaluator"]
    unknown = sorted(set(given) - {"model_factory", "model_cfg", "mean", "std"})
    if unknown:
        raise ValueError(
            f"{where}: unknown evaluator argument(s) {unknown}; a demo evaluator file holds only model_cfg, mean "
            "and std."
        )
    if given.get("model_factory", _TINY_FACTORY) != _TINY_FACTORY:
        raise ValueError(
            f"{where}: 'model_factory' names {given['model_factory']!r}; a data file never names code to run, and a "
            f"demo evaluator is always the TinyCLIP of {_TINY_FACTORY}. For another architecture build "
            "beyondlabels.io.evaluator.ClipEvaluator(model_factory=...) in your own config (its _target_)."
        )
    cfg = given.get("model_cfg")
    if not isinstance(cfg, dict) or sorted(set(cfg) - set(ARCHITECTURE_KEYS)):
        extra = sorted(set(cfg) - set(ARCHITECTURE_KEYS)) if isinstance(cfg, dict) else type(cfg).__name__
        raise ValueError(
            f"{where}: 'model_cfg' must map TinyCLIP architecture arguments {ARCHITECTURE_KEYS}; got {extra!r}."
        )
    for key, value in cfg.items():
        wanted = str if key == "vision" else int
        if isinstance(value, bool) or not isinstance(value, wanted) or (wanted is int and not 0 < value < 1 << 31):
            kind = "a name" if wanted is str else "a positive int"
            raise ValueError(f"{where}: model_cfg {key!r} must be {kind}, got {value!r}.")
    out: dict[str, Any] = {"model_cfg": dict(cfg)}
    for key in ("mean", "std"):
        value = given.get(key, [0.25, 0.25, 0.25])
        if not isinstance(value, list) or len(value) != 3 or not all(_is_finite_number(v) for v in value):
            raise ValueError(f"{where}: {key!r} must be a list of 3 finite numbers, got {value!r}.")
        out[key] = [float(v) for v in value]
    return out


def _is_finite_number(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)


def _check_fits_checkpoint(model_cfg: Mapping[str, Any], path: Path, json_path: Path) -> None:
    """Build the described model on the meta device (no memory) and compare its parameter shapes with the
    checkpoint's, so that a file cannot ask for a model larger than the weights it ships."""
    from beyondlabels.demo.model import tiny_clip_model

    where = f"demo evaluator file {json_path}"
    try:
        with torch.device("meta"):
            shapes = {k: tuple(v.shape) for k, v in tiny_clip_model(**model_cfg).state_dict().items()}
    except (ValueError, TypeError, RuntimeError, KeyError) as exc:
        raise ValueError(f"{where}: model_cfg does not describe a TinyCLIP: {exc}") from exc
    try:
        state = load_tensors(path, "`checkpoint`", mmap=True)
    except FileNotFoundError as exc:
        raise ValueError(f"`checkpoint` {path} is missing: {exc}") from None
    given = {k: tuple(v.shape) for k, v in state.items()} if isinstance(state, Mapping) else {}
    if given != shapes:
        differ = sorted(k for k in set(shapes) | set(given) if shapes.get(k) != given.get(k))
        shown = differ[:3]
        raise ValueError(
            f"{where}: the parameters its model_cfg describes do not match the weights in {path} ({len(differ)} "
            f"differ, e.g. {shown}: {[shapes.get(k) for k in shown]} against {[given.get(k) for k in shown]})."
        )


def save_tiny_clip_evaluator(module: Any, path: str | os.PathLike[str] | IO[bytes]) -> dict[str, Any]:
    """Save the CLIP of a trained :class:`~beyondlabels.demo.model.TinyCLIP` as an evaluator checkpoint.

    Writes ``module.clip.state_dict()`` to ``path`` (a file path or a binary file object) and returns the keyword
    arguments of :class:`ClipEvaluator` that rebuild it (``model_factory`` =
    :func:`beyondlabels.demo.model.tiny_clip_model`, ``model_cfg`` = every architecture argument, ``checkpoint``,
    ``mean``, ``std``): the demo's dual encoder becomes a frozen evaluator without downloads.

    Raises:
        ValueError: if ``module`` lacks the TinyCLIP hyperparameters or its ``clip`` model.
    """
    from beyondlabels.demo.model import ARCHITECTURE_KEYS

    hp = getattr(module, "hparams", None)
    # `vision` and `conv_width` are optional hyperparameters: a TinyCLIP without them is a ViT.
    needed = tuple(k for k in ARCHITECTURE_KEYS if k not in ("vision", "conv_width")) + ("image_mean", "image_std")
    if hp is None or not hasattr(module, "clip") or any(k not in hp for k in needed):
        raise ValueError(
            f"`module` must be a TinyCLIP (hyperparameters {needed} and a `clip` model), got {type(module).__name__}."
        )
    model_cfg = {k: plain(hp[k]) for k in ARCHITECTURE_KEYS if k in hp}
    model_cfg.setdefault("vision", "vit")
    state = {k: v.detach().cpu() for k, v in module.clip.state_dict().items()}
    if isinstance(path, (str, os.PathLike)):
        save_torch(state, path)
    else:
        torch.save(state, path)  # atomic: a handle the caller opened (export_demo_evaluator: io.atomic.atomic_file)
    return {
        "model_factory": "beyondlabels.demo.model.tiny_clip_model",
        "model_cfg": model_cfg,
        "checkpoint": str(path) if isinstance(path, (str, os.PathLike)) else getattr(path, "name", None),
        "mean": [float(v) for v in hp["image_mean"]],
        "std": [float(v) for v in hp["image_std"]],
    }
