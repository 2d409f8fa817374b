"""The units and text every output shares: the terminal (probe.render), the explorer (probe.explorer) and the
analysis's own sentences (a diagnosis's verdict, --json's words) say a figure the same way through these.

- ns as a number of ms or µs (`ns_to_ms`, `ns_to_us`: a chart's axis), or as text (`ms`, `us`: "1.234");
- a fraction as a percentage (`pct`: "25.0");
- a name cut to a width (`short`), and text escaped for Markdown (`md_escape`).

A figure that was not measured (None) stays None as a number and is a dash as text, never 0. An error's first line is
probe.errors'. A leaf: it imports nothing from probe, so every layer may use it.
"""

from __future__ import annotations

DASH = "-"  # a figure that was not measured (a GPU figure on a CPU trace, a count nobody took): never 0


def ns_to_ms(ns: int | float | None) -> float | None:
    """Nanoseconds as a number of milliseconds (None, a figure that was not measured, stays None)."""
    return None if ns is None else ns / 1e6


def ns_to_us(ns: int | float | None) -> float | None:
    """Nanoseconds as a number of microseconds (None stays None)."""
    return None if ns is None else ns / 1e3


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
