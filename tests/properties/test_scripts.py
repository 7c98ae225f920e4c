"""Any script, from the file to the translation: text of many writing systems, with and without
spaces between words, keeps every character through reading, cleaning, splitting, encoding and
decoding (a property over generated text); a tiny model learns a language pair written without
spaces; and the few lines of Python that train the quick recipe on one's own pairs work."""

from __future__ import annotations

import logging
import unicodedata
from pathlib import Path
from typing import List, Tuple

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import transformer_cpp as tc
from transformer_cpp import task
from transformer_cpp.data import DataRecord, read_pairs, sentence_key, split_by_source
from transformer_cpp.text import cleaning_rules
from transformer_cpp.training import TrainConfig, Trainer

from helpers.toy_task import threads

# (language, letters of its script, whether it writes spaces between words)
SCRIPTS: List[Tuple[str, str, bool]] = [
    ("fr", "abcdeéèçàôœABCÉ", True),
    ("vi", "aăâđêôơưạảấầẩẫậ", True),
    ("el", "αβγδεζηθλμπσςωάέ", True),
    ("ru", "абвгдеёжзийклмнЯЖ", True),
    ("ar", "ابتثجحخدذرزسشصضطظعغفقكلمنهوي", True),
    ("he", "אבגדהוזחטיכלמנסעפצקרשת", True),
    ("hi", "कखगघचछजझटडतथदनपबमयरलवसह\u093e\u093f\u0940\u0941\u094d", True),
    ("ta", "அஆஇஈஉகஙசஞடணதநபமயரலவ\u0bbe\u0bbf", True),
    ("ka", "აბგდევზთიკლმნოპ", True),
    ("hy", "աբգդեզէըթժիլխծկ", True),
    ("am", "ሀለሐመሠረሰሸቀበተቸኀነ", True),
    ("ko", "가나다라마바사아자차카타파하한국어", True),
    ("zh", "我你他是的不了人在有这中大来上国个到说们为子和", False),
    ("ja", "あいうえおかきくけこアイウエオ日本語漢字", False),
    ("th", "กขคงจฉชซญดตถทนบปผพฟมยรลวสหอ\u0e31\u0e34\u0e35\u0e48", False),
    ("lo", "ກຂຄງຈຊຍດຕຖທນບປຜຝພຟມຢຣລວສຫອຮ", False),
    ("my", "ကခဂဃငစဆဇဈညဋဌဍဎဏတထဒဓန\u102c\u102d", False),
    ("tok", "😀🙂🐍🚀🌍✨👍🏽", True),  # emoji, with a skin-tone modifier, in a language without a table
]
PUNCTUATION = "。、，！？.,!?؟،।…«»“”"
SPACES = [" ", "  ", "\u3000", "\u00a0", "\u2009 "]


@st.composite
def sentence(draw, letters: str, spaced: bool) -> str:
    words = draw(st.lists(st.text(alphabet=letters, min_size=1, max_size=6), min_size=1, max_size=6))
    out = ""
    for i, word in enumerate(words):
        if i:
            out += draw(st.sampled_from(SPACES)) if spaced else draw(st.sampled_from(["", "", " "]))
        out += word
        if draw(st.booleans()) and draw(st.booleans()):
            out += draw(st.sampled_from(PUNCTUATION))
    lead = draw(st.sampled_from(["", " ", "\u3000"]))
    return lead + out + draw(st.sampled_from(["", " ", "  "]))


@st.composite
def corpus(draw) -> Tuple[str, str, List[Tuple[str, str]]]:
    (src_lang, src_letters, src_spaced), (tgt_lang, tgt_letters, tgt_spaced) = draw(
        st.lists(st.sampled_from(SCRIPTS), min_size=2, max_size=2, unique_by=lambda s: s[0])
    )
    pairs = draw(
        st.lists(
            st.tuples(sentence(src_letters, src_spaced), sentence(tgt_letters, tgt_spaced)), min_size=3, max_size=20
        )
    )
    return src_lang, tgt_lang, pairs


