"""The attention kinds' records (attention_kinds()) say what the code does: each record's claims
are checked against the layers that read them (the reversible stack, the language model's
memory and generation), so a record and the behaviour cannot drift apart."""

from __future__ import annotations

import pytest

import transformer_cpp as tc
from transformer_cpp.config import LanguageModelConfig, attention_kind, attention_kinds, quoted_kinds

KINDS = attention_kinds()
SMALL = dict(d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=16, pre_norm=True)


def test_the_records_name_the_kinds_of_the_configuration_once_each():
    names = [k.name for k in KINDS]
    assert len(set(names)) == len(names)
    field = next(f for f in LanguageModelConfig.fields() if f.name == "attention")
    assert list(field.limit.choices) == names
    assert all(attention_kind(n).name == n for n in names)
    with pytest.raises(ValueError, match=r"attention must be one of 'softmax', 'linear', 'lsh', 'relative', got 'x'"):
        attention_kind("x")


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_reversible_stack_accepts_exactly_the_kinds_whose_record_says_so(kind):
    if kind.reversible:
        tc.ReversibleStack(1, 8, 2, 16, attention=kind.name)
    else:
        with pytest.raises(ValueError, match=f"one of {quoted_kinds(lambda k: k.reversible).replace(' or ', ', ')}"):
            tc.ReversibleStack(1, 8, 2, 16, attention=kind.name)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_language_model_memory_and_reversible_follow_the_record(kind):
    if kind.memory:
        tc.LanguageModel(7, attention=kind.name, memory_length=4, **SMALL)
    else:
        with pytest.raises(ValueError, match="memory_length 4 needs attention 'relative'"):
            tc.LanguageModel(7, attention=kind.name, memory_length=4, **SMALL)
    if kind.reversible:
        tc.LanguageModel(7, attention=kind.name, reversible=True, **SMALL)
    else:
        with pytest.raises(ValueError, match="reversible=True needs attention 'softmax', 'linear' or 'lsh'"):
            tc.LanguageModel(7, attention=kind.name, reversible=True, **SMALL)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_cached_step_exactly_when_the_record_says_so(kind):
    assert tc.LanguageModel(7, attention=kind.name, **SMALL).has_cached_step == kind.has_cached_step
