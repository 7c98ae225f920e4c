"""The language-model task: a decoder-only model trained on a long text, one character per token;
its checkpoints, held-out bits per character, and sampling. The command line (``train-lm``,
``generate``, ``evaluate-lm``), notebooks and tools call it::

    from transformer_cpp.task import LmTrainRequest, new_lm_trainer, load_lm
    trainer = new_lm_trainer(LmTrainRequest(text="shakespeare", steps=500), "runs/lm")
    trainer.fit()
    print(trainer.evaluate("test"))                       # held-out bits per character
    lm = load_lm("runs/lm")
    print(lm.generate("ROMEO:", max_tokens=200, temperature=0.8, top_k=20, seed=1))

Training draws windows of ``seq_len + 1`` characters at random positions of the training text
(``B`` of them per step, from a generator seeded by the run's seed and the step number, so a
resumed run draws what an uninterrupted one would). Bits per character are the mean
cross-entropy in nats per character divided by ln 2, over the text cut into consecutive windows
(each character but the first scored once, given up to ``seq_len`` characters before it).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from .._runtime import ThreadGovernor, get_num_threads, governor_for, set_num_threads
from ..checkpoint import CheckpointError, checkpoint_name, foreign_entries, latest_checkpoint, list_checkpoints
from ..checkpoint.files import (
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
from ..checkpoint.layout import CONFIG_FILE, FORMAT_NAME, MODEL_FILE, OPTIMIZER_FILE, not_written_here, refuse_foreign
from ..config import LM_FIELDS, LanguageModelConfig, attention_kind, quoted_kinds
from ..data.lm_text import CharVocabulary, LmText, TextSplit, load_lm_text, split_text
from ..model import LanguageModel, NonFiniteError

__all__ = [
    "LM_KIND",
    "LmCheckpoint",
    "LmTrainRequest",
    "LmTrainer",
    "bits_per_character",
    "generate",
    "load_lm",
    "new_lm_trainer",
    "resume_lm_trainer",
    "sample_next",
]

Report = Callable[[str], None]

#: The ``kind`` a language model's checkpoint manifest records.
LM_KIND = "language_model"
VOCABULARY_FILE = "vocabulary.json"
STATE_FILE = "trainer_state.json"
_ARCH = [f.name for f in LM_FIELDS if f.name not in ("vocab_size", "max_len")]


def _say(message: str) -> None:
    print(message, flush=True)


@dataclass
class LmTrainRequest:
    """What a language-model run is asked for: the text, the architecture and the training.

    ``text`` is ``"shakespeare"`` (the plays, see :mod:`transformer_cpp.data.lm_text`) or a file.
    The run stops when the model has taken ``steps`` steps, after ``time_budget`` seconds of this
    call to :meth:`LmTrainer.fit`, or when it has seen ``epochs`` times the training characters,
    whichever is given (1000 steps when none is).
    """

    text: str = "shakespeare"
    encoding: str = "utf-8"
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    attention: str = "softmax"
    memory_length: int = 0
    lsh_hashes: int = 4
    lsh_chunk: int = 64
    lsh_buckets: int = 0
    reversible: bool = False
    pre_norm: bool = True
    share_embeddings: bool = True
    seq_len: int = 128
    batch_size: int = 32
    steps: Optional[int] = None
    time_budget: Optional[float] = None
    epochs: Optional[float] = None
    warmup: int = 200
    lr_scale: float = 0.5
    clip_norm: float = 1.0
    eval_every: int = 200
    eval_chars: int = 65536
    checkpoint_every: float = 600.0
    keep: int = 3
    threads: Optional[int] = None
    adaptive_threads: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        def positive_int(name: str, value: Any, low: int = 1) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"LmTrainRequest: {name} must be an integer >= {low}, got {value!r}")

        for name in ("seq_len", "batch_size", "warmup", "eval_every", "eval_chars", "keep"):
            positive_int(name, getattr(self, name))
        if self.steps is not None:
            positive_int("steps", self.steps)
        if self.threads is not None:
            positive_int("threads", self.threads)
        for name in ("time_budget", "epochs"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v == math.inf):
                raise ValueError(f"LmTrainRequest: {name} must be a finite number > 0, got {v!r}")
        if sum(x is not None for x in (self.steps, self.time_budget, self.epochs)) > 1:
            raise ValueError("LmTrainRequest: give at most one of steps, time_budget and epochs")
        if not isinstance(self.text, str) or not self.text:
            raise ValueError(
                f"LmTrainRequest: text must be 'shakespeare' or the path of a text file, got {self.text!r}"
            )
        # the architecture: the core's own checks, with its messages (vocab_size is the text's)
        LanguageModelConfig(vocab_size=2, **self.architecture())

    def architecture(self) -> Dict[str, Any]:
        """The model's fields this request sets (all but the vocabulary size and the table cache)."""
        return {name: getattr(self, name) for name in _ARCH}


