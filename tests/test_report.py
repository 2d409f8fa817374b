"""Prediction vs measurement and the write-ups' closing predictions, on hand-made cells."""

from __future__ import annotations

import dataclasses

import pytest

from probe.analysis.report import Machine, batching_verdict, host_overhead_verdict, points_at, predictions
from probe.analysis.results import BenchResults, Cell
from probe.analysis.roofline.formulas import arch_for, decode_step

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
        reference=None,
    )


def results(*cells: Cell) -> BenchResults:
    return BenchResults(list(cells), {"dtype": "float32"}, {"dtype": "float32", "model": "tiny"})


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
