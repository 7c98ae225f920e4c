"""Export a trained model to other runtimes: CTranslate2, plain PyTorch, Hugging Face Transformers.

::

    transformer-cpp export --model runs/quick --to ctranslate2 exported-ct2 [--quantization int8]
    transformer-cpp export --model runs/quick --to torch exported-torch
    transformer-cpp export --model runs/quick --to transformers exported-hf

or :func:`export_ctranslate2` / :func:`export_torch` / :func:`export_transformers` from Python.
``--model`` is what ``translate`` takes: a run directory (its ``best`` checkpoint) or one checkpoint
directory. The output directory must not exist, or be empty; it is written under a temporary name
and renamed into place, so a failed export leaves nothing behind (one killed outright leaves its
staging directory, ``.export-<OUT>-<pid>-<random>``, which the next export to the same place
removes). The CTranslate2 and PyTorch exports hold the two subword vocabularies as Hugging Face
``tokenizers`` files (``source_tokenizer.json``, ``target_tokenizer.json``): transformer-cpp encodes
a sentence as ``" " + sentence`` without the tokenizer's own special tokens, between its start
(id 1) and end (id 2) tokens.

**CTranslate2** (:func:`export_ctranslate2`; needs ``pip install 'transformer-cpp[ctranslate2]'``):
a CTranslate2 model directory written through ``ctranslate2.specs.TransformerSpec``, the mapping
of :func:`convert_to_ctranslate2`. In float32 (no quantization) it is exact: CTranslate2's greedy
search gives our tokens (the benchmark and the tests check this) when called as ::

    translator = ctranslate2.Translator("exported-ct2")
    tokens = source_tokenizer.encode(" " + sentence, add_special_tokens=False).tokens
    result = translator.translate_batch([tokens], beam_size=1, suppress_sequences=[["<pad>"]],
                                        min_decoding_length=0, max_decoding_length=limit)

(the start and end tokens are added to the source by CTranslate2; ``suppress_sequences`` keeps the
padding token out of the output as our decoder does; our output limit is ``1.5 * source tokens
+ 10``). ``transformer_cpp.json`` in the directory records these options and where the model
came from. CTranslate2 has positions for 2,048 tokens or the model's own ``max_length``, whichever
is more; longer sentences are refused by it (not by transformer-cpp, which has no limit).

**PyTorch** (:func:`export_torch`; the export itself needs nothing beyond transformer-cpp, using
it needs ``torch``, ``safetensors`` and ``tokenizers``): ``model.safetensors`` (the state dict,
with our parameter names), ``config.json`` and ``transformer_torch.py``, a small module definition
in plain PyTorch that loads them and computes our logits (see that file's docstring).

**Hugging Face Transformers** (:func:`export_transformers`; writing needs nothing beyond
transformer-cpp, using it needs ``pip install 'transformer-cpp[transformers]'``): a MarianMT model
(``config.json``, ``generation_config.json``, ``model.safetensors``) and its tokenizer
(``tokenizer.json``, ``tokenizer_config.json``), which the library's own classes load, no
``trust_remote_code``::

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained("exported-hf")
    model = AutoModelForSeq2SeqLM.from_pretrained("exported-hf")
    batch = tokenizer(["How are you?"], return_tensors="pt", padding=True)
    print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))

``generate`` searches greedily, as ``transformer-cpp translate`` does by default, and gives our
tokens (the tests compare them, and the log-probabilities, on more than 100 sentences). The
Transformers 4 series also has ``pipeline("translation")`` (Transformers 5 removed it), which
searches with 4 beams unless told ``num_beams=1``. How the model maps:

* MarianMT is the paper's architecture as transformer-cpp builds it by default: post-norm
  sub-layers ``LN(x + sublayer(x))``, ReLU feed-forward, embeddings times ``sqrt(d_model)`` plus
  sinusoidal positions, biases everywhere, the output bias as ``final_logits_bias``. A pre-norm
  model has no MarianMT equivalent and is refused (export it to CTranslate2 or PyTorch).
* Positions: MarianMT computes its own table, sines in the first half of the model dimension and
  cosines in the second (our ``concatenated`` layout). For the ``interleaved`` layout (sine and
  cosine of each frequency side by side, the default) the export reorders the model dimension:
  every weight that reads it, writes it or normalises it is permuted by the same
  :func:`marian_permutation`, which changes no result, only the order of terms in sums.
* LayerNorm epsilon: MarianMT's is fixed at 1e-5, transformer-cpp's default is 1e-6. A model
  trained with 1e-5 (``train --layer-norm-eps 1e-5``) exports exactly (up to float32 rounding);
  any other epsilon becomes 1e-5, which moves the log-probabilities by a few 1e-5, a few times
  float32 rounding (``transformer_cpp.json`` says ``"exact"`` or not; the tests bound the
  difference for a model trained with 1e-6). No change of the weights can make up for it: the
  positions are added to the embeddings unscaled, which fixes the scale of the first LayerNorm's
  input.
* Special tokens: the decoder starts from our start token (``decoder_start_token_id`` 1, not
  Marian's usual padding id), ends at our end token (``eos_token_id`` 2), never outputs padding
  (``suppress_tokens`` [0]) and is not forced to end (``forced_eos_token_id`` none).
* One tokenizer for two vocabularies. A Transformers translation model has one tokenizer, which
  encodes the source and decodes the output. The export's tokenizer has one vocabulary made of
  the target vocabulary with its own ids, then each source token that the target vocabulary
  lacks. Both vocabularies are byte-level BPE, where a token stands for the same bytes whichever
  vocabulary holds it, so the tokenizer encodes with the source merges (producing source tokens
  only, under their new ids) and decodes any id to its bytes. The encoder's embedding has our
  source rows under the new ids (zeros for target-only tokens, which encoding never produces);
  the decoder's embedding and output layer keep our target rows and ids, and the extra ids get
  zero weights and a ``final_logits_bias`` of ``-inf``: never predicted, and the log-probabilities
  over the target vocabulary are ours. So the tokenizer is a plain ``PreTrainedTokenizerFast``
  from ``tokenizer.json``, which ``AutoTokenizer`` loads without custom code (a
  tokenizer class with two vocabularies, as Marian's own SentencePiece tokenizer has, would need
  ``trust_remote_code``). With one shared vocabulary there are no extra ids.
* Text: the tokenizer cleans whitespace as ``translate`` does (NFC, whitespace runs to one space,
  stripped), adds the leading space, and decodes to one line; ``translate`` also puts a space
  between two sentences typed without one (``"ofendas.Tom"``), which the tokenizer does not, so
  such input can differ.
  An empty sentence is ``<start> <end>`` without the token of one space that ``translate`` adds.
* Lengths and precision: MarianMT builds positions for 1,024 tokens (``MARIAN_POSITIONS``), so
  longer sources cannot be translated; ``generate`` stops at 512 tokens (``max_length``, where
  ``translate`` stops at ``1.5 * source tokens + 10``: pass ``max_new_tokens`` for that). Weights
  are float32.

``transformer_cpp.json`` in the directory records where the model came from and the epsilon, and
``README.md`` is a model card for sharing it.

The exports are tested to give our tokens and logits (``tests/integration/test_export.py``,
``tests/integration/test_export_transformers.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._checks import path
from ._runtime import positional_encoding
from .checkpoint import load_checkpoint
from .tokenizer import SPECIAL_TOKENS
from ._version import __version__

__all__ = [
    "CTRANSLATE2_OPTIONS",
    "MARIAN_LAYER_NORM_EPS",
    "MARIAN_MAX_LENGTH",
    "MARIAN_POSITIONS",
    "QUANTIZATIONS",
    "TORCH_MODULE_FILE",
    "TRANSFORMERS_FILES",
    "convert_to_ctranslate2",
    "convert_to_marian",
    "export_ctranslate2",
    "export_torch",
    "export_transformers",
    "import_ctranslate2",
    "marian_permutation",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Weight types ``--quantization`` accepts (CTranslate2's own names; None keeps float32).
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
#: The ``translate_batch`` options that make CTranslate2's greedy search ours.
CTRANSLATE2_OPTIONS: Dict[str, Any] = {"beam_size": 1, "suppress_sequences": [["<pad>"]], "min_decoding_length": 0}
#: The module definition written into a PyTorch export.
TORCH_MODULE_FILE = "transformer_torch.py"
#: CTranslate2 needs a table of positions; it gets at least this many.
CTRANSLATE2_POSITIONS = 2048

_TEMPLATE = Path(__file__).with_name("_exported_torch.py")
_PAD_ID, _START_ID, _END_ID, _UNK_ID = 0, 1, 2, 3  # the core's fixed special ids
EXPORT_FORMAT = "transformer_cpp.export"
EXPORT_VERSION = 1


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
        ValueError: vocabularies of the wrong size or with repeated tokens, an unknown quantization.
        ImportError: CTranslate2 is not installed.
    """
    cfg = model.config
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"convert_to_ctranslate2: unknown quantization {quantization!r}; expected one of "
            + ", ".join(QUANTIZATIONS)
        )
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
    import_ctranslate2()
    from ctranslate2.specs import transformer_spec

    params = {name: np.ascontiguousarray(p.value, dtype=np.float32) for name, p in model.parameters().items()}
    spec = transformer_spec.TransformerSpec.from_config(
        cfg["n_layers"], cfg["n_heads"], pre_norm=bool(cfg["pre_norm"]), with_relative_position=False
    )
    rows = int(positions) if positions is not None else cfg["max_length"] + 16
    table = positional_encoding(rows, cfg["d_model"], cfg["layout"]).astype(np.float32)

    def linear(s: Any, *names: str) -> None:
        s.weight = np.concatenate([params[n + ".weight"] for n in names])
        s.bias = np.concatenate([params[n + ".bias"] for n in names])

    def norm(s: Any, name: str) -> None:
        s.gamma, s.beta = params[name + ".weight"], params[name + ".bias"]

    for side, stack in (("encoder", spec.encoder), ("decoder", spec.decoder)):
        embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        embeddings.weight = params[f"{side}.embedding.weight"]
        stack.scale_embeddings = True
        stack.position_encodings.encodings = table
        for i, layer in enumerate(stack.layer):
            p = f"{side}.layers.{i}"
            a = f"{p}.self_attention"
            linear(layer.self_attention.linear[0], f"{a}.query", f"{a}.key", f"{a}.value")
            linear(layer.self_attention.linear[1], f"{a}.output")
            norm(layer.self_attention.layer_norm, f"{p}.norm1")
            if side == "decoder":
                c = f"{p}.cross_attention"
                linear(layer.attention.linear[0], f"{c}.query")
                linear(layer.attention.linear[1], f"{c}.key", f"{c}.value")
                linear(layer.attention.linear[2], f"{c}.output")
                norm(layer.attention.layer_norm, f"{p}.norm2")
            linear(layer.ffn.linear_0, f"{p}.feed_forward.linear1")
            linear(layer.ffn.linear_1, f"{p}.feed_forward.linear2")
            norm(layer.ffn.layer_norm, f"{p}.norm3" if side == "decoder" else f"{p}.norm2")
        if cfg["pre_norm"]:  # the LayerNorm after the stack
            norm(stack.layer_norm, f"{side}.norm")
    if "output.weight" in params:
        linear(spec.decoder.projection, "output")
    else:  # share_embeddings: the projection is the decoder embedding
        spec.decoder.projection.weight = params["decoder.embedding.weight"]
        spec.decoder.projection.bias = params["output.bias"]
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
    ckpt = _load(checkpoint_dir)
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


