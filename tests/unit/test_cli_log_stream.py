"""The training commands' log lines (epoch summaries, the checkpoint average) go to the standard
error of the moment they are written: a command run with its standard error redirected (a test's
``redirect_stderr``, a program's) leaves later commands of the process showing theirs."""

import contextlib
import io
import logging

from transformer_cpp.cli.train import show_epoch_summaries


def _say(text: str) -> None:
    show_epoch_summaries()
    logging.getLogger("transformer_cpp.training").info(text)


def test_a_later_command_shows_its_lines_after_a_redirected_one(capsys):
    earlier = io.StringIO()
    with contextlib.redirect_stderr(earlier):
        _say("the redirected command's line")
    assert "the redirected command's line" in earlier.getvalue()
    _say("a later command's line")
    assert capsys.readouterr().err.count("a later command's line") == 1  # one handler, not one per command
