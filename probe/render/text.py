"""The text every output shares: units, shortened names and escaping (an error's first line is probe.errors').

A leaf: it imports nothing from probe, so every layer may use it.
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