# ------------------------------------------------------------------------------------ PyTorch


def export_torch(checkpoint_dir: PathLike, out_dir: PathLike) -> Path:
    """Export the checkpoint at ``checkpoint_dir`` (a run directory: its ``best`` checkpoint; or one
    checkpoint directory) for plain PyTorch into ``out_dir``; returns ``out_dir``.

    Writes ``model.safetensors`` (the weights under our parameter names, which are the state-dict
    names of the module), ``config.json`` (the architecture, special token ids, provenance),
    ``transformer_torch.py`` (the module definition, which imports nothing from transformer-cpp)
    and the two tokenizers. Writing needs no PyTorch.

    Raises:
        OSError: an output directory that exists and is not empty (``FileExistsError``) or cannot
            be written. CheckpointError (a ``ValueError``): a missing or damaged checkpoint.
    """
    from safetensors.numpy import save_file

    out = _check_out_dir(out_dir)
    ckpt = _load(checkpoint_dir)
    weights = {name: np.ascontiguousarray(p.value) for name, p in ckpt.model.parameters().items()}
    with _staging(out) as tmp:
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        shutil.copyfile(_TEMPLATE, tmp / TORCH_MODULE_FILE)
        _write_tokenizers(tmp, ckpt.src_tokenizer, ckpt.tgt_tokenizer)
        _write_json(tmp / "config.json", dict(_provenance(ckpt, "torch"), module=TORCH_MODULE_FILE))
    return out


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


