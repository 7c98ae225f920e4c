"""Learning the byte-level BPE of :class:`~transformer_cpp.tokenizer.SubwordTokenizer` from a
corpus with Hugging Face ``tokenizers``: the arguments and the corpus checked
(:func:`learn_from_corpus`), then the merges learnt (:func:`learn_byte_level_bpe`). The same corpus
and arguments give the same vocabulary."""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, List, NamedTuple

from .._checks import ANY, flag, integer
from ._bpe_format import BYTE_ALPHABET_SIZE, MAX_VOCAB_SIZE, SPECIAL_TOKENS, library_errors, require_tokenizers
from ._common import unicode_error

# the tokenizer's own logger: what learning says is said by SubwordTokenizer
logger = logging.getLogger(__name__.rsplit(".", 1)[0] + ".bpe")

_UNK = SPECIAL_TOKENS[3]


class Learned(NamedTuple):
    """What :func:`learn_from_corpus` made: the Hugging Face tokenizer and the checked ``lowercase``
    flag."""

    tokenizer: Any
    lowercase: bool


def learn_from_corpus(
    sentences: Iterable[str], target_vocab_size: int, min_frequency: int, lowercase: bool, name: str
) -> Learned:
    """The byte-level BPE learnt from ``sentences`` (each non-empty one with its leading space), the
    arguments checked as :meth:`SubwordTokenizer.build_from_corpus` documents, each error naming
    ``name``; the size learnt is logged."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(f"{name}: expected an iterable of sentences, got a single string")
    target_vocab_size = integer(name, "target_vocab_size", target_vocab_size, ANY)
    n_special = len(SPECIAL_TOKENS)
    if target_vocab_size < n_special + 1:
        raise ValueError(
            f"{name}: target_vocab_size {target_vocab_size} is too small; it must be at least "
            f"{n_special + 1} ({n_special} special tokens + 1)"
        )
    if target_vocab_size > MAX_VOCAB_SIZE:
        raise ValueError(
            f"{name}: target_vocab_size {target_vocab_size} is too large; it must be at most {MAX_VOCAB_SIZE} (2**20)"
        )
    min_frequency = integer(name, "min_frequency", min_frequency, 1, 2**63 - 1)
    lowercase = flag(name, "lowercase", lowercase)
    corpus = _corpus(sentences, name)
    tok = learn_byte_level_bpe(corpus, target_vocab_size, min_frequency, lowercase, name)
    logger.info(
        "%s: learned %d tokens (target %d) from %d sentences",
        name,
        tok.get_vocab_size(with_added_tokens=True),
        target_vocab_size,
        len(corpus),
    )
    return Learned(tok, lowercase)


def _corpus(sentences: Iterable[str], name: str) -> List[str]:
    """The non-empty sentences, each with its leading space; ``TypeError`` for a non-string,
    ``ValueError`` for text that is not valid Unicode or a corpus with no non-empty sentence."""
    corpus: List[str] = []
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"{name}: sentence {i} is a {type(sentence).__name__}, expected a str")
        bad = unicode_error(sentence, f"{name}: sentence {i}")
        if bad is not None:
            raise bad
        if sentence.strip():
            corpus.append(" " + sentence)
    if not corpus:
        raise ValueError(f"{name}: the corpus is empty (no non-empty sentence)")
    return corpus


def learn_byte_level_bpe(
    corpus: List[str], target_vocab_size: int, min_frequency: int, lowercase: bool, name: str
) -> Any:
    """A byte-level BPE tokenizer (Hugging Face ``tokenizers``) learnt from ``corpus``: NFC (and
    lower-case) normalisation, the special tokens first, every byte symbol when the size allows."""
    Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers = require_tokenizers()
    n_special = len(SPECIAL_TOKENS)
    tok = Tokenizer(models.BPE(unk_token=_UNK))
    norm = [normalizers.NFC()]
    if lowercase:
        norm.append(normalizers.Lowercase())
    tok.normalizer = normalizers.Sequence(norm)
    if target_vocab_size < n_special + BYTE_ALPHABET_SIZE:
        # the byte symbols the corpus uses (after normalisation) must all fit, or its own text
        # would encode as <unk>
        used = len(set(tok.normalizer.normalize_str(" ".join(corpus)).encode("utf-8")))
        if target_vocab_size < n_special + used:
            raise ValueError(
                f"{name}: target_vocab_size {target_vocab_size} cannot hold the {n_special} special "
                f"tokens and the {used} byte symbols this corpus uses; it must be at least "
                f"{n_special + used} (at least {n_special + BYTE_ALPHABET_SIZE} to encode any text)"
            )
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()

    trainer_args: Dict[str, Any] = dict(
        vocab_size=target_vocab_size,
        min_frequency=int(min_frequency),
        show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),
    )
    if target_vocab_size >= n_special + BYTE_ALPHABET_SIZE:
        trainer_args["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
    else:
        trainer_args["limit_alphabet"] = target_vocab_size - n_special
        logger.warning(
            "%s: target_vocab_size %d < %d cannot hold all byte symbols; bytes the corpus does "
            "not use will encode as %s and not round-trip",
            name,
            target_vocab_size,
            n_special + BYTE_ALPHABET_SIZE,
            _UNK,
        )
    with library_errors(name):
        tok.train_from_iterator(corpus, trainers.BpeTrainer(**trainer_args), length=len(corpus))
    return tok
