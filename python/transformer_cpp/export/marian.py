"""The Hugging Face Transformers export: a MarianMT directory that the library's own classes load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np

from ..pretrained.own_export import TARGET_TOKENIZER_FILE
from ..tokenizer import SPECIAL_TOKENS
from .common import (
    _PAD_ID,
    _START_ID,
    _END_ID,
    PathLike,
    _check_out_dir,
    _load,
    _provenance,
    _staging,
    _write_json,
    check_exportable,
)


# ------------------------------------------------------------------------------------ Hugging Face Transformers

#: Marian's LayerNorm epsilon: ``nn.LayerNorm``'s default, which MarianMT does not make configurable.
MARIAN_LAYER_NORM_EPS = 1e-5
#: Rows of the sinusoid tables MarianMT builds when it loads the model: the longest source or output.
MARIAN_POSITIONS = 1024
#: ``generation_config.json``'s ``max_length``: most output tokens, the decoder's start token included.
MARIAN_MAX_LENGTH = 512
#: What ``export_transformers`` writes.
TRANSFORMERS_FILES = (
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "transformer_cpp.json",
)


def marian_permutation(d_model: int, layout: str) -> np.ndarray:
    """The order of our model dimension in which our positional table is Marian's.

    Marian's table (``MarianSinusoidalPositionalEmbedding``) holds the sines of the frequencies
    ``10000**(-2i/d)``, ``i = 0, 1, ...``, in its first ``ceil(d/2)`` columns and their cosines in the
    rest. Our ``"concatenated"`` layout is that table (it needs an even ``d``); in the
    ``"interleaved"`` layout column ``2i`` holds the sine and ``2i + 1`` the cosine of frequency ``i``.
    Returns ``perm`` such that ``ours[:, perm]`` is Marian's table: every even column, then every odd
    one (or the identity for the concatenated layout).
    """
    if layout == "concatenated":
        return np.arange(d_model)
    if layout == "interleaved":
        return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])
    raise ValueError(f"marian_permutation: unknown layout {layout!r}; expected 'interleaved' or 'concatenated'")


def _marian_vocabulary(src_tok: Any, tgt_tok: Any) -> Tuple[Dict[str, int], np.ndarray]:
    """The vocabulary of the exported tokenizer and, for each of its ids, the source id (-1 for a
    token the source vocabulary lacks).

    It holds the target vocabulary with the target ids (so the decoder, its embedding and its output
    layer keep ours, and a generated id is our id), then each source token that the target
    vocabulary lacks, in source id order. Both vocabularies are byte-level, so a token names the
    same bytes in either: the tokenizer encodes with the source merges (only source tokens come
    out) and decodes any id to its bytes."""
    merged = dict(sorted(tgt_tok.get_vocab().items(), key=lambda item: item[1]))
    if list(merged.values()) != list(range(tgt_tok.vocab_size)):
        raise ValueError("export_transformers: the target vocabulary's ids are not 0 .. vocab_size - 1")
    src_vocab = src_tok.get_vocab()
    for token, _ in sorted(src_vocab.items(), key=lambda item: item[1]):
        merged.setdefault(token, len(merged))
    source_ids = np.full(len(merged), -1, dtype=np.int64)
    for token, i in merged.items():
        if token in src_vocab:
            source_ids[i] = src_vocab[token]
    return merged, source_ids


#: A run of what Python's ``\s`` matches in text (the Rust regex's ``\s`` lacks the separators U+001C-U+001F).
_WHITESPACE_RUN = r"[\s\x1c-\x1f]+"


def _marian_tokenizer(src_tok: Any, merged: Dict[str, int]) -> str:
    """``tokenizer.json`` of the export (see the module docstring): the source tokenizer's byte-level
    BPE (its merges, normaliser and pre-tokenizer) over the merged vocabulary, with our input
    whitespace handling and leading space, ``<start> ... <end>`` around every sentence, and a decoder
    that writes bytes, one space per whitespace run, stripped."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, processors

    document = json.loads(src_tok.to_str())["tokenizer"]
    model = document["model"]
    if model.get("type") != "BPE" or model.get("ignore_merges") or model.get("dropout"):
        raise ValueError("export_transformers: the source tokenizer is not a plain byte-level BPE")
    model["vocab"] = merged
    tok = Tokenizer.from_str(json.dumps(document, ensure_ascii=False))
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.NFC(),
            normalizers.Replace(Regex(_WHITESPACE_RUN), " "),
            normalizers.Strip(),
            normalizers.Prepend(" "),
            tok.normalizer,  # the source tokenizer's own: NFC, lower case if it lowercases
        ]
    )
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIAL_TOKENS[_START_ID]} $A {SPECIAL_TOKENS[_END_ID]}",
        special_tokens=[(SPECIAL_TOKENS[_START_ID], _START_ID), (SPECIAL_TOKENS[_END_ID], _END_ID)],
    )
    tok.decoder = decoders.Sequence(
        [tok.decoder, decoders.Replace(Regex(_WHITESPACE_RUN), " "), decoders.Strip(" ", 1, 1)]
    )
    return tok.to_str()


