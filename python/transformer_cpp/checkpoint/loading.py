"""Reading a checkpoint: every file checked against the size and SHA-256 that ``config.json``
records, every tensor against the architecture, before anything is used; and averaging several."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from .. import kernels
from .._checks import flag as _flag, integer as _integer
from .._runtime import memory_limit_bytes
from ..model import Transformer
from ..tokenizer import MAX_FILE_BYTES as _MAX_TOKENIZER_BYTES, Tokenizer, tokenizer_from_str
from .files import sha256
from .layout import (
    AVERAGED_NAME,
    CONFIG_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_CONFIG_BYTES,
    MODEL_FILE,
    OPTIMIZER_FILE,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    TRAINER_STATE_FILE,
    TRANSLATION_KIND,
    Checkpoint,
    CheckpointError,
    PathLike,
    check_kind,
    resolve_checkpoint,
)
from .saving import describe_bad, nonfinite_tensors, save_checkpoint

#: Size beyond which a trainer_state.json is not one (a checkpoint's other files are bounded by
#: what config.json records, MAX_CONFIG_BYTES, and what the architecture needs).
_MAX_STATE_BYTES = 1 << 30


def _read_file(ckpt: Path, fname: str, files: Mapping[str, Any], most: Optional[int] = None) -> bytes:
    """The bytes of ``fname``, checked against the size and SHA-256 that config.json records before
    (size) and after (checksum) reading; a recorded size above ``most`` bytes (what such a file can
    hold) or above the memory there is is refused before anything is read."""
    path = ckpt / fname
    expected = files.get(fname)
    if not (
        isinstance(expected, Mapping)
        and isinstance(expected.get("bytes"), int)
        and not isinstance(expected.get("bytes"), bool)
        and expected["bytes"] >= 0
        and isinstance(expected.get("sha256"), str)
    ):
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{CONFIG_FILE}' records no valid size and SHA-256 for '{fname}' "
            f"(got {expected!r:.80}); the checkpoint is damaged"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{ckpt}' is incomplete: '{fname}' is missing")
    size = path.stat().st_size
    if size != expected["bytes"]:
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' has {size} bytes, expected {expected['bytes']} (truncated or overwritten)"
        )
    if most is not None and size > most:
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' has {size:,} bytes, more than such a file can hold "
            f"({most:,}); the checkpoint is damaged"
        )
    room = memory_limit_bytes()  # compared here: paths need not be valid UTF-8 for the core
    if size > room:
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' has {size:,} bytes, more than the {room:,.0f} bytes of "
            "memory available to read it"
        )
    data = path.read_bytes()
    if len(data) != size:
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' changed while it was read")
    if sha256(data) != expected["sha256"]:
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' is damaged (its SHA-256 does not match config.json)")
    return data


def _read_json(ckpt: Path, fname: str, files: Mapping[str, Any]) -> Any:
    data = _read_file(ckpt, fname, files, _MAX_STATE_BYTES)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' is not valid JSON ({exc})") from None


def _tensor_file_bound(targets: Mapping[str, Any]) -> int:
    """The most bytes a safetensors file of ``targets`` can take: the tensors (at 8 bytes an element,
    so that float64 tensors for a float32 model are refused for their dtype, by name) and a header
    with a generous allowance per tensor."""
    return int(sum(8 * t.value.size + 1024 for t in targets.values())) + (1 << 20)


def _load_tensors(
    ckpt: Path, fname: str, files: Mapping[str, Any], targets: Optional[Mapping[str, Any]] = None
) -> Dict[str, np.ndarray]:
    from safetensors.numpy import load

    data = _read_file(ckpt, fname, files, None if targets is None else _tensor_file_bound(targets))
    try:
        return load(data)
    except Exception as exc:  # safetensors raises its own SafetensorError (an Exception)
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' is not a readable safetensors file ({exc})") from None


def _assign(ckpt: Path, fname: str, targets: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
    """Copy ``tensors`` into the ``.value`` views of ``targets``, checking names, shapes, dtypes."""
    missing = [n for n in targets if n not in tensors]
    unexpected = [n for n in tensors if n not in targets]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensor(s), e.g. {missing[0]!r}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected tensor(s), e.g. {unexpected[0]!r}")
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' does not match the architecture in config.json: " + "; ".join(parts)
        )
    for n, target in targets.items():
        value = tensors[n]
        if value.shape != target.value.shape:
            raise CheckpointError(
                f"checkpoint '{ckpt}': '{fname}' tensor {n!r} has shape {value.shape}, "
                f"the architecture in config.json needs {target.value.shape}"
            )
        if value.dtype != target.value.dtype:
            raise CheckpointError(
                f"checkpoint '{ckpt}': '{fname}' tensor {n!r} is {value.dtype}, the model is {target.value.dtype}"
            )
    bad = nonfinite_tensors(tensors)
    if bad:
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' holds non-finite values, in tensor {describe_bad(bad)}; "
            "the checkpoint is unusable (saved from a diverged run, or damaged)"
        )
    for n, target in targets.items():
        target.value[...] = tensors[n]


def read_file(ckpt: Path, fname: str, files: Mapping[str, Any], most: Optional[int] = None) -> bytes:
    """The bytes of checkpoint file ``fname``, checked against what the manifest's ``files``
    records (for every task's own files: a vocabulary, say)."""
    return _read_file(ckpt, fname, files, most)


def read_json(ckpt: Path, fname: str, files: Mapping[str, Any]) -> Any:
    """Checkpoint file ``fname`` (checked like :func:`read_file`) as JSON."""
    return _read_json(ckpt, fname, files)


def load_tensors_into(ckpt: Path, fname: str, files: Mapping[str, Any], targets: Mapping[str, Any]) -> None:
    """Read the safetensors file ``fname`` of checkpoint ``ckpt`` into the ``.value`` arrays of
    ``targets`` (a model's parameters or optimiser state), every name, shape, dtype and value
    checked first."""
    _assign(ckpt, fname, targets, _load_tensors(ckpt, fname, files, targets))


def _load_tokenizer(ckpt: Path, fname: str, files: Mapping[str, Any]) -> Tokenizer:
    data = _read_file(ckpt, fname, files, _MAX_TOKENIZER_BYTES)
    try:
        return tokenizer_from_str(data.decode("utf-8"), source=str(ckpt / fname))
    except (UnicodeDecodeError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' is not a tokenizer ({exc})") from None


def average_checkpoints(
    paths: Sequence[PathLike], run_dir: Optional[PathLike] = None, name: str = AVERAGED_NAME
) -> Tuple[Optional[Path], Transformer]:
    """Average the weights of several checkpoints of one run (the same architecture and
    tokenizers); return ``(path written or None, the averaged model)``.

    Every weight becomes the arithmetic mean over ``paths`` (accumulated in float64). With
    ``run_dir``, the result is saved there as checkpoint ``name`` (default ``averaged``)
    without optimiser state: it is for translating, not for resuming; ``latest`` is unchanged.

    Raises:
        CheckpointError: fewer than one checkpoint, or checkpoints that differ in architecture
            or tokenizers.
    """
    if not paths:
        raise CheckpointError("average_checkpoints: no checkpoint to average")
    first = load_checkpoint(paths[0], optimizer=False)
    params = first.model.parameters()
    sums = {k: np.array(p.value, dtype=np.float64) for k, p in params.items()}
    for path in paths[1:]:
        ckpt = load_checkpoint(path, optimizer=False)
        if ckpt.model.config != first.model.config:
            raise CheckpointError(f"average_checkpoints: '{ckpt.path}' has another architecture than '{first.path}'")
        if ckpt.src_tokenizer != first.src_tokenizer or ckpt.tgt_tokenizer != first.tgt_tokenizer:
            raise CheckpointError(f"average_checkpoints: '{ckpt.path}' has other tokenizers than '{first.path}'")
        if ckpt.run_id != first.run_id:
            raise CheckpointError(
                f"average_checkpoints: '{ckpt.path}' belongs to another run ({ckpt.run_id}) than "
                f"'{first.path}' ({first.run_id}); average checkpoints of one run"
            )
        for k, p in ckpt.model.parameters().items():
            sums[k] += p.value
    for k, p in params.items():
        p.value[...] = sums[k] / len(paths)
    out = None
    if run_dir is not None:
        data = dict(first.data or {}, averaged_from=[Path(p).name for p in paths])
        out = save_checkpoint(
            run_dir,
            first.model,
            first.src_tokenizer,
            first.tgt_tokenizer,
            name=name,
            train_config=first.train_config,
            data=data,
            optimizer=False,
            keep=None,
        )
    return out, first.model


def read_checkpoint_config(path: PathLike, prefer: str = "latest") -> Tuple[Path, Dict[str, Any]]:
    """``(checkpoint directory, its config.json as a dict)`` without loading any tensor.

    The dict has the sections ``model`` (architecture), ``optimizer``, ``train_config``, ``data``
    and ``files``. Useful to look at a run, or to rebuild its data split, cheaply.

    Raises:
        CheckpointError: no checkpoint at ``path``, or a ``config.json`` that is not valid.
    """
    ckpt = resolve_checkpoint(path, prefer)
    config_path = ckpt / CONFIG_FILE
    try:
        size = config_path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise CheckpointError(
                f"checkpoint '{ckpt}': '{CONFIG_FILE}' has {size:,} bytes, more than a checkpoint "
                f"configuration ({MAX_CONFIG_BYTES:,} at most); it is damaged"
            )
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': '{CONFIG_FILE}' is not valid JSON ({exc})") from None
    except OSError as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': cannot read '{CONFIG_FILE}' ({exc})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT_NAME:
        raise CheckpointError(f"checkpoint '{ckpt}': '{CONFIG_FILE}' is not a transformer_cpp checkpoint configuration")
    if config.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint '{ckpt}': format version {config.get('version')!r} is not supported "
            f"(this transformer_cpp reads version {FORMAT_VERSION})"
        )
    return ckpt, config


def load_checkpoint(path: PathLike, *, optimizer: bool = True, prefer: Optional[str] = None) -> Checkpoint:
    """Load a checkpoint written by :func:`save_checkpoint`.

    Args:
        path: a run directory (the checkpoint ``prefer`` names is read) or a checkpoint directory.
        optimizer: also restore the Adam moments, ``step`` and ``dropout_calls`` (to resume
            training). Translation does not need them, and with ``False`` the optimiser file is
            not even read.
        prefer: for a run directory, ``"latest"`` or ``"best"`` (see :func:`resolve_checkpoint`);
            default ``"latest"`` with ``optimizer`` (resuming), else ``"best"`` (translating).

    Raises:
        CheckpointError: anything missing, damaged or inconsistent (the message says what and where).
    """
    optimizer = _flag("load_checkpoint", "optimizer", optimizer)
    ckpt, config = read_checkpoint_config(path, prefer or ("latest" if optimizer else "best"))
    check_kind(ckpt, config, TRANSLATION_KIND)
    files, model_cfg, opt = _sections(ckpt, config)
    model = _model_of(ckpt, model_cfg, opt, optimizer)
    _assign(ckpt, MODEL_FILE, model.parameters(), _load_tensors(ckpt, MODEL_FILE, files, model.parameters()))
    if optimizer:
        _restore_optimizer(ckpt, model, files, opt)
    optimizer_loaded = optimizer

    src_tok = _load_tokenizer(ckpt, SRC_TOKENIZER_FILE, files)
    tgt_tok = _load_tokenizer(ckpt, TGT_TOKENIZER_FILE, files)
    for label, tok, key in (("source", src_tok, "src_vocab_size"), ("target", tgt_tok, "tgt_vocab_size")):
        if tok.vocab_size != model_cfg.get(key):
            raise CheckpointError(
                f"checkpoint '{ckpt}': the {label} tokenizer has {tok.vocab_size} tokens but the model's "
                f"{key} is {model_cfg.get(key)}"
            )
    trainer_state = _read_json(ckpt, TRAINER_STATE_FILE, files)
    if trainer_state is not None and not isinstance(trainer_state, dict):
        raise CheckpointError(f"checkpoint '{ckpt}': '{TRAINER_STATE_FILE}' must hold a JSON object or null")
    run_id = config.get("run_id")
    return Checkpoint(
        path=ckpt,
        model=model,
        src_tokenizer=src_tok,
        tgt_tokenizer=tgt_tok,
        trainer_state=trainer_state,
        train_config=config.get("train_config"),
        data=config.get("data"),
        optimizer_loaded=optimizer_loaded,
        run_id=run_id if isinstance(run_id, str) and run_id else None,
    )


def _sections(ckpt: Path, config: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """The ``files``, ``model`` and ``optimizer`` sections of a translation checkpoint's manifest;
    :class:`CheckpointError` when one is missing or ``train_config`` / ``data`` is not an object."""
    files, model_cfg, opt = config.get("files"), config.get("model"), config.get("optimizer")
    if not isinstance(files, dict) or not isinstance(model_cfg, dict) or not isinstance(opt, dict):
        raise CheckpointError(f"checkpoint '{ckpt}': '{CONFIG_FILE}' lacks its 'model', 'optimizer' or 'files' section")
    for section in ("train_config", "data"):
        if config.get(section) is not None and not isinstance(config[section], dict):
            raise CheckpointError(
                f"checkpoint '{ckpt}': the '{section}' section of '{CONFIG_FILE}' must be an object "
                f"or null, got {type(config[section]).__name__}"
            )
    return files, model_cfg, opt


def _model_of(ckpt: Path, model_cfg: Dict[str, Any], opt: Dict[str, Any], optimizer: bool) -> Transformer:
    """The model the manifest describes, its optimiser configured. A model trained in bf16 is
    loaded in float32 (with a warning) on a CPU without the bf16 kernel, unless it is to resume
    training (``optimizer``): decoding runs in float32 whatever the training precision."""
    if not optimizer and model_cfg.get("precision") == "bf16" and not kernels.have_bf16():
        warnings.warn(
            f"checkpoint '{ckpt}' was trained with precision 'bf16', which cannot run here "
            f"({kernels.bf16_unsupported_reason()}); loaded with precision 'float32' (decoding is float32 "
            "either way)",
            RuntimeWarning,
            stacklevel=3,  # the caller of load_checkpoint
        )
        model_cfg = dict(model_cfg, precision="float32")
    try:
        model = Transformer.from_config(model_cfg)
        if isinstance(opt.get("config"), dict):
            model.configure_optimizer(**opt["config"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': the configuration in '{CONFIG_FILE}' is invalid ({exc})") from None
    return model


def _restore_optimizer(ckpt: Path, model: Transformer, files: Dict[str, Any], opt: Dict[str, Any]) -> None:
    """The Adam moments, ``step`` and ``dropout_calls`` put back into ``model``, to resume training;
    :class:`CheckpointError` when the checkpoint was saved without them or they are damaged."""
    if not opt.get("saved", False):
        raise CheckpointError(f"checkpoint '{ckpt}' was saved without optimiser state; it cannot resume training")
    _assign(
        ckpt,
        OPTIMIZER_FILE,
        model.optimizer_state(),
        _load_tensors(ckpt, OPTIMIZER_FILE, files, model.optimizer_state()),
    )
    try:
        model.step = _integer("", "step", opt.get("step"))
        model.dropout_calls = _integer("", "dropout_calls", opt.get("dropout_calls"))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': '{CONFIG_FILE}' lacks a valid optimiser step ({exc})") from None
