"""What the exporters share: the special ids, loading a checkpoint, the provenance record, the output directory written under a temporary name."""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any, Dict, List, Union


from .._checks import path
from ..checkpoint import load_checkpoint
from .._version import __version__


PathLike = Union[str, "os.PathLike[str]"]

#: Weight types ``--quantization`` accepts (CTranslate2's own names; None keeps float32).
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
#: The ``translate_batch`` options that make CTranslate2's greedy search ours.
CTRANSLATE2_OPTIONS: Dict[str, Any] = {"beam_size": 1, "suppress_sequences": [["<pad>"]], "min_decoding_length": 0}
#: The module definition written into a PyTorch export.
TORCH_MODULE_FILE = "transformer_torch.py"
#: CTranslate2 needs a table of positions; it gets at least this many.
CTRANSLATE2_POSITIONS = 2048

_TEMPLATE = Path(__file__).parent.with_name("_exported_torch.py")
_PAD_ID, _START_ID, _END_ID, _UNK_ID = 0, 1, 2, 3  # the core's fixed special ids
EXPORT_FORMAT = "transformer_cpp.export"
EXPORT_VERSION = 1


# ------------------------------------------------------------------------------------ shared


def _load(checkpoint_dir: PathLike, who: str) -> Any:
    ckpt = load_checkpoint(checkpoint_dir, optimizer=False)
    check_exportable(ckpt.model.config, who)
    return ckpt


def check_exportable(config: Dict[str, Any], who: str) -> None:
    """ValueError when the model of ``config`` has a layer the other runtimes do not: they hold the
    paper's softmax attention everywhere, so a model with linear self-attention stays here."""
    for side in ("encoder", "decoder"):
        kind = config.get(f"{side}_attention", "softmax")
        if kind != "softmax":
            raise ValueError(
                f"{who}: the model's {side} has {kind} self-attention, which the exported format does not "
                f"have (it holds softmax attention only); only a model with {side}_attention 'softmax' exports"
            )


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
