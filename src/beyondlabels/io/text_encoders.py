"""Text encoders named by a string, as configs give them: ``"hashing"`` or ``"open_clip:<model>[:<pretrained>]"``.

``hashing``
    :class:`~beyondlabels.taxonomy.text.HashingTextEncoder` (512 dimensions), a dependency-free lexical baseline.
``open_clip:<model>[:<pretrained>]``
    The text tower of an open_clip model created by name (``open_clip.create_model``), weights from a local file or a
    pretrained tag (none: random weights); texts tokenised by the model's tokenizer, embeddings L2-normalised.

Encoder objects (a callable ``list[str] -> Tensor [N, D]``, an object with ``encode_text``) pass through
:func:`~beyondlabels.taxonomy.text.as_encoder`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from beyondlabels.taxonomy.text import HashingTextEncoder, as_encoder

__all__ = ["text_encoder"]


def text_encoder(spec: Any) -> tuple[Callable[[list[str]], Tensor], Any]:
    """``(encode, identity)`` for an encoder given as a callable, an object with ``encode_text``, ``"hashing"`` or
    ``"open_clip:<model>[:<pretrained>]"`` (see the module docstring). The identity names the encoder: its settings
    for a named one, the object itself (compared by ``is``) otherwise. Give both to
    :class:`~beyondlabels.taxonomy.text.TextToNode` (``encoder=encode, encoder_key=identity``).

    Raises:
        ValueError: for anything else, or an open_clip model that cannot be created (the message says why).

    Example:
        >>> encode, key = text_encoder("hashing")
        >>> encode(["a cat"]).shape, key
        (torch.Size([1, 512]), ('hashing', 512))
    """
    if isinstance(spec, str):
        if spec == "hashing":
            encoder = HashingTextEncoder()
            return encoder, ("hashing", encoder.dim)
        if spec.startswith("open_clip:"):
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
        raise ValueError(
            f"encoder {spec!r} is not known: use 'hashing', 'open_clip:<model>[:<pretrained>]', a callable "
            "list[str] -> Tensor [N, D], or an object with an encode_text method"
        )
    if not callable(getattr(spec, "encode_text", None)) and not callable(spec):
        raise ValueError(f"`encoder` must be a callable, an object with encode_text, or a name; got {type(spec).__name__}.")
    return as_encoder(spec)
