"""`probe` and `python -m probe`: one console script, one subcommand a job.

`probe --help` is built from the static table below and imports no command module. A command line that names its
subcommand imports that module alone (its `add_arguments(parser)` and `main(args) -> exit code`), so each command
pays for its own imports and no other's: `probe analyze` never loads torch, scipy or DuckDB.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
from collections.abc import Iterator

from probe.errors import ProbeError, first_line

# name -> the one line `probe --help` shows for it; the module probe.commands.<name> does the rest.
COMMANDS = {
    "run": "the default sweep (naive vs cached) with predictions, written to a report folder",
    "bench": "time engines across prompt lengths, with token parity against naive",
    "profile": "record a torch.profiler (or --nsys) trace of one engine at one prompt length",
    "count": "count aten ops dispatched per forward (prefill and one decode step)",
    "roofline": "bytes a decode step moves, its bandwidth floor and batch limit; --check the write-ups' numbers",
    "overhead": "measure the host floor and time a cached step's bookkeeping piece by piece",
    "analyze": "per-step ledger of any trace: steps, launches, kernels, GPU window busy/idle, host time by part",
    "compare": "compare against a baseline: exact launch counts, noise-aware timings; exit 1 on a regression",
    "baseline": "record the default CPU configuration's launch counts and timings into a baseline file",
    "app": "open the Streamlit explorer on the runs and traces under a folder (localhost only)",
    "ab": "A/B two engines interleaved in one process; exit 1 if the second regressed",
    "history": "the run history (DuckDB): list runs, check the trend of every configuration, show a run, import runs",
    "models": "the model presets, the decoder families each engine serves, the GPUs the roofline knows",
}


class _Parser(argparse.ArgumentParser):
    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and self._subparsers is None:
            # a command's own parser was given every argument after its name: what it left is unknown to it, and
            # only it knows the flags to suggest (its parent would just say "unrecognized")
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str):  # one line, no usage dump, with the nearest flag or choice
        where = self.prog.removeprefix("probe").strip()
        raise ProbeError(f"{where}: {message}{self._nearest(message)}" if where else message + self._nearest(message))

    def _nearest(self, message: str) -> str:
        """`: did you mean X?` when an unknown flag or a wrong choice is close to one this parser has."""
        if message.startswith("unrecognized arguments: "):
            given = message.removeprefix("unrecognized arguments: ").split()[0].split("=")[0]
            known = list(self._option_string_actions)
        elif (choice := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)) is not None:
            given, known = choice[1], re.findall(r"'([^']*)'", choice[2])
        else:
            return ""
        close = difflib.get_close_matches(given, known, n=1)
        return f": did you mean {close[0]}?" if close else ""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI. Every subcommand is listed from COMMANDS; the one `only` names (if any) is imported and given its
    flags, description and main."""
    parser = _Parser(prog="probe", description="Where each millisecond of an LLM decode step goes.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, help_text in COMMANDS.items():
        if name != only:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(f"probe.commands.{name}")
        p = sub.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def command_lines(name: str) -> list[list[str]]:
    """`[name]` and every subcommand under it (`["history", "list"]`, ...): each command line `--help` answers."""

    def walk(parser: argparse.ArgumentParser, argv: list[str]) -> Iterator[list[str]]:
        yield argv
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    yield from walk(sub, [*argv, sub_name])

    return [argv for argv in walk(build_parser(name), []) if argv[:1] == [name]]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser(argv[0] if argv else None).parse_args(argv)
        args.argv = list(argv)  # the command line as given: what a resume hint repeats
        return args._main(args)
    except ProbeError as e:
        print(f"probe: error: {e}", file=sys.stderr)
        return e.exit_code
    except (ValueError, OSError) as e:
        # engines.EngineError / ModelError and unreadable files: a one-line reason, never a traceback
        if type(e).__module__.startswith(("engines", "probe")) or isinstance(e, OSError):
            print(f"probe: error: {first_line(e)}", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print("probe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
