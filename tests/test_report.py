"""Prediction vs measurement and the write-ups' closing predictions, on hand-made cells."""

from __future__ import annotations

import dataclasses
import json

import pytest

from probe import render
from probe.analysis.environment import Environment
from probe.analysis.ledger import analyze
from probe.analysis.report import (
    Machine,
    Report,
    batching_verdict,
    hand_figures,
    host_overhead_verdict,
    points_at,
    predictions,
    step_counts,
)
from probe.analysis.results import BenchResults, Cell
from probe.analysis.roofline.formulas import arch_for, decode_step
from probe.analysis.telemetry import TelemetrySummary
from probe.analysis.trace import load_trace
from probe.settings import BenchConfig

TINY = arch_for("tiny")


def cell(engine: str, prompt: int, itl_ms: float, batch: int = 1, new_tokens: int = 9) -> Cell:
    steps = [[itl_ms] * (new_tokens - 1)]
    return Cell.from_runs(
        engine=engine,
        prompt_tokens=prompt,
        batch=batch,
        ttft_ms=[1.0],
        itl_ms=steps,
        total_ms=[1.0 + itl_ms * (new_tokens - 1)],
        tokens=[[[1] * new_tokens] * batch],
        peak_mem_bytes=1,
        peak_mem_kind="cpu_rss",
    )


def results(*cells: Cell) -> BenchResults:
    return BenchResults(list(cells), Environment(dtype="float32"), BenchConfig(dtype="float32", model="tiny"))


def test_prediction_is_max_of_floor_and_traffic():
    machine = Machine(2.0, "test", 10e9, "test")
    naive = dataclasses.replace(cell("naive", 1000, 9.0), recomputes=True)
    rows = predictions(results(cell("cached", 16, 2.1), naive), TINY, machine)
    traffic = decode_step(TINY, "float32", 16 + 4, 1, 10e9).traffic_ms
    assert rows[0].traffic_ms == pytest.approx(traffic) and rows[0].context == 20
    assert (rows[0].predicted_ms, rows[0].binding) == (2.0, "host") and rows[0].ratio == pytest.approx(1.05)
    assert rows[0].points_at.startswith("host: the prediction holds")
    assert rows[1].points_at.startswith("compute")  # naive recomputes P+i positions every step
    slow_bw = Machine(0.001, "test", 1e9, "test")
    row = predictions(results(cell("cached", 16, 50.0)), TINY, slow_bw)[0]
    assert row.binding == "bandwidth" and row.points_at.startswith("bandwidth term not reached")


def test_points_at_names_the_wrong_term():
    assert points_at(1.3, "host", False).startswith("host floor")
    assert points_at(0.5, "host", False).startswith("host term too high")


def test_host_overhead_verdict():
    supported = results(cell("naive", 16, 10.0), cell("cached", 16, 9.0), cell("static", 16, 3.0))
    verdict = host_overhead_verdict(supported)
    assert verdict.supported is True and verdict.numbers["static_speedup"] == pytest.approx(3.0)
    refuted = results(cell("naive", 16, 30.0), cell("cached", 16, 9.0), cell("static", 16, 8.0))
    assert host_overhead_verdict(refuted).supported is False
    assert host_overhead_verdict(results(cell("naive", 16, 1.0))).supported is None


def test_batching_verdict():
    machine = Machine(1.0, "test", 10e9, "test")
    flat = results(*(cell("batched", 16, 2.0 * (1 + 0.02 * b), batch=b) for b in (1, 2, 4, 8)))
    verdict = batching_verdict(flat, TINY, machine)
    assert verdict.supported is True and verdict.numbers["by_batch"][8]["step_ratio"] == pytest.approx(1.16 / 1.02)
    growing = results(*(cell("batched", 16, 2.0 * b, batch=b) for b in (1, 2, 4)))
    assert batching_verdict(growing, TINY, machine).supported is False
    assert batching_verdict(growing, TINY, machine).numbers["holds_up_to_batch"] == 1
    partly = results(*(cell("batched", 16, x, batch=b) for b, x in ((1, 2.0), (2, 2.1), (4, 2.2), (8, 3.0))))
    verdict = batching_verdict(partly, TINY, machine)
    assert verdict.supported is False and verdict.numbers["holds_up_to_batch"] == 4 and "up to B=4" in verdict.evidence
    assert batching_verdict(results(cell("cached", 16, 1.0)), TINY, machine).supported is None