def _source_embedding(cfg: Dict[str, Any]) -> str:
    """Our parameter that holds the source embedding (the decoder's when the two are one)."""
    return "decoder.embedding.weight" if cfg["share_source_embedding"] else "encoder.embedding.weight"


def _marian_layers(cfg: Dict[str, Any], params: Dict[str, np.ndarray], perm: np.ndarray) -> Dict[str, np.ndarray]:
    """MarianMT's names and values of every encoder and decoder layer's weights (see
    :func:`convert_to_marian`)."""
    weights: Dict[str, np.ndarray] = {}

    def reads(ours: str, theirs: str) -> None:  # a layer that reads the model dimension
        weights[theirs + ".weight"] = params[ours + ".weight"][:, perm]
        weights[theirs + ".bias"] = params[ours + ".bias"]

    def writes(ours: str, theirs: str) -> None:  # a layer (or LayerNorm) that writes it
        weight = params[ours + ".weight"]
        weights[theirs + ".weight"] = weight[perm] if weight.ndim == 1 else weight[perm, :]
        weights[theirs + ".bias"] = params[ours + ".bias"][perm]

    def attention(ours: str, theirs: str) -> None:
        for a, b in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            reads(f"{ours}.{a}", f"{theirs}.{b}")
        writes(f"{ours}.output", f"{theirs}.out_proj")

    for side in ("encoder", "decoder"):
        for i in range(_layer_count(cfg, side)):
            ours, theirs = f"{side}.layers.{i}", f"model.{side}.layers.{i}"
            attention(f"{ours}.self_attention", f"{theirs}.self_attn")
            writes(f"{ours}.norm1", f"{theirs}.self_attn_layer_norm")
            if side == "decoder":
                attention(f"{ours}.cross_attention", f"{theirs}.encoder_attn")
                writes(f"{ours}.norm2", f"{theirs}.encoder_attn_layer_norm")
            reads(f"{ours}.feed_forward.linear1", f"{theirs}.fc1")
            writes(f"{ours}.feed_forward.linear2", f"{theirs}.fc2")
            writes(f"{ours}.norm3" if side == "decoder" else f"{ours}.norm2", f"{theirs}.final_layer_norm")
    return weights


def _layer_count(cfg: Dict[str, Any], side: str) -> int:
    return int(cfg[f"n_{side}_layers"] or cfg["n_layers"])


