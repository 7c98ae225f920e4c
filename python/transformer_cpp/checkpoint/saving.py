"""Writing a checkpoint: check the model, serialise everything, write it atomically, move the
``latest`` pointer, prune the run's oldest checkpoints; and the ``best`` pointer."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import sys
import uuid
from pathlib import Path
from typing import Any, BinaryIO, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import numpy as np

from .._checks import flag as _flag, integer as _integer, path as _path
from ..model import Transformer
from ..tokenizer import SentencePieceTokenizer, SubwordTokenizer, Tokenizer
from .files import (
    fsync_dir,
    json_bytes,
    lock_run,
    remove_checkpoint,
    remove_stale_temporaries,
    sha256,
    temporary,
    write_bytes,
    write_pointer,
)
from .layout import (
    AVERAGED_NAME,
    BEST_FILE,
    CONFIG_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    LATEST_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    TRAINER_STATE_FILE,
    TRANSLATION_KIND,
    CheckpointError,
    PathLike,
    best_checkpoint,
    checkpoint_name,
    complete_config,
    latest_checkpoint,
    list_checkpoints,
    not_written_here,
    order_key,
    refuse_foreign,
)


def nonfinite_tensors(tensors: Mapping[str, Any]) -> List[str]:
    """The names of the tensors (arrays, or objects with a ``.value`` array) that hold a NaN or
    infinite value, each with what it holds: ``"'output.bias' (3 NaN, 0 infinite of 120)"``."""
    bad = []
    for name, t in tensors.items():
        value = np.asarray(getattr(t, "value", t))
        if value.dtype.kind not in "fc":
            continue
        finite = np.isfinite(value)
        if not finite.all():
            nan = int(np.isnan(value).sum())
            bad.append(f"{name!r} ({nan} NaN, {int(value.size - finite.sum()) - nan} infinite of {value.size})")
    return bad


def describe_bad(bad: List[str]) -> str:
    """The first three of :func:`nonfinite_tensors`' findings, and how many more there are."""
    return ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")


def tensor_bytes(tensors: Mapping[str, Any], kind: str) -> bytes:
    """The ``.value`` arrays of ``tensors`` as the bytes of one safetensors file, made by the
    safetensors package: a copy of every tensor in memory at once. Checkpoints are written by
    :class:`TensorFile`, which writes the same bytes (this is its reference) tensor by tensor."""
    from safetensors.numpy import save

    arrays = {name: np.ascontiguousarray(np.array(t.value, copy=True)) for name, t in tensors.items()}
    return save(arrays, metadata={"format": FORMAT_NAME, "content": kind})


# safetensors' names of the NumPy dtypes, in the order of its dtype enumeration: a file holds its
# tensors sorted by that order, the last first, then by name
_SAFETENSORS_DTYPES = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "uint16": "U16",
    "float16": "F16",
    "int32": "I32",
    "uint32": "U32",
    "float32": "F32",
    "float64": "F64",
    "int64": "I64",
    "uint64": "U64",
}
_DTYPE_RANK = {name: rank for rank, name in enumerate(_SAFETENSORS_DTYPES)}
_WRITE_CHUNK = 16 << 20  # bytes handed to each write (and to the checksum)


