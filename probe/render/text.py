"""The text every output shares: units, shortened names, escaping, and the first line of an error.

A leaf: it imports nothing from probe, so every layer may use it (the analysis side's one-line errors too).
"""

from __future__ import annotations

DASH = "-"  # a figure that was not measured (a GPU figure on a CPU trace, a count nobody took): never 0


def ms(ns: int | float | None, digits: int = 3) -> str:
    """Nanoseconds as milliseconds; a dash for None."""
    return DASH if ns is None else f"{ns / 1e6:.{digits}f}"


def us(ns: int | float | None, digits: int = 1) -> str:
    """Nanoseconds as microseconds; a dash for None."""
    return DASH if ns is None else f"{ns / 1e3:.{digits}f}"


def pct(fraction: float | None, digits: int = 1) -> str:
    """A fraction as a percentage (0.25 -> "25.0"); a dash for None."""
    return DASH if fraction is None else f"{100 * fraction:.{digits}f}"


def short(name: str, width: int = 70) -> str:
    """`name` cut to `width` characters, an ellipsis marking the cut (the JSON keeps names whole)."""
    return name if len(name) <= width else name[: width - 1] + "…"


_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_{}[]<>()#+-.!|~$"})


def md_escape(text: str) -> str:
    """`text` as literal Markdown: every character Markdown could read as syntax escaped, newlines as spaces (a
    table cell or a list item stays one line)."""
    return " ".join(str(text).splitlines()).translate(_MARKDOWN_SPECIAL)


def first_line(e: BaseException, with_type: bool = False) -> str:
    """An error in one line: the first non-empty line of its message, else its type's name; `with_type` puts the
    type's name in front ("OSError: ...") where the message alone would not say what failed."""
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    name = type(e).__name__
    if not lines:
        return name
    return f"{name}: {lines[0]}" if with_type else lines[0]
