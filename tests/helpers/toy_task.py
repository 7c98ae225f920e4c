"""Small tasks for the training, checkpoint, translation and command-line tests.

* The *reversal language*: sentences of 1-5 symbols from ``a``-``f`` ("c a f"), translated into
  the same symbols in reverse order ("f a c"). A one-layer model of width 32 learns it exactly in
  about a second, so tests can demand exact translations.
* A tiny Tatoeba-format file (``English<TAB>Spanish<TAB>attribution``) built from a handful of
  words, for the command line. The real data set is never used by the tests.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp.data import EncodedPairs
from transformer_cpp.training import TrainConfig, Trainer

SYMBOLS = "abcdef"


def reversal_pairs(n: int, seed: int = 0, max_symbols: int = 5) -> Tuple[List[str], List[str]]:
    """``n`` random sentences of 1..max_symbols symbols and their reversals."""
    rng = np.random.default_rng(seed)
    src = [" ".join(rng.choice(list(SYMBOLS), size=int(rng.integers(1, max_symbols + 1)))) for _ in range(n)]
    return src, [" ".join(s.split()[::-1]) for s in src]


def reversal_tokenizer() -> tc.SubwordTokenizer:
    """A byte-level BPE vocabulary where every symbol (with its leading space) is one token."""
    corpus = [" ".join(SYMBOLS)] * 4 + [s for s in SYMBOLS]
    logging.getLogger("transformer_cpp.tokenizer").setLevel(logging.ERROR)  # the small-alphabet warning
    tok = tc.SubwordTokenizer.build_from_corpus(corpus, 20, min_frequency=1)
    for s in SYMBOLS:
        assert len(tok.encode(s, add_special_tokens=False)) == 1, tok.tokens(s)
    return tok


def tiny_model(
    tok: tc.SubwordTokenizer,
    *,
    dropout: float = 0.0,
    seed: int = 0,
    d_model: int = 32,
    max_length: int = 8,
    **options: Any,
) -> tc.Transformer:
    """A one-layer Transformer small enough to train in a second; ``options``: any other argument
    of :class:`~transformer_cpp.Transformer`."""
    return tc.Transformer(
        tok.vocab_size,
        tok.vocab_size,
        d_model=d_model,
        n_layers=1,
        n_heads=2,
        d_ff=2 * d_model,
        dropout=dropout,
        max_length=max_length,
        seed=seed,
        **options,
    )


def trained_reversal_model(tok: tc.SubwordTokenizer) -> tc.Transformer:
    """``tiny_model`` trained on 2,000 reversal pairs for 20 epochs: it translates them exactly."""
    src, tgt = reversal_pairs(2000, seed=0)
    model = tiny_model(tok)
    Trainer(
        model,
        tc.encode_pairs(src, tgt, tok, tok, 8),
        None,
        TrainConfig(epochs=20, batch_size=32, warmup=100, lr_scale=1.0, progress=False),
    ).fit()
    return model


def two_layer_model(
    src_vocab: int, tgt_vocab: int, enc: EncodedPairs, n_pairs: int, steps: int, **arch
) -> tc.Transformer:
    """A two-layer model (width 32, 4 heads, no dropout, outputs up to 8 tokens, seed 1) trained
    for ``steps`` steps on consecutive batches of 32 of the ``n_pairs`` encoded pairs (from the
    first again after the last)."""
    model = tc.Transformer(
        src_vocab, tgt_vocab, d_model=32, n_layers=2, n_heads=4, d_ff=64, dropout=0.0, max_length=8, seed=1, **arch
    )
    model.configure_optimizer(warmup=20)
    for i in range(steps):
        rows = slice((32 * i) % n_pairs, (32 * i) % n_pairs + 32)
        model.train_step(
            enc.src[rows], np.ascontiguousarray(enc.tgt[rows, :-1]), np.ascontiguousarray(enc.tgt[rows, 1:])
        )
    return model


def float64_model(**options) -> tc.Transformer:
    """A two-layer float64 model of width 16 (vocabularies 30 and 25, outputs up to 12 tokens,
    seed 3) for the exact comparisons of fast paths and decoders; ``options`` added."""
    return tc.Transformer(
        30, 25, d_model=16, n_layers=2, n_heads=2, d_ff=32, max_length=12, seed=3, dtype="float64", **options
    )


def write_tatoeba_file(path: Path, n: int = 400, seed: int = 0) -> Path:
    """A tiny English-Spanish file in the manythings.org format."""
    words = [
        ("cat", "gato"),
        ("dog", "perro"),
        ("house", "casa"),
        ("water", "agua"),
        ("book", "libro"),
        ("tree", "árbol"),
        ("car", "coche"),
        ("bird", "pájaro"),
    ]
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        a, b = (words[int(k)] for k in rng.integers(0, len(words), size=2))
        lines.append(f"The {a[0]} and the {b[0]}.\tEl {a[1]} y el {b[1]}.\tCC-BY 2.0 (France) Attribution: test #{i}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# The language-model tests' text: three short sentences.
LINES = ["the cat sat on the mat.", "a dog ran to the log!", "so the cat and the dog met."]


def write_tiny_text(path: Path, n_lines: int) -> Path:
    """``n_lines`` of ``LINES`` drawn at random (seed 0), one a line: a text to train a language model on."""
    rng = np.random.default_rng(0)
    path.write_text("\n".join(LINES[i] for i in rng.integers(0, 3, size=n_lines)) + "\n", encoding="utf-8")
    return path


def toy_config(**kw: Any) -> TrainConfig:
    """The training settings of the toy runs (3 epochs of batches of 32, a short warm-up, a line
    every batch, no progress bar), with ``kw`` on top."""
    return TrainConfig(**{**dict(epochs=3, batch_size=32, warmup=50, lr_scale=0.5, log_every=1, progress=False), **kw})


def saving_to(tok: tc.SubwordTokenizer, directory: Any) -> Dict[str, Any]:
    """The Trainer arguments of a toy run that writes its checkpoints into ``directory``: ``tok`` as
    both tokenizers (they are saved with the model)."""
    return dict(src_tokenizer=tok, tgt_tokenizer=tok, checkpoint_dir=directory)


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` C++ threads, then restore the previous count (toy models are faster
    on one thread, and a busy shared machine makes threads wait for each other)."""
    before = tc.get_num_threads()
    tc.set_num_threads(n)
    try:
        yield
    finally:
        tc.set_num_threads(before)


# Fixtures shared by the training, checkpoint and translation tests (import them into a module to
# use them there; one_thread is autouse within the importing module).
@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Toy models train fastest on one thread (and the count is the same in every run compared)."""
    with threads(1):
        yield


@pytest.fixture(scope="module")
def tok():
    """The reversal task's tokenizer."""
    return reversal_tokenizer()


@pytest.fixture(scope="module")
def data(tok):
    """The toy runs' pairs of the reversal task: 500 to train on and 100 to validate with (seed 1)."""
    src, tgt = reversal_pairs(600, seed=1)
    return tc.encode_pairs(src[:500], tgt[:500], tok, tok, 8), tc.encode_pairs(src[500:], tgt[500:], tok, tok, 8)
