"""The plain PyTorch export: a state dict and a module definition that needs nothing of transformer-cpp."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from .common import (
    PathLike,
    TORCH_MODULE_FILE,
    _TEMPLATE,
    _check_out_dir,
    _load,
    _provenance,
    _staging,
    _write_json,
    _write_tokenizers,
)


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
    ckpt = _load(checkpoint_dir, "export_torch")
    weights = {name: np.ascontiguousarray(p.value) for name, p in ckpt.model.parameters().items()}
    with _staging(out) as tmp:
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        shutil.copyfile(_TEMPLATE, tmp / TORCH_MODULE_FILE)
        _write_tokenizers(tmp, ckpt.src_tokenizer, ckpt.tgt_tokenizer)
        _write_json(tmp / "config.json", dict(_provenance(ckpt, "torch"), module=TORCH_MODULE_FILE))
    return out