# ---------------------------------------------------------------------------- evaluation


def _windows(ids: np.ndarray, seq_len: int) -> np.ndarray:
    """Consecutive windows of seq_len + 1 ids overlapping by one (the last padded with 0): every id
    but the first is a label exactly once. (n_windows, seq_len + 1)."""
    n = len(ids)
    starts = np.arange(0, max(n - 1, 1), seq_len)
    out = np.zeros((len(starts), seq_len + 1), dtype=np.int64)
    for r, s in enumerate(starts):
        piece = ids[s : s + seq_len + 1]
        out[r, : len(piece)] = piece
    return out


def stripes(ids: np.ndarray, rows: int) -> np.ndarray:
    """The text cut into ``rows`` consecutive stripes (at most one per two characters) overlapping
    by one id, padded at the end with 0: every id but the first is a label of exactly one stripe.
    (rows, S + 1) with S = ceil((len(ids) - 1) / rows); the first stripe is never padded."""
    ids = np.asarray(ids, dtype=np.int64)
    labels = len(ids) - 1
    rows = max(1, min(rows, labels))
    width = -(-labels // rows)
    out = np.zeros((rows, width + 1), dtype=np.int64)
    for r in range(rows):
        piece = ids[r * width : r * width + width + 1]
        out[r, : len(piece)] = piece
    return out


def segments(block: np.ndarray, seq_len: int) -> List[np.ndarray]:
    """Consecutive (rows, seq_len + 1) windows of a (rows, S + 1) block, overlapping by one column
    (the last padded with 0): segment k continues segment k - 1 in every row."""
    width = block.shape[1] - 1
    out = []
    for start in range(0, width, seq_len):
        window = np.zeros((block.shape[0], seq_len + 1), dtype=np.int64)
        piece = block[:, start : start + seq_len + 1]
        window[:, : piece.shape[1]] = piece
        out.append(window)
    return out


def bits_per_character(
    model: LanguageModel,
    ids: np.ndarray,
    seq_len: int,
    batch_size: int = 32,
    memory_length: Optional[int] = None,
) -> float:
    """Mean cross-entropy of ``ids[1:]`` (each given up to ``seq_len`` ids before it), in bits per
    character: total nats / characters scored / ln 2.

    Relative attention (Transformer-XL) reads the text with state reuse: ``batch_size`` stripes
    of the text, each walked in consecutive segments of ``seq_len`` whose blocks also attend to
    the memory of the ``memory_length`` positions before (default the model's; any length,
    0 included). The model's memory length is restored afterwards (with an empty memory)."""
    if len(ids) < 2:
        raise ValueError("bits_per_character: the text must hold at least 2 characters")
    if attention_kind(model.config["attention"]).memory:
        return _bits_per_character_with_memory(model, ids, seq_len, batch_size, memory_length)
    if memory_length:
        raise ValueError(
            f"bits_per_character: a memory length needs attention {quoted_kinds(lambda k: k.memory)}, the model has "
            f"{model.config['attention']!r}"
        )
    windows = _windows(np.asarray(ids, dtype=np.int64), seq_len)
    nats, count = 0.0, 0
    for i in range(0, len(windows), batch_size):
        loss, n = model.evaluate_loss(windows[i : i + batch_size])
        nats += loss * n
        count += n
    return nats / count / math.log(2)


def _bits_per_character_with_memory(
    model: LanguageModel, ids: np.ndarray, seq_len: int, batch_size: int, memory_length: Optional[int]
) -> float:
    kept = model.memory_length
    length = kept if memory_length is None else memory_length
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"bits_per_character: memory_length must be an integer >= 0, got {memory_length!r}")
    nats, count = 0.0, 0
    try:
        model.memory_length = length  # an empty memory: the stripes start their text
        for window in segments(stripes(ids, batch_size), seq_len):
            loss, n = model.evaluate_loss(window)
            nats += loss * n
            count += n
    finally:
        model.memory_length = kept
    return nats / count / math.log(2)


