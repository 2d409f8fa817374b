"""Every regular expression a user gives probe, compiled by one function for an engine whose time is linear in
the text it searches.

`--steps`, `--part NAME=REGEX`, `--kernel-category CAT=REGEX`, and the explorer's URL parameters (which reach the
same `AnalyzeOptions.parse`) all come through `compile_user`. Python's own `re` backtracks: a pattern like
`(a|a)*b` on a long name takes exponential time, and one such pattern from a URL froze the explorer for every
user. RE2 (the `google-re2` package) matches in time linear in the text, whatever the pattern, and refuses what
it cannot do that way (backreferences, lookaround). Without RE2 installed, user patterns are refused with one line
(the import fails closed), never handed to the backtracking engine.

Before RE2 sees a pattern, probe bounds what it may cost to compile: at most MAX_PATTERN_CHARS characters, groups
nested at most MAX_NESTING deep, and no repetition count above RE2's own 1000 (RE2 reads `a{4294967296}` as the
literal text, which no user means), and it must be UTF-8 (a byte of the command line that is not reaches Python as
a lone surrogate, which RE2 cannot read). Anything refused is one line naming the flag, the pattern and why.

Searching: `Pattern.search(text)` is `re.search`'s meaning (the pattern may match anywhere; `^...$` anchor it).
Names are searched as UTF-8, lone surrogates included, so no trace name can make a search raise.

The built-in rules (kernel categories, probe's own part and marker patterns) are probe's code, not input: they stay
on `re`, and the kernel-category rules are held to a bounded match width by tests/test_kernel_names.py, which makes
each search linear in the name too (see `max_width`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from probe.errors import ProbeError

try:
    import re2
except ImportError:  # fails closed: compile_user refuses every pattern with one line
    re2 = None
try:
    # typeshed stubs this parser only under its deprecated name sre_parse, not as re._parser (its home since 3.11)
    from re import _parser as _sre_parse  # type: ignore[attr-defined]  # Python 3.11+
except ImportError:  # Python 3.10
    import sre_parse as _sre_parse

MAX_PATTERN_CHARS = 2000  # a long alternation of op names fits; a pattern past this is not typed by hand
MAX_NESTING = 100  # groups inside groups
MAX_REPEAT = 1000  # RE2's own bound on {m,n}; it reads larger counts as literal text, so they are refused here
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")  # only ever run on a pattern already under MAX_PATTERN_CHARS


@dataclass(frozen=True)
class Pattern:
    """A user's pattern, compiled by RE2. Equal patterns compare equal (options built twice are the same)."""

    pattern: str  # the text as given, as re.Pattern names it
    ignore_case: bool = False
    compiled: Any = field(default=None, compare=False, repr=False)

    def search(self, text: str):
        """A match anywhere in `text` (or None), as re.search."""
        return self.compiled.search(text.encode("utf-8", "surrogatepass"))


def compile_user(text: str, what: str, ignore_case: bool = False) -> Pattern:
    """`text` compiled for linear-time search; `what` names it in the one-line ProbeError for anything refused
    (e.g. "--steps 'a{4294967296}'")."""
    why = not_utf8(text) or _too_costly(text)
    if why:
        raise ProbeError(f"{what}: {why}")
    if re2 is None:
        raise ProbeError(
            f"{what}: user patterns need the google-re2 package (a regex engine linear in the text): "
            "pip install google-re2"
        )
    options = re2.Options()
    options.log_errors = False  # RE2 would print to stderr; the reason goes in the one line instead
    options.case_sensitive = not ignore_case
    try:
        compiled = re2.compile(text, options)
    except re2.error as e:
        reason = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ProbeError(f"{what}: not a regular expression probe can match in linear time ({reason})") from None
    return Pattern(text, ignore_case, compiled)


def not_utf8(text: str) -> str:
    """Why `text` is not UTF-8 (RE2 reads only that, and JSON takes nothing else), or "": a lone surrogate, which is
    how Python hands over a byte of the command line that is not UTF-8 (`--steps $'\\xff'`)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"not UTF-8 text: {text[e.start]!r} at character {e.start}"
    return ""


def _too_costly(text: str) -> str:
    """Why `text` is refused before it is compiled, or ""."""
    if len(text) > MAX_PATTERN_CHARS:
        return f"a pattern of {len(text)} characters (at most {MAX_PATTERN_CHARS})"
    depth, deepest, i, in_class = 0, 0, 0, False
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 2 if text[i + 1 : i + 3] == "^]" else 1 if text[i + 1 : i + 2] in ("]", "^") else 0
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
        elif c == "{" and (m := _REPEAT.match(text, i)):
            counts = [int(g) for g in m.groups() if g]
            if max(counts) > MAX_REPEAT:
                return f"repetition count {max(counts)} (at most {MAX_REPEAT})"
        i += 1
    if deepest > MAX_NESTING:
        return f"groups nested {deepest} deep (at most {MAX_NESTING})"
    return ""


def max_width(pattern: str) -> int | None:
    """The most characters one match of `pattern` (a built-in rule, Python syntax) can span, or None when that is
    unbounded (a `*`, `+` or `{m,}`). A search tries each start once and a match from one start reads at most
    this many characters, so a bounded width makes `re.search` linear in the text's length."""
    _, hi = _sre_parse.parse(pattern).getwidth()
    return None if hi >= _sre_parse.MAXREPEAT else hi
