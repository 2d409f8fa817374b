"""A sweep's faults, run here: a cell that raises, an --out folder that already holds results, an interrupt and
--resume, and contention from another process on the cores."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys

import pandas as pd
import pytest

from probe.analysis.records.results import load_results
from probe.analysis.records.telemetry import CONTENDED_CORES, MIN_JUDGED_NS, TelemetrySummary, contention
from probe.capture.sweep import _signals_deferred
from tests.conftest import ROOT, interrupt_sweep, run_probe
from tests.variants import RAISE_AT_PROMPT

# The sweeps run in processes of their own, each from a few seconds to minutes on this 2-core machine: those run under
# `pytest -m slow` (and in .ci/run); the default run keeps the contention rule, a refused folder, Ray's absence and a
# deferred interrupt.
TINY = ("--new-tokens", "4", "--runs", "1", "--warmup", "0", "--device", "cpu", "--no-history")


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.slow
def test_a_cell_that_raises_is_recorded_failed_and_the_others_finish(tmp_path):
    out = tmp_path / "o"
    prompts = f"8,{RAISE_AT_PROMPT},24"
    result = run_probe(
        "bench", "--engines", "naive,tests.variants:RaisingEngine", "--prompts", prompts, *TINY, "--out", str(out)
    )
    assert result.returncode == 1, result.stderr
    cells = json.loads((out / "results.json").read_text())["cells"]
    status = {(c["engine"], c["prompt_tokens"]): c["status"] for c in cells}
    assert status == {
        ("naive", 8): "ok",
        ("raising", 8): "ok",
        ("naive", 16): "ok",
        ("raising", 16): "failed",
        ("naive", 24): "ok",
        ("raising", 24): "ok",
    }
    failed = next(c for c in cells if c["status"] == "failed")
    assert failed["error"].startswith("RuntimeError: out of memory: cannot hold a prompt of 16 tokens")
    assert failed["host"] and failed["device"] == "cpu"
    assert all(c["tokens_match_naive"] for c in cells if c["status"] == "ok")
    csv = pd.read_csv(out / "cells.csv")  # one row a cell, the failed one with its error and no figures
    row = csv[csv["status"] == "failed"].iloc[0]
    assert row["engine"] == "raising" and row["prompt_tokens"] == 16 and pd.isna(row["ttft_ms"])
    assert "out of memory" in row["error"] and len(csv) == 6
    assert "FAILED" in result.stdout
    assert "1 of 6 cells failed: raising p16 on " in result.stderr
    assert [c.engine for c in load_results(out).failed] == ["raising"]


@pytest.mark.slow
def test_a_folder_that_holds_results_is_refused_unless_resume_or_force(tmp_path):
    out = tmp_path / "o"
    args = ("bench", "--engines", "cached", "--prompts", "8", *TINY, "--out", str(out))
    assert run_probe(*args).returncode == 0
    (out / "report.json").write_text("{}")  # an old run's report, which the explorer would show beside new cells
    (out / "notes.txt").write_text("mine")  # the user's own file
    again = run_probe(*args)
    assert again.returncode == 2
    assert "already holds results (results.json, cells.parquet, cells.csv, telemetry.parquet, ...)" in one_line(again)
    assert "--resume" in one_line(again) and "--force" in one_line(again)
    forced = run_probe(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (out / "report.json").exists() and (out / "notes.txt").read_text() == "mine"
    assert len(load_results(out).cells) == 1
    both = run_probe(*args, "--force", "--resume")
    assert both.returncode == 2 and "exclude each other" in one_line(both)


@pytest.mark.slow
def test_resume_refuses_another_configuration(tmp_path):
    out = tmp_path / "o"
    assert run_probe("bench", "--engines", "cached", "--prompts", "8", *TINY, "--out", str(out)).returncode == 0
    other = run_probe(
        "bench", "--engines", "cached", "--prompts", "8", *TINY, "--seed", "1", "--out", str(out), "--resume"
    )
    assert other.returncode == 2
    assert f"cannot resume {out}: its seed was 0, now 1" in one_line(other)


def test_probe_run_refuses_a_folder_that_holds_results(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.json").write_text("{}")
    result = run_probe("run", "--prompts", "8", *TINY, "--out", str(out))
    assert result.returncode == 2 and "already holds results (report.json)" in one_line(result)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_sweep_says_what_it_kept_and_resume_runs_only_the_rest(tmp_path, signum):
    out = tmp_path / "sweep"
    args = ["bench", "--prompts", "8,16,32,64,128,256", "--new-tokens", "16", "--runs", "2", "--warmup", "0"]
    args += ["--device", "cpu", "--no-history", "--out", str(out)]
    results = out / "results.json"
    stopped = interrupt_sweep(args, out, signum)
    err = stopped.stderr
    assert stopped.returncode == 128 + signum, err
    kept = load_results(out)
    assert kept.complete is False and 2 <= len(kept.cells) < 12
    said = f"interrupted: {len(kept.cells)} of 12 cells kept in {results}; to finish: "
    assert said in err
    finish = shlex.split(err.split(said, 1)[1].splitlines()[0])  # the whole command: every flag, --out, --resume
    assert finish == ["probe", *[a for a in args if a not in ("--out", str(out))], "--out", str(out), "--resume"]
    assert "Traceback" not in err

    done = run_probe(*args, "--resume")
    assert done.returncode == 0, done.stderr
    final = load_results(out)
    assert final.complete and len(final.cells) == 12 and all(c.tokens_match_naive for c in final.cells)
    by_key = {c.key: c for c in final.cells}
    for c in kept.cells:  # the kept cells were not run again: their raw timings are the ones measured before
        assert by_key[c.key].ttft_runs_ms == c.ttft_runs_ms and by_key[c.key].itl_runs_ms == c.itl_runs_ms
    telemetry = pd.read_parquet(out / "telemetry.parquet")
    assert set(telemetry["cell"]) == set(range(12))  # every cell's samples, the kept ones' included


def test_the_contention_rule():
    """other cores = machine busy (every core) - this process, over the decode phases; judged past 0.1 s."""
    long = [(0, MIN_JUDGED_NS)]
    # 2 cores, the machine 90% busy = 1.8 cores, this process 150% = 1.5 cores: others used 0.3 cores
    busy = contention(TelemetrySummary(sys_cpu_pct_mean=90.0, proc_cpu_pct_mean=150.0), long, cores=2)
    assert busy.other_cpu_cores == pytest.approx(0.3) and busy.contended is (0.3 >= CONTENDED_CORES)
    # 2 cores, 55% = 1.1 cores busy, this process 100%: 0.1 cores beside it, under a quarter of a core
    calm = contention(TelemetrySummary(sys_cpu_pct_mean=55.0, proc_cpu_pct_mean=100.0), long, cores=2)
    assert calm.other_cpu_cores == pytest.approx(0.1) and calm.contended is False
    short = contention(TelemetrySummary(sys_cpu_pct_mean=90.0, proc_cpu_pct_mean=150.0), [(0, 5_000_000)], 2)
    assert short.other_cpu_cores == pytest.approx(0.3) and short.contended is None  # 5 ms of phases: not judged
    assert contention(TelemetrySummary(), long, 2).contended is None  # no /proc figures


@pytest.mark.slow
@pytest.mark.serial  # its calm run must be alone on the machine: a test beside it is contention
def test_a_busy_process_beside_the_sweep_flags_its_cells(tmp_path):
    """One torch thread: alone, the machine's busy CPU is this process's; with a busy loop on the other core,
    about one core more."""
    # 2 x 127 decode steps of about 1 ms: phases well past the 0.1 s the rule needs to judge
    args = ("bench", "--engines", "cached", "--prompts", "16", "--new-tokens", "128", "--runs", "2", "--warmup", "0")
    args += ("--threads", "1", "--device", "cpu", "--no-history")
    calm = run_probe(*args, "--out", str(tmp_path / "calm"))
    assert calm.returncode == 0, calm.stderr
    cell = load_results(tmp_path / "calm").cells[0]
    assert cell.contended is False and cell.other_cpu_cores < CONTENDED_CORES
    assert "warning" not in calm.stderr

    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = run_probe(*args, "--out", str(tmp_path / "busy"))
    finally:
        loop.kill()
        loop.wait()
    assert busy.returncode == 0, busy.stderr
    cell = load_results(tmp_path / "busy").cells[0]
    assert cell.contended is True and cell.other_cpu_cores >= CONTENDED_CORES
    assert cell.telemetry.sys_cpu_pct_mean is not None and cell.telemetry.proc_cpu_pct_mean is not None
    warnings = [line for line in busy.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and "1 of 1 cells ran while other processes used the CPU" in warnings[0]
    assert "CONTENDED" in busy.stdout
    row = pd.read_csv(tmp_path / "busy" / "cells.csv").iloc[0]
    assert bool(row["contended"]) is True and row["other_cpu_cores"] >= CONTENDED_CORES


def test_without_an_executor_ray_is_never_imported(tmp_path):
    argv = ["bench", "--engines", "cached", "--prompts", "8", *TINY, "--out", str(tmp_path / "o")]
    code = f"import sys\nfrom probe.cli import main\nrc = main({argv!r})\nprint('ray' in sys.modules, rc)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.stdout.split()[-2:] == ["False", "0"], result.stderr


def test_an_interrupt_during_a_save_lands_after_it(tmp_path):
    """results.json and telemetry.parquet are written with SIGINT and SIGTERM deferred: a signal sent between the two
    writes is delivered after both (a resumed sweep once found a kept cell without its telemetry)."""
    written = []
    with pytest.raises(KeyboardInterrupt):
        with _signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            (tmp_path / "first").write_text("1")
            written.append("first")
            (tmp_path / "second").write_text("2")
            written.append("second")
    assert written == ["first", "second"]
