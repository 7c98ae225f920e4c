"""``transformer-cpp translate`` and ``transformer-cpp evaluate``: a :class:`~transformer_cpp.translate.Translator`
from a checkpoint, on sentences (arguments or standard input) or on held-out pairs."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Set, Tuple

from ..checkpoint import BEST_FILE, LATEST_FILE, TRANSLATION_KIND, check_kind, read_checkpoint_config
from ..config import Setting
from ..data import DataRecord, check_encoding, columns_option
from ..task import check_same_split, load_pairs, load_split
from ..text import is_blank
from ..training import TrainConfig
from ..translate import DecodeOptions, LongInputWarning, Translator, evaluate, order_losses
from ..translate.decoding import BEAM_RULES, checked_defaults, resolved_rules
from ..translate.batch import encode_target_text
from .common import PROG, UserError, add_command, console, set_threads, terminate_as_interrupt
from .options import (
    add_model_option,
    add_option,
    add_settings,
    as_type,
    count_option,
    deprecated_alias,
    path_option,
)
from .translate_io import InputLine, StreamReader, argument_lines, atomic_output, n_best_lines, progress_bar, unbuffered

__all__ = ["add_evaluate_parser", "add_translate_parser", "run_evaluate", "run_translate"]


def _hypotheses(result: Any) -> List[Tuple[str, Optional[float]]]:
    """``(text, score)`` of each hypothesis kept for one input, best first."""
    if isinstance(result, str):
        return [(result, None)]
    return [(h.text, h.score) for h in result.hypotheses] or [(result.text, result.score)]


def _translate_lines(
    translator: Any, todo: List[Tuple[int, str]], args: argparse.Namespace
) -> Tuple[Dict[int, List[Tuple[str, Optional[float]]]], List[Tuple[int, str]]]:
    """Translate ``(number, sentence)`` pairs a batch at a time: ``({number: hypotheses}, failed)``
    (one hypothesis each, ``--n-best`` of them with it). A batch the core refuses (a sentence too
    long for the memory, say) is retried sentence by sentence, so that one sentence fails alone:
    ``failed`` holds ``(number, why)``."""
    done: Dict[int, List[Tuple[str, Optional[float]]]] = {}
    failed: List[Tuple[int, str]] = []

    def translate(chunk: List[Tuple[int, str]]) -> None:
        results = translator.translate_batch(
            [s for _, s in chunk],
            beam_size=args.beam_size,
            length_penalty=args.length_penalty,
            batch_size=args.batch_size,
            n_best=args.n_best,
            **_search_options(args),
        )
        if args.constraint:  # Translations: say which reached the output limit before every constraint
            for (number, _), t in zip(chunk, results):
                if t.constraints_missing:
                    console.say(
                        f"{PROG} translate: line {number}: the output limit came before {t.constraints_missing} "
                        "of the --constraint texts; the translation holds the most it could"
                    )
        done.update(zip((n for n, _ in chunk), map(_hypotheses, results)))

    for start in range(0, len(todo), args.batch_size):
        chunk = todo[start : start + args.batch_size]
        try:
            translate(chunk)
        except (ValueError, MemoryError) as exc:
            if len(chunk) == 1:
                failed.append((chunk[0][0], " ".join(str(exc).split()) or type(exc).__name__))
                continue
            for item in chunk:
                try:
                    translate([item])
                except (ValueError, MemoryError) as one:
                    failed.append((item[0], " ".join(str(one).split()) or type(one).__name__))
    return done, failed


class _Report:
    """What translate says on standard error as it goes (through the progress bar when there is
    one), and its summary at the end."""

    def __init__(self, what: str, bar: Any) -> None:
        self.what = what  # "argument" or "line"
        self.say = (lambda m: bar.write(m, file=sys.stderr)) if bar is not None else console.say
        self.lines = self.bad = self.failed = self.translated = self.empty = 0
        self.seen: Set[str] = set()

    def batch(self, batch: List[InputLine], done: Dict[int, Any], failed: List[Tuple[int, str]], caught: Any) -> None:
        """Report one batch: its lines that are not UTF-8 (the first 20 of the run), its long-input
        warnings (each once a run, though a refused batch is retried) and its failures."""
        self.lines += len(batch)
        for line in batch:
            if line.text is None:
                self.bad += 1
                if self.bad <= 20:
                    self.say(
                        f"{PROG} translate: {self.what} {line.number} is not valid UTF-8"
                        f"{f' ({line.problem})' if line.problem else ''}; its output line is left empty"
                    )
        for message in (str(w.message) for w in caught if issubclass(w.category, LongInputWarning)):
            if message not in self.seen:
                self.seen.add(message)
                self.say(f"{PROG} translate: warning: {message}")
        for number, why in failed:
            self.say(
                f"{PROG} translate: {self.what} {number} cannot be translated: {why}; its output line is left empty"
            )
        self.failed += len(failed)
        self.translated += len(done)
        self.empty += sum(1 for hyps in done.values() if not hyps[0][0])

    def finish(self) -> int:
        """The summary lines; the exit status (1 when an input was not translated)."""
        what = self.what
        if self.bad > 20:
            self.say(
                f"{PROG} translate: {self.bad - 20:,} more {what}s are not valid UTF-8; their output lines are left empty"
            )
        if self.empty:
            self.say(
                f"{PROG} translate: warning: {self.empty:,} of {self.translated:,} translated {what}s gave an empty "
                "translation (their output lines are empty): the model ended them at once, or wrote only tokens "
                "that decode to nothing; this usually means an undertrained model, or too short a length limit "
                "(--max-output-tokens)"
            )
        if self.bad or self.failed:
            self.say(
                f"{PROG} translate: {self.bad + self.failed:,} of {self.lines:,} {what}s not translated (see above); "
                "the others are"
            )
            return 1
        return 0


def _translate_batch(
    translator: Any, batch: List[InputLine], args: argparse.Namespace, out: Any, report: _Report
) -> None:
    """Translate one batch of input lines and write its output (flushed): one line per input, or
    its ``--n-best`` lines. Blank lines (whitespace, or only invisible characters such as
    zero-width spaces) and lines that cannot be translated give an empty line (no n-best line)."""
    todo = [(line.number, line.text) for line in batch if line.text is not None and not is_blank(line.text)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LongInputWarning)
        done, failed = _translate_lines(translator, todo, args)
    report.batch(batch, done, failed, caught)
    for line in batch:
        hyps = done.get(line.number)
        if args.n_best is None:
            out.write((hyps[0][0] if hyps else "") + "\n")
        elif hyps:
            scored = [(text, score if score is not None else float("nan")) for text, score in hyps]
            out.write("".join(f"{text}\n" for text in n_best_lines(line.number - 1, scored)))
    out.flush()


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuse options that do not go together, and an ``--input`` that cannot be read."""
    if args.n_best is not None and args.beam_size < max(args.n_best, 2):
        raise UserError(
            f"--n-best {args.n_best} needs beam search with at least as many hypotheses: give --beam-size "
            f"{max(args.n_best, 2)} or more (got {args.beam_size})"
        )
    if args.input is not None:
        if args.sentences:
            raise UserError("give the sentences as arguments or in --input FILE, not both")
        if not os.path.isfile(args.input) or not os.access(args.input, os.R_OK):
            raise UserError(f"--input '{args.input}' cannot be read (not a readable file)")


