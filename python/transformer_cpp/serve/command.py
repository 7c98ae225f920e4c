"""``transformer-cpp serve`` and ``python -m transformer_cpp.serve``: the options, the
:class:`~transformer_cpp.serve.ServeConfig` they make, and the command that loads a checkpoint
once and serves it until SIGTERM."""

from __future__ import annotations

import argparse
import sys
from typing import Any, List, Optional, Tuple

from .._runtime import set_num_threads
from ..options import (
    add_compute_type_option,
    checked,
    count_option,
    deprecated_alias,
    limits_of,
    non_negative_number,
    path_option,
    setting,
    threads_option,
)
from ..translate import DecodeOptions, Translator
from .app import (
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_BYTES,
    serve,
    uvicorn_choices,
)
from .config import SERVE_EXTRA_HINT, ServeConfig, host_patterns

__all__ = ["add_serve_parser", "config_from_args", "main", "run_from_args"]

_DESCRIPTION = (
    "Serve a trained model over HTTP (FastAPI on uvicorn): POST /translate (JSON), GET /health, "
    "GET /info, a web page at / with the cross-attention map, the OpenAPI schema at /docs. "
    "Concurrent requests are batched into one decode call, a small request never waiting behind a large "
    "one for more than one decode call. Requests are bounded in bytes, texts, characters, tokens and "
    "attention weights; clients in time and connections. SIGTERM finishes the requests in flight "
    '(--graceful-timeout), then exits 0. Needs the serve extra: pip install "transformer-cpp[serve]".'
)


def _host_list(text: str) -> Tuple[str, ...]:
    """An argparse type: comma-separated host names (``example.org,*.example.org`` or ``*``)."""
    try:
        return host_patterns([h for h in text.split(",") if h.strip()] or [text])
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("ServeConfig: allowed_hosts", "--allowed-hosts")) from None


def _positive_seconds(text: str) -> float:
    """An argparse type for a number of seconds > 0."""
    value = non_negative_number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text}")
    return value


