"""The test suite's layout, and where the tests find the Tatoeba data.

The tests are in folders by what they test:

* ``unit/``: one module, layer or kernel against its reference (NumPy written from the formula,
  central finite differences, PyTorch), the tokenizer, text, data, configuration, checkpoints,
  decoding, the C++ tests;
* ``integration/``: whole workflows: training, translation, the command line, the server, the
  exports, MPI, the notebooks, the benchmark, the language-model task;
* ``properties/``: generated and hostile input: the Hypothesis fuzz suite, any writing system,
  the hostile-input case table;
* ``repo/``: the repository itself: linters, types, the documentation, the stubs, the public API,
  the import layers.

Markers (registered in pyproject.toml; they select, nothing skips by default): ``torch`` on every
test that needs PyTorch, ``slow`` on those that take more than about 10 seconds (``-m "not slow"``
for a quick run), ``network`` on a test that reaches beyond the local host. No test does: servers,
downloads and clients run on 127.0.0.1, and a connection from the test process to any other
address fails here with an error naming it, unless the test is marked ``network``.

What they share is the package ``helpers/`` (toy tasks, gradient checks, the command line in a
subprocess, the hostile-input cases), imported as ``helpers.<module>``: ``tests/`` is on the path
(``pythonpath`` in pyproject.toml).

As ``transformer-cpp train`` does: ``TRANSFORMER_CPP_DATA`` when it is set (how an offline
machine points at a local copy), else the cache, else the download. When the variable is unset
and a copy sits at ``../shared/data/spa-eng/spa.txt`` beside the repository (the layout of the
offline machines that run CI), the tests use that copy, so the suite never downloads there.
Without any of them the real-data tests fail with the message of ``load_tatoeba`` (nothing skips).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest

from transformer_cpp.data import DATA_ENV_VAR

_SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "spa-eng" / "spa.txt"

if not os.environ.get(DATA_ENV_VAR) and _SHARED.is_file():
    os.environ[DATA_ENV_VAR] = str(_SHARED)


class NetworkRefused(ConnectionError):
    """A test that is not marked ``network`` connected to an address beyond the local host."""


def _is_local(address: Any) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX paths and the like
        return True
    host = str(address[0])
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:  # a host name other than localhost
        return False


_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


def _guarded(original: Any) -> Any:
    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
            raise NetworkRefused(f"tests must not reach the network: connection to {address!r} (mark the test network)")
        return original(self, address)

    return connect


@pytest.fixture(autouse=True)
def _no_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("network") is None:
        monkeypatch.setattr(socket.socket, "connect", _guarded(_connect))
        monkeypatch.setattr(socket.socket, "connect_ex", _guarded(_connect_ex))
    yield
