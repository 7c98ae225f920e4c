"""A Hugging Face MarianMT (OPUS-MT) directory read into a :class:`~transformer_cpp.Transformer`.

The directory holds ``config.json`` and ``model.safetensors`` (or ``pytorch_model.bin``, read with
``torch.load(weights_only=True)``, which executes no pickled code; it needs PyTorch). The
architecture maps onto the core's options one to one:

* post-norm layers ``LN(x + sublayer(x))``, LayerNorm epsilon 1e-5 (``nn.LayerNorm``'s);
* ``activation_function`` -> ``activation`` (relu, gelu, swish / silu);
* ``scale_embedding`` -> ``scale_embedding``; ``encoder_layers`` / ``decoder_layers`` ->
  ``n_encoder_layers`` / ``n_decoder_layers``;
* ``share_encoder_decoder_embeddings`` -> ``share_source_embedding`` (one vocabulary),
  ``tie_word_embeddings`` -> ``share_embeddings`` (``lm_head`` is the decoder embedding),
  ``final_logits_bias`` -> the output layer's bias;
* Marian's sinusoidal table (sines in the first half of the columns, cosines in the second,
  positions from 0) is the ``"concatenated"`` layout, so no weight is permuted;
* ``pad_token_id``, ``decoder_start_token_id``, ``eos_token_id`` -> ``pad_id``, ``start_id``,
  ``end_id``.

Anything else (a pre-norm or otherwise different Marian variant, an activation the core lacks,
weights whose shapes disagree with the configuration) is refused with a ``ValueError`` naming the
field. Each tensor of ``model.safetensors`` is read from the file straight into the model's
parameter (:mod:`~transformer_cpp.pretrained.weight_files`): the model is all that is held. A
``pytorch_model.bin`` is memory-mapped and copied one tensor at a time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from ..model import Transformer
from .weight_files import WeightFile, open_weights

__all__ = ["MARIAN_ACTIVATIONS", "load_marian", "marian_config"]

PathLike = Union[str, Path]

#: Marian's ``activation_function`` names and the core's activation of each.
MARIAN_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
#: ``nn.LayerNorm``'s epsilon, what every MarianMT layer norm uses.
MARIAN_LAYER_NORM_EPS = 1e-5
# elements of each tensor held at a time when two are compared
_COMPARED_ELEMENTS = 1 << 22

# config.json fields of Marian variants the core does not implement, and the value it implements
_FIXED = {
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "add_bias_logits": False,
    "static_position_embeddings": True,
}


def _refuse(field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"load_marian: config.json's {field} is {value!r}; supported: {allowed}")


def _integer(config: Dict[str, Any], field: str, low: int = 0) -> int:
    value = config.get(field)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _refuse(field, value, f"an integer >= {low}")
    return value


def marian_config(config: Dict[str, Any]) -> Dict[str, Any]:
    """The :class:`~transformer_cpp.Transformer` keyword arguments of a MarianMT ``config.json``
    (as a dict). Raises ``ValueError`` naming the first field the core cannot express."""
    if config.get("model_type") != "marian":
        raise _refuse("model_type", config.get("model_type"), "'marian'")
    for field, value in _FIXED.items():
        if field in config and config[field] != value:
            raise _refuse(field, config[field], repr(value))
    activation = config.get("activation_function", "gelu")
    if activation not in MARIAN_ACTIVATIONS:
        raise _refuse("activation_function", activation, ", ".join(MARIAN_ACTIVATIONS))
    scale = config.get("scale_embedding", False)
    if not isinstance(scale, bool):
        raise _refuse("scale_embedding", scale, "true or false")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(a) != config.get(b):
            raise _refuse(b, config.get(b), f"the same as {a} ({config.get(a)!r})")
    d_model = _integer(config, "d_model", 2)
    if d_model % 2:
        raise _refuse("d_model", d_model, "an even width (Marian's positional table)")
    shared = config.get("share_encoder_decoder_embeddings", True)
    tied = config.get("tie_word_embeddings", True)
    for field, flag in (("share_encoder_decoder_embeddings", shared), ("tie_word_embeddings", tied)):
        if not isinstance(flag, bool):
            raise _refuse(field, flag, "true or false")
    vocab = _integer(config, "vocab_size", 2)
    decoder_vocab = vocab
    if not shared and config.get("decoder_vocab_size") is not None:
        decoder_vocab = _integer(config, "decoder_vocab_size", 2)
    return {
        "src_vocab_size": vocab,
        "tgt_vocab_size": decoder_vocab,
        "d_model": d_model,
        "n_layers": _integer(config, "encoder_layers", 1),
        "n_encoder_layers": _integer(config, "encoder_layers", 1),
        "n_decoder_layers": _integer(config, "decoder_layers", 1),
        "n_heads": _integer(config, "encoder_attention_heads", 1),
        "d_ff": _integer(config, "encoder_ffn_dim", 1),
        "dropout": float(config.get("dropout", 0.1)),
        "max_length": _integer(config, "max_position_embeddings", 1),
        "layout": "concatenated",
        "pre_norm": False,
        "share_embeddings": tied,
        "share_source_embedding": shared,
        "activation": MARIAN_ACTIVATIONS[activation],
        "scale_embedding": scale,
        "pad_id": _integer(config, "pad_token_id"),
        "start_id": _integer(config, "decoder_start_token_id"),
        "end_id": _integer(config, "eos_token_id"),
        "layer_norm_eps": MARIAN_LAYER_NORM_EPS,
    }


def _layer_names(side: str, i: int) -> List[Tuple[str, str]]:
    """(our name, Marian's name) of every weight and bias of layer i of the encoder or decoder."""
    ours, theirs = f"{side}.layers.{i}", f"model.{side}.layers.{i}"
    pairs = [(f"{ours}.self_attention", f"{theirs}.self_attn"), (f"{ours}.norm1", f"{theirs}.self_attn_layer_norm")]
    if side == "decoder":
        pairs += [
            (f"{ours}.cross_attention", f"{theirs}.encoder_attn"),
            (f"{ours}.norm2", f"{theirs}.encoder_attn_layer_norm"),
        ]
    pairs += [
        (f"{ours}.feed_forward.linear1", f"{theirs}.fc1"),
        (f"{ours}.feed_forward.linear2", f"{theirs}.fc2"),
        (f"{ours}.norm3" if side == "decoder" else f"{ours}.norm2", f"{theirs}.final_layer_norm"),
    ]
    names = []
    for a, b in pairs:
        if a.endswith("attention"):
            for x, y in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj"), ("output", "out_proj")):
                names += [(f"{a}.{x}.{kind}", f"{b}.{y}.{kind}") for kind in ("weight", "bias")]
        else:
            names += [(f"{a}.{kind}", f"{b}.{kind}") for kind in ("weight", "bias")]
    return names


def marian_names(config: Dict[str, Any]) -> List[Tuple[str, Tuple[str, ...]]]:
    """Each of our parameters (for ``config``, our keyword arguments) and the Marian names that may
    hold it, preferred first (a tied weight is saved under one of its names)."""
    shared, tied = config["share_source_embedding"], config["share_embeddings"]
    decoder = ["model.decoder.embed_tokens.weight", "model.shared.weight"]
    if shared:
        decoder.append("model.encoder.embed_tokens.weight")
    if tied:
        decoder.append("lm_head.weight")
    names: List[Tuple[str, Tuple[str, ...]]] = [("decoder.embedding.weight", tuple(decoder))]
    if not shared:
        names.append(("encoder.embedding.weight", ("model.encoder.embed_tokens.weight",)))
    if not tied:
        names.append(("output.weight", ("lm_head.weight",)))
    names.append(("output.bias", ("final_logits_bias",)))
    for side, key in (("encoder", "n_encoder_layers"), ("decoder", "n_decoder_layers")):
        for i in range(int(config[key])):
            names += [(a, (b,)) for a, b in _layer_names(side, i)]
    return names


def _copy(model: Transformer, names: List[Tuple[str, Tuple[str, ...]]], weights: WeightFile) -> None:
    """Read each of our parameters from the file, straight into the model's array."""
    params = model.parameters()
    available = set(weights.keys)
    for ours, candidates in names:
        found = next((n for n in candidates if n in available), None)
        if found is None:
            raise ValueError(f"load_marian: the weights lack {candidates[0]} (for our {ours})")
        shape = weights.shape(found)
        if ours == "output.bias":  # (1, V) in the file
            shape = (int(np.prod(shape, dtype=np.int64)),)
        target = params[ours].value
        if shape != target.shape:
            raise ValueError(
                f"load_marian: {found} has shape {shape} but the configuration gives "
                f"{tuple(target.shape)} (vocab_size, decoder_vocab_size, d_model, ffn_dim)"
            )
        weights.read_into(found, target)


def _same_tensor(weights: WeightFile, a: str, b: str) -> bool:
    """``np.array_equal`` of two tensors of the file, compared a block of rows at a time."""
    shape = weights.shape(a)
    if shape != weights.shape(b):
        return False
    if len(shape) < 2:
        return bool(np.array_equal(weights.read(a), weights.read(b)))
    step = max(1, _COMPARED_ELEMENTS // max(1, int(np.prod(shape[1:], dtype=np.int64))))
    return all(
        np.array_equal(weights.read(a, i, i + step), weights.read(b, i, i + step)) for i in range(0, shape[0], step)
    )


def _untie_what_differs(config: Dict[str, Any], weights: WeightFile) -> None:
    """Share a weight only where the file holds one value for it: a configuration that ties the
    embeddings (``share_encoder_decoder_embeddings``, ``tie_word_embeddings``) next to a file that
    saves different tensors under the tied names (Transformers ties them only together, with
    ``tie_word_embeddings``) is read as the file's separate weights. Compared a block at a time."""
    decoder = "model.decoder.embed_tokens.weight"
    keys = weights.keys
    if decoder not in keys:
        return
    for flag, other in (
        ("share_source_embedding", "model.encoder.embed_tokens.weight"),
        ("share_embeddings", "lm_head.weight"),
    ):
        if config[flag] and other in keys and not _same_tensor(weights, other, decoder):
            config[flag] = False


def load_marian(directory: PathLike, *, dtype: str = "float32", layer_norm_eps: Optional[float] = None) -> Transformer:
    """The MarianMT model in ``directory`` (``config.json`` and ``model.safetensors`` or
    ``pytorch_model.bin``) as a :class:`~transformer_cpp.Transformer` that computes the same
    logits. ``dtype`` is the model's (``"float64"`` for gradient checks); ``layer_norm_eps`` replaces
    MarianMT's LayerNorm epsilon (what a model this package exported was trained with).

    Raises:
        ValueError: not a Marian model, or an option the core does not implement (named), or
            weights that disagree with the configuration.
        FileNotFoundError: no config.json or no weights file.
        ImportError: ``pytorch_model.bin`` without PyTorch installed.
    """
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"load_marian: {directory} holds no config.json")
    config = marian_config(json.loads((directory / "config.json").read_text(encoding="utf-8")))
    if layer_norm_eps is not None:
        config["layer_norm_eps"] = float(layer_norm_eps)
    weights = open_weights(directory)
    try:
        _untie_what_differs(config, weights)
        model = Transformer(dtype=dtype, **config)
        _copy(model, marian_names(config), weights)
    finally:
        weights.close()
    return model
