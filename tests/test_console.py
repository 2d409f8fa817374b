"""Output that fits its reader (probe.render.console): tables at the terminal's width with every figure whole, a
column that does not fit dropped and named, lines wrapped at words with no trailing spaces, COLUMNS obeyed."""

from __future__ import annotations

import io
import os
import re

import pytest
from rich.table import Table

from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.host import MECHANISM_PARTS, PURPOSE_PARTS
from probe.analysis.trace import load_trace
from probe.render.console import NOT_A_TERMINAL_WIDTH, FittingConsole, width_for
from probe.render.ledger import host_tables
from probe.text import ms
from tests.conftest import ROOT, run_probe, shared_trace

# The H100 prefill of the README (../shared/traces/public; skipped where absent): its host parts read 4.404, 2.304,
# 14.122 ms, which the fixed 160 columns cut to
# `4…`, `2…`, `14.1…`.
H100 = "public/h100_hf_qwen1.5-0.5b_prefill_b16.trace.json.gz"


def printed(width: int, *renderables) -> str:
    console = FittingConsole(file=io.StringIO(), width=width, highlight=False)
    for r in renderables:
        console.print(r)
    return console.file.getvalue()


@pytest.mark.parametrize("width", [80, 160])
def test_the_host_time_tables_show_every_number_whole(width):
    result = analyze(load_trace(shared_trace(H100)))
    out = printed(width, *host_tables(result))
    lines = out.splitlines()
    assert max(map(len, lines)) <= width
    assert not [line for line in lines if line != line.rstrip()]
    assert not re.search(r"\d…", out)  # no figure cut to `4…`
    # Every figure a row holds is printed whole or its column is named as not shown; no other number appears.
    figures = {ms(s.wall_ns) for s in result.steps}
    figures |= {ms(ns) for s in result.steps for ns in (*s.purpose_ns.values(), *s.mechanism_ns.values())}
    rows = [line for line in lines if line.startswith("│")]
    for row in rows:
        cells = [c.strip() for c in row.strip("│").split("│")]
        numbers = [c for c in cells[2:] if c]  # after the position and the step's name
        assert numbers and set(numbers) <= figures, (numbers, figures)
    shown = " ".join(lines)
    for part in (*PURPOSE_PARTS, *MECHANISM_PARTS):
        words = part.label.split()
        assert all(w in shown for w in words), part.label  # a header (maybe wrapped) or named under its table
    if width == 160:  # both tables fit whole at 160: nothing dropped
        assert "not shown" not in out
    else:
        assert "not shown at 80 columns:" in out


def test_a_column_that_does_not_fit_is_named_under_the_table():
    """The columns before the last go first; the first (what a row is) and the last (the verdict) stay."""
    table = Table(title="figures")
    for name in ("engine", "alpha", "beta", "gamma", "verdict"):
        table.add_column(name, justify="right")
    table.add_row("cached", "123456.789", "2.304", "14.122", "regression")
    out = printed(40, table)
    assert "123456.789" in out and "regression" in out and "…" not in out
    assert " ".join(out.split("not shown at 40 columns: ")[1].split()).startswith("beta, gamma (")
    assert max(map(len, out.splitlines())) <= 40


def test_a_markers_number_stays_on_its_line_where_names_fold():
    """A column of names folds where the table is narrow, but no narrower than FOLD_WIDTH: `ProfilerStep#100`
    folded as `ProfilerStep#1` over `00` reads as two steps."""
    table = Table(title="steps")
    table.add_column("step", overflow="fold")
    for name in ("wall", "busy", "idle", "launch", "sync"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_row("ProfilerStep#100", "123456.789", "2.304", "14.122", "88.000", "1.000")
    for width in (46, 54):  # where a fold at 12 split it
        out = printed(width, table)
        assert "ProfilerStep#100" in out and "123456.789" in out


def test_lines_wrap_at_words_without_trailing_spaces():
    text = "step 0 (profiler_step, ProfilerStep#6): host-bound, by dispatch. " + "The host works 33.029 ms " * 6
    out = printed(50, text)
    lines = out.splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 50
    assert all(line == line.rstrip() for line in lines)
    assert " ".join(lines).split() == text.split()  # broken only between words


def test_the_width_is_columns_else_100_in_a_pipe(monkeypatch):
    pipe = io.StringIO()
    monkeypatch.delenv("COLUMNS", raising=False)
    assert width_for(pipe) == NOT_A_TERMINAL_WIDTH == 100
    monkeypatch.setenv("COLUMNS", "72")
    assert width_for(pipe) == 72


def test_probe_analyze_in_a_pipe_fits_100_columns():
    """A real process, output a pipe and no COLUMNS: every line within 100 columns, none ending in a space."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = run_probe(
        "analyze", str(shared_trace(H100)), "--model", "qwen1.5-0.5b", "--tokens", "8944", "--batch", "16", env=env
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 100
    assert not [line for line in lines if line != line.rstrip()]
    assert not re.search(r"\d…", result.stdout)


@pytest.mark.parametrize("width", [60, 80])
def test_every_table_of_a_cpu_trace_fits_a_narrow_terminal(width):
    """`COLUMNS=80 probe analyze traces/tiny_cached...` (the README's first trace) raised ValueError in the fitting
    of its summary table: no column that folds, and the others at their least before the table fit."""
    env = os.environ | {"COLUMNS": str(width)}
    trace = ROOT / "traces" / "tiny_cached_cpu_p64_n16.trace.json.gz"
    result = run_probe("analyze", str(trace), env=env)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert not re.search(r"\d…", result.stdout)