def _input_batches(args: argparse.Namespace, stack: contextlib.ExitStack) -> Tuple[Iterator[List[InputLine]], str]:
    """The input lines in batches, and what a line is called in messages."""
    if args.sentences:
        return argument_lines(args.sentences, args.batch_size), "argument"
    stream: BinaryIO
    if args.input is not None:
        stream = stack.enter_context(open(args.input, "rb", buffering=0))
    else:
        stream = unbuffered(sys.stdin.buffer)
        if sys.stdin.isatty():
            console.say("reading sentences from standard input, one per line (end with Ctrl-D)")
    return StreamReader(stream, capacity=max(4 * args.batch_size, 1024)).batches(args.batch_size), "line"


# ------------------------------------------------------------- prefix, constraints, sampling


def _add_search_options(p: Any) -> None:
    """``--prefix``, ``--constraint`` and the sampling options of ``translate``."""
    p.add_argument("--prefix", default=None, metavar="TEXT", help="every translation starts with this text")
    p.add_argument(
        "--constraint",
        action="append",
        default=[],
        metavar="TEXT",
        help="text every translation must contain (repeatable; beam search with --beam-size above the number of "
        "constraints)",
    )
    add_settings(
        p, DecodeOptions, only=["sampling_topk", "sampling_topp", "sampling_temperature", "seed"], owner="Translator"
    )


