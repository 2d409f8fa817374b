"""One module a subcommand: `HELP`, `add_arguments(parser)` and `main(args) -> exit code`."""

import sys

import msgspec


def print_json(doc) -> None:
    """A command's --json document on stdout, indented: msgspec writes 1000 steps' ledger several times faster than
    the json module, and a NaN as null (valid JSON) rather than NaN."""
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc), indent=1).decode() + "\n")
