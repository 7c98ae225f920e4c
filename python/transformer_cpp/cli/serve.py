"""``transformer-cpp serve`` and ``python -m transformer_cpp.serve``: the options (generated from
:class:`~transformer_cpp.serve.ServeConfig`, :class:`~transformer_cpp.serve.ServerOptions` and the
decoding settings), the :class:`~transformer_cpp.serve.ServeConfig` they make, and the command that
loads a checkpoint once and serves it until SIGTERM."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Tuple

from .._runtime import set_num_threads
from ..config import settings_of
from ..serve import SERVE_EXTRA_HINT, ServeConfig, ServerOptions, serve, uvicorn_choices
from ..training import TrainConfig
from ..translate import DecodeOptions, Translator
from .common import add_command, standalone
from .options import add_settings, deprecated_alias, given, path_option

__all__ = ["add_serve_parser", "config_from_args", "main", "run_from_args"]

_DESCRIPTION = (
    "Serve a trained model over HTTP (FastAPI on uvicorn): POST /translate (JSON), GET /health, "
    "GET /info, the LibreTranslate API (/translate, /languages, /detect), a web page at / with the "
    "cross-attention map, the OpenAPI schema at /docs. Repeat --model to serve several language pairs. "
    "Concurrent requests are batched into one decode call, a small request never waiting behind a large "
    "one for more than one decode call. Requests are bounded in bytes, texts, characters, tokens and "
    "attention weights; clients in time and connections. SIGTERM finishes the requests in flight "
    '(--graceful-timeout), then exits 0. Needs the serve extra: pip install "transformer-cpp[serve]".'
)
_BATCHING = ("max_batch", "max_wait_ms", "max_batch_tokens", "batch_seconds", "beam_size", "length_penalty")
_LIMITS = [n for n in settings_of(ServeConfig) if n not in _BATCHING + ("read_timeout", "allowed_hosts")]


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        type=path_option,
        action="append",
        required=True,
        help="run directory (its best checkpoint by validation BLEU, its latest if it has none) or checkpoint "
        "directory; repeat to serve several language pairs, one model each",
    )
    add_settings(p, ServerOptions, only=["host", "port"])
    add_settings(p, TrainConfig, only=["threads"])
    g = p.add_argument_group("batching and decoding")
    add_settings(g, ServeConfig, only=_BATCHING)
    add_settings(g, DecodeOptions, only=["max_output_tokens"], owner="Translator")
    deprecated_alias(g, "--max-length", "--max-output-tokens")
    add_settings(g, DecodeOptions, only=["compute_type"])
    g = p.add_argument_group("limits (a request over one gets a 4xx JSON error; a full queue 503)")
    add_settings(g, ServeConfig, only=_LIMITS, unset={"max_beam_size"})  # None: 8, or --beam-size if larger
    g = p.add_argument_group("server")
    add_settings(g, ServerOptions, only=["graceful_timeout"])
    add_settings(g, ServeConfig, only=["read_timeout"])
    add_settings(g, ServerOptions, only=["keep_alive_timeout", "max_connections", "max_header_bytes"])
    add_settings(g, ServeConfig, only=["allowed_hosts"])
    add_settings(g, ServerOptions, only=["log_level", "access_log"])


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    """The :class:`ServeConfig` of parsed ``serve`` options."""
    settings = given(args, ServeConfig)
    if args.max_beam_size is None:
        settings["max_beam_size"] = max(ServeConfig.max_beam_size, args.beam_size)
    return ServeConfig(**settings)


def run_from_args(args: argparse.Namespace) -> int:
    """``transformer-cpp serve``: load the checkpoint once and serve it until SIGTERM."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        print(f"transformer-cpp serve: error: {SERVE_EXTRA_HINT} ({exc})", file=sys.stderr)
        return 1
    config = config_from_args(args)
    if args.threads is not None:
        set_num_threads(args.threads)
    translators = [
        Translator.from_checkpoint(m, max_output_tokens=args.max_output_tokens, compute_type=args.compute_type)
        for m in args.model
    ]
    pairs: Dict[Tuple[Optional[str], Optional[str]], Any] = {}
    for t in translators:
        key = (t.src_lang, t.tgt_lang)
        if key in pairs:
            print(
                f"transformer-cpp serve: error: --model {pairs[key]} and --model {t.checkpoint} both translate "
                f"{key[0]} to {key[1]}; serve one model per language pair",
                file=sys.stderr,
            )
            return 2
        pairs[key] = t.checkpoint
    where = f"http://{'[' + args.host + ']' if ':' in args.host else args.host}:{args.port}"
    stack = uvicorn_choices()
    print(
        f"transformer-cpp serve: {', '.join(f'{t.checkpoint} ({t.src_lang}-{t.tgt_lang})' for t in translators)} on {where}/ (page), POST /translate, GET /health, "
        f"/info, /docs; batches of up to {config.max_batch} sentences, waiting up to {config.max_wait_ms:g} ms; "
        f"uvicorn with {stack['http']} and {stack['loop']}",
        file=sys.stderr,
        flush=True,
    )
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"transformer-cpp serve: warning: listening on {args.host}, reachable from other machines; the "
            "server has no authentication"
            + ("" if args.allowed_hosts else " and accepts any Host header there (see --allowed-hosts)"),
            file=sys.stderr,
            flush=True,
        )
    return serve(translators, config=config, **asdict(ServerOptions(**given(args, ServerOptions))))


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve`` subcommand on an ``argparse`` subparsers object; sets ``func``."""
    what = "serve a trained model over HTTP (API, batching, web page)"
    return add_command(subparsers, "serve", what, _DESCRIPTION, _add_arguments, run_from_args)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m transformer_cpp.serve --model DIR [options]`` (the options of ``transformer-cpp serve``)."""
    return standalone("transformer_cpp.serve", _DESCRIPTION, _add_arguments, run_from_args, argv)