# ---------------------------------------------------------------------------- sampling


def sample_next(logits: np.ndarray, temperature: float, top_k: int, rng: np.random.Generator) -> int:
    """One id from logits (V,): the most likely with ``temperature == 0``, else drawn from
    softmax(logits / temperature) over the ``top_k`` most likely (all when 0). The padding id 0
    is never drawn."""
    z = np.array(logits, dtype=np.float64)
    z[0] = -np.inf
    if temperature == 0:
        return int(np.argmax(z))
    z /= temperature
    if 0 < top_k < len(z) - 1:
        cut = np.partition(z, -top_k)[-top_k]
        z[z < cut] = -np.inf
    p = np.exp(z - z.max())
    p /= p.sum()
    return int(rng.choice(len(p), p=p))


def generate(
    model: LanguageModel,
    vocabulary: CharVocabulary,
    prompt: str,
    max_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    seed: int = 0,
    context: Optional[int] = None,
) -> str:
    """``prompt`` continued by ``max_tokens`` characters sampled from the model (the continuation
    only is returned). The same seed gives the same text. An empty prompt starts after a newline
    (the start of a line).

    Each character sees at most ``context`` characters (default the model's ``max_len``; the
    task passes the training ``seq_len``): positions beyond those a model was trained on are
    positions it never learnt. Each character costs one step: softmax attention appends to
    key/value caches, linear attention advances its recurrent state (constant time per
    character); when the context is full the state starts again from its last half. Relative
    attention (Transformer-XL) keeps the keys and values of the last ``context`` - 1 positions
    and slides on. A model without a step (LSH attention, reversible blocks) runs its forward over
    the last ``context`` characters for each character: the same function as in training, at the
    cost of a whole window per character."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ValueError(f"generate: max_tokens must be an integer >= 0, got {max_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"generate: temperature must be a finite number >= 0, got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"generate: top_k must be an integer >= 0 (0: every token), got {top_k!r}")
    window = int(model.config["max_len"]) if context is None else context
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ValueError(f"generate: context must be an integer >= 2, got {context!r}")
    seq = [int(i) for i in vocabulary.encode(prompt if prompt else "\n")]
    rng = np.random.default_rng(seed)
    out: List[int] = []
    if max_tokens == 0:
        return ""
    if not model.has_cached_step:
        for _ in range(max_tokens):
            logits = model.forward(np.array([seq[-window:]], dtype=np.int64))
            nxt = sample_next(logits[0, -1], float(temperature), top_k, rng)
            out.append(nxt)
            seq.append(nxt)
        return vocabulary.decode(out)

    def restart(piece: List[int]) -> np.ndarray:
        """Fresh caches fed with ``piece``: the logits after its last id."""
        model.start_generation(1, window)
        last = np.empty((1, 0))
        for i in piece:
            last = model.generation_step(np.array([i], dtype=np.int64))
        return last

    keep = window // 2
    logits = restart(seq[-window:])
    fed = min(len(seq), window)
    while True:
        nxt = sample_next(logits[0], float(temperature), top_k, rng)
        out.append(nxt)
        seq.append(nxt)
        if len(out) == max_tokens:
            break
        # the context is full: start again from its last half (relative attention's window slides)
        if fed >= window and not attention_kind(model.config["attention"]).memory:
            logits = restart(seq[-keep:])
            fed = keep
        else:
            logits = model.generation_step(np.array([nxt], dtype=np.int64))
            fed += 1
    return vocabulary.decode(out)


# ---------------------------------------------------------------------------- checkpoints


def _tensor_bytes(tensors: Any, kind: str) -> bytes:
    from safetensors.numpy import save

    arrays = {name: np.ascontiguousarray(np.array(t.value, copy=True)) for name, t in tensors.items()}
    return save(arrays, metadata={"format": FORMAT_NAME, "content": kind})


def save_lm_checkpoint(
    run: Path, model: LanguageModel, vocabulary: CharVocabulary, state: Dict[str, Any], run_id: str, keep: int
) -> Path:
    """Write the checkpoint of step ``state['step']`` into ``run`` atomically (a temporary
    directory renamed into place), point ``latest`` at it and delete this run's oldest beyond
    ``keep``. Nothing of the user's is replaced (``FileExistsError``)."""
    bad = model.nonfinite_parameters()
    if bad:
        raise NonFiniteError(f"the model holds non-finite values ({', '.join(bad[:3])}); not saved")
    name = checkpoint_name(0, int(state["step"])) if state["step"] > 0 else checkpoint_name(0)
    files = {
        MODEL_FILE: _tensor_bytes(model.parameters(), "weights"),
        OPTIMIZER_FILE: _tensor_bytes(model.optimizer_state(), "adam"),
        VOCABULARY_FILE: vocabulary.to_str().encode("utf-8"),
        STATE_FILE: json_bytes(state),
    }
    config = {
        "format": FORMAT_NAME,
        "version": 1,
        "kind": LM_KIND,
        "model": model.config,
        "optimizer": {
            "config": model.optimizer_config,
            "saved": True,
            "step": model.step,
            "dropout_calls": model.dropout_calls,
        },
        "run_id": run_id,
        "files": {f: {"bytes": len(b), "sha256": sha256(b)} for f, b in sorted(files.items())},
    }
    with lock_run(run):
        target = run / name
        hint = "move it elsewhere, or write the run into another directory"
        refuse_foreign(target, "train-lm", hint)
        refuse_foreign(run / "latest", "train-lm", hint)
        with temporary(run, name) as tmp, temporary(run, f"old-{name}") as trash:
            tmp.mkdir()
            try:
                for fname, payload in files.items():
                    write_bytes(tmp / fname, payload)
                write_bytes(tmp / CONFIG_FILE, json_bytes(config))  # last: a directory with it is complete
                fsync_dir(tmp)
                if target.exists():
                    os.replace(target, trash)
                    os.replace(tmp, target)
                    shutil.rmtree(trash, ignore_errors=True)
                else:
                    os.replace(tmp, target)
                fsync_dir(run)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        write_pointer(run, name)
        remove_stale_temporaries(run)
        ours = list_checkpoints(run, run_id=run_id)
        for old in ours[: max(0, len(ours) - keep)]:
            if old != target and not_written_here(old) is None:
                remove_checkpoint(old)
    return target