def _marian_configs(
    cfg: Dict[str, Any], vocab: int, decoder_vocab: int, shared: bool, pad: int, start: int, end: int
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """config.json and generation_config.json of the export."""
    special = {"pad_token_id": pad, "bos_token_id": start, "eos_token_id": end}
    config = {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": vocab,
        "decoder_vocab_size": decoder_vocab,
        "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": bool(cfg["share_embeddings"]),
        "d_model": int(cfg["d_model"]),
        "encoder_layers": _layer_count(cfg, "encoder"),
        "decoder_layers": _layer_count(cfg, "decoder"),
        "encoder_attention_heads": int(cfg["n_heads"]),
        "decoder_attention_heads": int(cfg["n_heads"]),
        "encoder_ffn_dim": int(cfg["d_ff"]),
        "decoder_ffn_dim": int(cfg["d_ff"]),
        "activation_function": cfg["activation"],
        "dropout": float(cfg["dropout"]),
        "activation_dropout": float(cfg["dropout"]),
        "attention_dropout": 0.0,
        "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0,
        "max_position_embeddings": MARIAN_POSITIONS,
        "scale_embedding": bool(cfg["scale_embedding"]),
        "is_encoder_decoder": True,
        "use_cache": True,
        "decoder_start_token_id": start,
        "forced_eos_token_id": None,
        **special,
    }
    generation_config = {
        "decoder_start_token_id": start,
        "forced_eos_token_id": None,
        "suppress_tokens": [pad],
        "num_beams": 1,
        "do_sample": False,
        "max_length": MARIAN_MAX_LENGTH,
        **special,
    }
    return config, generation_config


def _marian_own_vocabulary(model: Any) -> Dict[str, Any]:
    """convert_to_marian without tokenizers: the model's vocabularies and special ids as they are."""
    cfg = model.config
    perm = marian_permutation(int(cfg["d_model"]), cfg["layout"])
    params = {name: np.asarray(p.value, dtype=np.float32) for name, p in model.parameters().items()}
    decoder = params["decoder.embedding.weight"][:, perm]
    weights: Dict[str, np.ndarray] = {
        "model.encoder.embed_tokens.weight": params[_source_embedding(cfg)][:, perm],
        "model.decoder.embed_tokens.weight": decoder,
        "final_logits_bias": params["output.bias"][None, :],
    }
    if cfg["share_source_embedding"]:
        weights["model.shared.weight"] = decoder
    weights["lm_head.weight"] = decoder if cfg["share_embeddings"] else params["output.weight"][:, perm]
    weights.update(_marian_layers(cfg, params, perm))
    weights = {name: np.ascontiguousarray(w, dtype=np.float32) for name, w in weights.items()}
    ids = (int(cfg["pad_id"]), int(cfg["start_id"]), int(cfg["end_id"]))
    config, generation_config = _marian_configs(
        cfg, int(cfg["src_vocab_size"]), int(cfg["tgt_vocab_size"]), bool(cfg["share_source_embedding"]), *ids
    )
    return {"config": config, "generation_config": generation_config, "weights": weights}


def _check_marian_arguments(cfg: Dict[str, Any], src_tok: Any, tgt_tok: Any) -> None:
    """Refuse one tokenizer without the other and a pre-norm model, which MarianMT cannot express."""
    if (src_tok is None) != (tgt_tok is None):
        raise ValueError("export_transformers: give both tokenizers or neither")
    if cfg["pre_norm"]:
        raise ValueError(
            "export_transformers: this model is pre-norm (LayerNorm before each sub-layer and after each stack); "
            "MarianMT is post-norm only, so it cannot express it. Export it with --to ctranslate2 or --to torch, "
            "which support both"
        )


def _check_tokenizer_sizes(cfg: Dict[str, Any], src_tok: Any, tgt_tok: Any) -> None:
    """Refuse tokenizers whose vocabulary sizes are not the model's."""
    for side, tok, key in (("source", src_tok, "src_vocab_size"), ("target", tgt_tok, "tgt_vocab_size")):
        if tok.vocab_size != cfg[key]:
            raise ValueError(
                f"export_transformers: the {side} tokenizer has {tok.vocab_size} tokens but the model's {key} is "
                f"{cfg[key]}"
            )


def _marian_weights(
    cfg: Dict[str, Any], params: Dict[str, np.ndarray], perm: np.ndarray, merged: Dict[str, int], source_ids: np.ndarray
) -> Dict[str, np.ndarray]:
    """MarianMT's weights over the merged vocabulary (:func:`_marian_vocabulary`): the embeddings, the
    output layer and bias (zeros and ``-inf`` for the extra ids) and every layer's, as contiguous
    float32 arrays."""
    d = int(cfg["d_model"])
    src_embedding = params[_source_embedding(cfg)][:, perm]
    encoder_embedding = np.zeros((len(merged), d), dtype=np.float32)
    known = source_ids >= 0
    encoder_embedding[known] = src_embedding[source_ids[known]]
    v_tgt = int(cfg["tgt_vocab_size"])

    def target_rows(rows: np.ndarray, fill: float = 0.0) -> np.ndarray:  # our target ids, then the extra ids
        full = np.full((len(merged),) + rows.shape[1:], fill, dtype=np.float32)
        full[:v_tgt] = rows
        return full

    weights: Dict[str, np.ndarray] = {
        "model.encoder.embed_tokens.weight": encoder_embedding,
        "model.decoder.embed_tokens.weight": target_rows(params["decoder.embedding.weight"][:, perm]),
        "final_logits_bias": target_rows(params["output.bias"], -np.inf)[None, :],
    }
    if not cfg["share_embeddings"]:
        weights["lm_head.weight"] = target_rows(params["output.weight"][:, perm])
    weights.update(_marian_layers(cfg, params, perm))
    return {name: np.ascontiguousarray(w, dtype=np.float32) for name, w in weights.items()}


def _marian_tokenizer_config() -> Dict[str, Any]:
    """tokenizer_config.json of the export: a fast tokenizer with our special tokens, right padding."""
    names = dict(zip(("pad_token", "bos_token", "eos_token", "unk_token"), SPECIAL_TOKENS))
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **names,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": MARIAN_POSITIONS,
        "padding_side": "right",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": True,
    }


