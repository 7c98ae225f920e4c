"""Data specs: where sentence pairs come from (a tab-separated file or a zip holding one, two
aligned files, a Tatoeba pair by name), how they are found (:func:`resolve_data`), the languages
of a Tatoeba file's columns and which columns are the source and the target."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import path as _path
from ..text import language_code, language_iso3, language_name
from .download import DEFAULT_TATOEBA_PAIR, cached_tatoeba, check_tatoeba_pair

__all__ = [
    "ColumnsOption",
    "DATA_ENV_VAR",
    "DataSpec",
    "choose_columns",
    "file_languages",
    "parse_data_spec",
    "resolve_data",
    "tatoeba_pair_for",
]

#: Environment variable naming the data to use when none is given (any data spec: a file, two
#: aligned files, a named pair), before the cache.
DATA_ENV_VAR = "TRANSFORMER_CPP_DATA"


@dataclass(frozen=True)
class DataSpec:
    """Where sentence pairs come from (see the module docstring): ``kind`` ``"file"`` (a
    tab-separated file or a zip holding one), ``"aligned"`` (``path`` the source sentences,
    ``target_path`` the target ones) or ``"tatoeba"`` (``pair`` such as ``"fra-eng"``; ``path``
    the cached pairs file once it is resolved)."""

    kind: str
    path: Optional[Path] = None
    target_path: Optional[Path] = None
    pair: Optional[str] = None

    def __str__(self) -> str:
        if self.kind == "aligned":
            return f"{self.path},{self.target_path}"
        if self.kind == "tatoeba" and self.path is None:
            return f"tatoeba:{self.pair}"
        return str(self.path)


def parse_data_spec(data: Union[str, "os.PathLike[str]", DataSpec], caller: str = "parse_data_spec") -> DataSpec:
    """The :class:`DataSpec` that ``data`` names: ``"tatoeba:fra-eng"``, ``"train.es,train.en"``
    (two aligned files; a name that is itself an existing file is that file) or a file. Nothing
    is checked on disk but which comma splits two existing files."""
    if isinstance(data, DataSpec):
        return data
    if not isinstance(data, str):
        return DataSpec("file", _path(f"{caller}: path", data))
    if data.startswith("tatoeba:"):
        return DataSpec("tatoeba", pair=check_tatoeba_pair(data[len("tatoeba:") :], caller))
    if "," in data and not Path(data).expanduser().exists():
        cuts = [i for i, ch in enumerate(data) if ch == "," and 0 < i < len(data) - 1]
        existing = [
            i for i in cuts if Path(data[:i]).expanduser().is_file() and Path(data[i + 1 :]).expanduser().is_file()
        ]
        if len(existing) == 1 or (not existing and len(cuts) == 1):
            i = (existing or cuts)[0]
            return DataSpec(
                "aligned", _path(f"{caller}: source file", data[:i]), _path(f"{caller}: target file", data[i + 1 :])
            )
        if not cuts:
            raise ValueError(
                f"{caller}: {data!r} is neither a file nor two files 'SOURCE,TARGET' (a name is missing around the comma)"
            )
    return DataSpec("file", _path(f"{caller}: path", data))


def _not_a_file(path: Path, caller: str, where: str) -> OSError:
    if path.exists():
        kind = "a directory" if path.is_dir() else "not a regular file"
        return IsADirectoryError(f"{caller}: '{path}'{where} is {kind}; expected a .txt or .zip data file")
    return FileNotFoundError(f"{caller}: no such file '{path}'{where}")


def resolve_data(
    data: Union[str, "os.PathLike[str]", DataSpec, None] = None,
    *,
    pair: str = DEFAULT_TATOEBA_PAIR,
    cache_dir: Union[str, "os.PathLike[str]", None] = None,
    download: bool = True,
    urls: Optional[Sequence[str]] = None,
    caller: str = "resolve_data",
) -> DataSpec:
    """The data to read, with its files found: ``data`` if given, else ``$TRANSFORMER_CPP_DATA``,
    else the named ``pair`` in the cache, else its download (unless ``download`` is false).

    Raises:
        FileNotFoundError / IsADirectoryError: a file that is not there, naming it (and the
            variable it came from).
        OSError: the download failed.
    """
    where = ""
    if data is None:
        env = os.environ.get(DATA_ENV_VAR)
        if env:
            data, where = env, f" (from ${DATA_ENV_VAR})"
        else:
            data = DataSpec("tatoeba", pair=check_tatoeba_pair(pair, caller))
    spec = parse_data_spec(data, caller)
    if spec.kind == "tatoeba":
        if spec.path is not None:
            return spec
        assert spec.pair is not None
        cached = cached_tatoeba(spec.pair, cache_dir, download=download, urls=urls, caller=caller)
        return DataSpec("tatoeba", path=cached, pair=spec.pair)
    for label, given in (("", spec.path), (" (target file)", spec.target_path)):
        if given is not None and not given.expanduser().is_file():
            raise _not_a_file(given.expanduser(), caller, where + (label if spec.kind == "aligned" else ""))
    return DataSpec(
        spec.kind, spec.path.expanduser() if spec.path else None, spec.target_path and spec.target_path.expanduser()
    )


def _tatoeba_code(name: str) -> Optional[str]:
    """The language of a Tatoeba file name's ISO 639-3 code, when the table knows the code."""
    try:
        code = language_code(name, "file_languages")
    except ValueError:
        return None
    return code if code != name else None


