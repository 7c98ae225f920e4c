"""The HTTP boundary of the server: uvicorn's parser and loop (:func:`uvicorn_choices`), the
``Host`` check (:func:`host_refusal`) and the app's outermost layer that answers every failure as
JSON (:class:`Boundary`), and :func:`guarded_protocol`, which bounds how long a client may take
to send a request, how large its headers may be and how many connections may be open."""

from __future__ import annotations

import asyncio
import functools
import http
import importlib
import ipaddress
import json
import logging
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .config import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_HEADER_BYTES, ClientGone, ServeConfig

__all__ = ["Boundary", "guarded_protocol", "host_refusal", "uvicorn_choices"]

# uvicorn's logger: its lines look like uvicorn's own and follow --log-level
_log = logging.getLogger("uvicorn.error")


def uvicorn_choices() -> Dict[str, str]:
    """uvicorn's ``http`` and ``loop`` settings: ``httptools`` (a C HTTP parser) and ``uvloop``
    when they can be imported (the ``serve`` extra installs both), else the pure-Python ``h11``
    and asyncio's own loop. Chosen here rather than left to uvicorn's ``auto`` so that the
    command line can say what it runs and the bench can record it."""

    def importable(name: str) -> bool:
        try:
            importlib.import_module(name)
        except Exception:  # ImportError, or a broken build of the module
            return False
        return True

    return {
        "http": "httptools" if importable("httptools") else "h11",
        "loop": "uvloop" if importable("uvloop") else "asyncio",
    }


# ------------------------------------------------------------------------------------ the boundary


