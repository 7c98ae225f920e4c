"""The verified cache and the download's way out: SIGTERM during a download leaves no ``.part``
file, a refused download leaves the cache as it was, a sample of a large file is drawn without
holding the file, and the archive checks refuse what they must."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import tracemalloc
import zipfile

import pytest

from helpers.cli import cli_env
from helpers.hostile_server import PAIRS, HostileServer, good_zip, zip_bytes
from transformer_cpp.data import read_pairs
from transformer_cpp.data.archive import check_archive, check_pairs_file


def test_sigterm_during_a_download_removes_the_part_file(tmp_path):
    server = HostileServer({"slow": (good_zip(), "trickle")}, trickle_pause=0.05)
    cache = tmp_path / "cache"
    code = (
        "from transformer_cpp.data import download_tatoeba\n"
        f"download_tatoeba({str(cache)!r}, urls=[{server.url('slow') + 'spa-eng.zip'!r}], min_rate=0)\n"
    )
    env = cli_env()  # the package this process imports: the installed one, or the tree on PYTHONPATH
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not list(cache.glob("*.part")):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "no .part file appeared"
            time.sleep(0.05)
        time.sleep(0.5)  # a few bytes in
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
        server.close()
    assert sorted(p.name for p in cache.rglob("*")) == []


def test_a_sample_of_a_large_file_holds_only_the_sample(tmp_path):
    path = tmp_path / "big.txt"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(200_000):
            f.write(f"Sentence number {i} in English.\tFrase número {i} en español.\tCC-BY #{i}\n")
    tracemalloc.start()
    try:
        pairs = read_pairs(path, 50, seed=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(pairs) == 50 and pairs.line_numbers == sorted(pairs.line_numbers)
    assert all(s == f"Sentence number {n - 1} in English." for s, n in zip(pairs.sources, pairs.line_numbers))
    assert peak < 16 << 20, f"peak {peak:,} bytes"  # its 200,000 pairs held would take over 50 MB
    assert read_pairs(path, 50, seed=3).sources == pairs.sources  # seeded


def test_check_archive_refuses_and_accepts(tmp_path):
    good = tmp_path / "good.zip"
    good.write_bytes(good_zip())
    assert check_archive(good, "spa.txt", "t").filename == "spa.txt"
    with pytest.raises(ValueError, match="exactly one pairs file named fra.txt, found: _about.txt, spa.txt"):
        check_archive(good, "fra.txt", "t")
    latin = tmp_path / "latin.zip"
    latin.write_bytes(zip_bytes({"spa.txt": "\n".join(PAIRS).encode("latin-1")}))
    with pytest.raises(ValueError, match="not valid UTF-8"):
        check_archive(latin, "spa.txt", "t")
    not_zip = tmp_path / "page.zip"
    not_zip.write_bytes(b"<html></html>")
    with pytest.raises(ValueError, match="page.zip' is not an intact zip archive"):
        check_archive(not_zip, "spa.txt", "t")


def test_check_pairs_file_allows_a_few_lines_without_a_tab(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(("\n".join(PAIRS + ["a note"]) + "\n").encode())
    check_pairs_file(path, "t")
    path.write_bytes(("\n".join(PAIRS[:2] + ["a note"] * 3) + "\n").encode())
    with pytest.raises(ValueError, match="3 of its 5 lines have no tab"):
        check_pairs_file(path, "t")


def test_a_zip_member_named_like_the_pair_wins(tmp_path):
    path = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("notes.txt", "x\ty\n")
        z.writestr("fra.txt", "The cat.\tLe chat.\n")
    assert read_pairs(path).targets == ["Le chat."]
