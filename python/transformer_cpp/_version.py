"""The installed package's version, from its metadata (``0.0.0+unknown`` in a source tree that was
never installed). Its own module so that any module can say its version without importing the
package root."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("transformer-cpp")
except PackageNotFoundError:  # pragma: no cover - a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