def _host_name(header: str) -> str:
    """The host of a ``Host`` header, lower case, without its port and final dot."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8000
        end = value.find("]")
        name = value[: end + 1] if end > 0 else value
    else:
        name = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
    return name.rstrip(".")


def _is_loopback(name: str) -> bool:
    """Whether a host name or address (``[::1]`` bracketed or not) names this machine."""
    if name == "localhost":
        return True
    address = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(
        p == "*" or p == name or (p.startswith("*.") and (name == p[2:] or name.endswith(p[1:]))) for p in patterns
    )


def host_refusal(scope: Dict[str, Any], allowed_hosts: Optional[Tuple[str, ...]]) -> Optional[str]:
    """Why a request's ``Host`` header is refused, or ``None`` when it is accepted.

    With ``allowed_hosts=None`` the check applies when the connection arrived on a loopback
    address (``scope["server"]``): only ``localhost`` and loopback addresses are accepted, so that
    a web page whose own domain name resolves to 127.0.0.1 (DNS rebinding) cannot call the server.
    With ``allowed_hosts``, those names are accepted besides the loopback ones, on any address
    (``"*"``: any name)."""
    if allowed_hosts is None:
        server = scope.get("server")
        if not server or not isinstance(server[0], str) or not _is_loopback(server[0]):
            return None
        patterns: Tuple[str, ...] = ()
    elif "*" in allowed_hosts:
        return None
    else:
        patterns = allowed_hosts
    values = [v for k, v in scope.get("headers", ()) if k == b"host"]
    accepted = "localhost, 127.0.0.1 or [::1]" + (f" or {', '.join(patterns)}" if patterns else "")
    hint = f"this server answers requests for {accepted} (allowed_hosts; --allowed-hosts on the command line)"
    if len(values) != 1:
        return f"the request has {'no' if not values else 'several'} Host header{'s' if values else ''}; {hint}"
    header = values[0].decode("latin-1")
    name = _host_name(header)
    if _is_loopback(name) or _matches(name, patterns):
        return None
    return f"the Host header {header[:100]!r} is not a name of this server; {hint}"


async def _send_json(
    send: Callable[..., Any], status: int, message: str, headers: Sequence[Tuple[str, str]] = ()
) -> None:
    body = json.dumps({"error": message, "status": status}).encode("utf-8")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii"))]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _who(scope: Dict[str, Any]) -> str:
    client = scope.get("client")
    where = f"{client[0]}:{client[1]}" if client else "a client"
    return f"{where} - {scope.get('method', '')} {scope.get('path', '')}"


class Boundary:
    """The app's outermost layer of its own (inside Starlette's error middleware): the ``Host``
    check (:func:`host_refusal`), and everything a request can raise answered as JSON with one
    log line, never a traceback. A client that left is logged (``disconnected``); a request
    cancelled by the server's shutdown gets 503; anything else, an ``Exception`` or not (the
    ``tokenizers`` library panics with a ``BaseException``), gets 500."""

    def __init__(self, app: Any, allowed_hosts: Optional[Tuple[str, ...]] = None) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = host_refusal(scope, self.allowed_hosts)
        if refused is not None:
            _log.warning("%s: refused: %s", _who(scope), refused)
            await _send_json(send, 400, refused)
            return
        started = False

        async def tracked(message: Dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()  # the answer below is this task's last work
            _log.info("%s: cancelled: the server is shutting down", _who(scope))
            if not started:
                await _send_json(
                    send, 503, "the server shut down before answering this request", [("Retry-After", "1")]
                )
        except ClientGone as exc:
            _log.info("%s: %s", _who(scope), exc)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            if type(exc).__name__ == "ClientDisconnect":  # Starlette's, raised while reading a body
                _log.info("%s: the client disconnected while sending its request", _who(scope))
                return
            message = " ".join(f"{type(exc).__name__}: {exc}".split())[:1000]
            _log.error("%s: internal error: %s", _who(scope), message)
            _log.debug("the internal error's traceback", exc_info=exc)
            if not started:
                await _send_json(send, 500, f"internal error: {message}")


# ------------------------------------------------------------------------------------ HTTP layer


def _raw_json_response(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 response with a JSON error body, for the protocol to write itself."""
    body = json.dumps({"error": message, "status": status}).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class _Guards:
    """The guards of :func:`guarded_protocol`, mixed into uvicorn's protocol class; the settings
    are class attributes of the class it makes."""

    read_timeout: float
    max_connections: int
    max_header_bytes: int

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._deadline: Optional[asyncio.TimerHandle] = None
        self._partial = 0  # bytes of request line and headers received so far
        over_capacity = len(getattr(self, "connections")) > self.max_connections
        if over_capacity:
            _log.warning("%s: over %d connections open (max_connections)", self._peer(), self.max_connections)
        inner: Any = getattr(self, "app")  # uvicorn's app, set by the base class
        self.app = functools.partial(self._guard, inner, over_capacity)
        self._arm()

    def _too_large(self) -> Tuple[int, str]:
        return 431, f"the request line and headers are over {self.max_header_bytes:,} bytes (max_header_bytes)"

    async def _guard(self, inner: Any, over_capacity: bool, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        """The app behind a connection: 503 over the connection cap, 431 for headers over the
        limit (they arrived whole in one read), else ``inner``."""
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        size += sum(len(k) + len(v) + 4 for k, v in scope.get("headers", ()))
        refusal: Optional[Tuple[int, str]] = None
        if over_capacity:
            refusal = (
                503,
                f"the server has {self.max_connections} connections open, the most it keeps (max_connections); "
                "retry later",
            )
        elif size > self.max_header_bytes:
            refusal = self._too_large()
        if refusal is None:
            await inner(scope, receive, send)
            return
        _log.info("%s: %s", _who(scope), refusal[1])
        headers = [("Connection", "close")] + ([("Retry-After", "1")] if refusal[0] == 503 else [])
        await _send_json(send, refusal[0], refusal[1], headers)

    def _peer(self) -> str:
        client = getattr(self, "client", None)
        return f"{client[0]}:{client[1]}" if client else "a client"

    def _between_requests(self) -> bool:
        cycle = getattr(self, "cycle", None)
        return cycle is None or bool(cycle.response_complete)

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = getattr(self, "loop").call_later(self.read_timeout, self._expired)

    def data_received(self, data: bytes) -> None:
        if self._between_requests() and self._partial == 0:
            self._arm()  # the first bytes of a request: its clock starts
        super().data_received(data)  # type: ignore[misc]
        if getattr(self, "transport").is_closing():
            return
        if self._between_requests():
            self._partial += len(data)
            if self._partial > self.max_header_bytes:
                self._refuse(*self._too_large())
        else:
            self._partial = 0

    def _expired(self) -> None:
        self._deadline = None
        transport = getattr(self, "transport", None)
        if transport is None or transport.is_closing():
            return
        cycle = getattr(self, "cycle", None)
        if self._between_requests():
            if cycle is None or self._partial:
                self._refuse(408, f"the request did not arrive within {self.read_timeout:g} seconds (read_timeout)")
            # else an idle keep-alive connection, which uvicorn closes after timeout_keep_alive
        elif cycle is not None and cycle.more_body:  # the body is still coming: the app times it out; else cut it off
            self._deadline = getattr(self, "loop").call_later(self.read_timeout, self._cut)

    def _cut(self) -> None:
        self._deadline = None
        cycle = getattr(self, "cycle", None)
        transport = getattr(self, "transport")
        if cycle is not None and cycle.more_body and not cycle.response_complete and not transport.is_closing():
            _log.info("%s: connection closed: its request body did not arrive in time (read_timeout)", self._peer())
            transport.close()

    def _refuse(self, status: int, message: str) -> None:
        _log.info("%s: %s", self._peer(), message)
        transport = getattr(self, "transport")
        transport.write(_raw_json_response(status, message))
        transport.close()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        deadline = getattr(self, "_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)  # type: ignore[misc]


def guarded_protocol(
    http_protocol: Any = None,
    *,
    read_timeout: float = ServeConfig.read_timeout,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> type:
    """uvicorn's HTTP protocol ``http_protocol`` (``"httptools"``, ``"h11"`` or a protocol class;
    default: :func:`uvicorn_choices`'s) with three guards uvicorn lacks, as a class for
    ``uvicorn.Config(http=...)``:

    * a client has ``read_timeout`` seconds from its request's first byte (or from connecting)
      to send the request line and headers, else it gets 408 and the connection is closed; its
      body has as long again (the app answers 408 when it reads a body that does not arrive in
      time, see :func:`~transformer_cpp.serve.read_json_body`; a body nobody reads is cut off);
    * request line and headers over ``max_header_bytes`` get 431 and the connection is closed;
    * a connection beyond ``max_connections`` open ones gets 503 to its request and is closed.

    Idle keep-alive connections are uvicorn's (``timeout_keep_alive``). The errors are JSON, as
    the app's are.
    """
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    if http_protocol is None:
        http_protocol = uvicorn_choices()["http"]
    base = import_from_string(HTTP_PROTOCOLS[http_protocol]) if isinstance(http_protocol, str) else http_protocol
    name = f"Guarded{base.__name__}"
    settings = dict(read_timeout=read_timeout, max_connections=max_connections, max_header_bytes=max_header_bytes)
    cls = type(name, (_Guards, base), dict(settings, __qualname__=name, __module__=__name__))
    return cls
