"""Translator: exact translations of a learnable toy language, C++ vs Python greedy decoding, beam
search, attention weights, truncation, evaluation with BLEU/chrF."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp.checkpoint import CheckpointError, save_checkpoint
from transformer_cpp.plotting import attention_heatmap
from transformer_cpp.training import TrainConfig, Trainer
from transformer_cpp.translate import Translation, Translator, evaluate, greedy_decode, greedy_decode_reference

from helpers.toy_task import threads, SYMBOLS, reversal_pairs, tiny_model
from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)


@pytest.fixture(scope="module")
def held_out():
    """Sentences the model never saw in training (the training pairs use another seed)."""
    src, tgt = reversal_pairs(300, seed=1234)
    train_src = set(reversal_pairs(2000, seed=0)[0])
    keep = [i for i, s in enumerate(src) if s not in train_src]
    assert len(keep) > 30
    return [src[i] for i in keep], [tgt[i] for i in keep]


@pytest.fixture(scope="module")
def translator(tok):
    """A model trained to reverse sequences of a-f (about a second of training)."""
    src, tgt = reversal_pairs(2000, seed=0)
    enc = tc.encode_pairs(src, tgt, tok, tok, 8)
    model = tiny_model(tok)
    Trainer(model, enc, None, TrainConfig(epochs=20, batch_size=32, warmup=100, lr_scale=1.0, progress=False)).fit()
    return Translator(model, tok, tok)


def test_translates_the_toy_language_exactly(translator, held_out):
    src, tgt = held_out
    out = translator.translate_batch(src)
    wrong = [(s, o, t) for s, o, t in zip(src, out, tgt) if o != t]
    assert not wrong, wrong[:5]
    assert translator.translate("a b c d") == "d c b a"
    assert translator.translate("  f   e\t") == "e f"  # cleaned like the training data
    # chunking does not change anything
    assert translator.translate_batch(src, batch_size=7) == out
    assert [translator.translate(s) for s in src[:10]] == out[:10]


def test_cpp_greedy_decoding_matches_the_python_reference(translator, tok, held_out):
    model = translator.model
    src = tc.encode_pairs(held_out[0], held_out[1], tok, tok, 8).src  # padded batch of varied lengths
    cpp = model.greedy_decode(src, tok.start_id, tok.end_id, 8)
    ref = greedy_decode_reference(model, src, tok.start_id, tok.end_id, 8)
    np.testing.assert_array_equal(cpp, ref)
    np.testing.assert_array_equal(greedy_decode(model, src, tok.start_id, tok.end_id, 8), ref)
    # each row: ids up to and including the end token, then padding
    for row in ref:
        ids = list(row[row != 0])
        assert ids[-1] == tok.end_id and tok.end_id not in ids[:-1] and 0 not in ids
        assert list(row[len(ids) :]) == [0] * (len(row) - len(ids))


def test_greedy_reference_on_an_untrained_model_hits_max_length(tok):
    """An untrained model rarely stops: both paths cut at max_length the same way."""
    model = tiny_model(tok, seed=11)
    src = np.random.default_rng(0).integers(4, tok.vocab_size, size=(6, 7))
    for limit in (1, 3, 8, 50):
        cpp = model.greedy_decode(src, tok.start_id, tok.end_id, limit)
        ref = greedy_decode_reference(model, src, tok.start_id, tok.end_id, limit)
        np.testing.assert_array_equal(cpp, ref)
        assert ref.shape[1] <= limit


def test_greedy_decode_falls_back_to_python(translator, tok):
    class PythonOnly:  # a model without the C++ greedy_decode
        def __init__(self, model):
            self._m = model
            self.config = model.config

        def forward(self, src, tgt_in, training=False):
            return self._m.forward(src, tgt_in, training)

    src = np.array([[1, 11, 12, 13, 2]], dtype=np.int64)
    slow = greedy_decode(PythonOnly(translator.model), src, tok.start_id, tok.end_id, 8)
    np.testing.assert_array_equal(slow, translator.model.greedy_decode(src, tok.start_id, tok.end_id, 8))


def test_beam_search(translator, held_out):
    src, tgt = held_out
    assert translator.translate_batch(src[:40], beam_size=4) == tgt[:40]
    t = translator.translate("c a f", beam_size=3, return_attention=True)
    assert t.text == "f a c" and t.score is not None and t.score < 0 and t.finished


def test_return_attention(translator, tok):
    t = translator.translate("a b c d e", return_attention=True)
    assert isinstance(t, Translation) and str(t) == t.text == "e d c b a"
    assert t.source_ids == tok.encode("a b c d e") and t.target_ids[-1] == tok.end_id
    assert t.source_pieces == ["<start>", "\u2581a", "\u2581b", "\u2581c", "\u2581d", "\u2581e", "<end>"]
    assert t.target_pieces == ["\u2581e", "\u2581d", "\u2581c", "\u2581b", "\u2581a", "<end>"]
    assert list(t.attention) == ["decoder.layers.0.cross_attention"]
    w = t.cross_attention()
    assert w.shape == (2, len(t.target_ids), len(t.source_ids))  # (heads, target, source)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-5)
    # the weights recorded while decoding are those of a forward pass on [start] + output[:-1]
    # (float32: the cached steps and the forward pass round apart, by ~1e-8 on weights <= 1)
    model = translator.model
    model.forward(np.array([t.source_ids]), np.array([[tok.start_id] + t.target_ids[:-1]]))
    np.testing.assert_allclose(model.attention_weights()["decoder.layers.0.cross_attention"][0], w, rtol=0, atol=1e-6)
    # in a batch, padding is cut away
    batch = translator.translate_batch(["a", "a b c d e"], return_attention=True)
    assert batch[0].cross_attention().shape == (2, 2, 3)
    np.testing.assert_allclose(batch[1].cross_attention(), w, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="return_attention=True"):
        Translation("a", "a", [1], [2], [], [], True).cross_attention()
    fig = attention_heatmap(w, t.source_pieces, t.target_pieces)
    assert len(fig.axes) == 3  # two heads and a colour bar


def test_long_input_is_translated_whole(translator, tok):
    long = " ".join(SYMBOLS + SYMBOLS)  # 12 symbols + start/end > the positional table's 8 rows
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no training length recorded: no warning, and no truncation
        t = translator.translate(long, return_attention=True)
    assert len(t.source_ids) == 14 and t.source_ids[-1] == tok.end_id
    assert t.cross_attention().shape[-1] == 14
    assert len(t.target_ids) <= 1.5 * 14 + 10


def test_max_output_tokens_limits_the_output(translator):
    t = translator.translate("a b c d e", max_output_tokens=3, return_attention=True)
    assert len(t.target_ids) == 3 and not t.finished and t.text == "e d c"
    model, src, tgt = translator.model, translator.src_tokenizer, translator.tgt_tokenizer
    assert Translator(model, src, tgt, max_output_tokens=1000).max_output_tokens == 1000


def test_max_length_is_a_deprecated_name_of_max_output_tokens(translator, tmp_path):
    """The old name still works everywhere the new one does, with a DeprecationWarning that points
    at the caller's line and names the new one."""
    model, src, tgt = translator.model, translator.src_tokenizer, translator.tgt_tokenizer
    save_checkpoint(tmp_path, model, src, tgt, optimizer=False)
    calls = {
        "Translator.from_checkpoint": lambda: Translator.from_checkpoint(tmp_path, max_length=3).translate("a b c d e"),
        "Translator": lambda: Translator(model, src, tgt, max_length=3).translate("a b c d e"),
        "Translator.translate": lambda: translator.translate("a b c d e", max_length=3),
        "Translator.translate_batch": lambda: translator.translate_batch(["a b c d e"], max_length=3)[0],
    }
    for who, call in calls.items():
        with pytest.warns(DeprecationWarning, match=f"^{who}: max_length is deprecated .* use max_output_tokens") as w:
            assert call() == "e d c", who
        assert len(w) == 1 and w[0].filename == __file__, (who, w[0].filename)
    with pytest.warns(DeprecationWarning, match="use max_output_tokens"):
        translator.max_length = 3
    try:
        assert translator.max_output_tokens == 3
        with pytest.warns(DeprecationWarning, match="use max_output_tokens"):
            assert translator.max_length == 3
    finally:
        translator.max_output_tokens = None
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="give only max_output_tokens"):
        translator.translate("a", max_length=3, max_output_tokens=4)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="max_output_tokens must be"):
        translator.translate("a", max_length=0)