def convert_to_marian(model: Any, src_tok: Any = None, tgt_tok: Any = None) -> Dict[str, Any]:
    """MarianMT's files for ``model`` (a :class:`~transformer_cpp.Transformer`) and its tokenizers:
    ``{"config": ..., "generation_config": ..., "weights": {name: float32 array}, "tokenizer": str,
    "tokenizer_config": ...}`` and, when the two tokenizers differ, ``"target_tokenizer": str``,
    written as they are by :func:`export_transformers`. Needs neither PyTorch nor Transformers.

    Without tokenizers (a model read from MarianMT by
    :func:`~transformer_cpp.pretrained.load_marian`) only ``config``, ``generation_config`` and
    ``weights`` are returned, with the model's own vocabularies and special ids: the weights a
    MarianMT model holds under every name it saves (the shared embedding under each of its names).

    The mapping (``P`` is :func:`marian_permutation`; ``W[:, P]`` reorders the inputs of a layer that
    reads the model dimension, ``W[P]`` and ``b[P]`` the outputs of one that writes it; LayerNorm
    weights are permuted, attention heads are untouched):

    * embeddings: ``model.encoder.embed_tokens`` <- our source embedding, one row per id of the
      exported tokenizer (:func:`_marian_vocabulary`; zeros for target-only tokens, which the
      tokenizer never produces); ``model.decoder.embed_tokens`` <- our target embedding (the same
      ids; zeros for the extra ids); both scaled by ``sqrt(d_model)`` (``scale_embedding``),
      positions from Marian's own table;
    * each layer: ``self_attn`` / ``encoder_attn`` ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` <-
      our ``self_attention`` / ``cross_attention`` ``query``, ``key``, ``value``, ``output``;
      ``self_attn_layer_norm`` <- ``norm1``, ``encoder_attn_layer_norm`` <- ``norm2`` (decoder),
      ``fc1`` / ``fc2`` <- ``feed_forward.linear1`` / ``linear2`` (ReLU), ``final_layer_norm`` <- the
      layer's last norm; post-norm sub-layers ``LN(x + sublayer(x))`` as ours;
    * ``lm_head`` <- our output weight (tied to the decoder embedding when ours is,
      ``tie_word_embeddings``), ``final_logits_bias`` <- our output bias; for the extra ids zeros
      and ``-inf``, never predicted. The decoder has as many ids as the encoder
      (``decoder_vocab_size == vocab_size``), which Transformers 4.x requires of Marian models
      with separate embeddings.

    Raises:
        ValueError: a model MarianMT cannot express (pre-norm: MarianMT normalises after each
            sub-layer and has no LayerNorm after a stack; a decoder of linear self-attention), or tokenizers that do not fit the model.
    """
    cfg = model.config
    check_exportable(cfg, "convert_to_marian")
    _check_marian_arguments(cfg, src_tok, tgt_tok)
    if src_tok is None:
        return _marian_own_vocabulary(model)
    _check_tokenizer_sizes(cfg, src_tok, tgt_tok)
    perm = marian_permutation(int(cfg["d_model"]), cfg["layout"])
    params = {name: np.asarray(p.value, dtype=np.float32) for name, p in model.parameters().items()}
    merged, source_ids = _marian_vocabulary(src_tok, tgt_tok)
    weights = _marian_weights(cfg, params, perm, merged, source_ids)
    config, generation_config = _marian_configs(cfg, len(merged), len(merged), False, _PAD_ID, _START_ID, _END_ID)
    files = {
        "config": config,
        "generation_config": generation_config,
        "weights": weights,
        "tokenizer": _marian_tokenizer(src_tok, merged),
        "tokenizer_config": _marian_tokenizer_config(),
    }
    if src_tok != tgt_tok:  # the target side's own merges (its tokens all have their ids in ``merged``)
        files["target_tokenizer"] = _marian_tokenizer(tgt_tok, merged)
    return files


