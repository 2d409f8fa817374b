"""One module a subcommand: `add_arguments(parser)` and `main(args) -> exit code`; its help line is in probe.cli.
A command module imports at its top only what its flags need (probe.flags, probe.settings, engines.configs); the
modules that do its work (torch, pandas, DuckDB, the analysis) it imports inside the functions that run it, so that
`probe COMMAND --help` answers in a blink (the rule: tests/test_layout.py HEAVY; the times: docs/commands.md).
Here: the --json writer every command shares (what bench and run share is in `_sweep`)."""

from __future__ import annotations

import sys

import msgspec


def print_json(doc) -> None:
    """A command's --json document on stdout, indented: msgspec writes 1000 steps' ledger several times faster than
    the json module, and a NaN as null (valid JSON) rather than NaN. A file name that is not UTF-8 (its bytes held
    as lone surrogates, os.fsdecode's way) cannot be JSON text: only then is every string made writable (`_text`)."""
    try:
        raw = msgspec.json.encode(doc)
    except UnicodeEncodeError:
        raw = msgspec.json.encode(_writable(doc))
    sys.stdout.write(msgspec.json.format(raw, indent=1).decode() + "\n")


def _writable(value):
    """`value` with every string (dict keys too) JSON can hold, by `_text`; other values as they are."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        return {_writable(k): _writable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_writable(v) for v in value]
    return value


def _text(s: str) -> str:
    """A string as text UTF-8 can write: a name's undecodable bytes (surrogate-escaped) as `\\xff`, any other lone
    surrogate as `\\udXXX`; a string without them unchanged."""
    try:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")