@dataclass
class LmCheckpoint:
    """A language model read from a checkpoint: the model, its vocabulary, the trainer's state."""

    path: Path
    model: LanguageModel
    vocabulary: CharVocabulary
    state: Dict[str, Any]
    run_id: str

    def generate(self, prompt: str, max_tokens: int, **options: Any) -> str:
        """:func:`generate` with this model and vocabulary, the context its training windows had."""
        request = self.state["request"]
        options.setdefault("context", int(request["seq_len"]) + int(request.get("memory_length", 0)))
        return generate(self.model, self.vocabulary, prompt, max_tokens, **options)


def _read_checked(ckpt: Path, fname: str, manifest: Dict[str, Any]) -> bytes:
    entry = manifest["files"].get(fname)
    if not isinstance(entry, dict):
        raise CheckpointError(f"'{ckpt}': the manifest lists no '{fname}'")
    try:
        data = (ckpt / fname).read_bytes()
    except OSError as exc:
        raise CheckpointError(f"'{ckpt / fname}' cannot be read: {exc.strerror or exc}") from None
    if len(data) != entry.get("bytes") or sha256(data) != entry.get("sha256"):
        raise CheckpointError(f"'{ckpt / fname}' is damaged: its size or checksum is not the one recorded")
    return data


def _assign(ckpt: Path, fname: str, targets: Any, data: bytes) -> None:
    from safetensors.numpy import load

    try:
        tensors = load(data)
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"'{ckpt / fname}' is not a readable safetensors file: {exc}") from None
    if set(tensors) != set(targets):
        missing = sorted(set(targets) - set(tensors))[:3]
        extra = sorted(set(tensors) - set(targets))[:3]
        raise CheckpointError(f"'{ckpt / fname}' does not fit the architecture (missing {missing}, unexpected {extra})")
    for name, t in targets.items():
        value = tensors[name]
        if value.shape != t.value.shape:
            raise CheckpointError(f"'{ckpt / fname}': {name} has shape {value.shape}, expected {t.value.shape}")
        if not np.isfinite(value).all():
            raise CheckpointError(f"'{ckpt / fname}': {name} holds NaN or infinite values")
        t.value[...] = value


