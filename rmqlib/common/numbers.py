"""Decimal numbers written as text: property values, directory names, command arguments.

``str.isdigit`` is true for characters ``int`` refuses (``"²"``), so a check with it lets
such text through to a ``ValueError`` far from the input. Every decimal text in rmqlib is
read here: ASCII digits only, anything else is "not a number" where it is met.
"""

from __future__ import annotations


def is_decimal(text: str) -> bool:
    """Only ASCII digits, at least one."""
    return text.isascii() and text.isdigit()


def decimal_or_none(text: str | None) -> int | None:
    """The non-negative integer ``text`` spells in ASCII digits; None for anything else."""
    return int(text) if text and is_decimal(text) else None
