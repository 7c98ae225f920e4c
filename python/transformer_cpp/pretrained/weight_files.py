"""The weights file of a Hugging Face model directory, read a tensor at a time.

``model.safetensors`` is read with ordinary file reads: its header (an 8-byte little-endian
length, then JSON naming each tensor's dtype, shape and byte range) is parsed and checked here, and
each tensor's bytes go straight from the file into the array that receives them. Nothing else is
held in memory: not the file's bytes, and not a memory map of it (whose pages would count in the
process's resident memory once read). ``pytorch_model.bin`` is read with
``torch.load(weights_only=True)`` (memory-mapped), which executes no pickled code; it needs PyTorch.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

__all__ = ["SafetensorsFile", "TorchFile", "WeightFile", "open_weights"]

#: safetensors' dtype names that NumPy holds as they are (little-endian in the file).
SAFETENSORS_DTYPES = {
    "BOOL": "|b1",
    "U8": "|u1",
    "I8": "|i1",
    "I16": "<i2",
    "U16": "<u2",
    "F16": "<f2",
    "I32": "<i4",
    "U32": "<u4",
    "F32": "<f4",
    "F64": "<f8",
    "I64": "<i8",
    "U64": "<u8",
}
#: The longest header a safetensors reader accepts (the safetensors package's limit).
MAX_HEADER_BYTES = 100_000_000
#: Bytes read at a time where a tensor is converted on its way into an array of another dtype.
CHUNK_BYTES = 16 << 20


class WeightFile:
    """What the importer reads: the names of the tensors, each one's shape, its elements (all or
    a run of rows) as an array, and its elements copied into a given array."""

    keys: List[str]

    def shape(self, name: str) -> Tuple[int, ...]:
        raise NotImplementedError

    def read(self, name: str, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
        """Rows ``start:stop`` of the tensor (along its first axis; all of it by default)."""
        raise NotImplementedError

    def read_into(self, name: str, target: np.ndarray) -> None:
        """Copy the tensor into ``target`` (as many elements; the values cast as
        ``np.copyto(..., casting="same_kind")`` casts them)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def _bad(path: Path, why: str) -> ValueError:
    return ValueError(f"load_marian: {path} is not a valid safetensors file: {why}")


