from transformer_cpp.training.wording import plural


def test_one_is_singular_and_others_plural() -> None:
    assert plural(1, "minute") == "1 minute"
    assert plural(1.0, "minute") == "1 minute"
    assert plural(2, "epoch") == "2 epochs"
    assert plural(0, "longer one") == "0 longer ones"
    assert plural(2.5, "minute") == "2.5 minutes"
    assert plural(8000, "pair") == "8,000 pairs"
