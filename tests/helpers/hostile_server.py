"""A hostile HTTP server on 127.0.0.1 (a thread) for the download cases: each route is a body and
a way of sending it (whole, a byte at a time, announced far larger than it is, chunked without
end, chunked and cut short). ``url(route)`` is the base URL to give ``TRANSFORMER_CPP_TATOEBA_URL``.
"""

from __future__ import annotations

import http.server
import io
import threading
import time
import zipfile
from typing import Dict, List, Tuple

PAIRS = [f"The cat number {i}.\tEl gato número {i}.\tCC-BY 2.0 (France) #{i}" for i in range(12)]

#: How a route sends its body.
MODES = ("whole", "trickle", "huge", "endless", "cut")


def zip_bytes(members: Dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as z:
        for name, payload in members.items():
            z.writestr(name, payload)
    return buf.getvalue()


def good_zip() -> bytes:
    """A spa-eng.zip as manythings.org lays it out."""
    return zip_bytes({"_about.txt": b"Tatoeba, CC-BY 2.0 FR.\n", "spa.txt": ("\n".join(PAIRS) + "\n").encode()})


def bad_crc_zip() -> bytes:
    """A spa-eng.zip whose spa.txt is stored with one byte changed after its CRC was computed."""
    body = good_zip()
    at = body.index("El gato número 3".encode())
    return body[:at] + b"X" + body[at + 1 :]


class HostileServer:
    """Serves ``routes[name] = (body, mode)`` at ``/<name>/spa-eng.zip`` (any file name)."""

    def __init__(self, routes: Dict[str, Tuple[bytes, str]], trickle_pause: float = 0.2) -> None:
        self.routes = routes
        self.requests: List[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (the library's name)
                route = self.path.strip("/").split("/")[0]
                server.requests.append(route)
                if route not in server.routes:
                    self.send_error(404)
                    return
                body, mode = server.routes[route]
                try:
                    server.send(self, body, mode, trickle_pause)
                except OSError:
                    pass  # the client gave up, as it should
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def send(h: http.server.BaseHTTPRequestHandler, body: bytes, mode: str, pause: float) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/zip")
        if mode in ("endless", "cut"):
            h.send_header("Transfer-Encoding", "chunked")
        else:
            h.send_header("Content-Length", str(50 * 10**9 if mode == "huge" else len(body)))
        h.end_headers()
        if mode == "whole":
            h.wfile.write(body)
        elif mode == "trickle":
            for i in range(len(body)):
                h.wfile.write(body[i : i + 1])
                h.wfile.flush()
                time.sleep(pause)
        elif mode == "huge":
            h.wfile.write(body)
            h.wfile.flush()
            time.sleep(5)
        elif mode == "endless":
            block = b"%x\r\n" % (1 << 16) + bytes(1 << 16) + b"\r\n"
            for _ in range(1 << 16):
                h.wfile.write(block)
        else:  # cut: half the body in one chunk announced whole, then the connection closes
            h.wfile.write(b"%x\r\n" % len(body) + body[: len(body) // 2])
        h.wfile.flush()

    def url(self, route: str) -> str:
        return self.base + route + "/"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