def _check_search_options(translator: Any, args: argparse.Namespace) -> None:
    """One line naming the option for a --prefix or --constraint the search cannot take."""
    texts = ([("--prefix", args.prefix)] if args.prefix is not None else []) + [
        ("--constraint", c) for c in args.constraint
    ]
    for option, text in texts:
        try:
            ids = encode_target_text(translator, text, option)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if option == "--prefix" and args.max_output_tokens is not None and len(ids) > args.max_output_tokens:
            raise UserError(
                f"--prefix {text!r} is {len(ids)} tokens, more than --max-output-tokens {args.max_output_tokens}; "
                "give a shorter prefix or a larger limit"
            )
    if args.constraint and len(args.constraint) >= args.beam_size:
        raise UserError(
            f"--constraint: {len(args.constraint)} constraints need --beam-size of at least {len(args.constraint) + 1} "
            f"(one more than the constraints), got {args.beam_size}"
        )
    if args.sampling_topk > 1 and args.beam_size > 1:
        raise UserError(f"--sampling-topk {args.sampling_topk} needs --beam-size 1, got {args.beam_size}")


def _search_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The Translator's arguments of the options _add_search_options adds."""
    return {
        "target_prefix": args.prefix,
        "constraints": args.constraint or None,
        "return_attention": bool(args.constraint),
        "sampling_topk": args.sampling_topk,
        "sampling_topp": args.sampling_topp,
        "sampling_temperature": args.sampling_temperature,
        "seed": args.seed,
    }


def run_translate(args: argparse.Namespace) -> int:
    """``transformer-cpp translate``: the input translated a batch at a time, each batch's output
    written (and flushed) before the next is read (see :mod:`.translate_io`)."""
    set_threads(args.threads)
    translator = Translator.from_checkpoint(
        args.model, max_output_tokens=args.max_output_tokens, compute_type=args.compute_type
    )
    _resolve_decoding(args, translator)
    _check_arguments(args)
    _check_search_options(translator, args)
    if args.output is not None:
        _check_output(args.output, Path(translator.checkpoint or args.model), [("the --input file", args.input)])
    console.say(f"translating {translator.src_lang} -> {translator.tgt_lang} with {translator.checkpoint}")
    with contextlib.ExitStack() as stack:
        stack.enter_context(terminate_as_interrupt())
        batches, what = _input_batches(args, stack)
        out = stack.enter_context(atomic_output(args.output))
        bar = progress_bar(args.input)
        if bar is not None:
            stack.callback(bar.close)
        report = _Report(what, bar)
        for batch in batches:
            _translate_batch(translator, batch, args, out, report)
            if bar is not None:
                bar.update(sum(line.size for line in batch))
    return report.finish()


#: evaluate --pairs refuses the file's column order when the model's loss with the two columns
#: swapped is below this share of its loss with them as read.
SWAPPED_LOSS_RATIO = 0.8