def convert_to_marian(model: Any, src_tok: Any = None, tgt_tok: Any = None) -> Dict[str, Any]:
    """MarianMT's files for ``model`` (a :class:`~transformer_cpp.Transformer`) and its tokenizers:
    ``{"config": ..., "generation_config": ..., "weights": {name: float32 array}, "tokenizer": str,
    "tokenizer_config": ...}``, written as they are by :func:`export_transformers`. Needs neither
    PyTorch nor Transformers.

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
            sub-layer and has no LayerNorm after a stack), or tokenizers that do not fit the model.
    """
    cfg = model.config
    if (src_tok is None) != (tgt_tok is None):
        raise ValueError("export_transformers: give both tokenizers or neither")
    if cfg["pre_norm"]:
        raise ValueError(
            "export_transformers: this model is pre-norm (LayerNorm before each sub-layer and after each stack); "
            "MarianMT is post-norm only, so it cannot express it. Export it with --to ctranslate2 or --to torch, "
            "which support both"
        )
    if src_tok is None:
        return _marian_own_vocabulary(model)
    for side, tok, key in (("source", src_tok, "src_vocab_size"), ("target", tgt_tok, "tgt_vocab_size")):
        if tok.vocab_size != cfg[key]:
            raise ValueError(
                f"export_transformers: the {side} tokenizer has {tok.vocab_size} tokens but the model's {key} is "
                f"{cfg[key]}"
            )
    d = int(cfg["d_model"])
    perm = marian_permutation(d, cfg["layout"])
    params = {name: np.asarray(p.value, dtype=np.float32) for name, p in model.parameters().items()}
    merged, source_ids = _marian_vocabulary(src_tok, tgt_tok)

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
    weights = {name: np.ascontiguousarray(w, dtype=np.float32) for name, w in weights.items()}
    config, generation_config = _marian_configs(cfg, len(merged), len(merged), False, _PAD_ID, _START_ID, _END_ID)
    names = dict(zip(("pad_token", "bos_token", "eos_token", "unk_token"), SPECIAL_TOKENS))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **names,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": MARIAN_POSITIONS,
        "padding_side": "right",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": True,
    }
    return {
        "config": config,
        "generation_config": generation_config,
        "weights": weights,
        "tokenizer": _marian_tokenizer(src_tok, merged),
        "tokenizer_config": tokenizer_config,
    }


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
    ckpt = _load(checkpoint_dir)
    files = convert_to_marian(ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer)
    eps = float(ckpt.model.config["layer_norm_eps"])
    provenance = _provenance(ckpt, "transformers")
    with _staging(out) as tmp:
        save_file(files["weights"], str(tmp / "model.safetensors"), metadata={"format": "pt"})
        _write_json(tmp / "config.json", files["config"])
        _write_json(tmp / "generation_config.json", files["generation_config"])
        (tmp / "tokenizer.json").write_text(files["tokenizer"], encoding="utf-8")
        _write_json(tmp / "tokenizer_config.json", files["tokenizer_config"])
        _write_json(
            tmp / "transformer_cpp.json",
            dict(
                provenance,
                architecture="MarianMTModel",
                layer_norm_eps={"model": eps, "marian": MARIAN_LAYER_NORM_EPS},
                exact=eps == MARIAN_LAYER_NORM_EPS and ckpt.model.config["dtype"] == "float32",
                tokenization="one tokenizer (tokenizer.json): source merges, target ids",
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


# ------------------------------------------------------------------------------------ shared


def _load(checkpoint_dir: PathLike) -> Any:
    return load_checkpoint(checkpoint_dir, optimizer=False)


def _vocabulary(tokenizer: Any) -> List[str]:
    return [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]


def _hf_tokenizer_json(tokenizer: Any) -> str:
    """The Hugging Face ``tokenizers`` document inside a :class:`SubwordTokenizer`'s saved form."""
    return json.dumps(json.loads(tokenizer.to_str())["tokenizer"], ensure_ascii=False)


def _write_tokenizers(directory: Path, src_tok: Any, tgt_tok: Any) -> None:
    for name, tok in (("source_tokenizer.json", src_tok), ("target_tokenizer.json", tgt_tok)):
        (directory / name).write_text(_hf_tokenizer_json(tok), encoding="utf-8")


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _provenance(ckpt: Any, to: str) -> Dict[str, Any]:
    data = ckpt.data or {}
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "to": to,
        "exported_from": str(ckpt.path),
        "transformer_cpp_version": __version__,
        "model": ckpt.model.config,
        "special_ids": {"pad": _PAD_ID, "start": _START_ID, "end": _END_ID, "unk": _UNK_ID},
        "special_tokens": {
            k: ckpt.tgt_tokenizer.id_to_token(i)
            for k, i in (("pad", _PAD_ID), ("start", _START_ID), ("end", _END_ID), ("unk", _UNK_ID))
        },
        "src_lang": data.get("src_lang", "en"),
        "tgt_lang": data.get("tgt_lang", "es"),
        "tokenization": "ids = [start] + tokenizer.encode(' ' + sentence, add_special_tokens=False).ids + [end]",
    }


def _check_out_dir(out_dir: PathLike) -> Path:
    """``out_dir`` as a Path if it can be written: absent (its parent a writable directory) or an
    empty directory. Checked before any work."""
    out = path("export: out_dir", out_dir)
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise FileExistsError(f"the output '{out}' exists and is not a directory; choose another output directory")
        if any(out.iterdir()):
            raise FileExistsError(
                f"the output directory '{out}' already exists and is not empty; choose another one or remove it"
            )
    parent = out.absolute().parent
    if not parent.is_dir():
        raise FileNotFoundError(f"cannot write the output directory '{out}': no such directory '{parent}'")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write the output directory '{out}': '{parent}' is not writable")
    return out


#: The staging directory of an export: ``.export-<output name>-<pid>-<8 hex digits>`` beside it.
_STAGING_RE = re.compile(r"^\.export-(?P<name>.+)-(?P<pid>\d+)-[0-9a-f]{8}$")


def _process_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs on this machine (one of another user's still runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False
    return False


def remove_stale_staging(out: Path) -> List[Path]:
    """Remove the staging directories that exports to ``out`` left when they were killed (their
    process is gone): only those named as :class:`_staging` names them for ``out``; the paths
    removed."""
    parent = out.absolute().parent
    removed: List[Path] = []
    try:
        children = list(parent.iterdir())
    except OSError:
        return removed
    for child in children:
        match = _STAGING_RE.match(child.name)
        if (
            match is not None
            and match.group("name") == out.name
            and _process_gone(int(match.group("pid")))
            and child.is_dir()
            and not child.is_symlink()
        ):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


class _staging:
    """A temporary directory beside ``out`` that becomes ``out`` when the block succeeds and is
    removed when it fails; what earlier exports to ``out`` left when they were killed is removed
    first."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.tmp = out.absolute().parent / f".export-{out.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> Path:
        remove_stale_staging(self.out)
        self.tmp.mkdir()
        return self.tmp

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is None:
            try:
                os.replace(self.tmp, self.out)  # replaces an empty directory, nothing else
                return
            except OSError:
                shutil.rmtree(self.tmp, ignore_errors=True)
                raise
        shutil.rmtree(self.tmp, ignore_errors=True)
