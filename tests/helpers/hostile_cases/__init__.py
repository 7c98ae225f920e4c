"""The hostile-input case table, run by the test suite (``tests/properties/test_hostile.py``) and by
``tools/hostile_campaign.py``: each case once, with its name, its call (API code, or a command
line with its standard input and files) and what must come of it (an exception of a given type
naming given fragments, or a correct result). ``base`` defines cases and their fixtures, ``runner``
runs and classifies them; the other modules hold the cases, grouped by what they attack, and
``extras`` the campaign-only ones (too slow for the test suite), registered under
``campaign_only()``.
"""

from __future__ import annotations

from typing import List

from . import layers, model, text, data, downloads, training, checkpoints, translation  # noqa: F401 (they register)
from . import command_line, language_model  # noqa: F401
from .base import CASES, Case, Context, Result, campaign_only, setup

with campaign_only():
    from . import extras  # noqa: F401

_names = [c.name for c in CASES]
_duplicates = sorted({n for n in _names if _names.count(n) > 1})
if _duplicates:
    raise RuntimeError(f"duplicate hostile case names: {_duplicates}")


def shared_cases() -> List[Case]:
    """The cases both the test suite and the campaign run."""
    return [c for c in CASES if not c.extra]


def campaign_cases() -> List[Case]:
    """The cases only the campaign runs."""
    return [c for c in CASES if c.extra]


__all__ = ["CASES", "Case", "Context", "Result", "campaign_cases", "setup", "shared_cases"]
