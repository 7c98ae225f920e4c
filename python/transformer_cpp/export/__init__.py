"""Export a trained model to other runtimes: CTranslate2, plain PyTorch, Hugging Face Transformers.

::

    transformer-cpp export --model runs/quick --to ctranslate2 exported-ct2 [--quantization int8]
    transformer-cpp export --model runs/quick --to torch exported-torch
    transformer-cpp export --model runs/quick --to transformers exported-hf

or :func:`export_ctranslate2` / :func:`export_torch` / :func:`export_transformers` from Python.
``--model`` is what ``translate`` takes: a run directory (its ``best`` checkpoint) or one checkpoint
directory. The output directory must not exist, or be empty; it is written under a temporary name
and renamed into place, so a failed export leaves nothing behind (one killed outright leaves its
staging directory, ``.export-<OUT>-<pid>-<random>``, which the next export to the same place
removes). The CTranslate2 and PyTorch exports hold the two subword vocabularies as Hugging Face
``tokenizers`` files (``source_tokenizer.json``, ``target_tokenizer.json``): transformer-cpp encodes
a sentence as ``" " + sentence`` without the tokenizer's own special tokens, between its start
(id 1) and end (id 2) tokens.

**CTranslate2** (:func:`export_ctranslate2`; needs ``pip install 'transformer-cpp[ctranslate2]'``):
a CTranslate2 model directory written through ``ctranslate2.specs.TransformerSpec``, the mapping
of :func:`convert_to_ctranslate2`. In float32 (no quantization) it is exact: CTranslate2's greedy
search gives our tokens (the benchmark and the tests check this) when called as ::

    translator = ctranslate2.Translator("exported-ct2")
    tokens = source_tokenizer.encode(" " + sentence, add_special_tokens=False).tokens
    result = translator.translate_batch([tokens], beam_size=1, suppress_sequences=[["<pad>"]],
                                        min_decoding_length=0, max_decoding_length=limit)

(the start and end tokens are added to the source by CTranslate2; ``suppress_sequences`` keeps the
padding token out of the output as our decoder does; our output limit is ``1.5 * source tokens
+ 10``). ``transformer_cpp.json`` in the directory records these options and where the model
came from. CTranslate2 has positions for 2,048 tokens or the model's own ``max_length``, whichever
is more; longer sentences are refused by it (not by transformer-cpp, which has no limit).

**PyTorch** (:func:`export_torch`; the export itself needs nothing beyond transformer-cpp, using
it needs ``torch``, ``safetensors`` and ``tokenizers``): ``model.safetensors`` (the state dict,
with our parameter names), ``config.json`` and ``transformer_torch.py``, a small module definition
in plain PyTorch that loads them and computes our logits (see that file's docstring).

**Hugging Face Transformers** (:func:`export_transformers`; writing needs nothing beyond
transformer-cpp, using it needs ``pip install 'transformer-cpp[transformers]'``): a MarianMT model
(``config.json``, ``generation_config.json``, ``model.safetensors``) and its tokenizer
(``tokenizer.json``, ``tokenizer_config.json``), which the library's own classes load, no
``trust_remote_code``::

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained("exported-hf")
    model = AutoModelForSeq2SeqLM.from_pretrained("exported-hf")
    batch = tokenizer(["How are you?"], return_tensors="pt", padding=True)
    print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))

``generate`` searches greedily, as ``transformer-cpp translate`` does by default, and gives our
tokens (the tests compare them, and the log-probabilities, on more than 100 sentences). The
Transformers 4 series also has ``pipeline("translation")`` (Transformers 5 removed it), which
searches with 4 beams unless told ``num_beams=1``. How the model maps:

* MarianMT is the paper's architecture as transformer-cpp builds it by default: post-norm
  sub-layers ``LN(x + sublayer(x))``, ReLU feed-forward, embeddings times ``sqrt(d_model)`` plus
  sinusoidal positions, biases everywhere, the output bias as ``final_logits_bias``. A pre-norm
  model has no MarianMT equivalent and is refused (export it to CTranslate2 or PyTorch).
* Positions: MarianMT computes its own table, sines in the first half of the model dimension and
  cosines in the second (our ``concatenated`` layout). For the ``interleaved`` layout (sine and
  cosine of each frequency side by side, the default) the export reorders the model dimension:
  every weight that reads it, writes it or normalises it is permuted by the same
  :func:`marian_permutation`, which changes no result, only the order of terms in sums.
* LayerNorm epsilon: MarianMT's is fixed at 1e-5, transformer-cpp's default is 1e-6. A model
  trained with 1e-5 (``train --layer-norm-eps 1e-5``) exports exactly (up to float32 rounding);
  any other epsilon becomes 1e-5, which moves the log-probabilities by a few 1e-5, a few times
  float32 rounding (``transformer_cpp.json`` says ``"exact"`` or not; the tests bound the
  difference for a model trained with 1e-6). No change of the weights can make up for it: the
  positions are added to the embeddings unscaled, which fixes the scale of the first LayerNorm's
  input.
* Special tokens: the decoder starts from our start token (``decoder_start_token_id`` 1, not
  Marian's usual padding id), ends at our end token (``eos_token_id`` 2), never outputs padding
  (``suppress_tokens`` [0]) and is not forced to end (``forced_eos_token_id`` none).
* One tokenizer for two vocabularies. A Transformers translation model has one tokenizer, which
  encodes the source and decodes the output. The export's tokenizer has one vocabulary made of
  the target vocabulary with its own ids, then each source token that the target vocabulary
  lacks. Both vocabularies are byte-level BPE, where a token stands for the same bytes whichever
  vocabulary holds it, so the tokenizer encodes with the source merges (producing source tokens
  only, under their new ids) and decodes any id to its bytes. The encoder's embedding has our
  source rows under the new ids (zeros for target-only tokens, which encoding never produces);
  the decoder's embedding and output layer keep our target rows and ids, and the extra ids get
  zero weights and a ``final_logits_bias`` of ``-inf``: never predicted, and the log-probabilities
  over the target vocabulary are ours. So the tokenizer is a plain ``PreTrainedTokenizerFast``
  from ``tokenizer.json``, which ``AutoTokenizer`` loads without custom code (a
  tokenizer class with two vocabularies, as Marian's own SentencePiece tokenizer has, would need
  ``trust_remote_code``). With one shared vocabulary there are no extra ids.
* Text: the tokenizer cleans whitespace as ``translate`` does (NFC, whitespace runs to one space,
  stripped), adds the leading space, and decodes to one line; ``translate`` also puts a space
  between two sentences typed without one (``"ofendas.Tom"``), which the tokenizer does not, so
  such input can differ.
  An empty sentence is ``<start> <end>`` without the token of one space that ``translate`` adds.
* Lengths and precision: MarianMT builds positions for 1,024 tokens (``MARIAN_POSITIONS``), so
  longer sources cannot be translated; ``generate`` stops at 512 tokens (``max_length``, where
  ``translate`` stops at ``1.5 * source tokens + 10``: pass ``max_new_tokens`` for that). Weights
  are float32.

``transformer_cpp.json`` in the directory records where the model came from and the epsilon, and
``README.md`` is a model card for sharing it.

The exports are tested to give our tokens and logits (``tests/integration/test_export.py``,
``tests/integration/test_export_transformers.py``).
"""