def test_bad_arguments(translator, tok):
    with pytest.raises(TypeError, match="translate_batch"):
        translator.translate(["a b"])
    with pytest.raises(TypeError, match="single string"):
        translator.translate_batch("a b")
    with pytest.raises(ValueError, match="beam_size"):
        translator.translate("a", beam_size=0)
    with pytest.raises(ValueError, match="max_output_tokens"):
        translator.translate("a", max_output_tokens=0)
    other = tc.SubwordTokenizer.build_from_corpus(["x y z"] * 3, 9, min_frequency=1)
    with pytest.raises(ValueError, match="tgt_tokenizer has"):
        Translator(translator.model, tok, other)
    assert translator.translate_batch([]) == []


def test_from_checkpoint(translator, tok, tmp_path, held_out):
    save_checkpoint(tmp_path, translator.model, tok, tok, data={"src_lang": "en"}, optimizer=False)
    loaded = Translator.from_checkpoint(tmp_path)
    assert loaded.checkpoint == tmp_path / "epoch-0000"
    assert loaded.translate_batch(held_out[0][:20]) == held_out[1][:20]
    (tmp_path / "epoch-0000" / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="model.safetensors"):
        Translator.from_checkpoint(tmp_path)


def test_evaluate_scores(translator, held_out):
    src, tgt = held_out
    result = evaluate(translator, src, tgt, tgt_lang=None)
    assert result.bleu == pytest.approx(100.0) and result.chrf == pytest.approx(100.0)
    assert result.accuracy == 1.0 and 0 <= result.loss < 0.1
    assert result.sentences == result.scored_pairs == len(src)
    assert result.hypotheses == tgt and "BLEU 100.00" in result.summary()
    assert "tok:13a" in result.bleu_signature
    # a bad system scores lower, by sacrebleu's own numbers
    import sacrebleu

    wrong = evaluate(translator, src, [s for s in src], tgt_lang=None)  # references not reversed
    assert wrong.bleu == pytest.approx(sacrebleu.corpus_bleu(tgt, [src]).score)
    assert wrong.bleu < 100 and wrong.accuracy < 1.0
    with pytest.raises(ValueError, match="2 sources but 1 references"):
        evaluate(translator, ["a", "b"], ["a"])
    # the toy split repeats a few sources (with the same translation): each is scored once
    assert result.sources == len(set(src)) and result.multi_bleu == pytest.approx(100.0)
    once = {s: i for i, s in reversed(list(enumerate(src)))}
    firsts = sorted(once.values())
    expected = sacrebleu.corpus_chrf([wrong.hypotheses[i] for i in firsts], [[src[i] for i in firsts]])
    assert wrong.multi_chrf == pytest.approx(expected.score)


