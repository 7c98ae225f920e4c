"""The CTranslate2 export (its Transformer specification, converted in memory, saved by CTranslate2's own writer)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._runtime import positional_encoding
from .common import (
    _PAD_ID,
    _START_ID,
    _END_ID,
    _UNK_ID,
    CTRANSLATE2_OPTIONS,
    CTRANSLATE2_POSITIONS,
    PathLike,
    QUANTIZATIONS,
    _check_out_dir,
    _load,
    _provenance,
    _staging,
    _vocabulary,
    _write_json,
    _write_tokenizers,
    check_exportable,
)


# ------------------------------------------------------------------------------------ CTranslate2


def import_ctranslate2() -> Any:
    """Import ``ctranslate2``, or raise ``ImportError`` saying which extra installs it.

    CTranslate2 ships its own OpenMP runtime, but once PyTorch has been imported (it loads the
    system ``libgomp.so.1`` globally, and our extension uses the same one) CTranslate2's OpenMP
    calls bind to that shared runtime instead, from CTranslate2's own worker thread. The shared
    runtime then manages more threads than there are cores and stops spin-waiting, which slowed
    both our decoder (~35%) and PyTorch (~25%) for the rest of a benchmark run in our
    measurements. So the extension is loaded with RTLD_DEEPBIND: its libraries resolve their own
    symbols first, each library keeps its own OpenMP runtime, as it would in a process of its own.
    """
    if sys.modules.get("ctranslate2") is not None:
        return sys.modules["ctranslate2"]
    flags = sys.getdlopenflags()
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    try:
        if deepbind:
            sys.setdlopenflags(os.RTLD_NOW | os.RTLD_LOCAL | deepbind)
        import ctranslate2
    except ImportError as exc:
        raise ImportError(
            f"CTranslate2 is not installed ({exc}); install it with pip install 'transformer-cpp[ctranslate2]'"
        ) from exc
    finally:
        sys.setdlopenflags(flags)
    return ctranslate2


def _synthetic_vocabulary(size: int, prefix: str) -> List[str]:
    """Token names for a model without tokenizers (the benchmark's): id 0 is ``<unk>`` (our padding;
    never generated with ``disable_unk``), id 1 ``<s>``, id 2 ``</s>``, the rest ``<prefix><id>``."""
    names = [f"{prefix}{i}" for i in range(size)]
    names[_PAD_ID], names[_START_ID], names[_END_ID] = "<unk>", "<s>", "</s>"
    return names


def _ctranslate2_vocabularies(
    cfg: Dict[str, Any], source_vocabulary: Optional[Sequence[str]], target_vocabulary: Optional[Sequence[str]]
) -> Tuple[List[str], List[str]]:
    """The source and target token names of the conversion (synthetic ones for a vocabulary not
    given), checked: one per id of the model's vocabulary, none repeated."""
    source_vocab = (
        list(source_vocabulary) if source_vocabulary is not None else _synthetic_vocabulary(cfg["src_vocab_size"], "s")
    )
    target_vocab = (
        list(target_vocabulary) if target_vocabulary is not None else _synthetic_vocabulary(cfg["tgt_vocab_size"], "t")
    )
    for side, vocab, key in (("source", source_vocab, "src_vocab_size"), ("target", target_vocab, "tgt_vocab_size")):
        if len(vocab) != cfg[key]:
            raise ValueError(
                f"convert_to_ctranslate2: the {side} vocabulary has {len(vocab)} tokens but the model's "
                f"{key} is {cfg[key]}"
            )
        if len(set(vocab)) != len(vocab):
            raise ValueError(f"convert_to_ctranslate2: the {side} vocabulary repeats a token name")
    return source_vocab, target_vocab


def _set_linear(spec: Any, params: Dict[str, np.ndarray], *names: str) -> None:
    """Set a CTranslate2 linear layer to our layers ``names``, their weights and biases concatenated
    (one after the other along the outputs)."""
    spec.weight = np.concatenate([params[n + ".weight"] for n in names])
    spec.bias = np.concatenate([params[n + ".bias"] for n in names])


def _set_norm(spec: Any, params: Dict[str, np.ndarray], name: str) -> None:
    """Set a CTranslate2 LayerNorm to our LayerNorm ``name``."""
    spec.gamma, spec.beta = params[name + ".weight"], params[name + ".bias"]


