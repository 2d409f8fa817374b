"""`probe` and `python -m probe`: one console script, one subcommand a job.

Command modules are imported when the parser is built, but they import torch and friends only inside
`main`, so `probe --help` stays fast. A command line that names its subcommand imports that module alone:
`probe analyze` starts in ~0.1 s instead of ~1 s spent importing scipy and pandas for `compare` and `ab`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from probe.errors import ProbeError

COMMANDS = (
    "run",
    "bench",
    "profile",
    "count",
    "roofline",
    "overhead",
    "analyze",
    "compare",
    "baseline",
    "app",
    "ab",
    "history",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        raise ProbeError(f"{self.prog}: {message}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI, or, when `only` names a subcommand, a parser that knows that one alone."""
    parser = _Parser(prog="probe", description="Where each millisecond of an LLM decode step goes.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in (only,) if only in COMMANDS else COMMANDS:
        module = importlib.import_module(f"probe.commands.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser(argv[0] if argv else None).parse_args(argv)
        return args._main(args)
    except ProbeError as e:
        print(f"probe: error: {e}", file=sys.stderr)
        return e.exit_code
    except (ValueError, OSError) as e:
        # engines.EngineError / ModelError and unreadable files: a one-line reason, never a traceback
        if type(e).__module__.startswith(("engines", "probe")) or isinstance(e, OSError):
            print(f"probe: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print("probe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
