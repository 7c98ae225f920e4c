"""Importing a Hugging Face MarianMT model (``transformer_cpp.pretrained.load_marian``): MarianMT
models built locally with random weights, one per option the published checkpoints use (the
activation, the embedding scale, different encoder and decoder depths, one shared vocabulary or
two, a tied or separate output layer), saved with ``save_pretrained`` and read back; our logits,
greedy tokens and beam-search tokens against MarianMTModel's own; an unsupported option refused
naming its field; the export of an imported model giving the same weights back."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from transformers import MarianMTModel

from helpers.marian import marian_sources, tiny_marian_config, trimmed

from transformer_cpp import export
from transformer_cpp.pretrained import load_marian

pytestmark = pytest.mark.torch  # the module imports PyTorch

V_SRC, V_TGT = 29, 23
STEPS = 10  # generated tokens at most


def marian(tmp_path: Any, *, vocab_shared: bool = True, **options: Any) -> Dict[str, Any]:
    """A random MarianMTModel saved into tmp_path; pad (= decoder start) is the last shared id, end 0."""
    v_tgt = V_SRC if vocab_shared else V_TGT
    pad = min(V_SRC, v_tgt) - 1
    settings: Dict[str, Any] = dict(
        pad=pad,
        decoder_vocab_size=v_tgt,
        share_encoder_decoder_embeddings=vocab_shared,
        decoder_layers=3,
        init_std=0.25,  # weights large enough that the output depends on the source
    )
    settings.update(options)
    torch.manual_seed(7)
    model = MarianMTModel(tiny_marian_config(V_SRC, **settings)).eval()
    with torch.no_grad():
        bias = model.final_logits_bias
        bias.normal_(0.0, 0.5)
        # Transformers normalises the beam scores over every id and then forbids padding; we
        # normalise over every id but padding: a padding logit far below the rest makes the two the same.
        bias[0, pad] = -1e4
        # the end id's bias: the first at which some test sentences end early and others run to the
        # limit, with different outputs (a random model's greedy output is otherwise often the same)
        base = float(bias[0, 0])
        for boost in np.arange(0.0, 6.0, 0.25):
            bias[0, 0] = base + boost
            found = hf_generate({"hf": model, "pad": pad}, sources(pad), 1)
            if len({tuple(r) for r in found}) > 1 and 0 < sum(r[-1:] == [0] for r in found) < len(found):
                break
    path = tmp_path / "marian"
    model.save_pretrained(path)
    return {"hf": model, "ours": load_marian(path), "pad": pad, "path": path}


def sources(pad: int) -> np.ndarray:
    return marian_sources(3, (3, 6, 1, 8, 5, 2), pad)


def hf_generate(m: Dict[str, Any], src: np.ndarray, beams: int) -> List[List[int]]:
    with torch.no_grad():
        out = m["hf"].generate(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != m["pad"]).long(),
            num_beams=beams,
            do_sample=False,
            max_new_tokens=STEPS,
            **(dict(length_penalty=0.0, early_stopping=False) if beams > 1 else {}),
        )
    return [trimmed(row[1:], m["pad"]) for row in out.numpy()]  # without the decoder start token


CASES = {
    "relu, scaled, shared vocabulary, tied output": dict(activation_function="relu", scale_embedding=True),
    "gelu, unscaled, untied output": dict(activation_function="gelu", scale_embedding=False, tie_word_embeddings=False),
    "swish, two vocabularies, tied output": dict(activation_function="swish", scale_embedding=True, vocab_shared=False),
    "silu, two vocabularies, untied output": dict(
        activation_function="silu", scale_embedding=False, vocab_shared=False, tie_word_embeddings=False
    ),
}


@pytest.fixture(params=list(CASES), scope="function")
def case(request: Any, tmp_path: Any) -> Dict[str, Any]:
    return marian(tmp_path, **CASES[request.param])


def test_config_maps_every_option(case: Dict[str, Any]) -> None:
    c, hf = case["ours"].config, case["hf"].config
    assert (c["n_encoder_layers"], c["n_decoder_layers"]) == (2, 3)
    assert (
        c["activation"] == {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}[hf.activation_function]
    )
    assert c["scale_embedding"] == hf.scale_embedding
    # a weight is shared where MarianMTModel holds one tensor for it (with tie_word_embeddings false
    # Transformers ties nothing, whatever share_encoder_decoder_embeddings says)
    model = case["hf"].model
    same = model.encoder.embed_tokens.weight.data_ptr() == model.decoder.embed_tokens.weight.data_ptr()
    assert c["share_source_embedding"] == same
    assert c["share_embeddings"] == (
        case["hf"].lm_head.weight.data_ptr() == model.decoder.embed_tokens.weight.data_ptr()
    )
    assert c["share_embeddings"] == hf.tie_word_embeddings
    assert (c["pad_id"], c["start_id"], c["end_id"]) == (case["pad"], case["pad"], 0)


def test_logits_match_on_padded_batches(case: Dict[str, Any]) -> None:
    pad = case["pad"]
    src = sources(pad)
    rng = np.random.default_rng(5)
    lengths = [4, 2, 6, 1, 3, 5]
    tgt = np.full((len(src), max(lengths)), pad, dtype=np.int64)
    for i, n in enumerate(lengths):
        tgt[i, 1:n] = rng.integers(1, pad, size=n - 1)  # column 0 is the start id (= pad)
    with torch.no_grad():
        ref = case["hf"](
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != pad).long(),
            decoder_input_ids=torch.tensor(tgt),
        ).logits.numpy()
    got = case["ours"].forward(src, tgt)
    assert got.shape == ref.shape
    # the real positions (MarianMTModel computes the padding positions too, attending to
    # themselves; we mask padding keys, so only the positions after a sentence differ)
    real = np.arange(tgt.shape[1])[None, :] < np.array(lengths)[:, None]
    scale = np.abs(ref[real]).max()
    np.testing.assert_allclose(got[real], ref[real], rtol=0, atol=1e-4 * scale)


def test_greedy_equals_generate(case: Dict[str, Any]) -> None:
    pad = case["pad"]
    src = sources(pad)
    ours = [trimmed(row, pad) for row in case["ours"].greedy_decode(src, pad, 0, STEPS)]
    assert ours == hf_generate(case, src, 1)
    assert len({tuple(r) for r in ours}) > 1  # the sentences are not all translated alike
    assert any(r[-1] == 0 for r in ours) and any(r[-1] != 0 for r in ours)


def test_beam_search_equals_generate(case: Dict[str, Any]) -> None:
    # length_penalty 0 on both sides: Transformers divides by length ** penalty, we by the GNMT
    # ((5 + length) / 6) ** alpha; the two agree only at 0 (no normalisation)
    pad = case["pad"]
    src = sources(pad)
    found = case["ours"].beam_search(src, pad, 0, STEPS, 4, 0.0, 1)
    ours = [[int(v) for v in hyps[0][0]] for hyps in found]
    assert ours == hf_generate(case, src, 4)


@pytest.mark.parametrize(
    "field, value",
    [
        ("model_type", "bart"),
        ("activation_function", "gelu_new"),
        ("scale_embedding", 2),
        ("normalize_before", True),
        ("add_bias_logits", True),
        ("decoder_attention_heads", 2),
    ],
)
def test_unsupported_options_are_refused_by_name(tmp_path: Any, field: str, value: Any) -> None:
    m = marian(tmp_path)
    config = json.loads((m["path"] / "config.json").read_text())
    config[field] = value
    (m["path"] / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"config.json's {field} is"):
        load_marian(m["path"])


def test_vocabulary_mismatch_is_refused(tmp_path: Any) -> None:
    m = marian(tmp_path)
    config = json.loads((m["path"] / "config.json").read_text())
    config["vocab_size"] = V_SRC + 1
    config["decoder_vocab_size"] = V_SRC + 1
    (m["path"] / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"has shape \(29, 16\) but the configuration gives \(30, 16\)"):
        load_marian(m["path"])


def test_pytorch_bin_is_read_without_executing_pickles(tmp_path: Any) -> None:
    m = marian(tmp_path, activation_function="gelu")
    state = {k: v.contiguous() for k, v in m["hf"].state_dict().items()}
    (m["path"] / "model.safetensors").unlink()
    torch.save(state, m["path"] / "pytorch_model.bin")
    again = load_marian(m["path"])
    for name, p in m["ours"].parameters().items():
        np.testing.assert_array_equal(again.parameters()[name].value, p.value, err_msg=name)


@pytest.mark.parametrize("name", list(CASES))
def test_export_of_an_imported_model_gives_the_weights_back(tmp_path: Any, name: str) -> None:
    m = marian(tmp_path, **CASES[name])
    files = export.convert_to_marian(m["ours"], None, None)
    saved = {k: v.detach().numpy() for k, v in m["hf"].state_dict().items() if "embed_positions" not in k}
    for key, value in files["weights"].items():
        np.testing.assert_array_equal(value, saved[key], err_msg=key)
    # every saved tensor is exported (model.shared is no weight of a model whose embeddings differ)
    shared = m["ours"].config["share_source_embedding"]
    assert set(saved) - set(files["weights"]) <= (set() if shared else {"model.shared.weight"})
    config = json.loads((m["path"] / "config.json").read_text())
    for key in ("scale_embedding", "encoder_layers", "decoder_layers", "pad_token_id", "eos_token_id", "d_model"):
        assert files["config"][key] == config[key], key
    activation = files["config"]["activation_function"]
    assert activation == {"silu": "swish"}.get(config["activation_function"], config["activation_function"])
