"""One module a subcommand: `add_arguments(parser)` and `main(args) -> exit code`; its help line is in probe.cli.
A command module imports at its top only what its flags need (probe.flags, probe.settings, engines.configs); the
modules that do its work (torch, pandas, DuckDB, the analysis) it imports inside the functions that run it, so that
`probe COMMAND --help` answers in a blink (the rule: tests/test_layout.py HEAVY; the times: docs/commands.md).
Here: the --json writer every command shares (what bench and run share is in `_sweep`)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable

import msgspec

ROWS_A_CHUNK = 1000  # Rows made, written and dropped together: a chunk's dicts and text are all it holds at once


class Rows:
    """A list in a --json document that print_json writes a chunk at a time, each entry made by `row(i)` as it is
    written: a million steps' records never sit in memory together as dicts and text (1.9 GB for 100,000 steps,
    when the whole document was encoded, formatted and decoded at once). Not a dataclass: msgspec would encode
    one as an object."""

    __slots__ = ("count", "row")

    def __init__(self, count: int, row: Callable[[int], dict]):
        self.count = count
        self.row = row


def print_json(doc) -> None:
    """A command's --json document on stdout, indented: msgspec writes 1000 steps' ledger several times faster than
    the json module, and a NaN as null (valid JSON) rather than NaN. A `Rows` anywhere in it is written in
    chunks where it stands. A file name that is not UTF-8 (its bytes held as lone surrogates, os.fsdecode's way)
    cannot be JSON text: only then is every string made writable (`_text`)."""
    lists: list[Rows] = []
    mark = f"probe-rows-{secrets.token_hex(8)}-"  # no text of a trace can hold it by chance

    def hook(value: object) -> str:
        if not isinstance(value, Rows):
            raise TypeError(f"{type(value).__name__} is not JSON")
        i = next((i for i, seen in enumerate(lists) if seen is value), None)  # an encoding's retry: the same mark
        if i is None:
            lists.append(value)
            i = len(lists) - 1
        return f"{mark}{i}"

    text = msgspec.json.format(_encode(doc, hook), indent=1).decode()
    for i, rows in enumerate(lists):
        before, _, text = text.partition(f'"{mark}{i}"')
        sys.stdout.write(before)
        line = before[before.rfind("\n") + 1 :]
        _write_rows(rows, line[: len(line) - len(line.lstrip(" "))])  # the key's indent: entries one level in
    sys.stdout.write(text + "\n")


def _encode(value, hook: Callable[[object], str] | None = None) -> bytes:
    """`value` as JSON bytes; its strings made writable (`_writable`) only when one cannot be encoded as it is."""
    try:
        return msgspec.json.encode(value, enc_hook=hook)
    except UnicodeEncodeError:
        return msgspec.json.encode(_writable(value), enc_hook=hook)


def _write_rows(rows: Rows, pad: str) -> None:
    """`rows` as an indented JSON list whose closing bracket sits at `pad`."""
    if not rows.count:
        sys.stdout.write("[]")
        return
    sys.stdout.write("[\n")
    for first in range(0, rows.count, ROWS_A_CHUNK):
        chunk = [rows.row(i) for i in range(first, min(first + ROWS_A_CHUNK, rows.count))]
        inner = msgspec.json.format(_encode(chunk), indent=1).decode()[2:-2]  # less the chunk's [ ]
        sys.stdout.write((",\n" if first else "") + pad + inner.replace("\n", "\n" + pad))
    sys.stdout.write("\n" + pad + "]")


def _writable(value):
    """`value` with every string (dict keys too) JSON can hold, by `_text`; other values (a `Rows`) as they are."""
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
