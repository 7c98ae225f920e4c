"""A published MarianMT (OPUS-MT) model turned into a run directory of this package.

:func:`import_pretrained` takes a local MarianMT directory or a Hugging Face Hub name
(``Helsinki-NLP/opus-mt-en-es``), reads it with :func:`~transformer_cpp.pretrained.load_marian`
and :meth:`~transformer_cpp.tokenizer.SentencePieceTokenizer.from_marian_dir`, and writes an
ordinary run directory (one checkpoint, ``latest`` pointing at it) that ``translate``,
``evaluate`` and :meth:`~transformer_cpp.Translator.from_checkpoint` read like a trained run.
Where the model came from (the source as given, the directory read, every file's sha256) and its
license are recorded in ``pretrained.json`` in the run and in the checkpoint's manifest
(``data["pretrained"]``). Nothing pickled is executed: ``pytorch_model.bin`` is read with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional, Tuple, Union

from ..checkpoint import LATEST_FILE, list_checkpoints, save_checkpoint
from ..model import Transformer
from ..tokenizer import SentencePieceTokenizer, Tokenizer
from .generation import generation_defaults
from .marian import load_marian
from .own_export import is_own_export, read_own_export

__all__ = ["PROVENANCE_FILE", "PretrainedParts", "import_pretrained", "load_pretrained", "resolve_source"]

PathLike = Union[str, Path]

#: The provenance record written into an imported run directory.
PROVENANCE_FILE = "pretrained.json"
#: The license of every OPUS-MT model the University of Helsinki publishes on the Hub.
OPUS_MT_LICENSE = "CC-BY-4.0"
_OPUS_MT = re.compile(r"opus-mt-([a-z]{2,3}(?:_[A-Za-z]+)?)-([a-z]{2,3}(?:_[A-Za-z]+)?)$")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_DOWNLOADED = ["*.json", "*.spm", "*.safetensors", "pytorch_model.bin", "README.md"]


class PretrainedParts(NamedTuple):
    """What :func:`load_pretrained` reads: the model, its tokenizers, its languages (None when not
    known), the provenance record and the decoding defaults of its generation rules
    (:func:`~transformer_cpp.pretrained.generation.generation_defaults`)."""

    model: Transformer
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    src_lang: Optional[str]
    tgt_lang: Optional[str]
    provenance: Dict[str, Any]
    decode_defaults: Dict[str, Any] = {}


def resolve_source(source: PathLike, who: str = "import_pretrained") -> Path:
    """The local directory of ``source``: a directory as it is, else a Hub name from the
    Hugging Face cache, else downloaded. ``FileNotFoundError`` for neither, ``ImportError`` when
    huggingface_hub is missing, ``OSError`` (one line naming the model) when the Hub cannot be
    reached."""
    path = Path(source)
    if path.is_dir():
        return path.resolve()
    name = str(source)
    if not _HUB_NAME.match(name):
        raise FileNotFoundError(
            f"{who}: {name!r} is neither a directory nor a Hugging Face Hub name such as 'Helsinki-NLP/opus-mt-en-es'"
        )
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ImportError(
            f"{who}: {name!r} is not a local directory, and reading a Hub model needs the package "
            "huggingface_hub (pip install huggingface_hub; in a checkout of transformer-cpp, pip install '.[hub]'), "
            "or pass the path of a downloaded model directory"
        ) from None
    try:
        return Path(snapshot_download(name, local_files_only=True, allow_patterns=_DOWNLOADED))
    except Exception:  # not in the cache (huggingface_hub's error types vary between versions)
        pass
    try:
        return Path(snapshot_download(name, allow_patterns=_DOWNLOADED))
    except Exception as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        reason = reason if len(reason) <= 300 else reason[:300].rsplit(" ", 1)[0] + " ..."
        raise OSError(
            f"{who}: the Hub model {name!r} is not in the local Hugging Face cache and could not be "
            f"downloaded ({type(exc).__name__}: {reason}); download the model directory on a machine "
            "with access to the Hub and pass its path instead"
        ) from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _json(path: Path) -> Dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def model_license(source: str, directory: Path) -> str:
    """The license of the model: CC-BY-4.0 for the Hub's ``Helsinki-NLP/opus-mt-*``, else the
    ``license:`` of ``README.md``'s front matter (a model card), else ``"unknown"``."""
    if source.startswith("Helsinki-NLP/opus-mt"):
        return OPUS_MT_LICENSE
    readme = directory / "README.md"
    try:
        text = readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else ""
    except OSError:
        text = ""
    if text.startswith("---"):
        front = text[3:].split("\n---", 1)[0]
        for line in front.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "license" and value.strip().strip("'\""):
                return value.strip().strip("'\"")
    return "unknown"