class TensorFile:
    """A safetensors file of the ``.value`` arrays of ``tensors`` (with the metadata of a
    checkpoint, ``content`` = ``kind``), written straight from the arrays a piece at a time: no
    copy of a tensor is made, so writing a model costs no memory beyond a small buffer. The bytes
    are those of :func:`tensor_bytes` (the safetensors package's layout: an 8-byte little-endian
    header length, the JSON header padded with spaces to a multiple of 8, then the tensors sorted
    by dtype and name). The arrays must not change until :meth:`write` returns."""

    def __init__(self, tensors: Mapping[str, Any], kind: str) -> None:
        arrays = {name: np.asarray(getattr(t, "value", t)) for name, t in tensors.items()}
        for name, a in arrays.items():
            if a.dtype.name not in _SAFETENSORS_DTYPES:
                raise ValueError(f"TensorFile: tensor {name!r} has dtype {a.dtype}, which safetensors does not store")
        order = sorted(arrays, key=lambda n: (-_DTYPE_RANK[arrays[n].dtype.name], n))
        header: Dict[str, Any] = {"__metadata__": {"format": FORMAT_NAME, "content": kind}}
        offset = 0
        for name in order:
            a = arrays[name]
            header[name] = {
                "dtype": _SAFETENSORS_DTYPES[a.dtype.name],
                "shape": [int(n) for n in a.shape or (1,)],  # a 0-d value as tensor_bytes stores it
                "data_offsets": [offset, offset + a.nbytes],
            }
            offset += a.nbytes
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        text += b" " * (-len(text) % 8)
        self._header = struct.pack("<Q", len(text)) + text
        self._arrays = [arrays[name] for name in order]
        self.size = len(self._header) + offset  # bytes of the file

    def chunks(self) -> Iterator[memoryview]:
        """The file's bytes in order: the header, then each tensor in pieces of at most 16 MiB
        (views of the arrays themselves when they are contiguous and little-endian)."""
        yield memoryview(self._header)
        for a in self._arrays:
            flat = a.reshape(-1)  # a view of a contiguous array, else a copy of this one tensor
            if flat.dtype.byteorder == ">" or (flat.dtype.byteorder == "=" and sys.byteorder == "big"):
                flat = flat.astype(flat.dtype.newbyteorder("<"))
            data = np.ascontiguousarray(flat).view(np.uint8).data
            for start in range(0, len(data), _WRITE_CHUNK):
                yield data[start : start + _WRITE_CHUNK]

    def write(self, f: BinaryIO) -> Tuple[int, str]:
        """Write the file into the open binary file ``f``; its size and hex SHA-256."""
        digest = hashlib.sha256()
        written = 0
        for chunk in self.chunks():
            digest.update(chunk)
            f.write(chunk)
            written += len(chunk)
        return written, digest.hexdigest()


#: What :func:`write_checkpoint` writes into a file: its bytes, or tensors streamed from memory.
Payload = Union[bytes, TensorFile]


def save_checkpoint(
    run_dir: PathLike,
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    *,
    name: Optional[str] = None,
    trainer_state: Optional[Mapping[str, Any]] = None,
    train_config: Optional[Mapping[str, Any]] = None,
    data: Optional[Mapping[str, Any]] = None,
    optimizer: bool = True,
    keep: Optional[int] = 5,
    run_id: Optional[str] = None,
    best: bool = False,
) -> Path:
    """Write a checkpoint of ``model`` into ``run_dir/name`` atomically; point ``latest`` at it.

    Args:
        run_dir: the run directory (created if needed).
        model: the model; its ``config``, ``optimizer_config``, weights and (with ``optimizer``)
            Adam moments, ``step`` and ``dropout_calls`` are saved.
        src_tokenizer, tgt_tokenizer: the tokenizers (their vocabulary sizes must match the model).
        name: the directory name, as made by :func:`checkpoint_name` (default: from
            ``trainer_state``'s ``epoch`` and ``batch_in_epoch``, else ``epoch-0000``).
        trainer_state, train_config, data: JSON-serialisable dicts stored as they are.
        optimizer: also save the optimiser moments (needed to resume training, not to translate).
        keep: keep only the newest ``keep`` complete checkpoints of this run (``None`` or 0:
            keep all). The one just written and ``best`` are always kept; checkpoints of other
            runs, damaged directories and checkpoints holding a file their manifest does not list
            are never deleted.
        run_id: the run this checkpoint belongs to (recorded in ``config.json``; pruning only
            deletes checkpoints of the same run). Default: the run of the checkpoint ``latest``
            names, else a new one.
        best: also point ``best`` at it, before pruning: the checkpoint ``best`` named until
            then is pruned like any other when it is beyond the newest ``keep``.

    Returns:
        The checkpoint directory.

    Raises:
        ValueError: bad arguments (a name not made by :func:`checkpoint_name`, tokenizers that do
            not match the model, state that is not JSON-serialisable, weights or moments that
            hold NaN or infinite values).
        RunLockedError: another process is writing into ``run_dir``.
        FileExistsError: ``run_dir/name`` or ``run_dir/latest`` exists and was not written by
            this program (a checkpoint is recognised by its manifest, ``config.json``); it is
            never replaced.
    """
    run = _path("save_checkpoint: run_dir", run_dir)
    name = _checked_name(name, trainer_state)
    optimizer = _flag("save_checkpoint", "optimizer", optimizer)
    if keep is not None:
        keep = _integer("save_checkpoint", "keep", keep)
    _check_savable(model, src_tokenizer, tgt_tokenizer, optimizer)
    if run_id is not None and (not isinstance(run_id, str) or not run_id):
        raise ValueError(f"save_checkpoint: run_id must be a non-empty str or None, got {run_id!r}")
    # Everything is checked and serialised (the tensors laid out, written later straight from the
    # model) before the first byte is written, so that bad input fails early.
    files, config = _serialised(model, src_tokenizer, tgt_tokenizer, trainer_state, train_config, data, optimizer)
    return write_checkpoint(run, name, files, config, keep=keep, run_id=run_id, best=best, what="save_checkpoint")


