"""The ``transformer-cpp`` command line (also ``python -m transformer_cpp``).

Subcommands::

    transformer-cpp train --preset tutorial --out runs/tutorial          # English -> Spanish
    transformer-cpp train --out runs/tutorial --resume                   # continue after Ctrl-C
    transformer-cpp translate --model runs/tutorial "you should pay for it."
    echo "we have no extra money." | transformer-cpp translate --model runs/tutorial
    transformer-cpp evaluate --model runs/tutorial                       # BLEU, chrF, loss, accuracy
    transformer-cpp figures --out figures                                # positional-encoding figures

The data file is ``--data``, else ``$TRANSFORMER_CPP_DATA``, else the download cache (see
:func:`transformer_cpp.data.load_tatoeba`). Errors a user can cause (a missing file, a damaged
checkpoint, a bad option) print one line and exit with status 1 (2 for a bad command line); set
``TRANSFORMER_CPP_DEBUG=1`` to see the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

PROG = "transformer-cpp"

# Architecture options: command-line flag -> Transformer argument.
_ARCH_OPTIONS = {
    "d_model": "d_model",
    "layers": "n_layers",
    "heads": "n_heads",
    "d_ff": "d_ff",
    "dropout": "dropout",
    "max_length": "max_length",
}
# Training options: command-line flag -> TrainConfig field.
_TRAIN_OPTIONS = {
    "batch_size": "batch_size",
    "warmup": "warmup",
    "lr_scale": "lr_scale",
    "fixed_lr": "fixed_lr",
    "label_smoothing": "label_smoothing",
    "clip_norm": "clip_norm",
    "log_every": "log_every",
    "bucket_by_length": "bucket_by_length",
    "drop_remainder": "drop_remainder",
    "keep_checkpoints": "keep_checkpoints",
}
# Data options: command-line flag -> key of the checkpoint's "data" section.
_DATA_OPTIONS = {
    "num_samples": "num_samples",
    "vocab_size": "vocab_size",
    "split_seed": "split_seed",
    "valid_fraction": "valid_fraction",
    "test_fraction": "test_fraction",
}
_DEFAULT_DATA = {"num_samples": 80_000, "vocab_size": 2 ** 14, "split_seed": 0, "valid_fraction": 0.05,
                 "test_fraction": 0.05}


class UserError(Exception):
    """An error the user can fix; printed as one line without a traceback."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit with status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _version_text() -> str:
    from . import __version__, build_info

    info = build_info()
    lines = [f"transformer-cpp {__version__}"]
    for key in ("compiler", "build_type", "flags", "openmp", "eigen_version", "simd", "hardware_threads"):
        if key in info:
            lines.append(f"  {key:<16} {info[key]}")
    return "\n".join(lines)


def _set_threads(threads: Optional[int]) -> None:
    if threads is not None:
        from . import set_num_threads

        set_num_threads(threads)


# ------------------------------------------------------------------------------------ figures


def _cmd_figures(args: argparse.Namespace) -> int:
    from .plotting import save_positional_encoding_figures

    paths = save_positional_encoding_figures(args.out)
    for p in paths:
        print(p)
    return 0


# ------------------------------------------------------------------------------------ data