def _fill_ctranslate2_stack(
    side: str, stack: Any, params: Dict[str, np.ndarray], table: np.ndarray, pre_norm: bool
) -> None:
    """Set the weights of CTranslate2's encoder or decoder ``stack`` to ours of ``side``: the embedding
    and the positional table, each layer's attentions, feed-forward and LayerNorms, and with
    ``pre_norm`` the LayerNorm after the stack."""
    embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
    embeddings.weight = params[f"{side}.embedding.weight"]
    stack.scale_embeddings = True
    stack.position_encodings.encodings = table
    for i, layer in enumerate(stack.layer):
        p = f"{side}.layers.{i}"
        a = f"{p}.self_attention"
        _set_linear(layer.self_attention.linear[0], params, f"{a}.query", f"{a}.key", f"{a}.value")
        _set_linear(layer.self_attention.linear[1], params, f"{a}.output")
        _set_norm(layer.self_attention.layer_norm, params, f"{p}.norm1")
        if side == "decoder":
            c = f"{p}.cross_attention"
            _set_linear(layer.attention.linear[0], params, f"{c}.query")
            _set_linear(layer.attention.linear[1], params, f"{c}.key", f"{c}.value")
            _set_linear(layer.attention.linear[2], params, f"{c}.output")
            _set_norm(layer.attention.layer_norm, params, f"{p}.norm2")
        _set_linear(layer.ffn.linear_0, params, f"{p}.feed_forward.linear1")
        _set_linear(layer.ffn.linear_1, params, f"{p}.feed_forward.linear2")
        _set_norm(layer.ffn.layer_norm, params, f"{p}.norm3" if side == "decoder" else f"{p}.norm2")
    if pre_norm:  # the LayerNorm after the stack
        _set_norm(stack.layer_norm, params, f"{side}.norm")


def _ctranslate2_spec(model: Any, positions: Optional[int]) -> Any:
    """CTranslate2's ``TransformerSpec`` of ``model`` holding its weights (see
    :func:`convert_to_ctranslate2` for the mapping), with a positional table of ``positions`` rows
    (default ``max_length + 16``)."""
    from ctranslate2.specs import transformer_spec

    cfg = model.config
    params = {name: np.ascontiguousarray(p.value, dtype=np.float32) for name, p in model.parameters().items()}
    spec = transformer_spec.TransformerSpec.from_config(
        cfg["n_layers"], cfg["n_heads"], pre_norm=bool(cfg["pre_norm"]), with_relative_position=False
    )
    rows = int(positions) if positions is not None else cfg["max_length"] + 16
    table = positional_encoding(rows, cfg["d_model"], cfg["layout"]).astype(np.float32)
    for side, stack in (("encoder", spec.encoder), ("decoder", spec.decoder)):
        _fill_ctranslate2_stack(side, stack, params, table, bool(cfg["pre_norm"]))
    if "output.weight" in params:
        _set_linear(spec.decoder.projection, params, "output")
    else:  # share_embeddings: the projection is the decoder embedding
        spec.decoder.projection.weight = params["decoder.embedding.weight"]
        spec.decoder.projection.bias = params["output.bias"]
    return spec