def _checked_name(name: Optional[str], trainer_state: Optional[Mapping[str, Any]]) -> str:
    """``name``, or the name of the epoch and batch ``trainer_state`` records; ``ValueError`` for a
    name :func:`checkpoint_name` does not make."""
    if name is None:
        state = trainer_state or {}
        name = checkpoint_name(int(state.get("epoch", 0)), int(state.get("batch_in_epoch", 0)))
    if order_key(name) is None and name != AVERAGED_NAME:
        raise ValueError(
            f"save_checkpoint: name {name!r} is not a checkpoint name such as 'epoch-0003' (or {AVERAGED_NAME!r})"
        )
    return name


def _check_savable(model: Transformer, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, optimizer: bool) -> None:
    """``ValueError`` unless both tokenizers are of a saved kind and match the model's vocabulary
    sizes, and the weights (and with ``optimizer`` the Adam moments) are all finite."""
    cfg = model.config
    for label, tok, key in (
        ("src_tokenizer", src_tokenizer, "src_vocab_size"),
        ("tgt_tokenizer", tgt_tokenizer, "tgt_vocab_size"),
    ):
        if not isinstance(tok, (SubwordTokenizer, SentencePieceTokenizer)):
            raise ValueError(
                f"save_checkpoint: {label} must be a SubwordTokenizer or a SentencePieceTokenizer, got {type(tok).__name__}"
            )
        if tok.vocab_size != cfg[key]:
            raise ValueError(
                f"save_checkpoint: {label} has {tok.vocab_size} tokens but the model's {key} is {cfg[key]}"
            )
    bad = nonfinite_tensors(model.parameters())
    if optimizer and not bad:
        bad = nonfinite_tensors(model.optimizer_state())
    if bad:
        raise ValueError(
            f"save_checkpoint: the model holds non-finite values, in {describe_bad(bad)}; "
            "a checkpoint of it could not be used (has training diverged?)"
        )


def _serialised(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    trainer_state: Optional[Mapping[str, Any]],
    train_config: Optional[Mapping[str, Any]],
    data: Optional[Mapping[str, Any]],
    optimizer: bool,
) -> Tuple[Dict[str, Payload], Dict[str, Any]]:
    """The contents of each file of a translation checkpoint (bytes, or the tensors' layout) and
    its manifest; ``ValueError`` when the state given is not JSON-serialisable."""
    files: Dict[str, Payload] = {
        MODEL_FILE: TensorFile(model.parameters(), "weights"),
        SRC_TOKENIZER_FILE: src_tokenizer.to_str().encode("utf-8"),
        TGT_TOKENIZER_FILE: tgt_tokenizer.to_str().encode("utf-8"),
    }
    if optimizer:
        files[OPTIMIZER_FILE] = TensorFile(model.optimizer_state(), "adam")
    try:
        files[TRAINER_STATE_FILE] = json_bytes(None if trainer_state is None else dict(trainer_state))
        config: Dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "kind": TRANSLATION_KIND,
            "model": model.config,
            "optimizer": {
                "config": model.optimizer_config,
                "saved": bool(optimizer),
                "step": model.step,
                "dropout_calls": model.dropout_calls,
            },
            "train_config": None if train_config is None else dict(train_config),
            "data": None if data is None else dict(data),
        }
    except (TypeError, ValueError) as exc:
        raise ValueError(f"save_checkpoint: state is not JSON-serialisable: {exc}") from None
    return files, config


def _write_file(path: Path, payload: Payload) -> Dict[str, Any]:
    """Write ``payload`` (bytes, or a :class:`TensorFile` streamed from its arrays) into ``path`` and
    push it to disk; its manifest entry, ``{"bytes": size, "sha256": hex digest}``."""
    if isinstance(payload, TensorFile):
        with open(path, "wb") as f:
            size, digest = payload.write(f)
            f.flush()
            os.fsync(f.fileno())
        return {"bytes": size, "sha256": digest}
    write_bytes(path, payload)
    return {"bytes": len(payload), "sha256": sha256(payload)}