def _load_split(data_path: Optional[str], info: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """Load, clean and split the pairs as ``info`` says; returns (split, updated info).

    ``split`` maps ``"train"``, ``"valid"``, ``"test"`` to ``(source sentences, target sentences)``.
    """
    from .data import load_tatoeba, train_val_test_split
    from .text import clean_corpus

    num_samples = info.get("num_samples") or None
    pairs = load_tatoeba(data_path, num_samples=num_samples)
    _say(f"loaded {len(pairs):,} sentence pairs from {pairs.source}")
    src_all = clean_corpus(pairs.english, info["src_lang"])
    tgt_all = clean_corpus(pairs.spanish, info["tgt_lang"])
    parts = train_val_test_split(len(pairs), info["valid_fraction"], info["test_fraction"], seed=info["split_seed"])
    split = {name: ([src_all[i] for i in idx], [tgt_all[i] for i in idx])
             for name, idx in zip(("train", "valid", "test"), parts)}
    info = dict(info, path=str(Path(pairs.source).resolve()) if pairs.source else None, pairs_loaded=len(pairs))
    return split, info


def _encode(split: Dict[str, Any], name: str, src_tok: Any, tgt_tok: Any, max_length: int) -> Optional[Any]:
    from .data import encode_pairs

    src, tgt = split[name]
    if not src:
        return None
    try:
        return encode_pairs(src, tgt, src_tok, tgt_tok, max_length)
    except ValueError as exc:
        raise UserError(f"the {name} split has no usable pair: {exc}") from None


# ------------------------------------------------------------------------------------ train


def _given(args: argparse.Namespace, names: Sequence[str]) -> Dict[str, Any]:
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def _check_resume_options(args: argparse.Namespace, model_cfg: Dict[str, Any], train_cfg: Dict[str, Any],
                          data: Dict[str, Any]) -> None:
    """With --resume, options that would change the run must agree with the checkpoint."""
    conflicts = []
    for flag, key in _ARCH_OPTIONS.items():
        value = getattr(args, flag)
        if value is not None and value != model_cfg.get(key):
            conflicts.append(f"--{flag.replace('_', '-')} {value} (the run has {model_cfg.get(key)})")
    for flag, key in _TRAIN_OPTIONS.items():
        value = getattr(args, flag)
        if value is not None and value != train_cfg.get(key):
            conflicts.append(f"--{flag.replace('_', '-')} {value} (the run has {train_cfg.get(key)})")
    for flag, key in _DATA_OPTIONS.items():
        value = getattr(args, flag)
        if value is not None and value != data.get(key):
            conflicts.append(f"--{flag.replace('_', '-')} {value} (the run has {data.get(key)})")
    if args.seed is not None and args.seed != train_cfg.get("seed"):
        conflicts.append(f"--seed {args.seed} (the run has {train_cfg.get('seed')})")
    if args.preset is not None:
        conflicts.append("--preset (the architecture comes from the checkpoint)")
    if conflicts:
        raise UserError("--resume continues the run with its own settings; drop " + ", ".join(conflicts)
                        + ", or start a new run with another --out")


def _show_epoch_summaries() -> None:
    """Without a progress bar, the trainer reports each epoch through its logger: show those lines."""
    import logging

    log = logging.getLogger(f"{__package__}.training")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def _cmd_train(args: argparse.Namespace) -> int:
    from .checkpoint import list_checkpoints, load_checkpoint, read_checkpoint_config
    from .model import Transformer, preset_config
    from .tokenizer import SubwordTokenizer
    from .training import TrainConfig, Trainer, TrainingInterrupted

    out = Path(args.out if args.out is not None else f"runs/{args.preset or 'tutorial'}")
    _set_threads(args.threads)
    existing = list_checkpoints(out) or (out / "latest").exists()

    if args.resume:
        if not existing:
            raise UserError(f"nothing to resume: '{out}' holds no checkpoint")
        ckpt_dir, cfg = read_checkpoint_config(out)
        data_info = cfg.get("data") or {}
        if not data_info or cfg.get("train_config") is None:
            raise UserError(f"checkpoint '{ckpt_dir}' was not written by 'transformer-cpp train'; it cannot be resumed here")
        _check_resume_options(args, cfg["model"], cfg["train_config"], data_info)
        split, _ = _load_split(args.data if args.data is not None else data_info.get("path"), data_info)
        ckpt = load_checkpoint(ckpt_dir, optimizer=True)
        max_length = int(data_info["max_length"])
        train = _encode(split, "train", ckpt.src_tokenizer, ckpt.tgt_tokenizer, max_length)
        valid = _encode(split, "valid", ckpt.src_tokenizer, ckpt.tgt_tokenizer, max_length)
        trainer = Trainer.from_checkpoint(ckpt, train, valid, checkpoint_dir=out, epochs=args.epochs,
                                          threads=args.threads, progress=False if args.no_progress else None)
        _say(f"resuming {ckpt.path} at epoch {trainer.epoch} (+{trainer.batch_in_epoch} batches), "
             f"step {trainer.model.step}; training until epoch {trainer.config.epochs}")
    else:
        if existing:
            raise UserError(f"'{out}' already holds a run; pass --resume to continue it or choose another --out")
        arch = preset_config(args.preset or "tutorial")
        for flag, key in _ARCH_OPTIONS.items():
            if getattr(args, flag) is not None:
                arch[key] = getattr(args, flag)
        data_info: Dict[str, Any] = dict(_DEFAULT_DATA, src_lang="en", tgt_lang="es", max_length=arch["max_length"])
        data_info.update({_DATA_OPTIONS[k]: v for k, v in _given(args, list(_DATA_OPTIONS)).items()})
        if data_info["num_samples"] is not None and data_info["num_samples"] < 0:
            raise UserError(f"--num-samples must be >= 0 (0 = all pairs), got {data_info['num_samples']}")
        settings = {_TRAIN_OPTIONS[k]: v for k, v in _given(args, list(_TRAIN_OPTIONS)).items()}
        config = TrainConfig(epochs=args.epochs if args.epochs is not None else 10,
                             seed=args.seed if args.seed is not None else 0,
                             threads=args.threads, progress=not args.no_progress, **settings)
        Transformer(4, 4, seed=config.seed, **arch)  # a bad architecture fails now, before any work
        split, data_info = _load_split(args.data, data_info)
        vocab = int(data_info["vocab_size"])
        src_tok = SubwordTokenizer.build_from_corpus(split["train"][0], vocab)
        tgt_tok = SubwordTokenizer.build_from_corpus(split["train"][1], vocab)
        _say(f"subword vocabularies: {data_info['src_lang']} {src_tok.vocab_size:,} tokens, "
             f"{data_info['tgt_lang']} {tgt_tok.vocab_size:,} tokens (target {vocab:,})")
        train = _encode(split, "train", src_tok, tgt_tok, arch["max_length"])
        if train is None:
            raise UserError("no training pairs: lower --valid-fraction / --test-fraction or use more --num-samples")
        valid = _encode(split, "valid", src_tok, tgt_tok, arch["max_length"])
        _say(f"pairs of at most {arch['max_length']} tokens: {len(train):,} train, "
             f"{len(valid) if valid is not None else 0:,} validation, {len(split['test'][0]):,} test (held out)")
        model = Transformer(src_tok.vocab_size, tgt_tok.vocab_size, seed=config.seed, **arch)
        _say(f"model: {model!r}")
        trainer = Trainer(model, train, valid, config, src_tokenizer=src_tok, tgt_tokenizer=tgt_tok,
                          checkpoint_dir=out, data_info=data_info)
        _say(f"training {config.epochs} epochs of {trainer.batches_per_epoch:,} batches; checkpoints in {out}")
    _show_epoch_summaries()
    try:
        trainer.fit()
    except TrainingInterrupted as exc:
        where = f"checkpoint {exc.checkpoint}" if exc.checkpoint else "the last epoch checkpoint"
        _say(f"{PROG} train: interrupted; {where} holds the state; continue with: "
             f"{PROG} train --out {out} --resume")
        return 130
    last = trainer.history["epoch"]
    if last["epoch"]:
        summary = f"loss {last['loss'][-1]:.4f}, accuracy {last['accuracy'][-1]:.4f}"
        if last["val_loss"]:
            summary += f", validation loss {last['val_loss'][-1]:.4f}, accuracy {last['val_accuracy'][-1]:.4f}"
        _say(f"done after epoch {last['epoch'][-1]}: {summary}")
    if trainer.epoch >= trainer.config.epochs and not last["epoch"]:
        _say(f"nothing to do: the run already has {trainer.epoch} epochs (ask for more with --epochs)")
    _say(f"model saved in {trainer.last_checkpoint}; try: {PROG} translate --model {out} \"you should pay for it.\"")
    return 0


# ------------------------------------------------------------------------------------ translate


def _cmd_translate(args: argparse.Namespace) -> int:
    from .translate import SentenceTruncatedWarning, Translator

    _set_threads(args.threads)
    translator = Translator.from_checkpoint(args.model, max_length=args.max_length)
    if args.sentences:
        sentences: List[str] = list(args.sentences)
    else:
        if sys.stdin.isatty():
            _say("reading sentences from standard input, one per line (end with Ctrl-D)")
        sentences = [line.rstrip("\r\n") for line in sys.stdin]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SentenceTruncatedWarning)
        texts = translator.translate_batch(sentences, beam_size=args.beam_size, length_penalty=args.length_penalty,
                                           batch_size=args.batch_size)
    for w in caught:
        if issubclass(w.category, SentenceTruncatedWarning):
            _say(f"{PROG} translate: warning: {w.message}")
    for source, text in zip(sentences, texts):
        print(text if source.strip() else "")
    return 0


