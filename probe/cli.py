"""`probe` and `python -m probe`: one console script, one subcommand a job.

`probe --help` is built from the static table below and imports no command module. A command line that names its
subcommand imports that module alone (its `add_arguments(parser)` and `main(args) -> exit code`), so each command
pays for its own imports and no other's: `probe analyze` never loads torch, scipy or DuckDB.
"""

from __future__ import annotations

import argparse
import importlib
import sys

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
    def error(self, message: str):  # one line, no usage dump
        raise ProbeError(f"{self.prog}: {message}")


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
