"""SentencePiece tokenization with a Marian id mapping (OPUS-MT / MarianMT vocabularies).

The SentencePiece model (``.spm`` bytes) splits text into pieces with its own normaliser; a mapping
(Marian's ``vocab.json``: piece -> model id) turns pieces into the model's ids, which are not the
SentencePiece ids. Pieces missing from the mapping become ``unk_id``; :meth:`encode` appends
``end_id`` and prepends nothing. The special ids are read from the mapping by token name.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

import numpy as np

from ._common import BySavedForm, SpecialIds, SpecialTokenIds, read_tokenizer_file, write_atomically
from .base import IdSequence

__all__ = ["SentencePieceTokenizer"]

FORMAT_NAME = "transformer_cpp.SentencePieceTokenizer"
FORMAT_VERSION = 1
KIND = "sentencepiece"
#: The largest SentencePiece model accepted (Marian's take about a megabyte).
MAX_MODEL_BYTES = 1 << 28


class SentencePieceTokenizer(SpecialIds, BySavedForm):
    """A SentencePiece model plus the piece -> id mapping of the model it feeds."""

    def __init__(
        self,
        model: bytes,
        vocab: Mapping[str, int],
        *,
        end_token: str = "</s>",
        unk_token: str = "<unk>",
        pad_token: str = "<pad>",
        start_token: Optional[str] = None,
        decode_model: Optional[bytes] = None,
    ) -> None:
        import sentencepiece

        name = "SentencePieceTokenizer"
        if not isinstance(model, bytes) or not model or len(model) > MAX_MODEL_BYTES:
            raise ValueError(
                f"{name}: model must be the bytes of a SentencePiece model (1 to {MAX_MODEL_BYTES:,} bytes)"
            )
        if not isinstance(vocab, Mapping) or not all(isinstance(k, str) and type(v) is int for k, v in vocab.items()):
            raise ValueError(f"{name}: vocab must map pieces (str) to ids (int)")
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError(f"{name}: vocab must number its {len(vocab)} pieces 0 to {len(vocab) - 1}, each once")
        self._model, self._decode_bytes = model, decode_model
        try:
            self._sp = sentencepiece.SentencePieceProcessor(model_proto=model)
            self._decode_sp = (
                self._sp if decode_model is None else sentencepiece.SentencePieceProcessor(model_proto=decode_model)
            )
        except Exception as exc:
            raise ValueError(f"{name}: not a SentencePiece model ({' '.join(str(exc).split())[:120]})") from None
        self._vocab = dict(vocab)
        self._pieces = {v: k for k, v in self._vocab.items()}
        self._names = {"end": end_token, "unk": unk_token, "pad": pad_token, "start": start_token or pad_token}
        for role, token in self._names.items():
            if token not in self._vocab:
                raise ValueError(f"{name}: the {role} token {token!r} is not in the vocabulary")
        self._special = SpecialTokenIds(**{f"{role}_id": self._vocab[token] for role, token in self._names.items()})

    @classmethod
    def from_marian_dir(cls, path: Union[str, "os.PathLike[str]"], side: str = "source") -> "SentencePieceTokenizer":
        """The ``side`` (``"source"`` or ``"target"``) tokenizer of a Marian tokenizer directory:
        ``source.spm``/``target.spm``, ``vocab.json`` (and ``target_vocab.json`` when
        ``tokenizer_config.json`` says ``separate_vocabs``)."""
        if side not in ("source", "target"):
            raise ValueError(f"SentencePieceTokenizer.from_marian_dir: side must be 'source' or 'target', got {side!r}")
        root = os.fspath(path)
        config: Dict[str, Any] = {}
        config_path = os.path.join(root, "tokenizer_config.json")
        if os.path.isfile(config_path):
            config = json.loads(read_tokenizer_file(config_path, "from_marian_dir", "tokenizer_config", "Marian"))
        separate = bool(config.get("separate_vocabs", False))
        vocab_file = "target_vocab.json" if side == "target" and separate else "vocab.json"
        vocab = json.loads(read_tokenizer_file(os.path.join(root, vocab_file), "from_marian_dir", "vocab", "Marian"))
        with open(os.path.join(root, f"{side}.spm"), "rb") as f:
            model = f.read(MAX_MODEL_BYTES + 1)
        decode_model = None
        if side == "target" and not separate:  # MarianTokenizer decodes a shared vocabulary with source.spm
            with open(os.path.join(root, "source.spm"), "rb") as f:
                decode_model = f.read(MAX_MODEL_BYTES + 1)
        return cls(
            model,
            vocab,
            end_token=str(config.get("eos_token", "</s>")),
            unk_token=str(config.get("unk_token", "<unk>")),
            pad_token=str(config.get("pad_token", "<pad>")),
            decode_model=decode_model,
        )

    # ---------------------------------------------------------------- properties
    kind = KIND
    lowercase = False
    adds_start = False
    expects_cleaned_text = False

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    @property
    def normalization(self) -> str:
        """``"sentencepiece"``: the model's own normaliser (text is passed raw)."""
        return "sentencepiece"

    def __len__(self) -> int:
        return len(self._vocab)

    # ---------------------------------------------------------------- encoding
    def _split(self, text: str) -> List[str]:
        if not isinstance(text, str):
            raise TypeError(f"SentencePieceTokenizer: expected a str, got {type(text).__name__}")
        code: List[str] = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:  # a language code, as Marian's
            code, text = [text[: end + 2]], text[end + 2 :]
        return code + list(self._sp.encode(text, out_type=str))

    def tokens(self, text: str) -> List[str]:
        return self._split(text)

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        ids = [self._vocab.get(p, self.unk_id) for p in self._split(text)]
        return ids + [self.end_id] if add_special_tokens else ids

    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = True) -> List[List[int]]:
        if isinstance(texts, (str, bytes)):
            raise TypeError("SentencePieceTokenizer.encode_batch: expected a list of texts, got a single string")
        return [self.encode(t, add_special_tokens) for t in texts]

    # ---------------------------------------------------------------- decoding
    def decode(self, ids: IdSequence, skip_special_tokens: bool = True) -> str:
        """As MarianTokenizer's decode: special ids dropped (with ``skip_special_tokens``) or
        written out, the pieces joined by the SentencePiece model, ``▁`` as a space, stripped."""
        values = [int(v) for v in (ids.tolist() if isinstance(ids, np.ndarray) else ids)]
        for v in values:
            if v < 0 or v >= len(self._vocab):
                raise ValueError(f"SentencePieceTokenizer.decode: token id {v} is out of range [0, {len(self._vocab)})")
        special = self.special_ids
        names = {self._pieces[i] for i in special}
        out = ""
        pending: List[str] = []
        for v in values:
            if skip_special_tokens and v in special:
                continue
            piece = self._pieces[v]
            if piece in names:
                out += self._decode_sp.decode_pieces(pending) + piece + " "
                pending = []
            else:
                pending.append(piece)
        out += self._decode_sp.decode_pieces(pending)
        return str(out.replace("\u2581", " ").strip())

    def decode_batch(
        self, batch: Union[Iterable[IdSequence], np.ndarray], skip_special_tokens: bool = True
    ) -> List[str]:
        return [self.decode(row, skip_special_tokens) for row in batch]

    # ---------------------------------------------------------------- vocabulary
    def id_to_token(self, token_id: int) -> str:
        if token_id not in self._pieces:
            raise ValueError(f"SentencePieceTokenizer.id_to_token: token id {token_id} is out of range")
        return self._pieces[token_id]

    def token_to_id(self, token: str) -> Optional[int]:
        return self._vocab.get(token)

    def get_vocab(self) -> Dict[str, int]:
        return dict(self._vocab)

    # ---------------------------------------------------------------- persistence
    def to_str(self) -> str:
        document = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "kind": KIND,
            "normalization": self.normalization,
            "expects_cleaned_text": False,
            "model": base64.b64encode(self._model).decode("ascii"),
            "decode_model": None
            if self._decode_bytes is None
            else base64.b64encode(self._decode_bytes).decode("ascii"),
            "vocab": self._vocab,
            "special_tokens": self._names,
        }
        return json.dumps(document, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_str(cls, s: str, *, source: Optional[str] = None) -> "SentencePieceTokenizer":
        caller = f"SentencePieceTokenizer.from_str({source!r})" if source else "SentencePieceTokenizer.from_str"
        try:
            doc = json.loads(s)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME or doc.get("kind") != KIND:
                raise ValueError(f'expected a JSON object with "format": "{FORMAT_NAME}"')
            if doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {doc.get('version')!r}, this program reads {FORMAT_VERSION}")
            names = doc["special_tokens"]
            decode = doc.get("decode_model")
            return cls(
                base64.b64decode(doc["model"], validate=True),
                doc["vocab"],
                end_token=names["end"],
                unk_token=names["unk"],
                pad_token=names["pad"],
                start_token=names["start"],
                decode_model=None if decode is None else base64.b64decode(decode, validate=True),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"{caller}: not a SentencePieceTokenizer (damaged): {' '.join(str(exc).split())[:160]}"
            ) from None

    def save(self, path: Union[str, "os.PathLike[str]"]) -> None:
        write_atomically(os.fspath(path), self.to_str())

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"]) -> "SentencePieceTokenizer":
        p = os.fspath(path)
        text = read_tokenizer_file(
            p, "SentencePieceTokenizer.load", "SentencePieceTokenizer", "SentencePieceTokenizer.save"
        )
        return cls.from_str(text, source=p)
