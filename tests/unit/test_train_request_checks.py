import pytest

from transformer_cpp.task.request_checks import check_training_settings
from transformer_cpp.task.translation import TrainRequest, requested_settings


def test_threads_inside_training_names_the_request_argument() -> None:
    with pytest.raises(TypeError, match=r"TrainRequest\(threads=\.\.\.\)"):
        requested_settings(TrainRequest(training={"threads": 1}), None)


def test_typo_names_the_setting_and_the_closest_name() -> None:
    with pytest.raises(TypeError, match=r"unknown setting 'epoch' in training=; did you mean 'epochs'\?"):
        check_training_settings({"epoch": 3})


def test_the_allowed_list_holds_only_what_training_takes() -> None:
    with pytest.raises(TypeError) as e:
        check_training_settings({"epoch": 3})
    allowed = str(e.value).split("(allowed: ", 1)[1].rstrip(")").split(", ")
    assert "epochs" in allowed and not {"threads", "progress", "adaptive_threads"} & set(allowed)
    check_training_settings({name: None for name in allowed})  # every name it lists is taken


def test_valid_settings_pass_through() -> None:
    _, train, _ = requested_settings(TrainRequest(training={"epochs": 3}), None)
    assert train == {"epochs": 3}