def _read_pairs_file(
    path: str, encoding: str, translator: Any, columns: Optional[str]
) -> Tuple[List[str], List[str], List[int]]:
    """The pairs of ``path`` in the model's direction: the columns chosen by the model's languages
    (``columns`` as given, or from the file's name), then checked against the model itself (see
    :data:`SWAPPED_LOSS_RATIO`): columns that look the other way round are refused when they were
    guessed, and warned about when ``--columns`` chose them. Lines that are not valid in
    ``encoding`` are left out and reported by line number, with every other line left out. Also
    returns each pair's line number in the file."""
    record = DataRecord(
        encoding=encoding,
        decode_errors="skip",
        src_lang=translator.src_lang or "en",
        tgt_lang=translator.tgt_lang or "es",
        columns=columns,
    )
    pairs = load_pairs(path, record, console.say, sampling="first")
    sources, references = pairs.sources, pairs.targets
    given, swapped = order_losses(translator, sources, references)
    if swapped < SWAPPED_LOSS_RATIO * given:
        where = (
            f"columns {pairs.columns[0]} and {pairs.columns[1]}"
            if pairs.columns
            else f"'{pairs.source}' and '{pairs.target_file}'"
        )
        problem = (
            f"the pairs of {path} look the other way round for this {record.direction} model: its loss is "
            f"{swapped:.2f} with {where} swapped, {given:.2f} as read"
        )
        if columns is None:
            fix = (
                f"--columns {pairs.columns[1]},{pairs.columns[0]}"
                if pairs.columns
                else "the two files the other way round"
            )
            raise UserError(f"{problem}; pass {fix} (source then target), or --columns with the file's languages")
        console.say(f"{PROG} evaluate: warning: {problem}; scoring them as --columns says")
    return sources, references, pairs.line_numbers


def _check_output(output: str, ckpt_dir: Path, inputs: List[Tuple[str, Optional[str]]]) -> None:
    """Refuse an ``--output`` that cannot be written, or that is one of the command's inputs (the
    pairs, the data file, the checkpoint's files, the run's pointers): the translations are
    written there, and an input is never overwritten."""
    out = Path(output)
    folder = out.parent
    if out.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise UserError(f"--output '{output}' cannot be written (not a file in a writable directory)")
    if not out.exists():
        return
    run = ckpt_dir.parent
    inputs = inputs + [
        ("the run's 'latest' pointer", str(run / LATEST_FILE)),
        ("the run's 'best' pointer", str(run / BEST_FILE)),
    ]
    for label, path in inputs:
        try:
            same = path is not None and os.path.samefile(out, path)
        except OSError:  # no such file: not an input
            same = False
        if same:
            raise UserError(
                f"--output '{output}' is {label} ('{path}'): the translations would overwrite it; choose another --output"
            )
    if out.resolve().parent == ckpt_dir.resolve():
        raise UserError(
            f"--output '{output}' is a file of the checkpoint '{ckpt_dir}': the translations would overwrite it; "
            "choose another --output"
        )


