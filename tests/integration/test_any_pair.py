"""Any language pair, any parallel data: the direction and the columns, two aligned files, the
Tatoeba pairs by name (downloaded from a local HTTP server: checksums, interrupted downloads),
the languages recorded in a checkpoint and followed by translate and evaluate."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import zipfile
from pathlib import Path
from typing import Dict, Iterator

import pytest

from helpers.cli import SMALL, run_cli
from helpers.toy_task import write_tatoeba_file
from transformer_cpp import task
from transformer_cpp.task.column_order import detected_shares
from transformer_cpp.data import (
    CACHE_ENV_VAR,
    DATA_ENV_VAR,
    TATOEBA_URL_ENV_VAR,
    DataRecord,
    LineCountMismatch,
    cached_tatoeba,
    choose_columns,
    download_tatoeba,
    file_languages,
    parse_data_spec,
    read_pairs,
    tatoeba_pair_for,
    tatoeba_urls,
)

FRENCH = [("The cat.", "Le chat."), ("The dog.", "Le chien."), ("The house.", "La maison."), ("Water.", "De l'eau.")]
ATTR = "CC-BY 2.0 (France) Attribution: tatoeba.org #1 (a) & #2 (b)"


def fra_zip_bytes(pairs=FRENCH) -> bytes:
    """A fra-eng.zip as manythings.org lays it out: fra.txt (English, French, attribution) and _about.txt."""
    path_lines = "\n".join(f"{en}\t{fr}\t{ATTR}" for en, fr in pairs) + "\n"
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("_about.txt", "Sentence pairs from the Tatoeba Project, CC-BY 2.0 FR.\n")
        zf.writestr("fra.txt", path_lines)
    return buf.getvalue()


class _Server:
    """A local HTTP server (127.0.0.1, a thread) serving ``files`` by name; a name in
    ``truncate`` is announced whole but cut off half-way, as a broken connection does."""

    def __init__(self) -> None:
        self.files: Dict[str, bytes] = {}
        self.truncate: set = set()
        self.requests: list = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the library's name)
                name = self.path.lstrip("/")
                server.requests.append(name)
                body = server.files.get(name)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/zip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if name in server.truncate else body)
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def fresh(monkeypatch, tmp_path, server) -> Path:
    """A machine without local data: no data variable, an empty cache, the archives served locally."""
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV_VAR, str(cache))
    monkeypatch.setenv(TATOEBA_URL_ENV_VAR, server.url)
    return cache


# ------------------------------------------------------------------------- columns and direction


def test_choose_columns_by_language_number_or_file():
    tatoeba = ("en", "es")
    assert choose_columns(None, "en", "es", tatoeba) == (1, 2)
    assert choose_columns(None, "es", "en", tatoeba) == (2, 1)
    assert choose_columns(None, "spanish", "eng", tatoeba) == (2, 1)
    assert choose_columns(None, "es", "en", None) == (1, 2)  # any other file: source<TAB>target
    assert choose_columns("2,1", "en", "es", tatoeba) == (2, 1)  # numbers are taken as they are
    assert choose_columns("3,1", "de", "en") == (3, 1)
    assert choose_columns("de,en,fr", "fr", "de") == (3, 1)
    with pytest.raises(ValueError, match=r"Tatoeba file of English \(en\) and Spanish \(es\); it has no French \(fr\)"):
        choose_columns(None, "fr", "en", tatoeba)
    with pytest.raises(ValueError, match=r"said to hold English \(en\) and German \(de\); it has no French"):
        choose_columns("en,de", "fr", "en")
    with pytest.raises(ValueError, match="two different columns >= 1"):
        choose_columns("1,1", "en", "es")
    with pytest.raises(ValueError, match="two different columns >= 1"):
        choose_columns("0,1", "en", "es")
    with pytest.raises(ValueError, match="not both"):
        choose_columns("1,en", "en", "es")
    with pytest.raises(ValueError, match="named twice"):
        choose_columns("en,en", "en", "es")
    with pytest.raises(ValueError, match="both 'en'"):
        choose_columns(None, "en", "eng")


def test_file_languages_know_tatoeba_names_only(tmp_path):
    assert file_languages(Path("spa.txt")) == ("en", "es")
    assert file_languages(Path("/x/fra-eng.zip")) == ("en", "fr")
    assert file_languages(Path("jpn.txt")) == ("en", "ja")
    assert file_languages(Path("/cache/ber-eng/ber.txt")) == ("en", "ber")  # a pair the table does not list
    for other in ("dev.txt", "all.txt", "pairs.txt", "train.tsv", "eng.txt", "ber.txt"):
        assert file_languages(Path(other)) is None, other
    assert file_languages("tatoeba:deu-eng") == ("en", "de")
    assert tatoeba_pair_for("es", "en") == "spa-eng" and tatoeba_pair_for("en", "ja") == "jpn-eng"
    assert tatoeba_pair_for("fr", "de") is None


def test_one_file_read_both_ways_and_by_column_number(tmp_path):
    spa = write_tatoeba_file(tmp_path / "spa.txt", n=20)
    forward = read_pairs(spa, languages=("en", "es"))
    backward = read_pairs(spa, languages=("es", "en"))
    assert forward.columns == (1, 2) and backward.columns == (2, 1)
    assert backward.sources == forward.targets and backward.targets == forward.sources
    assert forward.sources[0].startswith("The ") and backward.sources[0].startswith("El ")
    # a file with three languages, columns chosen by the languages of its columns or by number
    tsv = tmp_path / "three.tsv"
    tsv.write_text("Hund\tdog\tchien\nKatze\tcat\tchat\nHaus\thouse\n", encoding="utf-8")
    by_lang = read_pairs(tsv, columns="de,en,fr", languages=("fr", "de"))
    assert list(by_lang) == [("chien", "Hund"), ("chat", "Katze")] and by_lang.stats.missing_column == 1
    assert "1 with too few columns" in by_lang.stats.describe_skipped()
    assert list(read_pairs(tsv, columns=(2, 1))) == [("dog", "Hund"), ("cat", "Katze"), ("house", "Haus")]
    with pytest.raises(ValueError, match="'es' is not among|has no Spanish"):
        read_pairs(tsv, columns="de,en,fr", languages=("es", "en"))


def test_legacy_records_are_english_to_spanish_columns_1_and_2():
    old = DataRecord.from_dict({"path": "/data/spa.txt", "encoding": "utf-8"})
    assert (old.src_lang, old.tgt_lang, old.source_column, old.target_column) == ("en", "es", 1, 2)
    assert old.read_columns() == (1, 2)
    new = DataRecord(src_lang="Spanish", tgt_lang="eng").check()
    assert (new.src_lang, new.tgt_lang, new.read_columns()) == ("es", "en", None)
    with pytest.raises(ValueError, match="both 'en'"):
        DataRecord(src_lang="en", tgt_lang="english").check()


# ------------------------------------------------------------------------- two aligned files


def test_two_aligned_files(tmp_path):
    src, tgt = tmp_path / "train.fr", tmp_path / "train.en"
    src.write_text("Le chat.\nLe chien.\n\nLa maison.\n", encoding="utf-8")
    tgt.write_text("The cat.\nThe dog.\n\nThe house.\n", encoding="utf-8")
    spec = parse_data_spec(f"{src},{tgt}")
    assert spec.kind == "aligned" and spec.path == src and spec.target_path == tgt
    pairs = read_pairs(f"{src},{tgt}", languages=("fr", "en"), clean=True)
    assert list(pairs) == [("Le chat.", "The cat."), ("Le chien.", "The dog."), ("La maison.", "The house.")]
    assert pairs.columns is None and pairs.target_file == tgt and pairs.stats.empty == 1
    with pytest.raises(ValueError, match="columns are for a tab-separated file"):
        read_pairs(f"{src},{tgt}", columns="2,1")
    # one line more in the source file: the error names that line and both files
    src.write_text("Le chat.\nLe chien.\n\nLa maison.\nEt un de trop.\n", encoding="utf-8")
    with pytest.raises(
        LineCountMismatch, match=r"line 5 of '.*train\.fr' has no counterpart, '.*train\.en' has only 4"
    ):
        read_pairs(f"{src},{tgt}")
    tgt.write_text("The cat.\n", encoding="utf-8")
    with pytest.raises(LineCountMismatch) as info:
        read_pairs(f"{src},{tgt}")
    assert info.value.line == 2 and info.value.longer == src
    with pytest.raises(FileNotFoundError, match="train.de"):
        read_pairs(f"{src},{tmp_path / 'train.de'}")
    # a name that is itself a file with a comma is that file, not two
    odd = tmp_path / "a,b.tsv"
    odd.write_text("x\ty\n", encoding="utf-8")
    assert parse_data_spec(str(odd)).kind == "file"


def test_train_on_two_aligned_files_and_evaluate(tmp_path):
    spa = write_tatoeba_file(tmp_path / "spa.txt", n=300)
    lines = [ln.split("\t") for ln in spa.read_text(encoding="utf-8").splitlines()]
    (tmp_path / "c.es").write_text("".join(f"{es}\n" for _, es, _ in lines), encoding="utf-8")
    (tmp_path / "c.en").write_text("".join(f"{en}\n" for en, _, _ in lines), encoding="utf-8")
    data = f"{tmp_path / 'c.es'},{tmp_path / 'c.en'}"
    result = run_cli(
        "train", *ONE_EPOCH, "--data", data, "--source-lang", "es", "--target-lang", "en", "--out", str(tmp_path / "r")
    )
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "r" / "epoch-0001" / "config.json").read_text())["data"]
    assert record["path"] == str((tmp_path / "c.es").resolve()) and record["target_path"] == str(
        (tmp_path / "c.en").resolve()
    )
    assert (record["src_lang"], record["tgt_lang"], record["source_column"]) == ("es", "en", None)
    result = run_cli("evaluate", "--model", str(tmp_path / "r"), "--examples", "1")
    assert result.returncode == 0, result.stderr
    assert "languages   es -> en" in result.stdout and "source     El " in result.stdout
    # resumed on the files it recorded
    result = run_cli(
        "train", "--out", str(tmp_path / "r"), "--resume", "--epochs", "2", "--threads", "1", "--no-progress"
    )
    assert result.returncode == 0 and "resuming" in result.stderr, result.stderr
    assert (tmp_path / "r" / "latest").read_text().strip() == "epoch-0002"
    # a second file with another number of lines: the command says where, in one line
    (tmp_path / "d.en").write_text("The cat.\n", encoding="utf-8")
    result = run_cli(
        "train", *ONE_EPOCH, "--data", f"{tmp_path / 'c.es'},{tmp_path / 'd.en'}", "--out", str(tmp_path / "r2")
    )
    assert result.returncode != 0 and "line 2 of" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# ------------------------------------------------------------------------- named pairs, downloaded


def test_named_pair_downloaded_from_a_local_server(fresh, server):
    body = fra_zip_bytes()
    server.files["fra-eng.zip"] = body
    assert tatoeba_urls("fra-eng") == [server.url + "fra-eng.zip"]
    pairs = read_pairs("tatoeba:fra-eng", languages=("fr", "en"))
    assert list(pairs)[0] == ("Le chat.", "The cat.") and pairs.columns == (2, 1)
    assert pairs.source == fresh / "fra-eng" / "fra.txt"
    sha = hashlib.sha256(body).hexdigest()
    assert pairs.sha256 == sha and (fresh / "fra-eng.zip.sha256").read_text().split()[0] == sha
    assert pairs.about == fresh / "fra-eng" / "_about.txt" and "CC-BY" in pairs.about.read_text()
    assert pairs.license is not None and "CC-BY 2.0 FR" in pairs.license and pairs.attributions == [ATTR] * 4
    assert not list(fresh.rglob("*.part"))
    # the second time comes from the cache: no request
    server.requests.clear()
    assert len(read_pairs("tatoeba:fra-eng")) == 4 and server.requests == []


def test_a_bad_checksum_is_refused(fresh, server):
    server.files["fra-eng.zip"] = fra_zip_bytes()
    with pytest.raises(OSError, match=r"fra-eng.zip: its SHA-256 is [0-9a-f]{64}, expected 0{64}"):
        download_tatoeba(pair="fra-eng", sha256="0" * 64)
    assert not (fresh / "fra-eng.zip").exists() and not (fresh / "fra-eng").exists()
    assert not list(fresh.rglob("*.part"))
    with pytest.raises(FileNotFoundError, match="download=False"):
        cached_tatoeba("fra-eng", download=False)
    good = hashlib.sha256(server.files["fra-eng.zip"]).hexdigest()
    assert download_tatoeba(pair="fra-eng", sha256=good.upper()).name == "fra.txt"


def test_an_interrupted_download_is_never_trusted(fresh, server):
    server.files["fra-eng.zip"] = fra_zip_bytes()
    server.truncate.add("fra-eng.zip")
    with pytest.raises(OSError, match=r"fra-eng.zip: .*(stopped after|IncompleteRead|incomplete)"):
        read_pairs("tatoeba:fra-eng")
    assert not (fresh / "fra-eng.zip").exists() and not list(fresh.rglob("*.part"))
    # a half-written file left by a process that was killed is not taken for the archive either
    (fresh / ".fra-eng-killed.zip.part").write_bytes(server.files["fra-eng.zip"][:100])
    with pytest.raises(FileNotFoundError, match="download=False"):
        cached_tatoeba("fra-eng", download=False)
    # the next download starts again from the beginning and succeeds
    server.truncate.clear()
    assert len(read_pairs("tatoeba:fra-eng")) == 4


def test_a_cached_archive_that_changed_is_not_used(fresh, server):
    server.files["fra-eng.zip"] = fra_zip_bytes()
    txt = cached_tatoeba("fra-eng")
    txt.unlink()  # only the archive is left: unpacked again when its checksum is the recorded one
    assert cached_tatoeba("fra-eng", download=False) == txt
    txt.unlink()
    (fresh / "fra-eng.zip").write_bytes(fra_zip_bytes(FRENCH[:2]))  # another archive in its place
    with pytest.raises(ValueError, match="not the .* recorded when it was downloaded"):
        cached_tatoeba("fra-eng", download=False)
    server.requests.clear()
    assert len(read_pairs("tatoeba:fra-eng")) == 4 and server.requests == ["fra-eng.zip"]  # downloaded again


def test_data_resolution_order(fresh, server, tmp_path, monkeypatch):
    server.files["spa-eng.zip"] = fra_zip_bytes([("Hello.", "Hola.")]).replace(b"fra.txt", b"spa.txt")
    local = write_tatoeba_file(tmp_path / "spa.txt", n=10)
    assert read_pairs(local).source == local  # 1. the data given
    monkeypatch.setenv(DATA_ENV_VAR, str(local))
    assert read_pairs().source == local and server.requests == []  # 2. the variable
    monkeypatch.delenv(DATA_ENV_VAR)
    assert list(read_pairs()) == [("Hello.", "Hola.")] and server.requests == ["spa-eng.zip"]  # 4. the download
    assert read_pairs().source == fresh / "spa-eng" / "spa.txt" and server.requests == ["spa-eng.zip"]  # 3. the cache


# ------------------------------------------------------------------------- the command line

ONE_EPOCH = [*SMALL, "--epochs", "1"]


def test_quickstart_without_local_data_downloads_the_pair(tmp_path, server):
    """``train`` with no --data and no TRANSFORMER_CPP_DATA on a machine with an empty cache: the
    Tatoeba pair of the two languages is downloaded (here from the local server), and used."""
    many = [(f"The {w} is here.", f"Le {w} est ici.") for w in ("cat", "dog", "car", "tree", "bird", "book")] * 40
    server.files["fra-eng.zip"] = fra_zip_bytes(many)
    env = {CACHE_ENV_VAR: str(tmp_path / "cache"), TATOEBA_URL_ENV_VAR: server.url}
    result = run_cli(
        "train", *ONE_EPOCH, "--source-lang", "fr", "--target-lang", "en", "--out", str(tmp_path / "r"), env=env
    )
    assert result.returncode == 0, result.stderr
    assert server.requests == ["fra-eng.zip"]
    assert "source: column 2, French (fr); target: column 1, English (en)" in result.stderr
    assert "Tatoeba archive sha256 " + hashlib.sha256(server.files["fra-eng.zip"]).hexdigest() in result.stderr
    record = json.loads((tmp_path / "r" / "epoch-0001" / "config.json").read_text())["data"]
    assert (
        record["tatoeba_pair"] == "fra-eng"
        and record["archive_sha256"] == hashlib.sha256(server.files["fra-eng.zip"]).hexdigest()
    )
    # the default direction, as the quickstart runs it: English to Spanish, spa-eng downloaded
    server.files["spa-eng.zip"] = fra_zip_bytes([(en, en.replace("The", "El")) for en, _ in many]).replace(
        b"fra.txt", b"spa.txt"
    )
    result = run_cli("train", *ONE_EPOCH, "--out", str(tmp_path / "quick"), env=env)
    assert result.returncode == 0, result.stderr
    assert server.requests == ["fra-eng.zip", "spa-eng.zip"] and "English (en); target: column 2" in result.stderr
    # the same languages without a pair of their own and without data: told what to pass
    result = run_cli(
        "train", *ONE_EPOCH, "--source-lang", "fr", "--target-lang", "de", "--out", str(tmp_path / "r2"), env=env
    )
    assert result.returncode != 0 and "no data given for fr -> de" in result.stderr and "--data" in result.stderr
    result = run_cli("train", *ONE_EPOCH, "--source-lang", "xx!", "--out", str(tmp_path / "r3"), env=env)
    assert result.returncode != 0 and "is not a language code" in result.stderr


@pytest.fixture(scope="module")
def es_en_run(tmp_path_factory):
    """A Spanish-to-English model of the toy file (trained until it knows its direction)."""
    root = tmp_path_factory.mktemp("es-en")
    data = write_tatoeba_file(root / "spa.txt", n=400)
    args = list(ONE_EPOCH)
    args[args.index("--epochs") + 1] = "6"
    result = run_cli(
        "train", *args, "--source-lang", "es", "--target-lang", "en", "--data", str(data), "--out", str(root / "run")
    )
    assert result.returncode == 0, result.stderr
    return root, data, result


def test_languages_recorded_and_followed(es_en_run):
    root, data, result = es_en_run
    assert "source: column 2, Spanish (es); target: column 1, English (en)" in result.stderr
    assert "es -> en" in result.stderr.splitlines()[-1]
    record = json.loads((root / "run" / "latest").parent.joinpath("epoch-0006", "config.json").read_text())["data"]
    assert (record["src_lang"], record["tgt_lang"], record["source_column"], record["target_column"]) == (
        "es",
        "en",
        2,
        1,
    )
    from transformer_cpp import Translator

    translator = Translator.from_checkpoint(root / "run")
    assert (translator.src_lang, translator.tgt_lang) == ("es", "en")
    result = run_cli("translate", "--model", str(root / "run"), "El gato y el perro.")
    assert result.returncode == 0 and "translating es -> en" in result.stderr
    assert result.stdout.startswith("The "), result.stdout
    result = run_cli("evaluate", "--model", str(root / "run"), "--examples", "1")
    assert result.returncode == 0, result.stderr
    assert "languages   es -> en" in result.stdout and "source     El " in result.stdout


def test_evaluate_pairs_with_the_columns_the_other_way_round_is_refused(es_en_run, tmp_path):
    root, data, _ = es_en_run
    model = str(root / "run")
    lines = data.read_text(encoding="utf-8").splitlines()[:60]
    # a Tatoeba file: English first, and the model's languages choose the columns
    ok = run_cli("evaluate", "--model", model, "--pairs", str(data), "--limit", "20")
    assert ok.returncode == 0 and "source: column 2, Spanish (es)" in ok.stderr, ok.stderr
    # a file of another name is source<TAB>target: English-first pairs are the wrong way round
    english_first = tmp_path / "pairs.tsv"
    english_first.write_text("\n".join(lines) + "\n", encoding="utf-8")
    wrong = run_cli("evaluate", "--model", model, "--pairs", str(english_first))
    assert wrong.returncode != 0 and "look the other way round for this es -> en model" in wrong.stderr
    assert "--columns 2,1" in wrong.stderr and "BLEU" not in wrong.stdout
    # told which column holds which language, or which column is the source, it scores them
    for columns in ("en,es", "2,1"):
        right = run_cli("evaluate", "--model", model, "--pairs", str(english_first), "--columns", columns)
        assert right.returncode == 0 and "BLEU" in right.stdout, right.stderr
    # columns forced the wrong way: scored, but not silently
    forced = run_cli("evaluate", "--model", model, "--pairs", str(english_first), "--columns", "1,2")
    assert forced.returncode == 0 and "warning: the pairs of" in forced.stderr
    # the languages the file's columns are said to hold must include the model's
    other = run_cli("evaluate", "--model", model, "--pairs", str(english_first), "--columns", "en,fr")
    assert other.returncode != 0 and "has no Spanish (es) column" in other.stderr


def test_task_reads_with_the_record(tmp_path):
    spa = write_tatoeba_file(tmp_path / "spa.txt", n=200)
    split, record = task.load_split(
        str(spa), DataRecord(src_lang="es", tgt_lang="en", vocab_size=300).check(), task.quiet
    )
    assert record.source_column == 2 and record.target_column == 1 and record.pairs_loaded == 200
    assert all(s.startswith("El ") for s in split.train[0]) and all(t.startswith("The ") for t in split.train[1])
    again, rebuilt = task.load_split(record.path, record, task.quiet)
    task.check_same_split("test", record, rebuilt)
    assert again.test == split.test


def test_train_refuses_columns_that_read_the_other_way_round(tmp_path):
    """A Spanish<TAB>English file trained with the default en -> es: refused before any training,
    naming --columns 2,1; with --columns 1,2 it trains as told, with a warning."""
    spa = write_tatoeba_file(tmp_path / "spa.txt", n=300)
    swapped = tmp_path / "pairs.tsv"  # not a Tatoeba name: column 1 is the source
    lines = [line.split("\t") for line in spa.read_text(encoding="utf-8").splitlines()]
    swapped.write_text("".join(f"{es}\t{en}\n" for en, es, _ in lines), encoding="utf-8")
    out = tmp_path / "run"
    refused = run_cli("train", *SMALL, "--data", str(swapped), "--epochs", "1", "--out", str(out))
    assert refused.returncode != 0 and not out.exists(), refused.stderr
    (line,) = [x for x in refused.stderr.splitlines() if "look the other way round" in x]
    assert "for en -> es" in line and "of column 1 reads as Spanish" in line and "of column 2 as English" in line
    assert "pass --columns 2,1 (source then target)" in line and "epoch" not in refused.stderr
    forced = run_cli("train", *SMALL, "--data", str(swapped), "--columns", "1,2", "--epochs", "1", "--out", str(out))
    assert forced.returncode == 0, forced.stderr
    assert "warning: the pairs of" in forced.stderr and "training as --columns says" in forced.stderr
    # the right order says nothing
    shares = detected_shares(*zip(*[(en, es) for en, es, _ in lines]), "en", "es")
    assert shares is not None and min(shares) > 0.8, shares
    assert detected_shares(["Hund"], ["chien"], "en", "xx") is None  # a language it cannot tell
