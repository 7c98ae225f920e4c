"""The Tatoeba download and its cache, against a hostile HTTP server on 127.0.0.1: damaged, wrong
and oversized archives, slow and endless servers; and local archives and files that are damaged,
bombs, or named wrongly."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import zipfile
from collections import namedtuple
from typing import Any, Dict, Iterator, Tuple

import transformer_cpp as tc
from transformer_cpp import data as td
from transformer_cpp.data import download as tdl

from ..hostile_server import PAIRS, HostileServer, bad_crc_zip, good_zip, zip_bytes
from .base import api


@contextlib.contextmanager
def _served(c, routes: Dict[str, Tuple[bytes, str]], route: str) -> Iterator[HostileServer]:
    """The server, with ``TRANSFORMER_CPP_TATOEBA_URL`` pointing at ``route`` and a fresh cache."""
    server = HostileServer({"good": (good_zip(), "whole"), **routes})
    os.environ[td.TATOEBA_URL_ENV_VAR] = server.url(route)
    os.environ[td.CACHE_ENV_VAR] = str(c.work / "cache")
    try:
        yield server
    finally:
        server.close()


def _refused(c, route: str, body: bytes, mode: str = "whole", **kw: Any) -> None:
    """Download ``route`` (with ``kw`` for download_tatoeba): it must fail within 2 s leaving
    nothing in the cache but no ``.part`` file; then a good server fills the cache. Re-raises the
    refusal for the table to judge."""
    cache = c.work / "cache"
    with _served(c, {route: (body, mode)}, route) as server:
        start = time.monotonic()
        try:
            td.download_tatoeba(**kw) if kw else tc.read_pairs("tatoeba:spa-eng")
        except OSError:
            took = time.monotonic() - start
            assert took < 2.5, f"the refusal took {took:.1f} s"
            left = sorted(p.name for p in cache.rglob("*") if p.is_file())
            assert left == [], f"the refused download left {left}"
            os.environ[td.TATOEBA_URL_ENV_VAR] = server.url("good")
            assert len(tc.read_pairs("tatoeba:spa-eng")) == 12
            raise
        raise AssertionError("the download was accepted")


@api("download: a pairs member whose CRC is wrong", expect="error", match=("spa-eng.zip", "CRC"), timeout=30)
def _(c):
    _refused(c, "crc", bad_crc_zip())


@api("download: an HTML page saved as spa.txt", expect="error", match=("no tab", "sentence pairs"), timeout=30)
def _(c):
    _refused(c, "html", zip_bytes({"spa.txt": b"<!DOCTYPE html>\n<html><body>Blocked</body></html>\n"}))


@api("download: an archive holding fra.txt for spa-eng", expect="error", match=("spa.txt", "fra.txt"), timeout=30)
def _(c):
    _refused(c, "fra", zip_bytes({"fra.txt": ("\n".join(PAIRS) + "\n").encode()}))


@api(
    "download: an archive whose member expands a thousandfold",
    expect="error",
    match=("compressed", "to 1 is allowed"),
    timeout=60,
)
def _(c):
    buf = bytes(1 << 20)
    path = c.work / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z, z.open("spa.txt", "w") as f:
        f.write(b"a\tb\n")
        for _ in range(100):
            f.write(buf)
    _refused(c, "bomb", path.read_bytes())


@api("download: an archive announced as 50 GB", expect="error", match=("announces", "at most"), timeout=30)
def _(c):
    _refused(c, "huge", good_zip(), "huge")


@api("download: a chunked body without end", expect="error", match=("passed", "most allowed"), timeout=30)
def _(c):
    _refused(c, "endless", b"", "endless", max_bytes=4 << 20)


@api("download: a chunked body cut short", expect="error", match=("spa-eng.zip", "IncompleteRead"), timeout=30)
def _(c):
    _refused(c, "cut", good_zip(), "cut")


@api("download: a byte at a time", expect="error", match=("bytes/s", "allowed"), timeout=30)
def _(c):
    tdl.RATE_WINDOW = 0.5
    _refused(c, "trickle", good_zip(), "trickle", min_rate=1000.0)


@api("download: steady but past the deadline", expect="error", match=("deadline",), timeout=30)
def _(c):
    _refused(c, "trickle", good_zip(), "trickle", deadline=1.0, min_rate=0.0)


@api("download: less free space than the archive", expect="error", match=("free", "needs"), timeout=30)
def _(c):
    real = shutil.disk_usage
    usage = namedtuple("usage", "total used free")
    shutil.disk_usage = lambda path: usage(1 << 30, (1 << 30) - 1000, 1000)  # type: ignore[assignment]
    try:
        with _served(c, {}, "good"):
            tc.read_pairs("tatoeba:spa-eng")
    finally:
        shutil.disk_usage = real


def _cached(c) -> Any:
    """A cache filled from the good server; returns the server (still serving)."""
    return _served(c, {}, "good")


@api("cache: an archive with a bad CRC and a matching record is removed and fetched again", timeout=30)
def _(c):
    with _cached(c) as server:
        txt = td.cached_tatoeba()
        zip_path = txt.parent.parent / "spa-eng.zip"
        zip_path.write_bytes(bad_crc_zip())
        (zip_path.parent / "spa-eng.zip.sha256").write_text(f"{td.file_sha256(zip_path)}  spa-eng.zip\n")
        txt.unlink()
        server.requests.clear()
        assert len(tc.read_pairs("tatoeba:spa-eng")) == 12 and server.requests == ["good"]
        record = (zip_path.parent / "spa-eng.zip.sha256").read_text().split()[0]
        assert zip_path.read_bytes() == good_zip() and record == td.file_sha256(zip_path)


@api("cache: an unpacked spa.txt that is an HTML page is unpacked again", timeout=30)
def _(c):
    with _cached(c) as server:
        txt = td.cached_tatoeba()
        txt.write_bytes(b"<html>blocked</html>\n")
        server.requests.clear()
        assert len(tc.read_pairs("tatoeba:spa-eng")) == 12 and server.requests == []


@api("cache: a lone HTML spa.txt is removed and fetched again", timeout=30)
def _(c):
    with _cached(c) as server:
        txt = c.work / "cache" / "spa-eng" / "spa.txt"
        txt.parent.mkdir(parents=True)
        txt.write_bytes(b"<html>blocked</html>\n")
        assert len(tc.read_pairs("tatoeba:spa-eng")) == 12 and server.requests == ["good"]


@api("cache: a damaged entry without download is removed", expect="error", match=("removed", "CRC"), timeout=30)
def _(c):
    with _cached(c):
        txt = td.cached_tatoeba()
        zip_path = txt.parent.parent / "spa-eng.zip"
        zip_path.write_bytes(bad_crc_zip())
        (zip_path.parent / "spa-eng.zip.sha256").unlink()
        try:
            td.cached_tatoeba(download=False)
        finally:
            assert not zip_path.exists() and not txt.exists()


# --- local archives and files -------------------------------------------------------------------


@api("data: a local zip whose member fails its CRC", expect="error", match=("bad.zip", "damaged zip"))
def _(c):
    path = c.work / "bad.zip"
    path.write_bytes(bad_crc_zip())
    return tc.load_tatoeba(path)


@api("data: a local zip bomb sampled", expect="error", match=("compressed", "to 1 is allowed"), timeout=30)
def _(c):
    path = c.work / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z, z.open("spa.txt", "w") as f:
        line = "\n".join(PAIRS).encode() + b"\n"
        for _ in range(50_000):
            f.write(line)
    start = time.monotonic()
    try:
        tc.load_tatoeba(path, 400)
    finally:
        assert time.monotonic() - start < 2.0


@api("data: a local spa-eng.zip holding only fra.txt", expect="error", match=("fra.txt", "another language"))
def _(c):
    path = c.work / "spa-eng.zip"
    path.write_bytes(zip_bytes({"fra.txt": ("\n".join(PAIRS) + "\n").encode()}))
    return tc.load_tatoeba(path)


@api("data: a zip holding one .tsv file")
def _(c):
    path = c.work / "pairs.zip"
    path.write_bytes(zip_bytes({"pairs.tsv": ("\n".join(PAIRS) + "\n").encode()}))
    assert len(tc.load_tatoeba(path)) == 12


@api("data: two aligned files, the target not UTF-8", expect="error", match=("train.en' line 2", "utf-8"))
def _(c):
    (c.work / "train.es").write_bytes("uno\ndos\n".encode())
    (c.work / "train.en").write_bytes(b"one\ntw\xffo\n")
    return tc.read_pairs(f"{c.work / 'train.es'},{c.work / 'train.en'}")