from __future__ import annotations

from .common import (
    CTRANSLATE2_OPTIONS,
    QUANTIZATIONS,
    TORCH_MODULE_FILE,
)
from .ctranslate2 import convert_to_ctranslate2, export_ctranslate2, import_ctranslate2
from .torch import export_torch
from ..pretrained.own_export import TARGET_TOKENIZER_FILE
from .marian import (
    MODEL_CARD_EXAMPLE,
    MARIAN_LAYER_NORM_EPS,
    MARIAN_MAX_LENGTH,
    MARIAN_POSITIONS,
    TRANSFORMERS_FILES,
    convert_to_marian,
    export_transformers,
    marian_permutation,
)

__all__ = [
    "CTRANSLATE2_OPTIONS",
    "MARIAN_LAYER_NORM_EPS",
    "MODEL_CARD_EXAMPLE",
    "MARIAN_MAX_LENGTH",
    "MARIAN_POSITIONS",
    "QUANTIZATIONS",
    "TARGET_TOKENIZER_FILE",
    "TORCH_MODULE_FILE",
    "TRANSFORMERS_FILES",
    "convert_to_ctranslate2",
    "convert_to_marian",
    "export_ctranslate2",
    "export_torch",
    "export_transformers",
    "import_ctranslate2",
    "marian_permutation",
]