def _add_arguments(p: argparse.ArgumentParser) -> None:
    d = ServeConfig()
    p.add_argument(
        "--model",
        type=path_option,
        required=True,
        help="run directory (its best checkpoint by validation BLEU, its latest if it has none) or checkpoint directory",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument(
        "--port", type=count_option("port", 0, 65535), default=8000, help="port (default 8000; 0 = any free port)"
    )
    p.add_argument(
        "--threads",
        type=threads_option(),
        default=None,
        help=f"C++ threads (default: all cores; {limits_of('TrainConfig')['threads'].describe()})",
    )
    g = p.add_argument_group("batching and decoding")
    g.add_argument(
        "--max-batch",
        type=count_option("max_batch", 1),
        default=d.max_batch,
        help=f"most sentences per decode call (default {d.max_batch}; 1 = one at a time)",
    )
    g.add_argument(
        "--max-wait-ms",
        type=non_negative_number,
        default=d.max_wait_ms,
        help=f"how long a batch waits to fill after its first sentence (default {d.max_wait_ms:g} ms)",
    )
    g.add_argument(
        "--max-batch-tokens",
        type=count_option("max_batch_tokens", 1),
        default=d.max_batch_tokens,
        help=f"most decoding work per decode call, in tokens: beam size x (source + most output tokens) summed "
        f"over its sentences (default {d.max_batch_tokens:,}); a decode call cannot be interrupted, so this "
        "bounds how long a request waits behind a large one (a larger sentence is decoded alone)",
    )
    g.add_argument(
        "--batch-seconds",
        type=non_negative_number,
        default=d.batch_seconds,
        help=f"how long one decode call should take (default {d.batch_seconds:g} s): batches hold at most the "
        "work the last ones decoded in that time, so a request waits about that long behind a large one "
        "on a slow or busy machine too (0 = by --max-batch-tokens alone)",
    )
    g.add_argument(
        "--beam-size",
        type=setting("Translator", "beam_size"),
        default=d.beam_size,
        help=f"beam size of requests that do not give one (default {d.beam_size} = greedy)",
    )
    g.add_argument(
        "--length-penalty",
        type=setting("Translator", "length_penalty"),
        default=d.length_penalty,
        help=f"beam search length-penalty exponent (default {d.length_penalty})",
    )
    g.add_argument(
        "--max-output-tokens",
        type=setting("Translator", "max_output_tokens"),
        default=None,
        help="most tokens to generate per sentence (default: 1.5 x its source tokens + 10; "
        + limits_of("Translator")["max_output_tokens"].describe()
        + ")",
    )
    deprecated_alias(g, "--max-length", "--max-output-tokens")
    add_compute_type_option(g)
    g = p.add_argument_group("limits (a request over one gets a 4xx JSON error; a full queue 503)")
    g.add_argument(
        "--max-beam-size",
        type=checked(DecodeOptions.LIMITS["beam_size"], "ServeConfig", "max_beam_size"),
        default=None,
        help=f"largest beam size (and n_best) a request may ask for (default {d.max_beam_size}, "
        f"or --beam-size if larger; {DecodeOptions.LIMITS['beam_size'].describe()})",
    )
    g.add_argument(
        "--max-request-bytes",
        type=count_option("max_request_bytes", 1),
        default=d.max_request_bytes,
        help=f"largest request body (default {d.max_request_bytes:,})",
    )
    g.add_argument(
        "--max-texts",
        type=count_option("max_texts", 1),
        default=d.max_texts,
        help=f"most texts per request (default {d.max_texts})",
    )
    g.add_argument(
        "--max-chars",
        type=count_option("max_chars", 1),
        default=d.max_chars,
        help=f"most characters per text (default {d.max_chars:,})",
    )
    g.add_argument(
        "--max-queue",
        type=count_option("max_queue", 1),
        default=d.max_queue,
        help=f"most sentences waiting for a decode (default {d.max_queue:,})",
    )
    g.add_argument(
        "--max-source-tokens",
        type=count_option("max_source_tokens", 1),
        default=d.max_source_tokens,
        help=f"most tokens per text once encoded (default {d.max_source_tokens:,}; an emoji is up to 4 tokens)",
    )
    g.add_argument(
        "--max-request-tokens",
        type=count_option("max_request_tokens", 1),
        default=d.max_request_tokens,
        help="most decoding work per request, in tokens: beam size x (source tokens + most output tokens, "
        f"1.5 x source + 10 or --max-output-tokens) summed over its texts (default {d.max_request_tokens:,})",
    )
    g.add_argument(
        "--max-attention-weights",
        type=count_option("max_attention_weights", 1),
        default=d.max_attention_weights,
        help="most attention weights per answer with return_attention: source tokens x most output tokens "
        f"summed over its texts (default {d.max_attention_weights:,}, a few megabytes of JSON)",
    )
    g = p.add_argument_group("server")
    g.add_argument(
        "--graceful-timeout",
        type=non_negative_number,
        default=30.0,
        help="on SIGTERM, wait this many seconds for the requests in flight (default 30; 0 = no wait); "
        "requests still unanswered then get 503",
    )
    g.add_argument(
        "--read-timeout",
        type=_positive_seconds,
        default=d.read_timeout,
        help=f"seconds a client has to send its request line and headers, and as long for its body "
        f"(default {d.read_timeout:g}); a slower client gets 408 and is disconnected",
    )
    g.add_argument(
        "--keep-alive-timeout",
        type=_positive_seconds,
        default=DEFAULT_KEEP_ALIVE_TIMEOUT,
        help=f"seconds an idle keep-alive connection stays open (default {DEFAULT_KEEP_ALIVE_TIMEOUT:g})",
    )
    g.add_argument(
        "--max-connections",
        type=count_option("max_connections", 1),
        default=DEFAULT_MAX_CONNECTIONS,
        help=f"most connections open at once (default {DEFAULT_MAX_CONNECTIONS}); a connection over it gets 503",
    )
    g.add_argument(
        "--max-header-bytes",
        type=count_option("max_header_bytes", 256),
        default=DEFAULT_MAX_HEADER_BYTES,
        help=f"largest request line and headers (default {DEFAULT_MAX_HEADER_BYTES:,} bytes); larger get 431",
    )
    g.add_argument(
        "--allowed-hosts",
        type=_host_list,
        default=None,
        metavar="NAMES",
        help="comma-separated names accepted in the Host header besides localhost and loopback addresses "
        "(*.example.org: a domain and its subdomains; *: any). By default, requests that arrive on a loopback "
        "address must name localhost, 127.0.0.1 or [::1], so that a web page cannot reach the server by "
        "pointing its own domain at 127.0.0.1 (DNS rebinding); on other addresses any name is accepted",
    )
    g.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        default="info",
        help="uvicorn's log level (default info)",
    )
    g.add_argument("--access-log", action="store_true", help="log every request")


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    """The :class:`ServeConfig` of parsed ``serve`` options."""
    max_beam = args.max_beam_size if args.max_beam_size is not None else max(ServeConfig.max_beam_size, args.beam_size)
    return ServeConfig(
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        beam_size=args.beam_size,
        max_beam_size=max_beam,
        length_penalty=args.length_penalty,
        max_request_bytes=args.max_request_bytes,
        max_texts=args.max_texts,
        max_chars=args.max_chars,
        max_queue=args.max_queue,
        max_source_tokens=args.max_source_tokens,
        max_request_tokens=args.max_request_tokens,
        max_attention_weights=args.max_attention_weights,
        max_batch_tokens=args.max_batch_tokens,
        batch_seconds=args.batch_seconds,
        read_timeout=args.read_timeout,
        allowed_hosts=args.allowed_hosts,
    )


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
    translator = Translator.from_checkpoint(
        args.model, max_output_tokens=args.max_output_tokens, compute_type=args.compute_type
    )
    where = f"http://{'[' + args.host + ']' if ':' in args.host else args.host}:{args.port}"
    stack = uvicorn_choices()
    print(
        f"transformer-cpp serve: {translator.checkpoint} on {where}/ (page), POST /translate, GET /health, "
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
    return serve(
        translator,
        host=args.host,
        port=args.port,
        config=config,
        graceful_timeout=args.graceful_timeout,
        log_level=args.log_level,
        access_log=args.access_log,
        max_connections=args.max_connections,
        keep_alive_timeout=args.keep_alive_timeout,
        max_header_bytes=args.max_header_bytes,
    )


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve`` subcommand on an ``argparse`` subparsers object; sets ``func``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="serve a trained model over HTTP (API, batching, web page)", description=_DESCRIPTION
    )
    _add_arguments(p)
    p.set_defaults(func=run_from_args)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m transformer_cpp.serve --model DIR [options]`` (the options of ``transformer-cpp serve``)."""
    parser = argparse.ArgumentParser(prog="python -m transformer_cpp.serve", description=_DESCRIPTION)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except (OSError, ValueError) as exc:
        print(f"transformer-cpp serve: error: {exc}", file=sys.stderr)
        return 1