def convert_to_ctranslate2(
    model: Any,
    output_dir: PathLike,
    *,
    source_vocabulary: Optional[Sequence[str]] = None,
    target_vocabulary: Optional[Sequence[str]] = None,
    special_tokens: Optional[Dict[str, str]] = None,
    positions: Optional[int] = None,
    quantization: Optional[str] = None,
) -> Tuple[List[str], List[str]]:
    """Write ``model`` (a :class:`~transformer_cpp.Transformer`) as a CTranslate2 model directory
    through ``ctranslate2.specs``; returns the source and target vocabularies (token names by id).

    Mapping (checked against CTranslate2's layers: post-norm sub-layers compute
    ``LN(x + sublayer(x))`` with the LayerNorm stored in the sub-layer spec; embeddings are
    multiplied by ``sqrt(d_model)`` when ``scale_embeddings``; a stored ``position_encodings``
    table is added as is, from position 0):

    * ``TransformerSpec.from_config(n_layers, n_heads, pre_norm=ours)``, no relative positions;
      ``config.layer_norm_epsilon`` = ours; pre-norm models: each stack's final ``layer_norm`` <-
      our ``encoder.norm`` / ``decoder.norm`` (CTranslate2's pre-norm sub-layers compute
      ``x + sublayer(LN(x))`` with the same per-sub-layer LayerNorms as below);
    * embeddings = ours, ``scale_embeddings = True``; ``position_encodings.encodings`` = our own
      table (so the interleaved and concatenated layouts both convert exactly), ``positions`` rows
      (default ``max_length + 16``);
    * self-attention ``linear[0]`` = ``[W_q; W_k; W_v]`` (and biases) concatenated, ``linear[1]`` =
      output; cross-attention ``linear[0]`` = query, ``linear[1]`` = ``[W_k; W_v]``, ``linear[2]`` =
      output; LayerNorms: self-attention <- norm1, cross-attention <- norm2, feed-forward <- the
      layer's last norm (norm2 in the encoder, norm3 in the decoder);
    * ``decoder.projection`` = our output layer (the decoder embedding when embeddings are tied).

    Without vocabularies, synthetic ones are used (the benchmark's random models; see
    :func:`_synthetic_vocabulary`). ``special_tokens`` sets CTranslate2's configuration
    (``unk_token``, ``bos_token``, ``eos_token``, ``decoder_start_token``, ``add_source_bos``,
    ``add_source_eos``). ``quantization`` is one of :data:`QUANTIZATIONS` or None (float32).

    Raises:
        ValueError: vocabularies of the wrong size or with repeated tokens, an unknown quantization,
            a decoder of linear self-attention (CTranslate2's is softmax).
        ImportError: CTranslate2 is not installed.
    """
    cfg = model.config
    check_exportable(cfg, "convert_to_ctranslate2")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"convert_to_ctranslate2: unknown quantization {quantization!r}; expected one of "
            + ", ".join(QUANTIZATIONS)
        )
    source_vocab, target_vocab = _ctranslate2_vocabularies(cfg, source_vocabulary, target_vocabulary)
    import_ctranslate2()
    spec = _ctranslate2_spec(model, positions)
    spec.register_source_vocabulary(source_vocab)
    spec.register_target_vocabulary(target_vocab)
    spec.config.layer_norm_epsilon = float(cfg["layer_norm_eps"])
    for key, value in (special_tokens or {}).items():
        setattr(spec.config, key, value)
    spec.validate()
    spec.optimize(quantization=quantization)
    spec.save(os.fspath(output_dir))
    return source_vocab, target_vocab


def export_ctranslate2(checkpoint_dir: PathLike, out_dir: PathLike, quantization: Optional[str] = None) -> Path:
    """Export the checkpoint at ``checkpoint_dir`` (a run directory: its ``best`` checkpoint; or one
    checkpoint directory) as a CTranslate2 model directory ``out_dir``; returns ``out_dir``.

    ``quantization``: None (float32, exact) or one of :data:`QUANTIZATIONS` (smaller and faster,
    not exact). See the module docstring for how to call CTranslate2 to get our tokens.

    Raises:
        ValueError: an unknown quantization, a missing or damaged checkpoint
            (:class:`~transformer_cpp.checkpoint.CheckpointError`).
        OSError: an output directory that exists and is not empty (``FileExistsError``) or cannot
            be written.
        ImportError: CTranslate2 is not installed (the message names the extra that installs it).
    """
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"export_ctranslate2: unknown quantization {quantization!r}; expected one of " + ", ".join(QUANTIZATIONS)
        )
    out = _check_out_dir(out_dir)
    import_ctranslate2()  # before any work
    ckpt = _load(checkpoint_dir, "export_ctranslate2")
    src_tok, tgt_tok = ckpt.src_tokenizer, ckpt.tgt_tokenizer
    special = {
        "unk_token": src_tok.id_to_token(_UNK_ID),
        "bos_token": src_tok.id_to_token(_START_ID),
        "eos_token": src_tok.id_to_token(_END_ID),
        "decoder_start_token": tgt_tok.id_to_token(_START_ID),
        "add_source_bos": True,
        "add_source_eos": True,
    }
    with _staging(out) as tmp:
        convert_to_ctranslate2(
            ckpt.model,
            tmp,
            source_vocabulary=_vocabulary(src_tok),
            target_vocabulary=_vocabulary(tgt_tok),
            special_tokens=special,
            positions=max(int(ckpt.model.config["max_length"]), CTRANSLATE2_POSITIONS),
            quantization=quantization,
        )
        _write_tokenizers(tmp, src_tok, tgt_tok)
        options = dict(CTRANSLATE2_OPTIONS, suppress_sequences=[[tgt_tok.id_to_token(_PAD_ID)]])
        _write_json(
            tmp / "transformer_cpp.json",
            dict(
                _provenance(ckpt, "ctranslate2"),
                quantization=quantization or "float32",
                exact=quantization in (None, "float32") and ckpt.model.config["dtype"] == "float32",
                translate_batch_options=options,
                max_decoding_length="int(1.5 * source tokens) + 10, source tokens counting the start and end tokens",
            ),
        )
    return out
