"""One module a subcommand: `HELP`, `add_arguments(parser)` and `main(args) -> exit code`."""

import sys

import msgspec


def print_json(doc) -> None:
    """A command's --json document on stdout, indented: msgspec writes 1000 steps' ledger several times faster than
    the json module, and a NaN as null (valid JSON) rather than NaN."""
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(doc, enc_hook=_plain), indent=1).decode() + "\n")


def _plain(value):
    """What msgspec does not encode itself but the json module did: subclasses of str, int and float."""
    for kind in (str, int, float):
        if isinstance(value, kind):
            return kind(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