def write_checkpoint(
    run: Path,
    name: str,
    files: Mapping[str, Payload],
    config: Dict[str, Any],
    *,
    keep: Optional[int],
    run_id: Optional[str],
    best: bool = False,
    what: str = "save_checkpoint",
) -> Path:
    """Write checkpoint ``name`` of run directory ``run`` from serialised ``files`` (each the bytes
    of a file, or a :class:`TensorFile` written straight from its tensors) and the manifest
    ``config`` (its ``files`` and ``run_id`` are filled in here, sizes and checksums as each file is
    written), atomically and under the run's lock; point ``latest`` (and with ``best``, ``best``)
    at it and prune the run's oldest beyond ``keep`` (None or 0: keep all). Every task's
    checkpoints are written here; ``what`` starts the messages. Its path."""
    config = dict(config)
    with lock_run(run):
        target = run / name
        # what is replaced must be this program's: a checkpoint (by its manifest) and the pointer
        hint = "move it elsewhere, or write the run into another directory"
        refuse_foreign(target, what, hint)
        if name != AVERAGED_NAME:
            refuse_foreign(run / LATEST_FILE, what, hint)
        config["run_id"] = run_id or _latest_run_id(run) or uuid.uuid4().hex[:16]
        try:
            json_bytes(config)  # before any file is written; the sizes and checksums are added below
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what}: state is not JSON-serialisable: {exc}") from None
        with temporary(run, name) as tmp, temporary(run, f"old-{name}") as trash:
            tmp.mkdir()
            try:
                entries = {fname: _write_file(tmp / fname, payload) for fname, payload in files.items()}
                config["files"] = dict(sorted(entries.items()))
                write_bytes(tmp / CONFIG_FILE, json_bytes(config))  # last: a directory with config.json is complete
                fsync_dir(tmp)
                if target.exists():  # e.g. the same epoch saved again after resuming from an older checkpoint
                    os.replace(target, trash)
                    os.replace(tmp, target)
                    shutil.rmtree(trash, ignore_errors=True)
                else:
                    os.replace(tmp, target)
                fsync_dir(run)
            except OSError as exc:  # a full disk, a file size limit, a vanished directory
                shutil.rmtree(tmp, ignore_errors=True)
                raise type(exc)(
                    f"{what}: writing checkpoint '{target}' failed: {exc.strerror or exc} "
                    f"(disk full?); '{run}' is as it was"
                ) from None
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise

        if name != AVERAGED_NAME:  # "latest" is what a resume continues: never the average
            try:
                write_pointer(run, name)
            except OSError as exc:
                raise type(exc)(
                    f"{what}: checkpoint '{target}' is complete, but writing '{LATEST_FILE}' "
                    f"failed: {exc.strerror or exc} (disk full?); it still names the previous "
                    "checkpoint"
                ) from None
        if best:
            write_pointer(run, name, BEST_FILE)
        remove_stale_temporaries(run)
        if keep:
            _prune(run, int(keep), protect=target, run_id=config["run_id"])
    return target


def _latest_run_id(run: Path) -> Optional[str]:
    """The run id recorded by the checkpoint ``latest`` names, if it can be read."""
    try:
        latest = latest_checkpoint(run)
    except CheckpointError:
        return None
    config = complete_config(latest) if latest is not None else None
    run_id = config.get("run_id") if config is not None else None
    return run_id if isinstance(run_id, str) and run_id else None


def _prune(run: Path, keep: int, protect: Path, run_id: str) -> None:
    """Delete the oldest complete checkpoints of run ``run_id`` beyond the newest ``keep``, never
    ``protect`` (the one just written) nor ``best``."""
    ours = list_checkpoints(run, run_id=run_id)
    try:
        best = best_checkpoint(run)
    except CheckpointError:
        best = None
    for old in ours[: max(0, len(ours) - keep)]:
        if old != protect and old != best and not_written_here(old) is None:  # never a file of the user's
            remove_checkpoint(old)


def mark_best(run_dir: PathLike, name: str) -> None:
    """Point ``run_dir/best`` at the checkpoint ``name`` (atomically)."""
    run = Path(run_dir)
    if not isinstance(name, str) or (order_key(name) is None and name != AVERAGED_NAME):
        raise CheckpointError(
            f"mark_best: name {name!r} is not the name of a checkpoint of the run, such as "
            f"'epoch-0003' or {AVERAGED_NAME!r}"
        )
    if not (run / name / CONFIG_FILE).is_file():
        raise CheckpointError(f"mark_best: '{run / name}' is not a checkpoint")
    with lock_run(run):
        write_pointer(run, name, BEST_FILE)
