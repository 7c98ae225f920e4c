"""The campaign-only cases: slow ones (seconds each: long inputs, exports through other runtimes,
figures, a fresh interpreter per environment) that ``tools/hostile_campaign.py`` runs besides the
table the test suite runs. The package imports this module under ``campaign_only()``."""

from __future__ import annotations

import os

import transformer_cpp as tc

from .base import SENT, api, cli, ctok, sparse
from .command_line import _ev, _ex, _exported, _n_lines, _run_ok, _tr, _trn

# --- long inputs ----------------------------------------------------------------------------------


@api("tokenizer: a 1 MB sentence")
def _(c):
    tok = ctok()
    text = "the cat sat on the mat " * 45_000
    ids = tok.encode(text)
    assert tok.decode(ids) == text


@api("text: a 2 MB sentence")
def _(c):
    out = tc.clean_sentence("Mr. Smith went to Washington. " * 70_000)
    assert out.count("Mr.") == 70_000


cli(
    "translate: --beam-size 1024",
    _tr("--beam-size", "1024", SENT, model="fixture"),
    expect="ok",
    check=_n_lines(1),
    timeout=180,
)

cli(
    "translate: 2000 lines",
    _tr("--batch-size", "100", model="fixture"),
    expect="ok",
    stdin=("The cat.\nThe dog and the tree.\n" * 1000).encode(),
    check=_n_lines(2000),
    timeout=240,
)

cli("translate: stdout closed", _tr(SENT, model="fixture"), expect="either", stdout="closed", check=lambda c, r: None)

cli(
    "translate: OMP_STACKSIZE=1G and --threads 2",
    _tr("--threads", "2", SENT, model="fixture"),
    env={"OMP_STACKSIZE": "1G"},
    expect="either",
    match=("stacks",),
    check=_n_lines(1),
)

cli(
    "translate: OMP_STACKSIZE=1G and OMP_NUM_THREADS=4",
    _tr(SENT, model="fixture"),
    env={"OMP_STACKSIZE": "1G", "OMP_NUM_THREADS": "4"},
    expect="ok",
    check=_n_lines(1),
)

cli(
    "translate: OMP_NUM_THREADS=abc",
    _tr(SENT, model="fixture"),
    env={"OMP_NUM_THREADS": "abc"},
    expect="ok",
    check=_n_lines(1),
)

cli(
    "translate: OMP_NUM_THREADS=0",
    _tr(SENT, model="fixture"),
    env={"OMP_NUM_THREADS": "0"},
    expect="ok",
    check=_n_lines(1),
)

cli(
    "evaluate: --pairs is a 10 GB sparse file",
    _ev("--pairs", "huge.txt"),
    match=("longer than",),
    prepare=lambda c: sparse(c.work / "huge.txt", 10 << 30),
)

cli(
    "figures: --out that is not UTF-8",
    lambda c: ["figures", "--out", str(c.work / os.fsdecode(b"fig\xe9"))],
    expect="ok",
    check=lambda c, r: (
        None
        if list((c.work / os.fsdecode(b"fig\xe9")).glob("*.png"))
        else (_ for _ in ()).throw(AssertionError("no figure written"))
    ),
    timeout=240,
)

cli(
    "train: C locale",
    _trn(),
    env={"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"},
    expect="ok",
    check=_run_ok(),
)

cli("export: to CTranslate2", _ex("--to", "ctranslate2"), expect="either", check=_exported("model.bin"), timeout=300)

cli(
    "export: to CTranslate2 in int8",
    _ex("--to", "ctranslate2", "--quantization", "int8"),
    expect="either",
    check=_exported("model.bin"),
    timeout=300,
)