def load_lm(path: Union[str, "os.PathLike[str]"], *, optimizer: bool = False) -> LmCheckpoint:
    """The language model of a checkpoint directory, or of a run directory's ``latest``
    (:class:`CheckpointError` naming what is missing or damaged)."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"'{p}' does not exist")
    if not (p / CONFIG_FILE).is_file():
        latest = latest_checkpoint(p)
        if latest is None:
            raise CheckpointError(f"'{p}' is neither a checkpoint nor a run directory holding one")
        p = latest
    try:
        manifest = json.loads((p / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"'{p / CONFIG_FILE}' cannot be read as JSON: {exc}") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT_NAME
        or not isinstance(manifest.get("files"), dict)
    ):
        raise CheckpointError(f"'{p}' is not a checkpoint of this program")
    if manifest.get("kind") != LM_KIND:
        raise CheckpointError(f"'{p}' is not a language model's checkpoint (a translation model's?)")
    try:
        model = LanguageModel.from_config(dict(manifest["model"]))
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"'{p}': its model configuration is not valid: {exc}") from None
    vocabulary = CharVocabulary.from_str(_read_checked(p, VOCABULARY_FILE, manifest).decode("utf-8"))
    if vocabulary.vocab_size != model.config["vocab_size"]:
        raise CheckpointError(f"'{p}': the vocabulary does not match the model's vocab_size")
    _assign(p, MODEL_FILE, model.parameters(), _read_checked(p, MODEL_FILE, manifest))
    opt = manifest.get("optimizer") or {}
    model.configure_optimizer(**opt.get("config", {}))
    model.step = int(opt.get("step", 0))
    if optimizer:
        _assign(p, OPTIMIZER_FILE, model.optimizer_state(), _read_checked(p, OPTIMIZER_FILE, manifest))
        model.dropout_calls = int(opt.get("dropout_calls", 0))
    state = json.loads(_read_checked(p, STATE_FILE, manifest).decode("utf-8"))
    return LmCheckpoint(path=p, model=model, vocabulary=vocabulary, state=state, run_id=str(manifest.get("run_id")))


# ---------------------------------------------------------------------------- training


def _text_digest(text: str) -> str:
    return sha256(text.encode("utf-8"))


@dataclass
class LmTrainer:
    """A language-model run: the model, the text's parts as ids, the run directory, the history.
    :meth:`fit` trains until the request's limit, with progress lines, validation and
    checkpoints; Ctrl-C saves a checkpoint and stops."""

    request: LmTrainRequest
    out: Path
    model: LanguageModel
    vocabulary: CharVocabulary
    split: TextSplit
    source: LmText
    report: Report = _say
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    history: List[Dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0
    governor: Optional[ThreadGovernor] = None

    def __post_init__(self) -> None:
        self.ids = {
            name: self.vocabulary.encode(getattr(self.split, name), unknown=self.vocabulary.chars[0])
            for name in ("train", "valid", "test")
        }
        if len(self.ids["train"]) < self.request.seq_len + 1:
            raise ValueError(
                f"seq_len {self.request.seq_len} is too long for a training text of {len(self.ids['train'])} "
                f"characters: each step needs windows of seq_len + 1 = {self.request.seq_len + 1} characters"
            )
        r = self.request
        if r.memory_length > 0 and len(self.ids["train"]) // r.batch_size < r.seq_len + 1:
            raise ValueError(
                f"a training text of {len(self.ids['train'])} characters is too short for batch_size "
                f"{r.batch_size} stripes of at least seq_len + 1 = {r.seq_len + 1} characters (a segment memory "
                "walks each stripe in consecutive segments): lower batch_size or seq_len"
            )

    # ------------------------------------------------------------ data
    def batch(self, step: int) -> np.ndarray:
        """The (batch_size, seq_len + 1) windows of step ``step`` (1-based): random positions from
        a generator seeded by the run's seed and the step. With a segment memory: row b is the
        next segment of stripe b of the text (see :meth:`segment_of`)."""
        r = self.request
        train = self.ids["train"]
        if r.memory_length > 0:
            k, count = self.segment_of(step)
            width = len(train) // r.batch_size  # each stripe's characters
            start = k * r.seq_len
            return np.stack([train[b * width + start : b * width + start + r.seq_len + 1] for b in range(r.batch_size)])
        rng = np.random.default_rng([r.seed, step])
        starts = rng.integers(0, len(train) - r.seq_len, size=r.batch_size)
        return np.stack([train[s : s + r.seq_len + 1] for s in starts])

    def segment_of(self, step: int) -> Tuple[int, int]:
        """With a segment memory: ``(k, count)`` — step ``step`` (1-based) feeds segment k of the
        ``count`` consecutive segments of seq_len characters in each of the batch_size stripes of
        the training text; after the last one the stripes start again (and the memory is emptied)."""
        r = self.request
        width = len(self.ids["train"]) // r.batch_size
        count = (width - 1) // r.seq_len
        return (step - 1) % count, count

    def evaluate(self, part: str = "test", chars: Optional[int] = None) -> float:
        """Bits per character of a part of the text (``"valid"`` or ``"test"``; its first
        ``chars`` characters when given)."""
        if part not in ("valid", "test", "train"):
            raise ValueError(f"evaluate: part must be 'train', 'valid' or 'test', got {part!r}")
        ids = self.ids[part] if chars is None else self.ids[part][:chars]
        return bits_per_character(self.model, ids, self.request.seq_len, self.request.batch_size)

    def generate(self, prompt: str, max_tokens: int, **options: Any) -> str:
        """:func:`generate` with the model being trained (the context of its training windows)."""
        options.setdefault("context", self.request.seq_len + self.request.memory_length)
        return generate(self.model, self.vocabulary, prompt, max_tokens, **options)

    # ------------------------------------------------------------ state
    def state(self) -> Dict[str, Any]:
        """What a checkpoint records of the run besides the weights (JSON)."""
        return {
            "step": self.model.step,
            "elapsed": self.elapsed,
            "history": self.history,
            "request": asdict(self.request),
            "text": {
                "source": self.source.source,
                "attribution": self.source.attribution,
                "characters": len(self.source.text),
                "sha256": _text_digest(self.source.text),
                "split": self.split.sizes(),
            },
        }

    def save(self) -> Path:
        """A checkpoint of the run now."""
        return save_lm_checkpoint(self.out, self.model, self.vocabulary, self.state(), self.run_id, self.request.keep)

    def _total_steps(self) -> Optional[int]:
        r = self.request
        if r.steps is not None:
            return r.steps
        if r.epochs is not None:
            return max(1, int(math.ceil(r.epochs * len(self.ids["train"]) / (r.batch_size * r.seq_len))))
        if r.time_budget is not None:
            return None
        return 1000

    # ------------------------------------------------------------ the loop
    def fit(self) -> Dict[str, Any]:
        """Train until the limit; returns the last history entry (step, loss, valid bpc, ...).
        Ctrl-C (or SIGTERM through the command line) saves a checkpoint, then re-raises."""
        r = self.request
        total = self._total_steps()
        most = r.threads or get_num_threads()
        set_num_threads(most)
        self.governor = governor_for(self.governor, most, r.adaptive_threads)
        start_clock = time.perf_counter()
        start_elapsed = self.elapsed
        last_save = start_clock
        losses: List[float] = []
        tokens_per_step = r.batch_size * r.seq_len

        def over() -> bool:
            if total is not None:
                return self.model.step >= total
            assert r.time_budget is not None  # seconds of this call
            return time.perf_counter() - start_clock >= r.time_budget

        entry: Dict[str, Any] = {}
        try:
            while not over():
                step = self.model.step + 1
                tokens = self.batch(step)
                if r.memory_length > 0 and self.segment_of(step)[0] == 0:
                    # the stripes start (again): no memory of the text before. (A resumed run and
                    # the evaluations at progress lines start the next segment with an empty one.)
                    self.model.reset_memory()
                t0 = time.perf_counter()
                losses.append(self.model.train_step(tokens))
                seconds = time.perf_counter() - t0
                if self.governor is not None:
                    self.governor.record(seconds, tokens_per_step)
                self.elapsed = start_elapsed + time.perf_counter() - start_clock
                if step % r.eval_every == 0 or over():
                    entry = self._log(step, losses, tokens_per_step)
                    losses = []
                if time.perf_counter() - last_save >= r.checkpoint_every:
                    self.save()
                    last_save = time.perf_counter()
        except KeyboardInterrupt:
            self.elapsed = start_elapsed + time.perf_counter() - start_clock
            path = self.save()
            self.report(f"interrupted at step {self.model.step}: saved {path} (continue with --resume)")
            raise
        path = self.save()
        self.report(f"saved {path}")
        return entry

    def _log(self, step: int, losses: List[float], tokens_per_step: int) -> Dict[str, Any]:
        loss = float(np.mean(losses)) if losses else float("nan")
        valid = self.evaluate("valid", self.request.eval_chars)
        entry = {
            "step": step,
            "elapsed": round(self.elapsed, 2),
            "train_loss": loss,
            "train_bpc": loss / math.log(2),
            "valid_bpc": valid,
            "lr": self.model.learning_rate(step),
        }
        self.history.append(entry)
        rate = step * tokens_per_step / self.elapsed if self.elapsed > 0 else 0.0
        self.report(
            f"step {step}  train {entry['train_bpc']:.3f} bpc  valid {valid:.3f} bpc  lr {entry['lr']:.2e}  "
            f"{rate:,.0f} chars/s  {self.elapsed:.0f}s"
        )
        return entry


def _check_new_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out '{out}' is a file, not a directory")
    if out.is_dir():
        foreign = foreign_entries(out)
        if foreign:
            path, why = foreign[0]
            raise FileExistsError(
                f"'{path}' was not written by this program ({why}); it is never replaced: move it elsewhere "
                "or choose another --out"
            )
        if latest_checkpoint(out) is not None:
            raise ValueError(f"'{out}' already holds a run; pass --resume to continue it or choose another --out")


def new_lm_trainer(request: LmTrainRequest, out: Union[str, "os.PathLike[str]"], report: Report = _say) -> LmTrainer:
    """A new run of ``request`` writing into ``out`` (refused when it already holds a run or
    files of the user's under the names a run writes)."""
    out_path = Path(out)
    _check_new_out(out_path)
    source = load_lm_text(request.text, request.encoding)
    if source.attribution:
        report(f"text: {source.attribution}")
    split = split_text(source.text)
    vocabulary = CharVocabulary.from_text(split.train)
    model = LanguageModel(vocabulary.vocab_size, max_len=max(request.seq_len, 16), **request.architecture())
    model.configure_optimizer(warmup=request.warmup, lr_scale=request.lr_scale, clip_norm=request.clip_norm)
    sizes = split.sizes()
    report(
        f"text: {len(source.text):,} characters ({sizes['train']:,} train, {sizes['valid']:,} valid, "
        f"{sizes['test']:,} test), {len(vocabulary.chars)} distinct; model: {model.num_parameters():,} parameters"
    )
    out_path.mkdir(parents=True, exist_ok=True)
    return LmTrainer(request, out_path, model, vocabulary, split, source, report)


# the settings a resumed run may change (the architecture and the text are the checkpoint's)
_RESUMABLE = (
    "steps",
    "time_budget",
    "epochs",
    "eval_every",
    "eval_chars",
    "checkpoint_every",
    "keep",
    "threads",
    "adaptive_threads",
)


def resume_lm_trainer(
    out: Union[str, "os.PathLike[str]"], changes: Optional[Dict[str, Any]] = None, report: Report = _say
) -> LmTrainer:
    """Continue the run in ``out`` from its latest checkpoint, with the same text (checked by its
    digest) and architecture; ``changes`` may set the limit and the bookkeeping (``steps``,
    ``time_budget``, ``epochs``, ``eval_every``, ``threads``, ...)."""
    out_path = Path(out)
    if latest_checkpoint(out_path) is None:
        raise ValueError(f"nothing to resume: '{out_path}' holds no checkpoint")
    ckpt = load_lm(out_path, optimizer=True)
    saved = dict(ckpt.state["request"])
    for key, value in (changes or {}).items():
        if key not in _RESUMABLE:
            raise ValueError(f"--resume continues the saved run: {key} cannot be changed (it is the checkpoint's)")
        saved[key] = value
    if changes and any(k in changes for k in ("steps", "time_budget", "epochs")):
        for k in ("steps", "time_budget", "epochs"):
            if k not in changes:
                saved[k] = None
    request = LmTrainRequest(**{f.name: saved[f.name] for f in fields(LmTrainRequest) if f.name in saved})
    source = load_lm_text(request.text, request.encoding)
    if _text_digest(source.text) != ckpt.state["text"]["sha256"]:
        raise ValueError(f"the text '{request.text}' is not the one this run was trained on (its digest differs)")
    split = split_text(source.text)
    trainer = LmTrainer(
        request,
        out_path,
        ckpt.model,
        ckpt.vocabulary,
        split,
        source,
        report,
        run_id=ckpt.run_id,
        history=list(ckpt.state.get("history", [])),
        elapsed=float(ckpt.state.get("elapsed", 0.0)),
    )
    report(f"resuming {ckpt.path} at step {ckpt.model.step}")
    return trainer
