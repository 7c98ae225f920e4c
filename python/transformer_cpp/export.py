"""Export a trained model to other runtimes: CTranslate2, and plain PyTorch.

::

    transformer-cpp export --model runs/quick --to ctranslate2 exported-ct2 [--quantization int8]
    transformer-cpp export --model runs/quick --to torch exported-torch

or :func:`export_ctranslate2` / :func:`export_torch` from Python. ``--model`` is what
``translate`` takes: a run directory (its ``best`` checkpoint) or one checkpoint directory. The
output directory must not exist, or be empty; it is written under a temporary name and renamed
into place, so a failed export leaves nothing behind (one killed outright leaves its staging
directory, ``.export-<OUT>-<pid>-<random>``, which the next export to the same place removes).
Both exports hold the two subword vocabularies as Hugging Face ``tokenizers`` files
(``source_tokenizer.json``, ``target_tokenizer.json``): transformer-cpp encodes a sentence as ``" " + sentence`` without the
tokenizer's own special tokens, between its start (id 1) and end (id 2) tokens.

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

The exports are tested to give our tokens and logits (``tests/test_export.py``).
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
from ._version import __version__

__all__ = [
    "CTRANSLATE2_OPTIONS",
    "QUANTIZATIONS",
    "TORCH_MODULE_FILE",
    "convert_to_ctranslate2",
    "export_ctranslate2",
    "export_torch",
    "import_ctranslate2",
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
