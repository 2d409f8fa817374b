"""Counts read from text someone else wrote (a trace's range and kernel names, recorded shapes, file names): the one
rule for turning digits into a number.

Python's `\\d` and `str.isdigit` let through more than `int` takes: `isdigit` is true for `²`, which `int` refuses,
and `int` refuses 4,300 digits or more. So a count is ASCII digits only, and no more than `MAX_COUNT`: tokens,
sequences, a tensor's dimension, a rank. A device holds under 2**31 of any of these (a dimension that large already
asks for more memory than any card has), so a larger one is not a count a trace can truthfully hold.
"""

from __future__ import annotations

import re

MAX_COUNT = 2**31 - 1
DIGITS = "[0-9]+"  # the only digits a pattern reading a count may match (never \d: it matches every script's digits)
_COUNT = re.compile(r"[0-9]{1,10}")


def count(text: str) -> int | None:
    """`text` as a count when it is ASCII digits whose value is at most MAX_COUNT; None otherwise."""
    if _COUNT.fullmatch(text) is None:
        return None
    value = int(text)
    return value if value <= MAX_COUNT else None


def signed_count(text: str) -> int | None:
    """`text` as an int, an optional '-' then a count (a dimension index, `-1`); None otherwise."""
    value = count(text.removeprefix("-"))
    return None if value is None else (-value if text.startswith("-") else value)


def shape_counts(dims, n: int) -> tuple[int, ...] | None:
    """A recorded shape (`Shapes.dims`' entry) as `n` counts of at least 1, else None."""
    ok = isinstance(dims, tuple) and len(dims) == n and all(type(d) is int and 1 <= d <= MAX_COUNT for d in dims)
    return dims if ok else None