def fake_cuda_trace(path, graph: bool, steps: int = 2):
    """A fake CUDA trace, built here (no GPU): `steps` decode steps of 100 us. Eager (graph=False): three kernel
    launches a step, one kernel each. Captured (graph=True): one cudaGraphLaunch a step whose three replayed
    kernels carry its correlation id. Kernels run 10 us each, back to back from 30 us into the step."""
    events, corr = [], 0
    for i in range(steps):
        t0 = i * 200.0
        events.append(dict(ph="X", cat="user_annotation", name=f"decode#{i}", pid=1, tid=1, ts=t0, dur=100.0))
        launches = [("cudaGraphLaunch", 3)] if graph else [("cudaLaunchKernel", 1)] * 3
        kernel = 0
        for j, (name, kernels) in enumerate(launches):
            corr += 1
            events.append(
                dict(
                    ph="X",
                    cat="cuda_runtime",
                    name=name,
                    pid=1,
                    tid=1,
                    ts=t0 + 5 + 5 * j,
                    dur=2.0,
                    args={"correlation": corr},
                )
            )
            for _ in range(kernels):
                events.append(
                    dict(
                        ph="X",
                        cat="kernel",
                        name="k",
                        pid=0,
                        tid=7,
                        ts=t0 + 30 + 10 * kernel,
                        dur=10.0,
                        args={"correlation": corr, "device": 0, "stream": 7},
                    )
                )
                kernel += 1
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_hand_figures_from_fake_cuda_traces(tmp_path):
    """The figures the write-ups counted by hand, from fake CUDA traces: per step the eager engine launches 3
    kernels, the captured one launches 1 graph whose 3 kernels are replayed; 30 us busy of each step's 100 us."""
    steps = {
        "cached": step_counts("cached", analyze(load_trace(fake_cuda_trace(tmp_path / "c.json", False))), "c.json"),
        "static": step_counts("static", analyze(load_trace(fake_cuda_trace(tmp_path / "s.json", True))), "s.json"),
    }
    assert (steps["cached"].launches, steps["cached"].graph_launches, steps["cached"].kernels) == (3, 0, 3)
    assert (steps["static"].launches, steps["static"].graph_launches, steps["static"].kernels) == (0, 1, 3)
    assert steps["static"].gpu_busy_us == 30 and steps["static"].wall_us == 100
    energy = TelemetrySummary(energy_per_token_j=0.25, energy_source="counter")
    res = results(dataclasses.replace(cell("cached", 16, 2.0), telemetry=energy), cell("static", 16, 1.0))
    report = Report(Machine(1.0, "test", 1e9, "test"), [], [], steps=steps)
    figures = {f.name: f for f in hand_figures(res, report, 16)}
    assert figures["kernel launches per step"].values == {"cached": 3, "static": 0}
    assert figures["graph launches per step"].values == {"cached": 0, "static": 1}
    assert figures["kernels per step (replayed ones for a graph)"].values == {"cached": 3, "static": 3}
    assert figures["GPU busy per step"].values == {"cached": 0.03, "static": 0.03}
    assert figures["step (ITL p50)"].values == {"cached": 2.0, "static": 1.0}
    assert figures["energy per token"].values == {"cached": 0.25, "static": None}
    assert "NVML (counter)" in figures["energy per token"].source
    assert all(f.source for f in figures.values())  # every figure says where it comes from
    assert "graph launches per step" in render.report_markdown(res, report, list(figures.values()))


def test_hand_figures_on_a_cpu_say_what_is_not_measured():
    report = Report(Machine(1.0, "test", 1e9, "test"), [], [])
    figures = {f.name: f for f in hand_figures(results(cell("cached", 16, 2.0)), report, 16)}
    assert "kernel launches per step" not in figures  # no CUDA trace: no GPU rows at all, never zeros
    assert (
        figures["energy per token"].values == {"cached": None} and figures["energy per token"].source == "no NVML here"
    )


def test_datasheet_bandwidth_is_shown_beside_the_measured_one():
    machine = Machine(1.0, "floor", 3.9e12, "measured copy on NVIDIA H200", 4.8e12, "H200 datasheet: NVIDIA ...")
    text = render.bandwidth_text(machine)
    assert "3900.0 GB/s (measured copy on NVIDIA H200)" in text and "H200 datasheet: 4800 GB/s" in text
    assert Report.from_json(Report(machine, [], []).to_json()).machine == machine
