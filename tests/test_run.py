"""probe run, end to end on a small budget: the sweep, the next-step sweeps, the predictions and the report; a part
that fails keeps the rest; progress that shows when the output is a pipe; no DuckDB under --no-history."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys

import pytest

from probe.analysis.diagnosis.report import load_report
from probe.analysis.records.results import load_results
from probe.capture import pipeline
from probe.errors import ProbeError
from tests.conftest import ROOT, floor_ops_by_profiler, run_probe
from tests.test_layout import HIDE_TORCH

# The two whole runs below are fresh processes: they compile the static engine with inductor, whose state (compiled
# graphs, recompile limits, its worker pool) is the process's, so they would leave it to every later test here.
# Each whole run is minutes on this 2-core machine: they run under `pytest -m slow` (and in .ci/run); the default run
# keeps the piped progress and --no-history runs.


@pytest.mark.slow
def test_probe_run_writes_the_whole_report(tmp_path):
    out = tmp_path / "run"
    result = run_probe(
        "run",
        "--prompts",
        "8,32",
        "--new-tokens",
        "5",
        "--runs",
        "2",
        "--warmup",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    for text in (
        "serving figures",
        "prediction vs measurement",
        "where a decode step goes",
        "the next steps: static and batched",
        "the write-ups' hand measurements",
        "report folder:",
    ):
        assert text in result.stdout
    results = load_results(out)
    assert [(c.engine, c.prompt_tokens) for c in results.cells] == [
        ("naive", 8),
        ("cached", 8),
        ("naive", 32),
        ("cached", 32),
    ]
    assert all(c.tokens_match_naive for c in results.cells)
    nxt = load_results(out / "next-batched")
    assert [c.batch for c in nxt.cells] == [1, 2, 4, 8] and all(c.tokens_match_naive for c in nxt.cells)
    assert load_results(out / "next-static").cells[0].tokens_match_naive
    report = load_report(out)
    assert len(report.predictions) == 4 and report.machine.floor_ms > 0 and report.machine.bandwidth_bytes_s > 0
    assert_both_predictions_measured(report)
    assert set(report.ledgers) == {"naive", "cached"}
    for digest in report.ledgers.values():  # a CPU trace dispatches top-level ops, and its wall is all host parts
        assert digest.dispatch == "top-level ops" and digest.gpu_busy_us is None and digest.dispatched > 0
    # The floor's op count (a dispatch-mode count) against torch.profiler's own count of the same forward.
    assert report.overhead.launches_per_forward == floor_ops_by_profiler()
    assert (out / "report.md").read_text().startswith("# probe run: tiny float32 on cpu")
    assert (out / "telemetry.parquet").exists() and (out / "cells.csv").exists()
    assert len(list((out / "traces").glob("*.trace.json.gz"))) == 2
    json.loads((out / "report.json").read_text())  # well-formed


@pytest.mark.slow
def test_probe_run_quick_prints_the_whole_report(tmp_path):
    """--quick on a tiny budget: naive, cached and static in one sweep, the batched check, the floor with and
    without a sync, one trace per engine, and every section of the report on stdout."""
    out = tmp_path / "quick"
    result = run_probe(
        "run", "--quick", "--prompts", "8,32", "--new-tokens", "5", "--runs", "1", "--device", "cpu", "--no-nsys",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for text in (
        "probe run: tiny float32",
        "serving figures",
        "the next steps: batched",
        "where a decode step goes",
        "the write-ups' hand measurements",
        "aten ops dispatched per step",
        "with a sync after each forward",
        "without one (back to back, one sync at the end)",
        "measured copy on cpu",
        "prediction vs measurement",
        "report folder:",
    ):
        assert text in result.stdout, text
    results = load_results(out)
    assert [(c.engine, c.prompt_tokens) for c in results.cells] == [
        (e, p) for p in (8, 32) for e in ("naive", "cached", "static")
    ]
    assert all(c.tokens_match_naive and c.parity_mode == "exact" for c in results.cells)
    report = load_report(out)
    assert set(report.steps) == {"naive", "cached", "static", "batched B=4"} and report.overhead.floor_unsynced_ms > 0
    assert report.steps["batched B=4"].batch == 4 and report.self_check.note.startswith("CUDA part skipped")
    assert len(list((out / "traces").glob("*_b4.trace.json.gz"))) == 1  # the batched trace's name says B
    assert_both_predictions_measured(report)
    assert len(list((out / "traces").glob("*.trace.json.gz"))) == 4
    assert_what_ifs_checked(report)
    markdown = (out / "report.md").read_text()
    assert "### What-ifs checked by making the change (`what_if_checks`)" in markdown
    assert "## The write-ups' hand measurements, measured here" in markdown
    assert not re.search(r"\bnan\b", markdown, re.IGNORECASE)  # static's op count is not measured: a dash
    static_row = next(line for line in markdown.splitlines() if line.startswith("| static   |"))
    assert static_row.split("|")[-3].strip() == "-"


def assert_both_predictions_measured(report) -> None:
    """Each of the write-ups' two predictions was measured: judged, or refused as a measurement error its evidence
    names (a contended reference, a scaling past B x single: timings on a loaded machine), never "needs ..."."""
    assert len(report.verdicts) == 2
    for v in report.verdicts:
        assert v.supported is not None or v.evidence.startswith("not judged: "), v.evidence


def assert_what_ifs_checked(report) -> None:
    """The cached CPU step's compile and batch what-ifs, each predicted and measured beside cached (issue 32): the
    arithmetic of the error, never its size (a timing)."""
    checks = {c.change: c for c in report.what_if_checks}
    # priced on the unprofiled step: the profile's sidecar carries the profiler's cost per event (issue 32 section 2)
    cached = report.diagnoses["cached"]
    assert 0 < cached.evidence.unprofiled_host_ns < cached.evidence.host_work_ns
    assert all("unprofiled (" in w.arithmetic for w in cached.what_if), cached.what_if
    # the compiled forward's guard check, measured on the model, priced into the compile what-if
    assert report.overhead.compiled_entry_ms > 0
    compile_ = [w for w in cached.what_if if w.change.startswith("compile")]
    assert all(w.terms["entry"] == pytest.approx(report.overhead.compiled_entry_ms) for w in compile_)
    assert {"cached -> static", "batched B=1 -> B=2", "batched B=1 -> B=4", "batched B=1 -> B=8"} <= set(checks)
    assert checks["cached -> static"].what_if == "compile the forward (torch.compile)"
    for c in checks.values():
        if c.predicted_step_ms is None:  # batching buys nothing where per-sequence compute holds over a quarter of the
            assert c.note == "not checked: the diagnosis offers no such change (it buys nothing on this step)", c
            assert c.change.startswith("batched")  # step, as the profiled step's own timings (a loaded machine) may say
            continue
        assert c.what_if.startswith(("compile ", "batch ", "run the ops on ")), c
        assert c.predicted_step_ms > 0 and c.measured_step_ms > 0, c
        # the change judged on its prediction rebased onto the baseline measured beside it (its saving held fixed)
        assert c.rebased_step_ms == pytest.approx(c.predicted_step_ms + c.baseline_step_ms - c.priced_step_ms)
        if c.rebased_step_ms <= 0:  # a baseline measured under the saving predicted: nothing left to judge
            assert c.error_pct is None and c.note.endswith("no step is left to predict"), c
            continue
        assert c.error_pct == pytest.approx(100 * (c.measured_step_ms / c.rebased_step_ms - 1))
        assert c.baseline_error_pct == pytest.approx(100 * (c.baseline_step_ms / c.priced_step_ms - 1))
        # contended is None where the decode phases were too short to judge (MIN_JUDGED_NS): a fast machine's quick run
        assert not (c.contended and c.judged) and (c.wrong_term is None or c.judged)


SMALL = ["--prompts", "8", "--new-tokens", "3", "--runs", "1", "--warmup", "0", "--device", "cpu"]


@pytest.mark.slow
def test_a_part_that_fails_is_named_and_the_rest_goes_on(tmp_path, cli, monkeypatch):
    """Issue 24 §3: the cached engine's profile raises (a stand-in for CUPTI or a compile failing); the naive trace,
    the machine and the predictions are still measured and written, report.md names the failure, the exit is 1."""
    real = pipeline.profile_torch

    def failing(pcfg, folder, model=None, **kw):
        if pcfg.engine == "cached":
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED (a stand-in)\nsecond line")
        return real(pcfg, folder, model, **kw)

    monkeypatch.setattr(pipeline, "profile_torch", failing)
    out = tmp_path / "run"
    result = cli("run", *SMALL, "--no-next", "--no-history", "--out", out)
    assert result.returncode == 1
    report = load_report(out)
    assert report.failed == {"profile cached": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED (a stand-in)"}
    assert set(report.ledgers) == {"naive"} and report.machine is not None and len(report.predictions) == 2
    assert "profile cached" in (out / "report.md").read_text()
    assert "probe: error: profile cached failed: RuntimeError: CUPTI_ERROR" in result.stderr
    # stdout is not a terminal here: a line a phase and a cell, in order, before the tables (and, on a slow machine,
    # a line whenever 30 s pass without one: left out here)
    heartbeat = re.compile(r"probe run: \w+: (still working|\d+ of \d+ cells done)")
    phases = [
        line
        for line in result.stdout.splitlines()
        if re.match(r"probe run: .* \(\+\d+ s\)$", line) and not heartbeat.match(line)
    ]
    assert [re.sub(r" \(\+\d+ s\)$", "", p) for p in phases] == [
        "probe run: profiler self-check on cpu",
        "probe run: threads: timing the floor at each thread count",
        "probe run: threads: " + phases[2].split("threads: ")[1].split(" (+")[0],
        "probe run: sweep: 2 cells of naive, cached",
        "probe run: cell 1 of 2 done: naive p8: ITL p50 " + phases[4].split("ITL p50 ")[1].split(" (+")[0],
        "probe run: cell 2 of 2 done: cached p8: ITL p50 " + phases[5].split("ITL p50 ")[1].split(" (+")[0],
        "probe run: machine: the floor, a cached step piece by piece, the copy bandwidth",
        "probe run: machine: a compiled forward's guard check (the static engine's step, traced once)",
        "probe run: profile naive",
        "probe run: profile cached",
        "probe run: what-if checks: each change made, measured in turn with its baseline",
        "probe run: report: predictions and verdicts",
    ]
    # no cached profile to predict from: every check says so, and nothing is measured for it
    assert report.what_if_checks and all(c.note == "no profiled baseline" for c in report.what_if_checks)


def test_bench_prints_a_line_per_cell_as_it_finishes_when_piped(tmp_path):
    """Issue 25: with stdout a pipe, `probe bench` printed nothing until the end. Each cell's line must arrive while
    the sweep is still running (flushed), before the tables. Issue 36: with stderr a pipe too (`2>&1 | tee log`), no
    frozen progress bar lands in the log."""
    argv = ["bench", "--engines", "naive,cached", *SMALL, "--prompts", "8,16", "--no-history"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "probe", *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    first = proc.stdout.readline()
    running = proc.poll() is None  # three cells still to go
    rest, err = proc.communicate(timeout=600)
    assert proc.returncode == 0
    assert first.startswith("probe bench: cell 1 of 4 done: naive p8: ITL p50 ") and running
    assert "━" not in err, err  # a bar (rich prints its last frame where it cannot draw it live)
    assert rest.index("probe bench: cell 4 of 4 done: cached p16") < rest.index("engine")


HIDE_DUCKDB = HIDE_TORCH.replace('name == "torch" or name.startswith("torch.")', 'name == "duckdb"')


def test_no_history_never_imports_duckdb(tmp_path):
    """Issue 24 §1: the GPU machine has no DuckDB; a recording command with --no-history must not need it (the old
    record() imported the history module before it read the flag)."""
    code = HIDE_DUCKDB + (
        "import probe.commands.run, probe.commands.profile, probe.commands.baseline\n"
        "from probe.cli import main\n"
        f"rc = main(['bench', '--engines', 'naive', {', '.join(map(repr, SMALL))}, '--no-history'])\n"
        "assert 'duckdb' not in sys.modules, 'duckdb imported'\n"
        "sys.exit(rc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
def test_an_interrupted_run_leaves_the_answers_its_cells_allow_and_the_command_that_finishes_it(tmp_path):
    """Issue 36 §1: `probe run --quick` interrupted (SIGINT, as Ctrl-C) once its first sweep (naive, cached, static)
    is done: report.md answers what those cells allow (the write-ups' Part 1 verdict needs exactly them), says what
    is not measured yet, and gives the whole command that finishes the run, which then does."""
    out = tmp_path / "quick"
    args = ["run", "--quick", "--prompts", "8", "--new-tokens", "4", "--runs", "1", "--warmup", "0"]
    args += ["--device", "cpu", "--no-nsys", "--no-history", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "probe", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    lines = []
    for line in proc.stdout:  # a line a phase and a cell, flushed: the pipe is the user's log
        lines.append(line)
        if line.startswith("probe run: next sweep: batched"):
            proc.send_signal(signal.SIGINT)
            break
    rest, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGINT, "".join(lines) + rest + err
    assert "Traceback" not in err
    report = load_report(out)
    assert report.status == "interrupted" and len(load_results(out).cells) == 3
    part1, part2 = report.verdicts
    assert part1.supported is not None or part1.evidence.startswith("not judged: ")  # answered from the 3 cells
    assert part2.supported is None and "bandwidth" in part2.evidence  # needs the machine: not measured yet
    markdown = (out / "report.md").read_text()
    assert "**Interrupted**. The answers below are what the 3 cells measured so far allow." in markdown
    assert "- the next sweep of batched: not run" in markdown
    assert "- the machine \\(floor, bandwidth\\): not measured, so no step is predicted" in markdown
    assert "## The write-ups' predictions, checked here" in markdown and "## Cells" in markdown
    # stderr: where the answers are, and the whole command that finishes the run, --out of the same folder
    (said,) = [line for line in err.splitlines() if line.startswith("probe: interrupted: ")]
    assert f"{out / 'report.md'} holds the answers the finished cells allow" in said
    command = shlex.split(said.split("; to finish: ", 1)[1])
    assert command[:2] == ["probe", "run"] and command[-3:] == ["--out", str(out), "--resume"]
    assert command[2:-3] == args[1:-2]  # every other flag as given
    finished = run_probe(*command[1:])
    assert finished.returncode == 0, finished.stderr
    done = load_report(out)
    assert done.status == "complete" and done.missing == [] and done.resume is None
    assert len(load_results(out).cells) == 3 and len(load_results(out / "next-batched").cells) == 4


def test_a_run_that_fails_leaves_the_answers_its_cells_allow(tmp_path, cli, monkeypatch):
    """Issue 36 §1: a failure outside any part (here, once the sweep has finished) still leaves report.md, marked
    failed with its error, and stderr says where it is and what finishes the run."""

    def failing(cfg, results):
        raise ProbeError("a stand-in for a full disk")

    monkeypatch.setattr(pipeline, "sweep_problems", failing)
    out = tmp_path / "run"
    result = cli("run", *SMALL, "--no-next", "--no-history", "--out", out)
    assert result.returncode == 2
    report = load_report(out)
    assert report.status == "failed: a stand-in for a full disk" and len(load_results(out).cells) == 2
    assert "the machine (floor, bandwidth): not measured, so no step is predicted" in report.missing
    assert "**Failed**: a stand\\-in for a full disk. The answers below" in (out / "report.md").read_text()
    stopped, error = result.stderr.strip().splitlines()[-2:]
    assert stopped.startswith(f"probe: the run stopped: {out / 'report.md'} holds the answers the finished cells")
    assert stopped.endswith(f"; to finish: probe run {' '.join(SMALL)} --no-next --no-history --out {out} --resume")
    assert error == "probe: error: a stand-in for a full disk"