def test_evaluate_counts_every_reference_of_a_repeated_source(translator, held_out):
    """One source with two translations: single-reference BLEU counts the output wrong against one
    of them; the all-references score is sacrebleu's with both references, once per source."""
    import sacrebleu

    firsts = {s: t for s, t in reversed(list(zip(*held_out)))}  # distinct sources
    src, tgt = list(firsts)[:6], list(firsts.values())[:6]
    other = [" ".join(reversed(t.split())) + " extra" for t in tgt]  # a second, different reference
    sources = src + [s.upper() for s in src[:3]]  # the same sentences (case ignored, as the split does)
    refs = tgt + other[:3]
    result = evaluate(translator, sources, refs, tgt_lang=None)
    assert result.sentences == 9 and result.sources == 6
    hyps = result.hypotheses[:6]
    assert hyps == tgt  # the toy model is exact
    assert result.bleu == pytest.approx(sacrebleu.corpus_bleu(result.hypotheses, [refs]).score) and result.bleu < 100
    expected = sacrebleu.corpus_bleu(hyps, [tgt, other[:3] + [None] * 3])
    assert result.multi_bleu == pytest.approx(expected.score) == pytest.approx(100.0)
    assert result.multi_chrf == pytest.approx(100.0)


def test_translate_batch_governs_threads_and_gives_them_back(translator, held_out):
    """With two threads, translate_batch times each chunk through the translator's
    ThreadGovernor (kept across calls), answers as with fixed threads, and leaves the core with
    the two threads; with adaptive_threads off there is no governor."""
    sources = held_out[0][:40]
    with threads(2):
        expected = translator.translate_batch(sources, batch_size=4)  # governed: 10 chunks
        governor = translator._governor
        assert governor is not None and governor.most == 2 and governor._units == 10
        assert tc.get_num_threads() == 2
        translator.translate_batch(sources, batch_size=8)
        assert translator._governor is governor and governor._units == 15
        translator.adaptive_threads = False
        try:
            assert translator.translate_batch(sources, batch_size=4) == expected
            assert governor._units == 15 and tc.get_num_threads() == 2
        finally:
            translator.adaptive_threads = True


