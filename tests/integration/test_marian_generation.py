"""An imported MarianMT model decodes as ``MarianMTModel.generate`` does: beam search with Hugging
Face's length rule (``length_penalty_mode="hf"``: ``log_prob / length ** penalty``, its candidate
and stopping rules, ``early_stopping`` False / True / "never", the forced end at the limit) against
``generate`` on random models, ids and scores; ``generation_config.json`` read into the run's
decoding defaults (used by ``Translator`` and ``translate`` unless an option overrides them), and a
rule this package does not implement refused by its field's name."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from transformers import MarianMTModel

from helpers.marian import marian_sources, tiny_marian_config, trimmed

from transformer_cpp.pretrained import load_marian
from transformer_cpp.pretrained.generation import generation_defaults
from transformer_cpp.translate import DecodeOptions
from transformer_cpp.translate.decoding import decode_rows

pytestmark = pytest.mark.torch  # the module imports PyTorch

VOCAB = 31
PAD = VOCAB - 1
STEPS = 9  # generated tokens at most
EARLY = {False: "heuristic", True: "first", "never": "never"}


def _model(tmp_path: Any, seed: int) -> Dict[str, Any]:
    torch.manual_seed(seed)
    config = tiny_marian_config(VOCAB, init_std=0.25)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, PAD] = -1e4  # both sides normalise alike when padding is this unlikely
        model.final_logits_bias[0, 0] += 1.5  # some hypotheses end before the limit
    path = tmp_path / f"marian-{seed}"
    model.save_pretrained(path)
    return {"hf": model, "ours": load_marian(path), "path": path}


def _sources() -> np.ndarray:
    return marian_sources(11, (3, 7, 1, 8, 5, 2, 6, 4), PAD)


def _trimmed(row: Any) -> List[int]:
    return trimmed(row, PAD)


def _generate(hf: Any, src: np.ndarray, **kwargs: Any) -> Any:
    with torch.no_grad():
        return hf.generate(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != PAD).long(),
            num_beams=4,
            num_return_sequences=4,
            do_sample=False,
            max_new_tokens=STEPS,
            output_scores=True,
            return_dict_in_generate=True,
            **kwargs,
        )


@pytest.fixture(scope="module")
def models(tmp_path_factory: Any) -> List[Dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("generation")
    return [_model(tmp, seed) for seed in (1, 2, 3)]


@pytest.mark.parametrize("forced", [None, 0])
@pytest.mark.parametrize("early", [False, True, "never"])
@pytest.mark.parametrize("penalty", [1.0, 0.6])
def test_beam_search_equals_generate(models: List[Dict[str, Any]], penalty: float, early: Any, forced: Any) -> None:
    src = _sources()
    differs = 0
    for m in models:
        out = _generate(m["hf"], src, length_penalty=penalty, early_stopping=early, forced_eos_token_id=forced)
        expected = [_trimmed(r[1:]) for r in out.sequences.numpy()]
        found = m["ours"].beam_search(
            src,
            PAD,
            0,
            STEPS,
            4,
            penalty,
            4,
            length_penalty_mode="hf",
            early_stopping=EARLY[early],
            force_end=forced is not None,
        )
        ours = [[int(v) for v in h[0]] for hyps in found for h in hyps]
        assert ours == expected  # all four hypotheses of every sentence, in order
        scores = np.array([h[1] for hyps in found for h in hyps])
        np.testing.assert_allclose(scores, out.sequences_scores.numpy(), rtol=1e-5, atol=1e-5)
        if forced is not None:
            assert all(h[-1] == 0 for h in ours)  # every hypothesis ends with the end token
        gnmt = m["ours"].beam_search(src, PAD, 0, STEPS, 4, penalty, 4)
        differs += sum(
            [int(v) for v in a[0]] != [int(v) for v in b[0]] or abs(a[1] - b[1]) > 1e-6
            for ha, hb in zip(found, gnmt)
            for a, b in zip(ha, hb)
        )
    assert differs > 0  # the rule matters: GNMT's scores (and here and there its choices) differ


def test_decode_rows_passes_the_rules(models: List[Dict[str, Any]]) -> None:
    m = models[0]
    src = _sources()
    rows = [[int(v) for v in r if v != PAD] for r in src]
    options = DecodeOptions(
        beam_size=4, length_penalty=1.0, length_penalty_mode="hf", force_end=True, max_output_tokens=STEPS
    )
    got = [h[0].ids for h in decode_rows(m["ours"], rows, PAD, 0, options)]
    out = _generate(m["hf"], src, length_penalty=1.0, early_stopping=False, forced_eos_token_id=0)
    assert got == [_trimmed(r[1:]) for r in out.sequences.numpy()[::4]]
    with pytest.raises(ValueError, match="early_stopping 'never' is a rule of length_penalty_mode 'hf'"):
        DecodeOptions(beam_size=4, early_stopping="never")


@pytest.mark.parametrize("forced", [None, 0])
def test_greedy_decoding_equals_generate_with_the_forced_end(models: List[Dict[str, Any]], forced: Any) -> None:
    """Greedy decoding (``beam_size`` 1) with ``force_end`` ends a sentence that reaches its limit
    with the end token, as generate's forced-EOS rule does with ``num_beams=1``; without it the
    sentence ends at the limit with the most likely token."""
    src = _sources()
    rows = [[int(v) for v in r if v != PAD] for r in src]
    cut = 0
    for m in models:
        with torch.no_grad():
            out = m["hf"].generate(
                input_ids=torch.tensor(src),
                attention_mask=torch.tensor(src != PAD).long(),
                num_beams=1,
                do_sample=False,
                max_new_tokens=STEPS,
                forced_eos_token_id=forced,
            )
        expected = [_trimmed(r[1:]) for r in out.numpy()]
        options = DecodeOptions(beam_size=1, force_end=forced is not None, max_output_tokens=STEPS)
        got = [h[0].ids for h in decode_rows(m["ours"], rows, PAD, 0, options)]
        assert got == expected
        cut += sum(len(ids) == STEPS for ids in got)
        if forced is not None:
            assert all(ids[-1] == 0 for ids in got)
    assert cut > 0  # some sentences reach the limit: the rule is exercised


def _write_generation(path: Any, **fields: Any) -> None:
    rules = {"bad_words_ids": [[PAD]], "decoder_start_token_id": PAD, "eos_token_id": 0, "pad_token_id": PAD}
    rules.update(fields)
    (path / "generation_config.json").write_text(json.dumps(rules), encoding="utf-8")


def test_generation_config_becomes_the_decoding_defaults(models: List[Dict[str, Any]]) -> None:
    m = models[0]
    # suppressing the padding id changes nothing: the decoders never emit it
    _write_generation(
        m["path"], num_beams=6, max_length=512, length_penalty=0.8, forced_eos_token_id=0, suppress_tokens=[PAD]
    )
    got = generation_defaults(m["path"], m["ours"].config)
    assert got == {
        "length_penalty_mode": "hf",
        "beam_size": 6,
        "length_penalty": 0.8,
        "early_stopping": "heuristic",
        "force_end": True,
        "max_output_tokens": 511,  # max_length counts the decoder's start token
    }


@pytest.mark.parametrize(
    "field, value",
    [
        ("no_repeat_ngram_size", 3),
        ("repetition_penalty", 1.2),
        ("do_sample", True),
        ("min_length", 4),
        ("bad_words_ids", [[PAD], [5]]),
        ("suppress_tokens", [PAD, 5]),
        ("forced_eos_token_id", 3),
        ("decoder_start_token_id", 2),
        ("num_beam_groups", 2),
    ],
)
def test_a_rule_we_do_not_follow_is_refused_by_name(models: List[Dict[str, Any]], field: str, value: Any) -> None:
    m = models[1]
    _write_generation(m["path"], **{field: value})
    try:
        with pytest.raises(ValueError, match=f"generation_config.json's {field} is"):
            generation_defaults(m["path"], m["ours"].config)
    finally:
        (m["path"] / "generation_config.json").unlink()