class SafetensorsFile(WeightFile):
    """``model.safetensors``, its header checked as the safetensors package checks it on opening:
    a header that fits in the file, a JSON object of tensors whose byte ranges follow each other
    from the start of the data to the end of the file, each as long as its dtype and shape say."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "rb")
        try:
            self._parse()
        except BaseException:
            self._file.close()
            raise

    def _parse(self) -> None:
        path, f = self.path, self._file
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise _bad(path, f"{size} bytes, fewer than the 8 of the header's length")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES:
            raise _bad(path, f"a header of {n} bytes, more than {MAX_HEADER_BYTES}")
        if 8 + n > size:
            raise _bad(path, f"a header of {n} bytes in a file of {size}")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise _bad(path, f"its header is not JSON ({exc})") from None
        if not isinstance(header, dict):
            raise _bad(path, "its header is not a JSON object")
        self._data_start = 8 + n
        self._tensors: Dict[str, Tuple[str, Tuple[int, ...], int, int]] = {}
        spans = []
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype, shape, (start, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
                ok = isinstance(dtype, str) and all(type(v) is int and v >= 0 for v in (*shape, start, end))
            except (TypeError, KeyError, ValueError):
                ok = False
            if not ok:
                raise _bad(path, f"tensor {name!r} has no valid dtype, shape and data_offsets")
            self._tensors[name] = (dtype, tuple(shape), start, end)
            spans.append((start, end, name))
        at = 0
        for start, end, name in sorted(spans):
            if start != at:
                raise _bad(path, f"tensor {name!r} starts at byte {start} of the data, not {at}")
            if end < start:
                raise _bad(path, f"tensor {name!r} ends at byte {end} of the data, before it starts ({start})")
            dtype, shape = self._tensors[name][:2]
            if dtype in SAFETENSORS_DTYPES:
                want = int(np.prod(shape, dtype=object)) * np.dtype(SAFETENSORS_DTYPES[dtype]).itemsize
                if end - start != want:
                    raise _bad(path, f"tensor {name!r} has {end - start} bytes, but {dtype} of shape {shape} is {want}")
            at = end
        if self._data_start + at != size:
            raise _bad(path, f"its tensors end at byte {self._data_start + at} of {size}")
        self.keys = list(self._tensors)

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._tensors[name][1]

    def _dtype(self, name: str) -> np.dtype:
        dtype = self._tensors[name][0]
        if dtype not in SAFETENSORS_DTYPES:
            raise ValueError(
                f"load_marian: {self.path.name}'s tensor {name!r} is {dtype}, which is not read "
                f"(supported: {', '.join(SAFETENSORS_DTYPES)})"
            )
        return np.dtype(SAFETENSORS_DTYPES[dtype])

    def _read_bytes_into(self, offset: int, view: memoryview) -> None:
        """Fill ``view`` (bytes) from byte ``offset`` of the tensor data."""
        self._file.seek(self._data_start + offset)
        done = 0
        while done < len(view):
            got = self._file.readinto(view[done:])
            if not got:
                raise _bad(self.path, "it ends before its last tensor (was it changed while being read?)")
            done += got

    def read(self, name: str, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
        dt, shape, begin = self._dtype(name), self.shape(name), self._tensors[name][2]
        if shape:
            first, last, _ = slice(start, stop).indices(shape[0])
            rows = max(0, last - first)
            out = np.empty((rows, *shape[1:]), dt)
            begin += first * (out[0].nbytes if rows else 0)
        else:
            out = np.empty((), dt)
        if out.nbytes:
            self._read_bytes_into(begin, out.reshape(-1).view(np.uint8).data)
        return out

    def read_into(self, name: str, target: np.ndarray) -> None:
        dt, begin = self._dtype(name), self._tensors[name][2]
        if not target.flags.c_contiguous:  # no flat view of it to read into
            np.copyto(target, self.read(name).reshape(target.shape), casting="same_kind")
            return
        flat = target.reshape(-1)  # a view of target
        if dt == target.dtype:  # the file's bytes are the values: read them in place
            if flat.nbytes:
                self._read_bytes_into(begin, flat.view(np.uint8).data)
            return
        step = max(1, CHUNK_BYTES // dt.itemsize)
        for i in range(0, flat.size, step):
            chunk = np.empty(min(step, flat.size - i), dt)
            self._read_bytes_into(begin + i * dt.itemsize, chunk.view(np.uint8).data)
            np.copyto(flat[i : i + len(chunk)], chunk, casting="same_kind")

    def close(self) -> None:
        self._file.close()


class TorchFile(WeightFile):
    """``pytorch_model.bin`` through ``torch.load(weights_only=True, mmap=True)``."""

    def __init__(self, path: Path) -> None:
        try:
            import torch
        except ImportError as e:
            raise ImportError(
                f"load_marian: {path.name} is a PyTorch file and reading it needs PyTorch (not installed); "
                "install torch or convert the weights to model.safetensors"
            ) from e
        self._torch = torch
        self._state: Dict[str, Any] = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        self.keys = list(self._state.keys())

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(int(n) for n in self._state[name].shape)

    def read(self, name: str, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
        torch = self._torch
        tensor = self._state[name].detach()
        if tensor.dim() > 0:
            tensor = tensor[start:stop]
        return np.asarray(tensor.to(torch.float64 if tensor.dtype == torch.float64 else torch.float32).numpy())

    def read_into(self, name: str, target: np.ndarray) -> None:
        np.copyto(target, self.read(name).reshape(target.shape), casting="same_kind")

    def close(self) -> None:
        self._state.clear()


def open_weights(directory: Path) -> WeightFile:
    """The weights of a model directory: ``model.safetensors``, else ``pytorch_model.bin``."""
    if (directory / "model.safetensors").is_file():
        return SafetensorsFile(directory / "model.safetensors")
    if (directory / "pytorch_model.bin").is_file():
        return TorchFile(directory / "pytorch_model.bin")
    raise FileNotFoundError(f"load_marian: {directory} holds neither model.safetensors nor pytorch_model.bin")