def test_a_translation_is_one_line_whatever_the_model_emits():
    """A model can emit any byte, a line break among them (here: an output bias that makes the
    newline byte win): the text is one line, whitespace runs as one space, as the cleaned
    training targets are; the command line's output lines stay aligned with its inputs."""
    from transformer_cpp.translate import one_line

    corpus = ["the cat and the dog", "el gato y el perro"] * 3
    tok = tc.SubwordTokenizer.build_from_corpus(corpus, 300, min_frequency=1)
    newline = [i for i in tok.encode("a\nb", add_special_tokens=False) if tok.id_to_token(i) == "Ċ"]
    assert newline
    model = tc.Transformer(tok.vocab_size, tok.vocab_size, d_model=8, n_layers=1, n_heads=2, d_ff=16, dropout=0.0)
    translator = Translator(model, tok, tok, src_lang=None)
    model.parameters()["output.bias"].value[newline[0]] = 1e3
    src = np.array([tok.encode("the cat")])
    assert tok.decode(model.greedy_decode(src, tok.start_id, tok.end_id, 5)[0]) == "\n" * 5
    assert translator.translate_batch(["the cat", "the dog"], max_output_tokens=5) == ["", ""]
    assert translator.translate("the cat", max_output_tokens=5, beam_size=2) == ""
    assert one_line(" a\n\n b\r\nc\u2028d\x0b e\t") == "a b c d e"


def test_adaptive_threads_and_max_output_tokens_are_checked_when_set(translator):
    """translator.max_output_tokens = 'x' failed at the next translation with "invalid literal for int()",
    2.5 with an internal TypeError."""
    with pytest.raises(TypeError, match="Translator: adaptive_threads must be True or False, got 'no'"):
        translator.adaptive_threads = "no"
    assert translator.adaptive_threads is True
    for bad in (-1, "x", 2.5, 10**6):  # a value of the wrong type: TypeError, the same message
        error = ValueError if isinstance(bad, int) else TypeError
        with pytest.raises(error, match=r"Translator: max_output_tokens must be an integer in \[1, 100000\]"):
            translator.max_output_tokens = bad
    assert translator.max_output_tokens is None
    translator.max_output_tokens = 3
    try:
        assert len(translator.translate_batch(["a b c d"], return_attention=True)[0].target_ids) <= 3
    finally:
        translator.max_output_tokens = None


def test_a_run_directory_translates_with_its_best_checkpoint_as_the_help_says(translator, tmp_path):
    from transformer_cpp import cli
    from transformer_cpp.checkpoint import mark_best

    model, tok = translator.model, translator.src_tokenizer
    for name in ("epoch-0001", "epoch-0002"):
        save_checkpoint(tmp_path, model, tok, tok, name=name, optimizer=False)
    assert Translator.from_checkpoint(tmp_path).checkpoint.name == "epoch-0002"  # no best yet: the latest
    mark_best(tmp_path, "epoch-0001")
    assert Translator.from_checkpoint(tmp_path).checkpoint.name == "epoch-0001"
    commands = next(a for a in cli.build_parser()._actions if hasattr(a, "choices") and a.choices).choices
    for command in ("translate", "evaluate", "serve", "export"):
        (model_help,) = [a.help for a in commands[command]._actions if "--model" in a.option_strings]
        assert "its best checkpoint by validation BLEU, its latest if it has none" in model_help, command