# ------------------------------------------------------------------------------------ evaluate


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .checkpoint import read_checkpoint_config
    from .translate import Translator, evaluate

    _set_threads(args.threads)
    ckpt_dir, cfg = read_checkpoint_config(args.model)
    data_info = cfg.get("data")
    if not data_info:
        raise UserError(f"checkpoint '{ckpt_dir}' does not record its data split; it was not written by "
                        f"'{PROG} train'")
    if args.split == "test" and not data_info.get("test_fraction"):
        raise UserError("the run kept no test split (test fraction 0); use --split valid")
    translator = Translator.from_checkpoint(ckpt_dir)
    split, _ = _load_split(args.data if args.data is not None else data_info.get("path"), data_info)
    sources, references = split[args.split]
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    if not sources:
        raise UserError(f"the {args.split} split is empty")
    result = evaluate(translator, sources, references, beam_size=args.beam_size, length_penalty=args.length_penalty,
                      batch_size=args.batch_size, tgt_lang=data_info.get("tgt_lang", "es"))
    print(f"checkpoint  {ckpt_dir}")
    print(f"split       {args.split}: {result.sentences} sentence pairs ({result.scored_pairs} within max_length)")
    print(f"BLEU        {result.bleu:.2f}   ({result.bleu_signature})")
    print(f"chrF        {result.chrf:.2f}   ({result.chrf_signature})")
    print(f"loss        {result.loss:.4f}")
    print(f"accuracy    {result.accuracy:.4f}")
    for i in range(min(args.examples, len(sources))):
        print(f"\n  source     {sources[i]}\n  reference  {result.references[i]}\n  output     {result.hypotheses[i]}")
    return 0