def run_evaluate(args: argparse.Namespace) -> int:
    """``transformer-cpp evaluate``."""
    set_threads(args.threads)
    ckpt_dir, cfg = read_checkpoint_config(args.model, "best")
    check_kind(ckpt_dir, cfg, TRANSLATION_KIND)  # a language model's run: say which commands read it
    record = DataRecord.from_dict(cfg.get("data")) if cfg.get("data") else None
    if args.output is not None:  # before the work, not after it
        data_file = args.data if args.data is not None else (record.path if record is not None else None)
        _check_output(args.output, ckpt_dir, [("the --pairs file", args.pairs), ("the data file", data_file)])
    translator = Translator.from_checkpoint(ckpt_dir, compute_type=args.compute_type)
    _resolve_decoding(args, translator)
    if args.pairs is not None:
        sources, references, lines = _read_pairs_file(args.pairs, args.encoding or "utf-8", translator, args.columns)
        what = f"{args.pairs}"
    else:
        if record is None:
            raise UserError(
                f"checkpoint '{ckpt_dir}' does not record its data split (it was not written by "
                f"'{PROG} train'); score it on a file with --pairs"
            )
        if args.split == "test" and not record.test_fraction:
            raise UserError("the run kept no test split (test fraction 0); use --split valid or --pairs FILE")
        if args.encoding is not None:  # e.g. the data file was converted since
            record = record.replace(encoding=args.encoding)
        if args.columns is not None:
            raise UserError("--columns is for --pairs; the run's split is read with the columns it recorded")
        split, rebuilt = load_split(args.data if args.data is not None else record.path, record, console.say)
        check_same_split(args.split, record, rebuilt)
        sources, references = split[args.split]
        what = f"the {args.split} split"
        lines = []
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    if not sources:
        raise UserError(f"{what} has no sentence pair")
    result = evaluate(
        translator,
        sources,
        references,
        beam_size=args.beam_size,
        length_penalty=args.length_penalty,
        batch_size=args.batch_size,
        tgt_lang=translator.tgt_lang,
    )
    for i, why in result.skipped[:20]:
        where = f"line {lines[i]} of {args.pairs}" if lines else f"pair {i + 1} of the {args.split} split"
        console.say(f"{PROG} evaluate: {where} cannot be scored here, left out: {why}")
    if len(result.skipped) > 20:
        console.say(f"{PROG} evaluate: {len(result.skipped) - 20:,} more pairs cannot be scored here, left out")
    if args.output is not None:  # one line per pair (empty for a pair left out)
        Path(args.output).write_text("".join(h + "\n" for h in result.hypotheses), encoding="utf-8")
    left_out = f" ({len(result.skipped):,} left out: see above)" if result.skipped else ""
    print(f"checkpoint  {ckpt_dir}")
    print(f"languages   {translator.src_lang} -> {translator.tgt_lang}")
    print(
        f"pairs       {what}: {result.sentences} sentence pairs{left_out}, beam size {args.beam_size}"
        + (f", compute type {args.compute_type}" if args.compute_type != "float32" else "")
    )
    print(f"BLEU        {result.bleu:.2f}   ({result.bleu_signature})")
    print(f"chrF        {result.chrf:.2f}   ({result.chrf_signature})")
    if result.sources < result.sentences:
        print(
            f"all refs    BLEU {result.multi_bleu:.2f}  chrF {result.multi_chrf:.2f}   ({result.sources} distinct "
            f"sources, each scored once against all its references)"
        )
    print(f"loss        {result.loss:.4f}")
    print(f"accuracy    {result.accuracy:.4f}")
    if args.output is not None:
        print(f"hypotheses  {args.output}")
    for i in [i for i in range(len(sources)) if i not in dict(result.skipped)][: args.examples]:
        print(f"\n  source     {sources[i]}\n  reference  {result.references[i]}\n  output     {result.hypotheses[i]}")
    return 0


#: The batch size of translate and evaluate: Translator's option.
_BATCH_SIZE = Setting(
    "batch_size",
    64,
    Translator.LIMITS["batch_size"],
    "sentences decoded together (default {default})",
    ("--batch-size",),
)


def _resolve_decoding(args: argparse.Namespace, translator: Any) -> None:
    """The beam options left out take the model's decoding defaults (else the defaults); the
    translator then decodes with them."""
    resolved = resolved_rules(translator.decode_defaults, **{k: getattr(args, k, None) for k in BEAM_RULES})
    try:
        translator.decode_defaults = checked_defaults({**translator.decode_defaults, **resolved}, "translate")
    except (TypeError, ValueError) as exc:
        raise UserError(str(exc).replace("DecodeOptions: ", "")) from None
    args.beam_size, args.length_penalty = resolved["beam_size"], resolved["length_penalty"]


def _add_decoding_options(p: Any, *, max_output_tokens: bool = False) -> None:
    """The decoding options of ``translate`` and ``evaluate``: Translator's (DecodeOptions'
    settings, checked as Translator checks them, and its batch size), threads and compute type;
    the beam options default to the model's decoding defaults."""
    add_settings(p, DecodeOptions, only=list(BEAM_RULES), owner="Translator", unset=True)
    add_option(p, _BATCH_SIZE, "Translator", _BATCH_SIZE.default)
    add_settings(p, TrainConfig, only=["threads"])
    add_settings(
        p,
        DecodeOptions,
        only=["compute_type"] + (["max_output_tokens"] if max_output_tokens else []),
        owner="Translator",
    )
    if max_output_tokens:
        deprecated_alias(p, "--max-length", "--max-output-tokens")


