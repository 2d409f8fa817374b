"""How long `probe COMMAND --help` takes, for every command and subcommand, against `python -c "import numpy"`
measured in the same run: each a fresh process, timed from start to exit, best of --repeats, the repeats interleaved
so that the machine's load lands on every row alike.

    python -m benchmarks.help_bench
    python -m benchmarks.help_bench --repeats 5

The target (docs/commands.md): each at most 0.3 s on a quiet machine, and at most 5x numpy's import. What keeps it
so is tested (tests/test_layout.py: no `--help` loads torch, pandas, DuckDB, Ray, Streamlit, scipy, numpy or rich);
the times are only reported here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from probe.cli import COMMANDS, command_lines

REFERENCES = {"python -c pass": ["-c", "pass"], 'python -c "import numpy"': ["-c", "import numpy"]}
NUMPY = 'python -c "import numpy"'


def seconds(args: list[str]) -> float:
    """Wall time of `python ARGS` in a fresh process, output discarded."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def measure(repeats: int) -> dict[str, float]:
    """The best of `repeats` of each row: the references, then `probe ... --help` for every command line."""
    rows = dict(REFERENCES) | {
        f"probe {' '.join(argv)} --help": ["-m", "probe", *argv, "--help"]
        for name in COMMANDS
        for argv in command_lines(name)
    }
    best = dict.fromkeys(rows, float("inf"))
    for _ in range(repeats):
        for label, args in rows.items():
            best[label] = min(best[label], seconds(args))
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="runs of each row; the best is shown (default: 3)")
    args = p.parse_args(argv)
    load = os.getloadavg()[0]
    best = measure(args.repeats)
    print(
        f"best of {args.repeats}; {os.cpu_count()} cores; load average {load:.2f} at start, "
        f"{os.getloadavg()[0]:.2f} at the end\n"
    )
    print("| command | best, s | x numpy's import |")
    print("|---|---|---|")
    for label, s in best.items():
        print(f"| `{label}` | {s:.3f} | {s / best[NUMPY]:.2f} |")
    worst = max((label for label in best if label not in REFERENCES), key=best.__getitem__)
    print(f"\nslowest: `{worst}`, {best[worst]:.3f} s = {best[worst] / best[NUMPY]:.2f}x numpy's import")
    return 0


if __name__ == "__main__":
    sys.exit(main())