# ------------------------------------------------------------------------------------ parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _add_train_parser(sub: Any) -> None:
    from .model import PRESETS

    p = sub.add_parser("train", help="train an English-to-Spanish model on the Tatoeba pairs",
                       description="Train a Transformer on English-Spanish pairs. A checkpoint is written "
                                   "after every epoch (and on Ctrl-C); --resume continues exactly. "
                                   "Options left out take the preset's or the default value.")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="architecture preset (default: tutorial)")
    p.add_argument("--data", default=None, help="spa.txt or spa-eng.zip (default: $TRANSFORMER_CPP_DATA, "
                                                "else the download cache)")
    p.add_argument("--out", default=None, help="run directory for checkpoints (default: runs/<preset>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    p.add_argument("--epochs", type=_positive_int, default=None,
                   help="epochs in total (default 10; with --resume, the run's own)")
    p.add_argument("--threads", type=_positive_int, default=None, help="C++ threads (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("data")
    g.add_argument("--num-samples", type=_non_negative_int, default=None,
                   help="use the first N pairs of the file (default 80000; 0 = all)")
    g.add_argument("--vocab-size", type=_positive_int, default=None, help="target size of each subword vocabulary (default 16384)")
    g.add_argument("--valid-fraction", type=float, default=None, help="share of pairs for validation (default 0.05)")
    g.add_argument("--test-fraction", type=float, default=None, help="share of pairs held out for evaluate (default 0.05)")
    g.add_argument("--split-seed", type=_non_negative_int, default=None, help="seed of the train/valid/test split (default 0)")
    g = p.add_argument_group("architecture (default: the preset's)")
    g.add_argument("--d-model", type=_positive_int, default=None, help="model width")
    g.add_argument("--layers", type=_positive_int, default=None, help="encoder and decoder layers")
    g.add_argument("--heads", type=_positive_int, default=None, help="attention heads")
    g.add_argument("--d-ff", type=_positive_int, default=None, help="feed-forward inner width")
    g.add_argument("--dropout", type=float, default=None, help="dropout rate")
    g.add_argument("--max-length", type=_positive_int, default=None,
                   help="longest sentence in tokens; longer pairs are dropped")
    g = p.add_argument_group("optimisation (default: TrainConfig's)")
    g.add_argument("--batch-size", type=_positive_int, default=None, help="pairs per step (default 64)")
    g.add_argument("--warmup", type=_positive_int, default=None, help="warm-up steps (default 4000)")
    g.add_argument("--lr-scale", type=float, default=None, help="multiplies the learning-rate schedule (default 1)")
    g.add_argument("--fixed-lr", type=float, default=None, help="constant learning rate instead of the schedule")
    g.add_argument("--label-smoothing", type=float, default=None, help="label smoothing (default 0; paper 0.1)")
    g.add_argument("--clip-norm", type=float, default=None, help="clip gradients to this global norm (default: off)")
    g.add_argument("--seed", type=_non_negative_int, default=None, help="seed of weights, dropout and shuffling (default 0)")
    g.add_argument("--log-every", type=_positive_int, default=None, help="history entry every N steps (default 10)")
    g.add_argument("--bucket-by-length", action="store_const", const=True, default=None,
                   help="batch sentences of similar length together")
    g.add_argument("--drop-remainder", action="store_const", const=True, default=None,
                   help="drop the last, smaller batch of each epoch")
    g.add_argument("--keep-checkpoints", type=_non_negative_int, default=None,
                   help="keep the newest N checkpoints (default 5; 0 = all)")
    p.set_defaults(func=_cmd_train)


def _add_translate_parser(sub: Any) -> None:
    p = sub.add_parser("translate", help="translate sentences with a trained model",
                       description="Translate the sentences given as arguments, or one per line from "
                                   "standard input; prints one translation per line.")
    p.add_argument("sentences", nargs="*", help="sentences to translate (default: read standard input)")
    p.add_argument("--model", required=True, help="run directory (its latest checkpoint) or checkpoint directory")
    p.add_argument("--beam-size", type=_positive_int, default=1, help="1 = greedy decoding (default), more = beam search")
    p.add_argument("--length-penalty", type=float, default=0.6, help="beam search length-penalty exponent (default 0.6)")
    p.add_argument("--max-length", type=_positive_int, default=None, help="most tokens to generate (default: the model's)")
    p.add_argument("--batch-size", type=_positive_int, default=64, help="sentences decoded together (default 64)")
    p.add_argument("--threads", type=_positive_int, default=None, help="C++ threads (default: all cores)")
    p.set_defaults(func=_cmd_translate)


def _add_evaluate_parser(sub: Any) -> None:
    p = sub.add_parser("evaluate", help="BLEU, chrF, loss and accuracy on the held-out pairs",
                       description="Rebuild the run's data split and score the model on its test (or "
                                   "validation) pairs.")
    p.add_argument("--model", required=True, help="run directory (its latest checkpoint) or checkpoint directory")
    p.add_argument("--data", default=None, help="the data file (default: the one the run was trained on)")
    p.add_argument("--split", choices=("test", "valid"), default="test", help="which held-out pairs (default test)")
    p.add_argument("--limit", type=_non_negative_int, default=0, help="score only the first N pairs (default all)")
    p.add_argument("--beam-size", type=_positive_int, default=1, help="1 = greedy decoding (default)")
    p.add_argument("--length-penalty", type=float, default=0.6, help="beam search length-penalty exponent")
    p.add_argument("--batch-size", type=_positive_int, default=64, help="sentences per batch (default 64)")
    p.add_argument("--examples", type=_non_negative_int, default=0, help="also print the first N translations")
    p.add_argument("--threads", type=_positive_int, default=None, help="C++ threads (default: all cores)")
    p.set_defaults(func=_cmd_evaluate)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``transformer-cpp`` with every subcommand."""
    parser = _Parser(prog=PROG, description="The Transformer of 'Attention Is All You Need' with a C++ core.")
    parser.add_argument("--version", action="store_true", help="print version and build facts")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    p = sub.add_parser("figures", help="render the positional-encoding figures to PNG files")
    p.add_argument("--out", default="figures", help="output directory (default: figures)")
    p.set_defaults(func=_cmd_figures)

    _add_train_parser(sub)
    _add_translate_parser(sub)
    _add_evaluate_parser(sub)

    # --- extension point: the benchmark subcommand -------------------------------------------
    # `transformer_cpp.bench` (when it exists) provides add_bench_parser(subparsers), which adds
    # the `bench` subcommand and sets its `func`. Import errors inside it are not hidden.
    if importlib.util.find_spec(f"{__package__}.bench") is not None:
        from .bench import add_bench_parser  # type: ignore[import-not-found]

        add_bench_parser(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:  # e.g. `transformer-cpp translate ... | head -1`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that Python's exit-time flush does not fail again
        return 0


def _main(argv: Optional[List[str]]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(_version_text())
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if os.environ.get("TRANSFORMER_CPP_DEBUG"):
        return int(args.func(args) or 0)
    try:
        return int(args.func(args) or 0)
    except (UserError, OSError, ValueError) as exc:  # CheckpointError and FileNotFoundError included
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
