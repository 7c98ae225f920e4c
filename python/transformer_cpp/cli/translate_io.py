"""What ``transformer-cpp translate`` reads and writes: input lines as they arrive, in small
batches; the output, on standard output or written atomically to a file; the progress bar; the
n-best format.

Streaming. Standard input (or ``--input FILE``) is read by a thread that splits it into lines as
the bytes come: a batch starts with the next line and takes the lines that follow within
:data:`BATCH_WAIT` seconds of each other, up to the batch size. A line typed or piped in alone is
translated (and its translation printed) before the next one arrives; a file fills every batch.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import sys
import tempfile
import threading
from typing import Any, BinaryIO, Iterable, Iterator, List, NamedTuple, Optional, Sequence, TextIO, Tuple

from .._runtime import tqdm_class
from ..text import check_text

__all__ = [
    "BATCH_WAIT",
    "InputLine",
    "StreamReader",
    "argument_lines",
    "atomic_output",
    "decode_line",
    "n_best_lines",
    "progress_bar",
    "split_lines",
    "unbuffered",
]

#: How long (seconds) a batch waits for one more input line before it is translated.
BATCH_WAIT = 0.05
_LINE_END = re.compile(rb"\r\n|\r|\n")
_CHUNK = 1 << 16


class InputLine(NamedTuple):
    """One input line: its number (from 1), its text (``None``: not valid UTF-8, ``problem`` says
    why) and the bytes it took in the input, its line end included (for the progress bar)."""

    number: int
    text: Optional[str]
    problem: str = ""
    size: int = 0


def split_lines(chunks: Iterable[bytes]) -> Iterator[Tuple[bytes, int]]:
    """The lines of a byte stream given in chunks, each as soon as its line end has arrived, as
    ``(line without its end, bytes taken)``. Lines end in ``\\n``, ``\\r\\n`` or a lone ``\\r``
    (old Mac files), as data files are read; a last line without a line end is a line too."""
    pending = b""
    skip_newline = False  # the previous chunk ended in "\r": a "\n" first in this one is its line end
    carried = 0
    for chunk in chunks:
        if skip_newline and chunk.startswith(b"\n"):
            chunk, carried = chunk[1:], carried + 1
        skip_newline = False
        data, start = pending + chunk, 0
        for match in _LINE_END.finditer(data):
            if match.group() == b"\r" and match.end() == len(data):
                skip_newline = True
            yield data[start : match.start()], match.end() - start + carried
            start, carried = match.end(), 0
        pending = data[start:]
    if pending:
        yield pending, len(pending) + carried


def decode_line(number: int, raw: bytes, size: int = 0) -> InputLine:
    """Line ``number`` of the input decoded as UTF-8 (a byte-order mark first on line 1 dropped)."""
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return InputLine(number, raw.decode("utf-8"), "", size)
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : max(exc.end, exc.start + 1)]
        return InputLine(number, None, f"{exc.reason} at byte {exc.start + 1} ({bad!r})", size)


def argument_lines(sentences: Sequence[str], batch_size: int) -> Iterator[List[InputLine]]:
    """The sentences given as arguments, as input lines in batches of ``batch_size`` (bytes that
    were not UTF-8, which Python keeps as lone surrogates, make a line without text)."""
    lines = []
    for number, sentence in enumerate(sentences, 1):
        try:
            lines.append(InputLine(number, check_text(sentence, "translate")))
        except ValueError:
            lines.append(InputLine(number, None))
    for start in range(0, len(lines), batch_size):
        yield lines[start : start + batch_size]


_END = object()


class StreamReader:
    """Input lines read from a binary stream by a thread, as they arrive: :meth:`batches` gives
    them in batches (see the module docstring). At most ``capacity`` lines wait to be translated,
    so a large file is not held in memory. Give it an unbuffered stream (:func:`unbuffered`)
    when the process may end while it waits."""

    def __init__(self, stream: BinaryIO, capacity: int = 4096) -> None:
        self._stream = stream
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=capacity)
        self._held: Any = None
        self._thread = threading.Thread(target=self._read, name="translate-input", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        # an unbuffered stream (standard input's raw file, say) holds no lock while it waits, so the
        # interpreter can exit (Ctrl-C) with this thread still waiting for input
        read = getattr(self._stream, "read1", self._stream.read)
        try:
            for number, (raw, size) in enumerate(split_lines(iter(lambda: read(_CHUNK), b"")), 1):
                self._queue.put(decode_line(number, raw, size))
        except Exception as exc:  # a read error: raised where the lines are taken
            self._queue.put(exc)
        self._queue.put(_END)

    def _take(self, timeout: Optional[float]) -> Any:
        if self._held is not None:
            item, self._held = self._held, None
            return item
        return self._queue.get(timeout=timeout)

    def batches(self, batch_size: int, wait: float = BATCH_WAIT) -> Iterator[List[InputLine]]:
        """Batches of at most ``batch_size`` lines: a batch is complete when it is full or when no
        further line arrives within ``wait`` seconds; the input's end ends the last one."""
        while True:
            item = self._take(None)
            if item is _END:
                return
            if isinstance(item, Exception):
                raise item
            batch = [item]
            while len(batch) < batch_size:
                try:
                    item = self._take(wait)
                except queue.Empty:
                    break
                if item is _END or isinstance(item, Exception):
                    self._held = item
                    break
                batch.append(item)
            yield batch


def unbuffered(stream: Any) -> Any:
    """The raw file under a buffered binary stream (standard input's), or the stream itself."""
    return getattr(stream, "raw", stream)


@contextlib.contextmanager
def atomic_output(path: Optional[str]) -> Iterator[TextIO]:
    """Where the translations go: standard output, or (``path``) a temporary file beside ``path``
    renamed to it once everything is written. On an error or an interrupt the temporary file is
    removed, and ``path`` is left as it was."""
    if path is None:
        yield sys.stdout
        return
    folder, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".part")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as a file the user creates, not mkstemp's owner-only mode
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            yield out
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def progress_bar(path: Optional[str], stream: Any = None) -> Any:
    """A tqdm bar over the bytes of the input file ``path`` on standard error (``stream``) when it
    is a terminal; ``None`` for standard input, arguments, or a redirected standard error."""
    stream = sys.stderr if stream is None else stream
    if path is None or not stream.isatty():
        return None
    tqdm = tqdm_class()  # only when a bar is shown

    size = os.path.getsize(path)
    return tqdm(total=size, unit="B", unit_scale=True, desc="translating", file=stream, leave=False)


def n_best_lines(index: int, hypotheses: Iterable[Tuple[str, float]]) -> List[str]:
    """The n-best lines of input line ``index`` (0-based), best first:
    ``INDEX ||| translation ||| score`` (the Moses format; the score is beam search's
    length-normalised log-probability)."""
    return [f"{index} ||| {text} ||| {score:.6f}" for text, score in hypotheses]
