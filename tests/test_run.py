"""probe run, end to end on a small budget: the sweep, the next-step sweeps, the predictions and the report."""

from __future__ import annotations

import json
import re

from probe.analysis.report import load_report
from probe.analysis.results import load_results
from tests.conftest import floor_ops_by_profiler, run_probe


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
    assert [v.supported is not None for v in report.verdicts] == [True, True]  # both predictions were measured
    assert set(report.ledgers) == {"naive", "cached"}
    for digest in report.ledgers.values():  # a CPU trace dispatches top-level ops, and its wall is all host parts
        assert digest.dispatch == "top-level ops" and digest.gpu_busy_us is None and digest.dispatched > 0
    # The floor's op count (a dispatch-mode count) against torch.profiler's own count of the same forward.
    assert report.overhead.launches_per_forward == floor_ops_by_profiler()
    assert (out / "report.md").read_text().startswith("# probe run: tiny float32 on cpu")
    assert (out / "telemetry.parquet").exists() and (out / "cells.csv").exists()
    assert len(list((out / "traces").glob("*.trace.json.gz"))) == 2
    json.loads((out / "report.json").read_text())  # well-formed


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
    assert set(report.steps) == {"naive", "cached", "static", "batched"} and report.overhead.floor_unsynced_ms > 0
    assert [v.supported is not None for v in report.verdicts] == [True, True]
    assert len(list((out / "traces").glob("*.trace.json.gz"))) == 4
    markdown = (out / "report.md").read_text()
    assert "## The write-ups' hand measurements, measured here" in markdown
    assert not re.search(r"\bnan\b", markdown, re.IGNORECASE)  # static's op count is not measured: a dash
    static_row = next(line for line in markdown.splitlines() if line.startswith("| static   |"))
    assert static_row.split("|")[-3].strip() == "-"
