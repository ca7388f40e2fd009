"""A frozen open_clip evaluator for text-to-image R-precision, with an on-disk text-feature cache.

Identity
    Numbers are comparable only under one evaluator. :class:`ClipEvaluator` records what it is in
    :attr:`ClipEvaluator.identity` (a JSON-ready dict: the open_clip model name or the full model config, the pretrained
    tag, the SHA-256 of a local checkpoint file, the seed of a random initialisation, the preprocessing) and
    :attr:`ClipEvaluator.identity_hash` (SHA-256 of its canonical JSON). Reports and run configs store the identity.

Weights
    ``pretrained`` is an open_clip tag (``"openai"``, ``"laion2b_s34b_b79k"``, ...; open_clip downloads it when it is
    not cached; the tests and the demo never need one), ``checkpoint`` a local state-dict file loaded with
    ``torch.load(weights_only=True)`` (no code in the file runs), or neither: a random initialisation seeded by
    ``init_seed`` (tests).

Preprocessing
    Images are float tensors ``[N, 3, H, W]`` with values in ``[0, 1]`` (what a generator returns); they are resized to
    the model's input size (bicubic, antialiased; skipped when the size already matches) and normalised by ``mean`` /
    ``std`` (default: OpenAI CLIP's). Features are fp32 and L2-normalised.

Text-feature cache
    With ``cache_dir``, the features of each exact text are stored under ``cache_dir/<identity_hash>/``, keyed by the
    SHA-256 of the UTF-8 text; re-evaluation encodes only texts not seen before. A changed evaluator (other weights,
    config, preprocessing) has another identity hash, so it never reads a stale entry. Files are written atomically.

Examples:
    >>> ev = ClipEvaluator(model_cfg=TINY_CONFIG, init_seed=0)
    >>> ev.encode_texts(["a red square", "a blue circle"]).shape, ev.identity["weights"]
    (torch.Size([2, 16]), 'random init seed 0')
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from beyondlabels._internal.checks import check_positive_int
from beyondlabels._internal.convert import plain
from beyondlabels._internal.files import load_tensors
from beyondlabels._internal.parse import read_json
from beyondlabels.io.atomic import save_torch, write_json

__all__ = ["TINY_CONFIG", "ClipEvaluator", "TextFeatureCache", "file_sha256"]

_SHA256 = re.compile(r"[0-9a-f]{64}")
_OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
_OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)

# A tiny open_clip CLIP config (32 px images, 16-d features) for tests and demos: created without downloads.
TINY_CONFIG: dict[str, Any] = {
    "embed_dim": 16,
    "vision_cfg": {"layers": 1, "width": 32, "head_width": 16, "patch_size": 8, "image_size": 32},
    "text_cfg": {"context_length": 16, "width": 32, "heads": 2, "layers": 1},
}


def _canonical(value: Any) -> str:
    return json.dumps(plain(value), sort_keys=True, separators=(",", ":"))


def _factory(factory: str | Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    """The factory and its dotted name: a callable given by the caller, or one named by a dotted path in the caller's
    configuration (imported, never read from a data file)."""
    if callable(factory):
        name = getattr(factory, "__qualname__", type(factory).__name__)
        return factory, f"{getattr(factory, '__module__', '?')}.{name}"
    return _import_function(factory), factory


def _import_function(path: str) -> Any:
    """The function named by a dotted path (``package.module.function``)."""
    import importlib

    module_name, _, name = path.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"`model_factory` {path!r} cannot be imported: {exc}") from exc
    if not callable(fn):
        raise ValueError(f"`model_factory` {path!r} is not callable.")
    return fn


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class TextFeatureCache:
    """Text features on disk under ``root/<identity_hash>/``, keyed by the SHA-256 of each exact text.

    The folder holds ``identity.json`` (the evaluator identity, written with the first shard) and shards
    ``shard_<random>.pt``, each ``{"keys": [sha256 hex, ...], "features": float32 [len(keys), D]}``. A cache folder
    travels (it is copied, renamed, shared), so it is checked when read, and any shard that fails a check is a
    ``ValueError`` that names it: ``identity.json`` must be there and name this evaluator (features of one evaluator
    never score another's); a shard must be a file of tensors (a pickle that names code is refused, never run), with
    one SHA-256 key per row, float32 rows of one width ``D`` (the evaluator's, when ``dim`` is given), finite and of
    unit norm (within 1e-3).

    Args:
        root: Cache folder (created on first write).
        identity: The evaluator identity (its hash names the subfolder; the identity is written beside the entries).
        dim: The width of the evaluator's features, when known (checked against every shard).

    Attributes:
        hits, misses: Texts found / not found by :meth:`lookup` since creation.
    """

    IDENTITY_FILE = "identity.json"
    NORM_TOLERANCE = 1e-3

    def __init__(self, root: str | os.PathLike[str], identity: Mapping[str, Any], dim: int | None = None) -> None:
        self.identity = dict(identity)
        self.identity_hash = hashlib.sha256(_canonical(self.identity).encode()).hexdigest()
        self.folder = Path(root) / self.identity_hash
        self.dim = dim
        self.hits = 0
        self.misses = 0
        self._entries: dict[str, Tensor] | None = None

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _load(self) -> dict[str, Tensor]:
        if self._entries is None:
            entries: dict[str, Tensor] = {}
            shards = sorted(self.folder.glob("shard_*.pt")) if self.folder.is_dir() else []
            if shards:
                self._check_identity()
            for shard in shards:
                keys, features = self._read_shard(shard)
                entries.update(zip(keys, features))
            self._entries = entries
        return self._entries

    def _check_identity(self) -> None:
        file = self.folder / self.IDENTITY_FILE
        where = f"text-feature cache {self.folder}"
        try:
            written = read_json(file, f"{where}: {self.IDENTITY_FILE}", max_bytes=1 << 20)
        except FileNotFoundError:
            raise ValueError(
                f"{where} holds features but no {self.IDENTITY_FILE}, so which evaluator made them is unknown; delete "
                "the folder (it is remade) or give another cache_dir"
            ) from None
        if _canonical(written) != _canonical(self.identity):
            raise ValueError(
                f"{where}: {self.IDENTITY_FILE} names another evaluator than this one ({_canonical(written)[:300]} "
                f"against {_canonical(self.identity)[:300]}): features of one evaluator never score another's. Delete "
                "the folder or give another cache_dir."
            )

    def _read_shard(self, shard: Path) -> tuple[list[str], Tensor]:
        """The keys and features of one shard, checked (see the class docstring)."""
        where = f"text-feature cache shard {shard}"
        data = load_tensors(shard, "text-feature cache shard")
        keys = data.get("keys") if isinstance(data, dict) else None
        features = data.get("features") if isinstance(data, dict) else None
        if not isinstance(keys, list) or not all(isinstance(k, str) and _SHA256.fullmatch(k) for k in keys):
            raise ValueError(f"{where}: 'keys' must be a list of SHA-256 hex digests, one per text")
        if not isinstance(features, Tensor) or features.dtype != torch.float32 or features.dim() != 2:
            got = (
                f"{features.dtype} {tuple(features.shape)}" if isinstance(features, Tensor) else type(features).__name__
            )
            raise ValueError(f"{where}: 'features' must be a float32 tensor [texts, D], got {got}")
        if features.shape[0] != len(keys) or len(set(keys)) != len(keys):
            raise ValueError(f"{where}: {len(keys)} keys (each once) for {features.shape[0]} rows of features")
        if self.dim is not None and features.shape[1] != self.dim:
            raise ValueError(
                f"{where}: features of width {features.shape[1]}, but this evaluator's have {self.dim}: written by "
                "another model"
            )
        if features.numel() and not bool(torch.isfinite(features).all()):
            raise ValueError(f"{where}: features hold NaN or infinite values")
        norms = torch.linalg.vector_norm(features.double(), dim=1)
        if norms.numel() and float((norms - 1.0).abs().max()) > self.NORM_TOLERANCE:
            raise ValueError(
                f"{where}: features are not L2-normalised (norms from {float(norms.min()):.4g} to "
                f"{float(norms.max()):.4g}): written by another program; this evaluator's features have norm 1"
            )
        return keys, features

    def lookup(self, texts: Sequence[str]) -> dict[str, Tensor]:
        """The cached features of those ``texts`` that are cached (``{text: [D] tensor}``); counts hits and misses.

        Raises:
            ValueError: naming the shard or ``identity.json`` that fails a check (the class docstring).
        """
        entries = self._load()
        found = {t: entries[self.key(t)] for t in set(texts) if self.key(t) in entries}
        self.hits += sum(1 for t in texts if t in found)
        self.misses += sum(1 for t in texts if t not in found)
        return found

    def store(self, texts: Sequence[str], features: Tensor) -> None:
        """Add features ``[len(texts), D]`` of ``texts`` as one new shard (atomic write)."""
        if not texts:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        identity_file = self.folder / self.IDENTITY_FILE
        if not identity_file.exists():
            write_json(identity_file, self.identity, sort_keys=True)
        keys = [self.key(t) for t in texts]
        features = features.detach().to("cpu", torch.float32).contiguous()
        save_torch({"keys": keys, "features": features}, self.folder / f"shard_{uuid.uuid4().hex}.pt")
        self._load().update(zip(keys, features))


class ClipEvaluator:
    """A frozen open_clip CLIP that embeds generated images and prompts (definitions in the module docstring).

    Args:
        model_name: An open_clip model name (``open_clip.list_models()``), or None with ``model_cfg``.
        pretrained: An open_clip pretrained tag for ``model_name`` (may download), or None.
        checkpoint: A local state-dict file (``torch.save(model.state_dict())``), loaded with ``weights_only=True``.
        model_cfg: A CLIP config dict (``embed_dim``, ``vision_cfg``, ``text_cfg``) instead of ``model_name``, or the
            keyword arguments of ``model_factory``.
        model_factory: A function that builds the model from ``model_cfg`` (a CLIP-like module with
            ``encode_image`` / ``encode_text(normalize=True)`` and ``visual.image_size``), for architectures
            open_clip's config does not describe: a callable, or its dotted path in the caller's own configuration,
            e.g. ``"beyondlabels.demo.model.tiny_clip_model"`` (imported, never unpickled). It is code, so it comes
            from the caller, never from a data file (:func:`beyondlabels.demo.evaluator.demo_evaluator` passes its
            own); ``model_cfg["context_length"]`` sets the tokenizer. Its dotted name is recorded in the identity.
        init_seed: Seed of the random initialisation when no weights are given.
        mean, std: Image normalisation (default OpenAI CLIP's).
        cache_dir: Folder of the text-feature cache (None: no cache).
        batch_size: Texts or images encoded per forward pass.
        device: Where the model runs.

    Raises:
        ValueError: if neither or both of ``model_name`` / ``model_cfg`` are given, both ``pretrained`` and
            ``checkpoint``, a checkpoint that is missing or does not fit, or a model open_clip cannot create.
    """

    def __init__(
        self,
        model_name: str | None = None,
        pretrained: str | None = None,
        *,
        checkpoint: str | os.PathLike[str] | None = None,
        model_cfg: Mapping[str, Any] | None = None,
        model_factory: str | Callable[..., Any] | None = None,
        init_seed: int = 0,
        mean: Sequence[float] = _OPENAI_MEAN,
        std: Sequence[float] = _OPENAI_STD,
        cache_dir: str | os.PathLike[str] | None = None,
        batch_size: int = 256,
        device: str | torch.device = "cpu",
    ) -> None:
        import open_clip
        from open_clip.model import CLIP
        from open_clip.tokenizer import SimpleTokenizer

        _check_model_choice(model_name, pretrained, checkpoint, model_cfg, model_factory)
        batch_size = check_positive_int(batch_size, "batch_size")
        if len(mean) != 3 or len(std) != 3 or any(s <= 0 for s in std):
            raise ValueError(f"`mean` and `std` must hold 3 values (std > 0), got {mean!r} and {std!r}.")
        self.device = torch.device(device)
        self.batch_size = batch_size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            try:
                if model_factory is not None:
                    cfg = plain(model_cfg)
                    factory, model_factory = _factory(model_factory)
                    self.model = factory(**cfg)
                    self.tokenizer = SimpleTokenizer(context_length=int(cfg.get("context_length", 77)))
                elif model_cfg is not None:
                    cfg = plain(model_cfg)
                    self.model = CLIP(**cfg)
                    self.tokenizer = SimpleTokenizer(
                        context_length=int(cfg.get("text_cfg", {}).get("context_length", 77))
                    )
                else:
                    self.model = open_clip.create_model(model_name, pretrained=pretrained)
                    self.tokenizer = open_clip.get_tokenizer(model_name)
            except (RuntimeError, TypeError, ValueError, KeyError) as exc:
                raise ValueError(
                    f"open_clip could not create the evaluator (model_name={model_name!r}, pretrained={pretrained!r}, "
                    f"model_cfg={model_cfg!r}): {exc}"
                ) from exc
        if checkpoint is not None:
            weights = _load_checkpoint(self.model, checkpoint)
        elif pretrained is not None:
            weights = f"open_clip pretrained {pretrained}"
        else:
            weights = f"random init seed {init_seed}"
        self.model.to(self.device).eval().requires_grad_(False)
        size = self.model.visual.image_size
        self.image_size = tuple(size) if isinstance(size, (tuple, list)) else (int(size), int(size))
        self.mean = torch.tensor([float(m) for m in mean], device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor([float(s) for s in std], device=self.device).view(1, 3, 1, 1)
        self.identity: dict[str, Any] = {
            "model": model_name if model_name is not None else {"config": plain(model_cfg)},
            **({"model_factory": model_factory} if model_factory is not None else {}),
            "weights": weights,
            "preprocess": {
                "input": "float [N, 3, H, W] in [0, 1]",
                "resize": list(self.image_size),
                "interpolation": "bicubic antialias",
                "mean": [float(m) for m in mean],
                "std": [float(s) for s in std],
            },
            "features": "fp32, L2-normalised",
            "open_clip": getattr(open_clip, "__version__", "unknown"),
        }
        self.identity_hash = hashlib.sha256(_canonical(self.identity).encode()).hexdigest()
        self.cache = TextFeatureCache(cache_dir, self.identity) if cache_dir is not None else None

    @torch.no_grad()
    def encode_images(self, images: Tensor) -> Tensor:
        """fp32 L2-normalised features ``[N, D]`` of images ``[N, 3, H, W]`` with values in ``[0, 1]``."""
        if (
            not isinstance(images, Tensor)
            or images.dim() != 4
            or images.shape[1] != 3
            or not images.is_floating_point()
        ):
            got = f"{tuple(images.shape)} {images.dtype}" if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(f"`images` must be a float tensor [N, 3, H, W] with values in [0, 1], got {got}.")
        if images.shape[0] == 0:
            raise ValueError("`images` is empty; pass at least one image.")
        if not bool(torch.isfinite(images).all()):
            raise ValueError("`images` contains NaN or Inf values; check the generator's output.")
        if float(images.min()) < 0.0 or float(images.max()) > 1.0:
            raise ValueError(
                f"`images` must lie in [0, 1], got values in [{float(images.min()):.3g}, {float(images.max()):.3g}]; "
                "map the generator's output to [0, 1] (e.g. (x + 1) / 2 for tanh outputs)."
            )
        out = []
        for start in range(0, images.shape[0], self.batch_size):
            x = images[start : start + self.batch_size].to(self.device, torch.float32)
            if tuple(x.shape[-2:]) != self.image_size:
                x = torch.nn.functional.interpolate(
                    x, size=self.image_size, mode="bicubic", antialias=True, align_corners=False
                )
            x = (x - self.mean) / self.std
            out.append(self.model.encode_image(x, normalize=True).float())
        return torch.cat(out)

    @torch.no_grad()
    def _encode_texts(self, texts: list[str]) -> Tensor:
        out = []
        for start in range(0, len(texts), self.batch_size):
            tokens = self.tokenizer(texts[start : start + self.batch_size]).to(self.device)
            out.append(self.model.encode_text(tokens, normalize=True).float())
        return torch.cat(out)

    def encode_texts(self, texts: Sequence[str]) -> Tensor:
        """fp32 L2-normalised features ``[N, D]`` of ``texts``; cached texts are read, only new ones are encoded."""
        if isinstance(texts, str) or not isinstance(texts, Sequence) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"`texts` must be a list of strings, got {type(texts).__name__}.")
        texts = list(texts)
        if not texts:
            raise ValueError("`texts` is empty; pass at least one prompt.")
        if self.cache is None:
            return self._encode_texts(texts)
        if self.cache.dim is None:  # the width every cached shard must have: this evaluator's
            self.cache.dim = int(self._encode_texts([""]).shape[1])
        found = self.cache.lookup(texts)
        new = list(dict.fromkeys(t for t in texts if t not in found))
        if new:
            features = self._encode_texts(new)
            self.cache.store(new, features)
            found.update(zip(new, features.cpu()))
        return torch.stack([found[t] for t in texts]).to(self.device)


def _check_model_choice(
    model_name: str | None,
    pretrained: str | None,
    checkpoint: str | os.PathLike[str] | None,
    model_cfg: Mapping[str, Any] | None,
    model_factory: str | Callable[..., Any] | None,
) -> None:
    """One model (a name or a config), and weights that fit it (a tag with a name, a checkpoint, or neither)."""
    if (model_name is None) == (model_cfg is None):
        raise ValueError(
            "pass exactly one of `model_name` (an open_clip model name) and `model_cfg` (a CLIP config dict)."
        )
    if pretrained is not None and checkpoint is not None:
        raise ValueError("pass `pretrained` (an open_clip tag) or `checkpoint` (a local file), not both.")
    dotted = isinstance(model_factory, str) and "." in model_factory
    if model_factory is not None and (model_cfg is None or not (dotted or callable(model_factory))):
        raise ValueError(
            "`model_factory` must be a callable or a dotted function path used with `model_cfg`, got "
            f"{model_factory!r}."
        )
    if pretrained is not None and model_cfg is not None:
        raise ValueError("`pretrained` tags need `model_name`; with `model_cfg` load weights from `checkpoint`.")


def _load_checkpoint(model: Any, checkpoint: str | os.PathLike[str]) -> str:
    """Load a state-dict file (or a Lightning checkpoint's ``state_dict``) into ``model``; the weights' identity."""
    path = Path(checkpoint)
    if not path.is_file():
        raise ValueError(f"`checkpoint` {path} does not exist; pass a state-dict file saved with torch.save.")
    state = load_tensors(path, "`checkpoint`")
    if isinstance(state, Mapping) and "state_dict" in state:
        state = state["state_dict"]
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:
        raise ValueError(f"`checkpoint` {path} does not fit the evaluator's model: {exc}") from exc
    return f"checkpoint sha256:{file_sha256(path)}"