def languages(
    source: str, directory: Path, src_lang: Optional[str], tgt_lang: Optional[str]
) -> Tuple[Optional[str], Optional[str]]:
    """``(source language, target language)``: those given, else tokenizer_config.json's
    ``source_lang`` / ``target_lang``, else from a name ending in ``opus-mt-xx-yy`` (the source
    or the directory), else None."""
    config = _json(directory / "tokenizer_config.json")
    found = [config.get("source_lang"), config.get("target_lang")]
    for name in (source.rstrip("/"), directory.name):
        match = _OPUS_MT.search(name)
        if match:
            found = [found[0] or match.group(1), found[1] or match.group(2)]
            break
    src = src_lang or (found[0] if isinstance(found[0], str) and found[0] else None)
    tgt = tgt_lang or (found[1] if isinstance(found[1], str) and found[1] else None)
    return src, tgt


def load_pretrained(
    source: PathLike,
    *,
    src_lang: Optional[str] = None,
    tgt_lang: Optional[str] = None,
    dtype: str = "float32",
    who: str = "load_pretrained",
) -> PretrainedParts:
    """Read a MarianMT directory or Hub name (see :func:`resolve_source`) into memory: the model,
    both SentencePiece tokenizers, the languages and the provenance record. A Transformers export
    of this package is read back as the run it was exported from translated
    (:mod:`~transformer_cpp.pretrained.own_export`)."""
    directory = resolve_source(source, who)
    if is_own_export(directory):  # a run of this package, exported: as that run translated
        model, src_own, tgt_own, recorded = read_own_export(directory, dtype)
        src_tok: Tokenizer = src_own
        tgt_tok: Tokenizer = tgt_own
        decode_defaults: Dict[str, Any] = {}
        src, tgt = src_lang or recorded["src_lang"], tgt_lang or recorded["tgt_lang"]
        kind = "transformer-cpp export"
    else:
        model = load_marian(directory, dtype=dtype)
        decode_defaults = generation_defaults(directory, model.config)
        src_tok = SentencePieceTokenizer.from_marian_dir(directory, "source")
        tgt_tok = SentencePieceTokenizer.from_marian_dir(directory, "target")
        src, tgt = languages(str(source), directory, src_lang, tgt_lang)
        kind = "marian"
    files = {p.name: _sha256(p) for p in sorted(directory.iterdir()) if p.is_file() and not p.name.startswith(".")}
    provenance = {
        "source": str(source),
        "resolved_path": str(directory),
        "format": kind,
        "license": model_license(str(source), directory),
        "files": files,
    }
    return PretrainedParts(model, src_tok, tgt_tok, src, tgt, provenance, decode_defaults)


def import_pretrained(
    source: PathLike,
    out: PathLike,
    *,
    src_lang: Optional[str] = None,
    tgt_lang: Optional[str] = None,
    dtype: str = "float32",
) -> Path:
    """Write the MarianMT model ``source`` (a directory or a Hub name) as a run directory ``out``
    (new, or without a run in it); returns the checkpoint written. The languages are those given,
    else the model's (tokenizer_config.json, or an ``opus-mt-xx-yy`` name); ``ValueError`` when
    neither says. ``FileExistsError`` when ``out`` already holds a run."""
    run = Path(out)
    if list_checkpoints(run, complete=False) or (run / LATEST_FILE).exists():
        raise FileExistsError(f"import_pretrained: '{run}' already holds a run; choose a new directory")
    if (run / PROVENANCE_FILE).exists():
        raise FileExistsError(f"import_pretrained: '{run / PROVENANCE_FILE}' exists; choose a new directory")
    parts = load_pretrained(source, src_lang=src_lang, tgt_lang=tgt_lang, dtype=dtype, who="import_pretrained")
    if parts.src_lang is None or parts.tgt_lang is None:
        raise ValueError(
            f"import_pretrained: the languages of {str(source)!r} are not recorded in it (tokenizer_config.json "
            "source_lang/target_lang, or a name opus-mt-xx-yy); give them (--source-lang and --target-lang)"
        )
    data = {
        "src_lang": parts.src_lang,
        "tgt_lang": parts.tgt_lang,
        "pretrained": parts.provenance,
        "decode_defaults": parts.decode_defaults,
    }
    path = save_checkpoint(run, parts.model, parts.src_tokenizer, parts.tgt_tokenizer, data=data, optimizer=False)
    tmp = run / f".{PROVENANCE_FILE}.tmp"
    tmp.write_text(json.dumps(parts.provenance, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, run / PROVENANCE_FILE)
    return path