def expected(text: str) -> str:
    """What cleaning makes of ``text`` apart from the spaces the prefix rules put between run-on
    sentences: NFC and single spaces."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def same_but_whitespace(cleaned: str, text: str, lang: str) -> bool:
    """Whether cleaning changed only whitespace: exactly NFC and single spaces with the generic
    rules; with the prefix rules, at most some spaces more."""
    want = expected(text)
    if cleaning_rules(lang) == "generic":
        return cleaned == want
    return "".join(cleaned.split()) == "".join(want.split())


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(corpus())
def test_every_script_survives_the_pipeline(tmp_path_factory, case):
    src_lang, tgt_lang, pairs = case
    path = tmp_path_factory.mktemp("scripts") / "pairs.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    read = read_pairs(path, languages=(src_lang, tgt_lang), clean=True)
    # reading and cleaning: every pair kept, no sentence empty, nothing but whitespace changed
    assert len(read) == len(pairs)
    for (s, t), (cs, ct) in zip(pairs, read):
        assert cs and ct
        assert same_but_whitespace(cs, s, src_lang), (s, cs)
        assert same_but_whitespace(ct, t, tgt_lang), (t, ct)
    # splitting: every pair in one part, or left out as a reference seen elsewhere
    assume(len({sentence_key(x) for x in read.sources}) >= 5)  # fewer can leave no training pair
    split = split_by_source(read.sources, read.targets, 0.1, 0.1, seed=1)
    parts = np.concatenate([split.train, split.valid, split.test])
    assert len(set(parts.tolist())) == len(parts) and len(parts) + split.dropped == len(read)
    # encoding and decoding: lossless for every sentence, with vocabularies learnt from the
    # training part only
    train = split.train
    logging.getLogger("transformer_cpp.tokenizer").setLevel(logging.ERROR)
    for side in (read.sources, read.targets):
        tok = tc.SubwordTokenizer.build_from_corpus([side[i] for i in train], 300)
        ids = tok.encode_batch(side)
        assert tok.decode_batch(ids) == side
        encoded = tc.encode_pairs(side, side, tok, tok, None)
        for row, text in zip(encoded.src, side):
            assert tok.decode(row) == text


def test_a_language_pair_without_spaces_trains_and_translates(tmp_path):
    """Japanese to Thai, both without spaces between words: a substitution of 8 kana by 8 Thai
    letters, learnt by a tiny model; held-out sentences come back exactly."""
    kana, thai = "かきくけこさしす", "กขคงจฉชซ"
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(3000):
        idx = rng.integers(0, len(kana), size=int(rng.integers(1, 7)))
        lines.append("".join(kana[i] for i in idx) + "。\t" + "".join(thai[i] for i in idx) + "\n")
    path = tmp_path / "ja-th.tsv"
    path.write_text("".join(lines), encoding="utf-8")
    record = DataRecord(src_lang="ja", tgt_lang="th", vocab_size=300).check()
    split, record = task.load_split(str(path), record, task.quiet)
    raw = [tuple(line.rstrip("\n").split("\t")) for line in lines]
    assert set(zip(*split.train)) <= set(raw)  # cleaning (generic rules) changed nothing
    src_tok, tgt_tok = task.build_tokenizers(split, record, task.quiet)
    for name in ("train", "valid", "test"):
        sources, targets = split[name]
        assert src_tok.decode_batch(src_tok.encode_batch(sources)) == sources
        assert tgt_tok.decode_batch(tgt_tok.encode_batch(targets)) == targets
    max_length = task.choose_max_length(split, src_tok, tgt_tok, 0, task.quiet)
    train = task.encode_split(split, "train", src_tok, tgt_tok, max_length)
    model = tc.Transformer(
        src_tok.vocab_size, tgt_tok.vocab_size, d_model=32, n_layers=1, n_heads=2, d_ff=64, dropout=0.0, seed=0
    )
    with threads(1):
        Trainer(
            model, train, None, TrainConfig(epochs=15, batch_size=32, warmup=100, lr_scale=1.0, progress=False)
        ).fit()
    translator = tc.Translator(model, src_tok, tgt_tok, src_lang="ja", tgt_lang="th")
    sources, references = split.test
    outputs = translator.translate_batch(sources)
    exact = sum(o == r for o, r in zip(outputs, references))
    assert len(sources) >= 50 and exact >= 0.85 * len(sources), list(zip(sources, outputs, references))[:10]
    assert all(set(o) <= set(thai) for o, r in zip(outputs, references) if o == r)


def quick_recipe_snippet(workdir: Path, pairs, src_lang: str, tgt_lang: str, **small) -> str:
    """The few lines a notebook user writes to train the quick recipe on their own pairs (``small``
    only shrinks the recipe for the test: the snippet itself is what the documentation shows)."""
    from transformer_cpp.task import TrainRequest, new_trainer

    with open(workdir / "my_pairs.tsv", "w", encoding="utf-8") as f:  # one "source<TAB>target" line a pair
        f.writelines(f"{src}\t{tgt}\n" for src, tgt in pairs)
    request = TrainRequest(
        preset="quick",  # the command line's 10-minute recipe
        data_path=str(workdir / "my_pairs.tsv"),
        data={"src_lang": src_lang, "tgt_lang": tgt_lang},
        **small,
    )
    trainer = new_trainer(request, workdir / "runs" / f"{src_lang}-{tgt_lang}")
    trainer.fit()

    from transformer_cpp import Translator

    translator = Translator.from_checkpoint(workdir / "runs" / f"{src_lang}-{tgt_lang}")
    return translator.translate(pairs[0][0])  # type: ignore[return-value]


def test_the_python_snippet_trains_the_quick_recipe_on_own_pairs(tmp_path):
    words = [("chat", "cat"), ("chien", "dog"), ("livre", "book"), ("arbre", "tree"), ("oiseau", "bird")]
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(300):
        (a, x), (b, y) = (words[int(k)] for k in rng.integers(0, len(words), size=2))
        pairs.append((f"Le {a} et le {b}.", f"The {x} and the {y}."))
    small = dict(
        architecture={"d_model": 32, "d_ff": 64, "n_layers": 1, "n_heads": 2},
        training={"time_budget": 0.0, "epochs": 2, "max_tokens": 0, "batch_size": 32, "warmup": 20},
        threads=1,
        progress=False,
    )
    with threads(1):
        out = quick_recipe_snippet(tmp_path, pairs, "fr", "en", **small)
    assert isinstance(out, str) and out
    run = tmp_path / "runs" / "fr-en"
    assert (run / "latest").is_file()
    translator = tc.Translator.from_checkpoint(run)
    assert (translator.src_lang, translator.tgt_lang) == ("fr", "en")