def export_transformers(checkpoint_dir: PathLike, out_dir: PathLike) -> Path:
    """Export the checkpoint at ``checkpoint_dir`` (a run directory: its ``best`` checkpoint; or one
    checkpoint directory) as a Hugging Face Transformers MarianMT model with its tokenizer into
    ``out_dir``; returns ``out_dir``. See the module docstring for what is exact and how to load it.

    Raises:
        ValueError: a pre-norm model (MarianMT is post-norm only), a missing or damaged checkpoint
            (:class:`~transformer_cpp.checkpoint.CheckpointError`).
        OSError: an output directory that exists and is not empty (``FileExistsError``) or cannot
            be written.
    """
    from safetensors.numpy import save_file

    out = _check_out_dir(out_dir)
    ckpt = _load(checkpoint_dir, "export_transformers")
    files = convert_to_marian(ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer)
    eps = float(ckpt.model.config["layer_norm_eps"])
    provenance = _provenance(ckpt, "transformers")
    with _staging(out) as tmp:
        save_file(files["weights"], str(tmp / "model.safetensors"), metadata={"format": "pt"})
        _write_json(tmp / "config.json", files["config"])
        _write_json(tmp / "generation_config.json", files["generation_config"])
        (tmp / "tokenizer.json").write_text(files["tokenizer"], encoding="utf-8")
        if "target_tokenizer" in files:
            (tmp / TARGET_TOKENIZER_FILE).write_text(files["target_tokenizer"], encoding="utf-8")
        _write_json(tmp / "tokenizer_config.json", files["tokenizer_config"])
        _write_json(
            tmp / "transformer_cpp.json",
            dict(
                provenance,
                architecture="MarianMTModel",
                layer_norm_eps={"model": eps, "marian": MARIAN_LAYER_NORM_EPS},
                exact=eps == MARIAN_LAYER_NORM_EPS and ckpt.model.config["dtype"] == "float32",
                tokenization="one tokenizer (tokenizer.json): source merges, target ids",
                target_tokenizer=TARGET_TOKENIZER_FILE if "target_tokenizer" in files else "tokenizer.json",
            ),
        )
        (tmp / "README.md").write_text(_model_card(provenance), encoding="utf-8")
    return out


# The sentence the model card's example translates: a placeholder for the user's own text.
MODEL_CARD_EXAMPLE = "Text to translate."


def _model_card(provenance: Dict[str, Any]) -> str:
    """A short model card: the languages, the pipeline tag and how to run the model with
    Transformers' ``generate`` (Transformers 5 has no translation pipeline)."""
    src, tgt = provenance["src_lang"], provenance["tgt_lang"]
    cfg = provenance["model"]
    return (
        "---\n"
        f"language:\n- {src}\n- {tgt}\n"
        "library_name: transformers\n"
        "pipeline_tag: translation\n"
        "tags:\n- marian\n- transformer-cpp\n"
        "---\n\n"
        f"# {src} to {tgt} translation\n\n"
        f"A Transformer ({cfg['n_layers']} layers, d_model {cfg['d_model']}, {cfg['n_heads']} heads) trained with "
        f"transformer-cpp {provenance['transformer_cpp_version']} and exported as a MarianMT model.\n\n"
        "With Transformers (and PyTorch) installed, greedy search as `transformer-cpp translate` does "
        "by default:\n\n"
        "```python\n"
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n\n"
        'directory = "path/to/this/directory"\n'
        "tokenizer = AutoTokenizer.from_pretrained(directory)\n"
        "model = AutoModelForSeq2SeqLM.from_pretrained(directory)\n"
        f'batch = tokenizer([{MODEL_CARD_EXAMPLE!r}], return_tensors="pt", padding=True)\n'
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))\n"
        "```\n"
    )
