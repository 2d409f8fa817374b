"""Compare a current measurement with a baseline and exit 1 on a regression.

Inputs: results folders, results.json or baseline files (probe baseline), or traces (.json, .json.gz,
.sqlite). Launches per step are exact, so any increase is a regression and the alert names the ops that
appeared or grew; every op or kernel that is new, grew, shrank or was removed is listed by name. Timings (host
time per step, cache bookkeeping per step, TTFT, decode tokens/s) alert only when the ratio of medians is past
--threshold and a Mann-Whitney U test on the raw samples gives p < --alpha; a timing measured while other processes
took the CPU is "contended: not judged". Across torch / transformers versions a loud warning is printed and counts
are not gated, unless --require-same-env makes that unusable input; across devices (the sidecar's, else the trace's
deviceProperties) kernels are compared by category and nothing is gated. With --counts-only, a current run missing
any baseline cell fails. Exit codes: 0 no regression, 1 regression, 2 unusable input (missing or corrupt file,
mismatched configs).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from probe.analysis.regression.rules import CompareRules
from probe.commands import print_json
from probe.errors import ProbeError
from probe.flags import add_arguments as add_config_arguments
from probe.flags import from_args

if TYPE_CHECKING:
    from probe.analysis.regression.compare import Comparison


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("baseline", type=Path, help="results folder, results.json, baseline file or trace")
    p.add_argument("current", type=Path, help="the same kind of input, measured now")
    add_config_arguments(p, CompareRules, skip=("window",))
    p.add_argument(
        "--require-same-env",
        action="store_true",
        help="exit 2 when torch, transformers or the device differ from the baseline's, instead of showing the "
        "counts ungated (CI: a dependency bump must not switch the gate off silently)",
    )
    add_output_arguments(p)


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the report as Markdown (a CI comment)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


def main(args: argparse.Namespace) -> int:
    from probe.analysis.regression.compare import compare
    from probe.analysis.regression.samples import load_samples

    rules = from_args(CompareRules, args)
    result = compare(load_samples(args.baseline), load_samples(args.current), rules, args.require_same_env)
    return write_outputs(result, args.markdown, args.json)


def write_markdown(path: Path | None, text: str) -> None:
    from probe.analysis.records.files import atomic_write

    if path is None:
        return
    try:
        atomic_write(path, text)
    except OSError as e:
        raise ProbeError(f"cannot write {path}: {e.strerror or e}") from None


def write_outputs(result: Comparison, markdown: Path | None, as_json: bool, header: str | None = None) -> int:
    """Print a comparison (warnings on stderr, the table or JSON on stdout, Markdown to a file), after `header`
    (what was compared, where: probe ab's model and device); the exit code."""
    from probe.render.compare import print_comparison, warnings_to_stderr
    from probe.render.markdown import comparison_markdown

    warnings_to_stderr(result)
    write_markdown(markdown, (f"{header}\n\n" if header else "") + comparison_markdown(result))
    if as_json:
        print_json(({"header": header} if header else {}) | result.to_json())
    else:
        if header:
            print(header)
        print_comparison(result)
    return 1 if result.regressed else 0