def _add_translate_io_options(p: Any) -> None:
    """translate's ``--input``, ``--output`` and ``--n-best``."""
    p.add_argument(
        "--input",
        type=path_option,
        default=None,
        metavar="FILE",
        help="translate the lines of this file instead of standard input (a progress bar on standard error "
        "when it is a terminal)",
    )
    p.add_argument(
        "--output",
        type=path_option,
        default=None,
        metavar="FILE",
        help="write the translations here instead of standard output; the file appears once every line is "
        "translated (nothing is left behind on an error or Ctrl-C)",
    )
    p.add_argument(
        "--n-best",
        type=count_option("n-best", 1, 1024),
        default=None,
        metavar="N",
        help="write the N best translations of each input, best first, as 'INDEX ||| translation ||| score' "
        "(INDEX: the 0-based input line; score: beam search's length-normalised log-probability); "
        "needs --beam-size N or more (and at least 2)",
    )


_TRANSLATE_DESCRIPTION = (
    "Translate the sentences given as arguments, or one per line from "
    "standard input or --input FILE; prints one translation per line (or, with --n-best N, the N best "
    "as 'INDEX ||| translation ||| score', INDEX the 0-based input line). Standard input is translated "
    "as it arrives: each line's translation is printed before the next line is read, and lines "
    "that arrive together are translated together. The model translates from the source "
    "language into the target language it was trained for (train --source-lang/--target-lang, "
    "recorded in its checkpoints; said on standard error)."
)


def _add_translate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sentences", nargs="*", help="sentences to translate (default: read standard input)")
    add_model_option(p)
    _add_translate_io_options(p)
    _add_decoding_options(p, max_output_tokens=True)
    _add_search_options(p)


def add_translate_parser(sub: Any) -> None:
    """``transformer-cpp translate``."""
    what = "translate sentences with a trained model"
    add_command(sub, "translate", what, _TRANSLATE_DESCRIPTION, _add_translate_arguments, run_translate)


_EVALUATE_DESCRIPTION = (
    "Score the model (the run's best checkpoint) with sacrebleu: on a file of "
    "sentence pairs (--pairs), or on the run's own test (or validation) split, rebuilt from the "
    "checkpoint's record. The model translates from the source language into the target "
    "language recorded when it was trained; the output names them."
)


def _add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pairs",
        type=path_option,
        default=None,
        metavar="FILE",
        help="score on this pairs file instead of the run's split: a tab-separated file or two aligned files "
        "'SOURCE_FILE,TARGET_FILE'. Its source column is the model's source language: a Tatoeba file "
        "(spa.txt) is English first, another file source<TAB>target unless --columns says otherwise; a "
        "file whose columns look the other way round for the model is refused",
    )
    p.add_argument(
        "--columns",
        type=as_type(columns_option),
        default=None,
        metavar="COLS",
        help="the columns of --pairs: the languages of its columns in order (en,es: the model's languages "
        "pick), or two column numbers, source then target (2,1)",
    )
    p.add_argument(
        "--output",
        type=path_option,
        default=None,
        metavar="FILE",
        help="write the translations here, one per line (never over an input: the pairs, the data file, the checkpoint)",
    )
    add_model_option(p)
    p.add_argument(
        "--data", type=path_option, default=None, help="the data file (default: the one the run was trained on)"
    )
    p.add_argument("--split", choices=("test", "valid"), default="test", help="which held-out pairs (default test)")
    p.add_argument(
        "--encoding",
        type=as_type(lambda text: check_encoding(text, "--encoding")),
        default=None,
        help="text encoding of --pairs (default utf-8) or --data (default: the run's); lines of --pairs "
        "not valid in it are left out and reported by line number",
    )
    p.add_argument(
        "--limit", type=count_option("limit", 0), default=0, help="score only the first N pairs (default all)"
    )
    _add_decoding_options(p)
    p.add_argument(
        "--examples", type=count_option("examples", 0), default=0, help="also print the first N translations"
    )


def add_evaluate_parser(sub: Any) -> None:
    """``transformer-cpp evaluate``."""
    what = "BLEU, chrF, loss and accuracy on held-out pairs or a pairs file"
    add_command(sub, "evaluate", what, _EVALUATE_DESCRIPTION, _add_evaluate_arguments, run_evaluate)
