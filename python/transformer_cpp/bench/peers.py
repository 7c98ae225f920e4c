"""The benchmark's peers: PyTorch and CTranslate2 on the same weights as ours.

* :class:`TorchTrainer`: the reference model of :mod:`transformer_cpp.torch_reference` with
  ``torch.optim.Adam`` (optionally under bf16 autocast), started from our model's weights;
* :class:`CTranslate2Greedy`: greedy decoding with CTranslate2 on a model converted by
  :func:`transformer_cpp.export.convert_to_ctranslate2` (the converter of ``transformer-cpp
  export``), float32 or quantised to int8 when loaded;
* :func:`check_ctranslate2_exact`: is that conversion exact (identical greedy outputs, token
  log-probabilities within 1e-4), and does the PyTorch tutorial loop agree too?

PyTorch (and the reference, which needs it) is imported only when a peer is built
(:func:`import_torch`), CTranslate2 through :func:`transformer_cpp.export.import_ctranslate2`:
importing this module imports neither.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any, List, Optional, Tuple

import numpy as np

from ..export import convert_to_ctranslate2, import_ctranslate2
from ..model import Transformer
from .machine import SOFTWARE
from .shapes import END_ID, START_ID, Batch, BenchShapes, pad, random_sentences

__all__ = [
    "CTranslate2Greedy",
    "TorchTrainer",
    "check_ctranslate2_exact",
    "convert_to_ctranslate2",
    "import_ctranslate2_or_reason",
    "import_torch",
    "trim_outputs",
]


def import_torch() -> Tuple[Any, Optional[str]]:
    """``(torch, None)`` or ``(None, reason)``; the reference module is imported too (it needs
    PyTorch), so that a peer built later cannot fail on it."""
    try:
        import torch

        from .. import torch_reference  # noqa: F401
    except ImportError as exc:
        return None, f"PyTorch not available ({exc}); install transformer-cpp[torch]"
    return torch, None


def import_ctranslate2_or_reason() -> Tuple[Any, Optional[str]]:
    """``(ctranslate2, None)`` or ``(None, reason)``; loaded by :func:`transformer_cpp.export.import_ctranslate2`
    (which keeps CTranslate2's OpenMP runtime apart from ours and PyTorch's)."""
    try:
        return import_ctranslate2(), None
    except ImportError as exc:
        return None, str(exc)


def trim_outputs(out: np.ndarray, end_id: int = END_ID) -> List[Tuple[int, ...]]:
    """Rows of a (B, L) id matrix as tuples up to and including ``end_id``, padding dropped."""
    rows = []
    for row in np.asarray(out):
        ids = []
        for x in row:
            x = int(x)
            if x == 0:
                break
            ids.append(x)
            if x == end_id:
                break
        rows.append(tuple(ids))
    return rows


class TorchTrainer:
    """The reference model of :mod:`transformer_cpp.torch_reference` with ``torch.optim.Adam``
    (same betas, eps and learning rate as ours), weights copied from ``model`` when given."""

    def __init__(
        self, shapes: BenchShapes, model: Optional[Transformer] = None, seed: int = 0, autocast: bool = False
    ) -> None:
        import torch

        from ..torch_reference import build_reference, copy_weights_to_reference

        self.autocast = bool(autocast)  # forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)
        self.torch = torch
        config = model.config if model is not None else dict(shapes.model_config(seed), dtype="float32")
        self.ref = build_reference(config)
        if model is not None:
            copy_weights_to_reference(model, self.ref)
        lr = model.learning_rate(1) if model is not None else shapes.d_model**-0.5 * 4000**-1.5
        self.optimizer = torch.optim.Adam(self.ref.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)

    def tensors(self, batch: Batch) -> Tuple[Any, Any, Any]:
        """The batch as int64 tensors (converted outside the timed region)."""
        t = self.torch
        return t.from_numpy(batch.src), t.from_numpy(batch.tgt_in), t.from_numpy(batch.tgt_out)

    def train_step(self, src: Any, tgt_in: Any, tgt_out: Any) -> Tuple[float, float]:
        """zero_grad, forward, masked loss (and accuracy, as ours computes it), backward, Adam."""
        self.ref.train()
        self.optimizer.zero_grad(set_to_none=True)
        with self.torch.autocast("cpu", dtype=self.torch.bfloat16, enabled=self.autocast):
            logits = self.ref(src, tgt_in)
            loss: Any = self.ref.loss(logits, tgt_out)
        loss.backward()
        self.optimizer.step()
        with self.torch.no_grad():
            keep = tgt_out != 0
            acc = ((logits.argmax(-1) == tgt_out) & keep).sum() / keep.sum()
        return float(loss.detach()), float(acc)

    def timed_step(self, batch: Batch) -> Tuple[float, float]:
        """One :meth:`train_step` on ``batch``, the tensors made before the clock starts: ``(seconds, loss)``."""
        src, tgt_in, tgt_out = self.tensors(batch)
        t0 = time.perf_counter()
        loss, _ = self.train_step(src, tgt_in, tgt_out)
        return time.perf_counter() - t0, loss


class CTranslate2Greedy:
    """Greedy decoding with CTranslate2 on a model converted by :func:`convert_to_ctranslate2`.

    ``decode(src)`` takes the same 0-padded (B, S) ids as ours and returns (B, L) ids with 0 after
    the end token; :meth:`prepare` converts ids to token strings outside any timed region."""

    def __init__(self, model: Transformer, threads: int, workdir: str, compute_type: str = "float32") -> None:
        ctranslate2 = import_ctranslate2()
        self.source_vocab, self.target_vocab = convert_to_ctranslate2(model, workdir)
        self.target_ids = {t: i for i, t in enumerate(self.target_vocab)}
        # the model is converted in float32; "int8" quantises it when loading (CTranslate2's CPU advice)
        self.compute_type = compute_type
        self.translator = ctranslate2.Translator(
            workdir, device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=threads
        )

    def prepare(self, src: np.ndarray) -> List[List[str]]:
        """Token strings of every 0-padded row (padding removed)."""
        return [[self.source_vocab[int(x)] for x in row if x != 0] for row in np.asarray(src)]

    def translate(self, tokens: List[List[str]], max_length: int) -> List[Any]:
        """The timed call: greedy search, the padding/unknown id 0 never generated, the end token
        allowed at the first step (CTranslate2's default ``min_decoding_length`` is 1, ours 0) and
        kept in the output."""
        return list(
            self.translator.translate_batch(
                tokens,
                beam_size=1,
                max_decoding_length=max_length,
                min_decoding_length=0,
                disable_unk=True,
                return_end_token=True,
                max_batch_size=0,
            )
        )

    def to_ids(self, results: List[Any]) -> np.ndarray:
        rows = [[self.target_ids[t] for t in r.hypotheses[0]] for r in results]
        out = np.zeros((len(rows), max([len(r) for r in rows] + [1])), np.int64)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return out

    def decode(self, src: np.ndarray, max_length: int) -> np.ndarray:
        return self.to_ids(self.translate(self.prepare(src), max_length))


def _max_log_prob_difference(
    model: Transformer, ct: "CTranslate2Greedy", src: np.ndarray, outputs: List[Tuple[int, ...]]
) -> float:
    """Largest |log p(token)| difference between CTranslate2's ``score_batch`` and our forward pass
    along our greedy outputs (teacher-forced), over every sentence and position."""
    targets = [[ct.target_vocab[i] for i in (row[:-1] if row and row[-1] == END_ID else row)] for row in outputs]
    scored = ct.translator.score_batch(ct.prepare(src), targets)
    worst = 0.0
    for i, (row, res) in enumerate(zip(outputs, scored)):
        if not row:
            continue
        logits = model.forward(src[i : i + 1], np.array([(START_ID,) + row[:-1]], np.int64))[0].astype(np.float64)
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        ours = log_probs[np.arange(len(row)), list(row)]
        worst = max(worst, float(np.max(np.abs(np.asarray(res.log_probs[: len(row)], np.float64) - ours))))
    return worst


def check_ctranslate2_exact(
    threads: int = 1, seed: int = 7, sentences: int = 24, layout: str = "interleaved", share_embeddings: bool = False
) -> Tuple[bool, str]:
    """Is the CTranslate2 conversion exact? On a small random float32 model whose end-token bias
    makes some sentences stop early, CTranslate2's greedy outputs must equal ours token for token
    (at batch 1 and padded in one batch), its token log-probabilities (``score_batch``) must agree
    with our forward pass to 1e-4, and the PyTorch tutorial loop's outputs must equal ours too when
    PyTorch is installed. Returns ``(exact, explanation)``."""
    ct2, why = import_ctranslate2_or_reason()
    if ct2 is None:
        return False, why or "CTranslate2 not available"
    model = Transformer(
        37,
        41,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        dropout=0.1,
        max_length=12,
        layout=layout,
        share_embeddings=share_embeddings,
        seed=seed,
    )
    bias = model.parameters()["output.bias"].value
    bias[END_ID] = 1.5  # some sentences end at once, some run to max_length, some in between
    rng = np.random.default_rng(seed)
    srcs = random_sentences(rng, sentences, 37, 3, 12)
    padded = pad(srcs)
    max_len = 12
    ours_batch = trim_outputs(model.greedy_decode(padded, START_ID, END_ID, max_len))
    ct: Optional[CTranslate2Greedy] = None
    with tempfile.TemporaryDirectory(prefix="tcpp-ct2-check-") as tmp:
        try:
            ct = CTranslate2Greedy(model, threads, tmp)
            ct_batch = trim_outputs(ct.decode(padded, max_len))
            ct_single = [trim_outputs(ct.decode(s[None], max_len))[0] for s in srcs]
            worst = _max_log_prob_difference(model, ct, padded, ours_batch)
        except Exception as exc:  # conversion or runtime refusal: report, do not crash the bench
            return False, f"conversion failed: {type(exc).__name__}: {exc}"
        finally:
            ct = None  # release the translator before the directory goes
    lengths = sorted({len(r) for r in ours_batch})
    if ct_batch != ours_batch or ct_single != ours_batch:
        bad = sum(a != b for a, b in zip(ct_batch, ours_batch)) + sum(a != b for a, b in zip(ct_single, ours_batch))
        return (
            False,
            f"greedy outputs differ from {SOFTWARE}'s on {bad} of {2 * len(srcs)} decodes of a small random model",
        )
    if not worst < 1e-4:
        return (
            False,
            f"token log-probabilities differ from {SOFTWARE}'s by up to {worst:.2g} (float32 rounding is ~1e-6)",
        )
    note = (
        f"identical greedy outputs on {len(srcs)} sentences (output lengths {lengths}) at batch 1 and padded, "
        f"token log-probs within {worst:.1g} of {SOFTWARE}'s"
    )
    torch, _ = import_torch()
    if torch is not None:
        from ..torch_reference import build_reference, copy_weights_to_reference, tutorial_greedy_decode

        ref = build_reference(model.config)
        copy_weights_to_reference(model, ref)
        ref.eval()
        if trim_outputs(tutorial_greedy_decode(ref, padded, START_ID, END_ID, max_len)) != ours_batch:
            return (
                False,
                f"the PyTorch reference loop disagrees with {SOFTWARE} on the check model (not a CTranslate2 issue)",
            )
        note += "; PyTorch tutorial loop identical too"
    return True, note
