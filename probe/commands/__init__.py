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
    the json module, and a NaN as null (valid JSON) rather than NaN."""
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=1).decode() + "\n")