def file_languages(spec: Union[DataSpec, str, "os.PathLike[str]"]) -> Optional[Tuple[str, str]]:
    """The languages of the first two columns of a Tatoeba file, ``("en", other)``, when ``spec``
    is one: a named pair, or a file named as manythings.org names them (``spa.txt``,
    ``fra-eng.zip``, or ``LLL.txt`` in a folder ``LLL-eng``); None for any other file."""
    spec = parse_data_spec(spec) if not isinstance(spec, DataSpec) else spec
    if spec.kind == "aligned" or (spec.kind == "file" and spec.path is None):
        return None
    if spec.pair is not None:
        lang = spec.pair.split("-")[0]
        return "en", language_code(lang, "file_languages")
    assert spec.path is not None
    name, folder = spec.path.name.lower(), spec.path.parent.name.lower()
    m = re.fullmatch(r"([a-z]{3})\.txt", name) or re.fullmatch(r"([a-z]{3})-eng\.zip", name)
    if m is None or m.group(1) == "eng":
        return None
    if folder == f"{m.group(1)}-eng" and name.endswith(".txt"):
        return "en", language_code(m.group(1), "file_languages")
    code = _tatoeba_code(m.group(1))
    return ("en", code) if code is not None else None


def tatoeba_pair_for(source_lang: str, target_lang: str) -> Optional[str]:
    """The Tatoeba pair that holds ``source_lang`` and ``target_lang`` (``("es", "en")`` ->
    ``"spa-eng"``), or None when neither is English or the other is not in the language table."""
    src, tgt = language_code(source_lang, "tatoeba_pair_for"), language_code(target_lang, "tatoeba_pair_for")
    other = tgt if src == "en" else src if tgt == "en" else None
    if other is None or other == "en":
        return None
    iso3 = language_iso3(other)
    return f"{iso3}-eng" if iso3 is not None else None


ColumnsOption = Union[None, str, Sequence[Union[int, str]]]


def _column_items(columns: ColumnsOption, caller: str) -> List[Union[int, str]]:
    items: List[Any] = columns.split(",") if isinstance(columns, str) else list(columns or [])
    out: List[Union[int, str]] = []
    for item in items:
        if isinstance(item, str) and item.strip().isdigit():
            out.append(int(item.strip()))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            out.append(int(item))
        elif isinstance(item, str) and item.strip():
            out.append(language_code(item, caller))
        else:
            raise ValueError(f"{caller}: columns must be column numbers or language codes, got {columns!r}")
    return out


def choose_columns(
    columns: ColumnsOption,
    source_lang: str,
    target_lang: str,
    file_langs: Optional[Sequence[str]] = None,
    *,
    what: str = "the data",
    caller: str = "choose_columns",
) -> Tuple[int, int]:
    """The 1-based (source, target) columns of a tab-separated file.

    ``columns`` is either two column numbers, source then target (``"2,1"`` or ``(2, 1)``), or the
    languages of the file's columns in their order (``"en,es"``), from which ``source_lang`` and
    ``target_lang`` pick. Without it, the languages of a Tatoeba file (``file_langs``, see
    :func:`file_languages`) pick the same way, and any other file is ``source<TAB>target``: (1, 2).

    Raises:
        ValueError: numbers that are not two different columns >= 1, a language listed twice, or
            a source or target language that is not among the file's languages (the message names
            them and how to say otherwise).
    """
    src, tgt = language_code(source_lang, caller), language_code(target_lang, caller)
    if src == tgt:
        raise ValueError(f"{caller}: the source and target languages are both {src!r}; they must differ")
    items = _column_items(columns, caller)
    numbers = [i for i in items if isinstance(i, int)]
    if items and len(numbers) == len(items):
        if len(numbers) != 2 or numbers[0] == numbers[1] or min(numbers) < 1:
            raise ValueError(
                f"{caller}: column numbers must be two different columns >= 1, source then target "
                f"(such as 2,1), got {columns!r}"
            )
        return numbers[0], numbers[1]
    if numbers:
        raise ValueError(
            f"{caller}: columns must be two column numbers (2,1) or the languages of the file's columns (en,es), "
            f"not both, got {columns!r}"
        )
    langs = [str(i) for i in items] or [language_code(x, caller) for x in (file_langs or [])]
    if not langs:
        return 1, 2
    if len(set(langs)) != len(langs):
        raise ValueError(f"{caller}: a language is named twice in the columns {', '.join(langs)}")
    missing = [lang for lang in (src, tgt) if lang not in langs]
    if missing:
        said = "the columns are said to hold" if items else "is a Tatoeba file of"
        raise ValueError(
            f"{caller}: {what} {said} {' and '.join(f'{language_name(x)} ({x})' for x in langs)}; it has no "
            f"{' or '.join(f'{language_name(x)} ({x})' for x in missing)} column. Choose languages among "
            f"{', '.join(langs)}, other data, or the columns by number (source,target such as 2,1)"
        )
    return langs.index(src) + 1, langs.index(tgt) + 1
