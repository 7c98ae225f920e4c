"""Count-aware wording for log lines ("1 minute", "2 minutes")."""

from __future__ import annotations


def plural(count: float, singular: str, many: str | None = None) -> str:
    """``count`` followed by ``singular`` when it is exactly one, otherwise by ``many``
    (``singular + "s"`` unless given); integers get thousands separators, others ``:g``."""
    word = singular if count == 1 else (many if many is not None else singular + "s")
    shown = f"{count:,}" if isinstance(count, int) else f"{count:g}"
    return f"{shown} {word}"
