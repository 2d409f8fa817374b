"""Prediction vs measurement and the write-ups' closing predictions, on hand-made cells."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import time

import pytest

from probe.analysis.diagnosis.evidence import Context
from probe.analysis.diagnosis.predictions import (
    BatchScaling,
    HostOverheadGains,
    Machine,
    Measured,
    OverheadReport,
    Side,
    batching_verdict,
    captured_host_cost,
    check_sides,
    host_overhead_verdict,
    points_at,
    predictions,
    what_if_checks,
    wrong_term,
)
from probe.analysis.diagnosis.report import Report, SelfCheck, StepCounts, engine_label, hand_figures, step_counts
from probe.analysis.diagnosis.verdict import diagnose_trace
from probe.analysis.diagnosis.what_if import WhatIf
from probe.analysis.ledger.build import analyze
from probe.analysis.records.environment import Environment
from probe.analysis.records.results import BenchResults, Cell, FailedCell
from probe.analysis.records.telemetry import TelemetrySummary, cell_telemetry
from probe.analysis.roofline.formulas import arch_for, decode_step
from probe.analysis.trace import load_trace
from probe.capture import pipeline
from probe.render import terminal
from probe.render.markdown import report_markdown
from probe.settings import BenchConfig
from tests.conftest import DATA
from tests.test_diagnosis import python_bound_trace
from tests.test_overhead import FAKE_FLOOR

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
    assert isinstance(verdict.numbers, HostOverheadGains)
    assert verdict.supported is True and verdict.numbers.static_speedup == pytest.approx(3.0)
    refuted = results(cell("naive", 16, 30.0), cell("cached", 16, 9.0), cell("static", 16, 8.0))
    assert host_overhead_verdict(refuted).supported is False
    assert host_overhead_verdict(results(cell("naive", 16, 1.0))).supported is None


def test_batching_verdict():
    machine = Machine(1.0, "test", 10e9, "test")
    flat = results(*(cell("batched", 16, 2.0 * (1 + 0.02 * b), batch=b) for b in (1, 2, 4, 8)))
    verdict = batching_verdict(flat, TINY, machine)
    assert isinstance(verdict.numbers, BatchScaling)
    assert verdict.supported is True and verdict.numbers.by_batch[8].step_ratio == pytest.approx(1.16 / 1.02)
    growing = results(*(cell("batched", 16, 2.0 * b, batch=b) for b in (1, 2, 4)))
    grown = batching_verdict(growing, TINY, machine)
    assert grown.supported is False and isinstance(grown.numbers, BatchScaling) and grown.numbers.holds_up_to_batch == 1
    partly = results(*(cell("batched", 16, x, batch=b) for b, x in ((1, 2.0), (2, 2.1), (4, 2.2), (8, 3.0))))
    verdict = batching_verdict(partly, TINY, machine)
    assert isinstance(verdict.numbers, BatchScaling)
    assert verdict.supported is False and verdict.numbers.holds_up_to_batch == 4 and "up to B=4" in verdict.evidence
    assert batching_verdict(results(cell("cached", 16, 1.0)), TINY, machine).supported is None


def test_verdict_figures_are_typed_and_report_json_keeps_their_shape():
    """A report.json written before the figures were typed reads back into them (by_batch keyed by B), and writes
    back as the same JSON; a verdict with no figures is an empty object, as it always was."""
    doc = json.loads((DATA / "quick-run" / "report.json").read_text())
    report = Report.from_json(doc)
    gains, scaling = (v.numbers for v in report.verdicts)
    assert isinstance(gains, HostOverheadGains) and gains.cache_speedup == pytest.approx(3.631364998094173)
    assert isinstance(scaling, BatchScaling) and sorted(scaling.by_batch) == [1, 2, 4, 8]
    assert scaling.by_batch[8].scaling == pytest.approx(0.7519393875129907) and scaling.holds_up_to_batch == 4
    assert json.loads(json.dumps(report.to_json()))["verdicts"] == doc["verdicts"]
    unmeasured = host_overhead_verdict(results(cell("naive", 16, 1.0)))
    assert unmeasured.numbers is None and unmeasured.to_json()["numbers"] == {}
    with pytest.raises(ValueError, match="claim"):
        Report.from_json(doc | {"verdicts": [doc["verdicts"][0] | {"claim": None}]})


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
    assert "graph launches per step" in report_markdown(res, report, list(figures.values()))


def test_hand_figures_on_a_cpu_say_what_is_not_measured():
    report = Report(Machine(1.0, "test", 1e9, "test"), [], [])
    figures = {f.name: f for f in hand_figures(results(cell("cached", 16, 2.0)), report, 16)}
    assert "kernel launches per step" not in figures  # no CUDA trace: no GPU rows at all, never zeros
    assert (
        figures["energy per token"].values == {"cached": None} and figures["energy per token"].source == "no NVML here"
    )


def test_datasheet_bandwidth_is_shown_beside_the_measured_one():
    machine = Machine(1.0, "floor", 3.9e12, "measured copy on NVIDIA H200", 4.8e12, "H200 datasheet: NVIDIA ...")
    text = terminal.bandwidth_text(machine)
    assert "3900.0 GB/s (measured copy on NVIDIA H200)" in text and "H200 datasheet: 4800 GB/s" in text
    assert Report.from_json(Report(machine, [], []).to_json()).machine == machine


def test_a_captured_engine_is_predicted_from_its_own_host_cost():
    """Issue 24 §3: a static (captured) step is one graph launch; predicting it from the eager floor (2 ms here)
    read "host term too high" for every static cell. The fake floor issues 100 launches at 15 us each, so static's
    host term is 1 x 0.015 ms; its prediction is max(0.015 ms, the traffic term), never the 2 ms floor."""
    overhead = OverheadReport.from_json({"model": "tiny", "dtype": "float16", "device": "cuda:0", **FAKE_FLOOR})
    cost = captured_host_cost(True, overhead)
    assert (cost.dispatches, cost.per_dispatch_ms) == (1.0, pytest.approx(0.015)) and "1 graph launch" in cost.source
    machine = Machine(2.0, "test", 10e9, "test")
    rows = predictions(results(cell("cached", 16, 2.1), cell("static", 16, 0.9)), TINY, machine, {"static": cost})
    cached, static = rows
    assert (cached.floor_ms, cached.host_source) == (2.0, "eager floor")
    assert static.floor_ms == pytest.approx(0.015) and static.host_source == cost.source
    traffic = decode_step(TINY, "float32", 16 + 4, 1, 10e9).traffic_ms
    assert static.predicted_ms == pytest.approx(max(0.015, traffic)) and static.predicted_ms < 2.0
    assert not static.points_at.startswith("host term too high")
    # a CPU compiles the static engine but captures no graph: no cost of its own, the eager floor stays
    assert captured_host_cost(False, overhead) is None


def test_the_batched_column_is_its_profiled_batch():
    """Issue 24 §3: the batched trace is B=4, so its column's bench figures are the B=4 cell's, not B=1's, and its
    name says B."""
    counts = StepCounts("batched", "t_b4.json", "torch.profiler", 8, False, 4000.0, 270.0, 0.0, 0.0, 0.0, None, None, 4)
    report = Report(Machine(1.0, "test", 1e9, "test"), [], [], steps={engine_label("batched", 4): counts})
    res = results(cell("batched", 16, 2.0), cell("batched", 16, 3.0, batch=4))
    figures = {f.name: f for f in hand_figures(res, report, 16)}
    assert figures["step (ITL p50)"].values == {"batched B=4": 3.0}
    assert figures["profiled step"].values == {"batched B=4": 4.0}


def test_energy_over_phases_shorter_than_nvmls_window_is_marked_unreliable():
    """Issue 24 §3: 31 decode steps of 2 ms are 62 ms, far under NVML's 1 s power window: the figure stays in the
    JSON, marked unreliable, and the report shows no number for it."""
    t0 = 10**12
    rows = [{"t_ns": t0 + i * 10_000_000, "energy_j": 100.0 + 0.5 * i} for i in range(200)]  # 50 W for 2 s
    short = cell_telemetry(rows, [(t0, t0 + 62_000_000)], 31)
    assert short.energy_per_token_j == pytest.approx(0.1) and short.energy_reliable is False  # 3.1 J / 31 tokens
    long = cell_telemetry(rows, [(t0, t0 + 1_500_000_000)], 750)
    assert long.energy_per_token_j == pytest.approx(0.1) and long.energy_reliable is True  # 75 J / 750 tokens
    res = results(dataclasses.replace(cell("cached", 16, 2.0), telemetry=short))
    figures = {f.name: f for f in hand_figures(res, Report(Machine(1.0, "t", 1e9, "t"), [], []), 16)}
    assert (
        figures["energy per token"].values == {"cached": None}
        and "unreliable for cached" in figures["energy per token"].source
    )
    table = terminal.telemetry_table(res)
    assert table.columns[-1]._cells == ["unreliable"]


def test_failures_warnings_and_lost_kernels_reach_the_report():
    """Issue 24 §2-3: a part that failed and what the ledgers warned are in report.md; a GPU trace whose steps
    launch and hold no kernel, and a self-check whose kernels vanished, are what the exit status turns on."""
    lost = StepCounts("static", "s.json", "torch.profiler", 8, True, 100.0, 5.0, 0.0, 1.0, 0.0, 0.0, 100.0)
    fine = dataclasses.replace(lost, engine="cached", launches=3.0, graph_launches=0.0, kernels=3.0)
    check = SelfCheck("cuda:0", 38, 3, 3, 3, 0, 3, 3, "TEARDOWN_CUPTI left unset", "kernels ... 3 -> 0")
    report = Report(
        Machine(1.0, "t", 1e9, "t"),
        [],
        [],
        steps={"static": lost, "cached": fine},
        warnings=["s.json: 8 step(s) launched a graph but hold none of its kernels"],
        failed={"profile naive": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"},
        self_check=check,
    )
    assert report.lost_kernels == ["static", "self-check"]
    assert Report.from_json(json.loads(json.dumps(report.to_json()))) == report
    md = report_markdown(results(cell("cached", 16, 2.0)), report)
    assert "## Parts that failed" in md and "CUPTI\\_ERROR\\_NOT\\_INITIALIZED" in md
    assert "## Warnings" in md and "## Profiler self-check" in md
    assert md.index("## Warnings") < md.index("## Cells")  # problems first


def test_an_old_report_without_the_new_fields_still_reads():
    old = {"machine": dataclasses.asdict(Machine(1.0, "t", 1e9, "t")), "predictions": [], "verdicts": []}
    report = Report.from_json(old)
    assert (report.warnings, report.failed, report.self_check, report.lost_kernels) == ([], {}, None, [])


def test_a_batch_that_beats_b_times_single_is_a_measurement_error_not_a_verdict():
    """A run printed "supported ... 488% of B x single" against a contended B=1 cell: a batch of B cannot produce
    more than B sequences run one at a time. B=1 at 10 ms (100 tok/s), B=2 at 2 ms (1000 tok/s): 500%."""
    machine = Machine(1.0, "test", 10e9, "test")
    v = batching_verdict(results(cell("batched", 16, 10.0), cell("batched", 16, 2.0, batch=2)), TINY, machine)
    assert v.supported is None and "500% of B x single" in v.evidence and "measurement error" in v.evidence


def test_a_contended_reference_cell_is_not_judged():
    machine = Machine(1.0, "test", 10e9, "test")
    one = dataclasses.replace(cell("batched", 16, 2.0), contended=True, other_cpu_cores=1.5)
    v = batching_verdict(results(one, cell("batched", 16, 2.1, batch=2)), TINY, machine)
    assert v.supported is None and "ran contended (1.50 cores" in v.evidence


def _python_bound_median(tmp_path):
    trace = load_trace(python_bound_trace(tmp_path))
    analysis = analyze(trace)
    return diagnose_trace(analysis, Context.of(trace, analysis=analysis)).median


def test_what_if_checks_hold_each_change_against_the_change_made(tmp_path):
    """The host-bound cached step (tests/test_diagnosis.py: host 100 us, GPU 7 us) predicts a captured step of
    87.5 us. Its GPU work has nothing per sequence (no attention or KV-cache kernel), so no batch is predicted (a
    prediction would stay under the host's 100 us at every B, and B=8 measured 0.2 ms: +100%): the batch checks say
    why they are not checked. Measured: cached 0.1 ms (its profiled step), static 0.1 ms (+14.3%: holds within
    15%)."""
    median = _python_bound_median(tmp_path)
    measured = {
        Side("cached"): Measured(0.1, False),
        Side("static"): Measured(0.1, False),
        Side("batched"): Measured(0.1, False),
        Side("batched", 2): Measured(0.1, False),
        Side("batched", 4): Measured(0.11, False),
        Side("batched", 8): Measured(0.2, False),
    }
    assert check_sides(median) == list(measured)  # no threads what-if on a GPU step
    static, *batches = what_if_checks(median, measured)
    assert (static.change, static.what_if) == ("cached -> static", "capture the forward in a CUDA graph")
    assert (static.predicted_step_ms, static.measured_step_ms) == (pytest.approx(0.0875), 0.1)
    assert (static.priced_step_ms, static.baseline_step_ms, static.baseline_error_pct) == (0.1, 0.1, 0.0)
    assert static.rebased_step_ms == pytest.approx(0.0875)  # the baseline measured as priced: nothing to rebase
    assert static.error_pct == pytest.approx(100 * (0.1 / 0.0875 - 1)) and static.wrong_term is None
    assert [c.change for c in batches] == ["batched B=1 -> B=2", "batched B=1 -> B=4", "batched B=1 -> B=8"]
    assert [c.predicted_step_ms for c in batches] == [None] * 3
    assert all(c.note.startswith("not checked: batch sequences: not offered: it needs work measured per sequence")
               for c in batches)  # fmt: skip
    assert [c.measured_step_ms for c in batches] == [0.1, 0.11, 0.2]
    assert static.judged and static.contended is False


def test_a_what_if_check_names_the_term_that_departed(tmp_path):
    """The change, not the baseline: cached measured at 0.2 ms beside the change, against the 0.1 ms the profile
    priced (+100%), is the profile's estimate departing, said apart; the capture's saving (0.1 - 0.0875 = 0.0125
    ms) held fixed, static should take 0.2 - 0.0125 = 0.1875 ms, and 0.15 ms beat it by 20%: the host work the
    capture left (host 87.5 > GPU 7 us), from the rebased figure. With the baseline in line, a static step of 0.15 ms
    against 0.0875 is the same term, figures as predicted."""
    median = _python_bound_median(tmp_path)
    measured = {Side("cached"): Measured(0.2, False), Side("static"): Measured(0.15, False)}
    (static, *_) = what_if_checks(median, measured)
    assert static.baseline_error_pct == pytest.approx(100.0) and static.baseline_departed
    assert static.rebased_step_ms == pytest.approx(0.1875) and static.error_pct == pytest.approx(-20.0)
    expected = (
        "the host work left outside the capture: predicted a step of 0.188 ms (0.087 + the baseline's +0.100), "
        "measured 0.150 ms"
    )
    assert static.wrong_term == expected
    measured[Side("cached")] = Measured(0.1, False)
    (static, *_) = what_if_checks(median, measured)
    expected = "the host work left outside the capture: predicted a step of 0.087 ms, measured 0.150 ms"
    assert static.wrong_term == expected and not static.baseline_departed


def test_a_compiled_models_departed_overhead_leaves_out_what_stays_as_it_is():
    """A compiled training step of 0.3 ms measured: less its compute (0.1), the host work outside the model (0.02)
    and the ops it leaves as they are (AccumulateGrad, the optimizer's: 0.05), 0.13 ms is the overhead it kept: from
    the saving, it saved none of the 0.1 ms predicted, so it kept 0.03 + 0.1."""
    w = WhatIf("compile the model", 0.2, 0.1, 33.3, "", "", step_ms=0.3)
    w = dataclasses.replace(w, terms={"compute": 0.1, "outside": 0.02, "eager": 0.05, "overhead": 0.1, "calls": 0.03})
    expected = (
        "the overhead a compiled graph keeps: predicted 0.030 ms, measured 0.130 ms (it saved 0.000 ms, 0.100 "
        "predicted)"
    )
    assert wrong_term(w, 0.3, 0.3) == expected


def _with_what_ifs(median, *what_ifs: WhatIf):
    return dataclasses.replace(median, what_if=what_ifs, withheld=())


# A cached CPU step's compile what-if as a real `probe run --quick` priced it: the step 2.025 ms (unprofiled),
# compiled 1.022 ms = compute 0.428 + outside the forward 0.100 + the calls a compiled graph keeps 0.394 + guards
# 0.100; its overhead, 2.025 - 0.528 = 1.497 ms, shrinks to 0.494: it saves 1.003 ms.
COMPILE = WhatIf(
    "compile the forward (torch.compile)", 1.022, 1.003, 49.5, "host 2.025 -> ...", "", step_ms=2.025,
    terms={"compute": 0.428, "outside": 0.1, "overhead": 1.497, "calls": 0.394, "entry": 0.1},
)  # fmt: skip


def test_a_change_that_holds_holds_though_its_baseline_departed_9_percent(tmp_path):
    """The real run's compile check: cached measured 2.209 ms beside the change, 9.1% over the 2.025 priced; static
    1.233 ms. Against the prediction as priced it read +20.6%, and the kept overhead (0.705 against 0.494) took the
    blame; with the saving held fixed, static should take 2.209 - 1.003 = 1.206 ms, and 1.233 is +2.2%: the change
    holds, and a 9% departure (under HOLDS) is no finding."""
    median = _with_what_ifs(_python_bound_median(tmp_path), COMPILE)
    measured = {Side("cached"): Measured(2.209, False), Side("static"): Measured(1.233, False)}
    (static, *_) = what_if_checks(median, measured)
    assert static.error_pct == pytest.approx(100 * (1.233 / 1.206 - 1))  # +2.2%, not +20.6%
    assert static.judged and static.wrong_term is None
    assert (static.predicted_step_ms, static.priced_step_ms) == (1.022, 2.025)  # the raw prediction is kept
    assert static.rebased_step_ms == pytest.approx(1.206)
    assert static.baseline_error_pct == pytest.approx(100 * (2.209 / 2.025 - 1)) and not static.baseline_departed
    assert terminal.check_line(static) == (
        "check: cached -> static (compile the forward (torch.compile)): predicted 1.022 ms from a baseline priced "
        "at 2.025 ms; the baseline measured 2.209 ms (+9.1%), so 1.206 ms; measured 1.233 ms (+2.2%; holds)"
    )


def test_a_baseline_that_departs_30_percent_is_said_and_the_change_judged_apart(tmp_path):
    """cached measured 2.633 ms, 30.0% over the 2.025 priced: the profile's estimate was off, said in the line and
    the table. The change is judged on 2.633 - 1.003 = 1.630 ms: static at 1.700 ms is +4.3%, it holds (against the
    prediction as priced, +66%)."""
    median = _with_what_ifs(_python_bound_median(tmp_path), COMPILE)
    measured = {Side("cached"): Measured(2.633, False), Side("static"): Measured(1.7, False)}
    (static, *batches) = what_if_checks(median, measured)
    assert static.error_pct == pytest.approx(100 * (1.7 / 1.630 - 1)) and static.judged and static.wrong_term is None
    assert static.baseline_departed and static.baseline_error_pct == pytest.approx(100 * (2.633 / 2.025 - 1))
    line = terminal.check_line(static)
    assert line.endswith(
        "the baseline measured 2.633 ms (+30.0%, past 15%: the profile's estimate of it was off), so 1.630 ms; "
        "measured 1.700 ms (+4.3%; holds)"
    )
    markdown = report_markdown(results(cell("cached", 16, 2.633)), Report(None, [], [], what_if_checks=[static]))
    row = (
        r"| cached \-\> static | compile the forward \(torch\.compile\) | 2.025 | 2.633 (+30.0%, past 15%: the "
        r"profile's estimate of it was off) | 1.022 | 1.630 | 1.700 | +4.3 | no | holds |"
    )
    assert row in markdown


def test_a_change_that_misses_names_its_term_from_the_rebased_figures(tmp_path):
    """The baseline departed 30% (2.633 ms against 2.025), and static measured 2.200 ms against the rebased 1.630:
    +35%, a miss of the change's own. It saved 2.633 - 2.200 = 0.433 ms of the 1.003 predicted, so the compiled
    graph kept 0.494 + 1.003 - 0.433 = 1.064 ms of overhead, not the baseline (as the old rule said) nor the 2.200 -
    0.528 = 1.672 ms the measured step less the priced compute would say. Static at 0.400 ms saved 2.233 ms, past
    the whole 1.497 ms of overhead: the compute shrank."""
    median = _with_what_ifs(_python_bound_median(tmp_path), COMPILE)
    measured = {Side("cached"): Measured(2.633, False), Side("static"): Measured(2.2, False)}
    (static, *_) = what_if_checks(median, measured)
    assert static.error_pct == pytest.approx(100 * (2.2 / 1.630 - 1)) and static.baseline_departed
    assert static.wrong_term == (
        "the overhead a compiled graph keeps: predicted 0.494 ms, measured 1.064 ms (it saved 0.433 ms, 1.003 "
        "predicted)"
    )
    measured[Side("static")] = Measured(0.4, False)
    (static, *_) = what_if_checks(median, measured)
    assert static.wrong_term == (
        "compute: the compiled step saved 2.233 ms, past the whole 1.497 ms of overhead: the ops' compute (0.428 "
        "ms), taken to stay, shrank"
    )


def test_a_batch_check_is_judged_from_batched_b1_measured_beside_it(tmp_path):
    """The real run's batch checks: the what-if priced the cached step at 2.025 ms = overhead 1.500 + once 0.386 +
    0.139 a sequence (B=2 2.164, B=4 2.442, B=8 2.998); batched B=1 measured 2.354 (+16.2%, departed). Rebased:
    2.493, 2.771, 3.327; measured 2.581 (+3.5%; +19.3% as priced), 2.759 (-0.4%), 3.028 (-9.0%): each holds. B=8 at
    4.500 (+35.3%) misses: the per-sequence work, (4.500 - 2.354) / 7 = 0.307 ms a sequence from B=1 measured beside
    it, against 0.139."""
    w = WhatIf(
        "batch 8 sequences", 2.998, 1.65, 81.5, "", "", step_ms=2.025,
        terms={"overhead": 1.5, "once": 0.386, "per_sequence": 0.139},
    )  # fmt: skip
    median = _with_what_ifs(_python_bound_median(tmp_path), w)
    measured = {Side("batched"): Measured(2.354, False)}
    measured |= {Side("batched", b): Measured(x, False) for b, x in ((2, 2.581), (4, 2.759), (8, 3.028))}
    _, *batches = what_if_checks(median, measured)
    assert [c.error_pct for c in batches] == [
        pytest.approx(100 * (m / r - 1)) for m, r in ((2.581, 2.493), (2.759, 2.771), (3.028, 3.327))
    ]
    assert [c.rebased_step_ms for c in batches] == [pytest.approx(x) for x in (2.493, 2.771, 3.327)]
    assert all(c.judged and c.wrong_term is None and c.baseline_departed for c in batches)
    measured[Side("batched", 8)] = Measured(4.5, False)
    *_, b8 = what_if_checks(median, measured)
    assert b8.wrong_term == "the per-sequence work: predicted 0.139 ms a sequence, measured 0.307 ms"


def test_a_threads_check_and_the_default_name_the_change_from_the_measured_baseline(tmp_path):
    """Threads: predicted to save 2.025 - 1.500 = 0.525 ms; cached measured 2.500 (+23.5%) and on 2 threads 2.300:
    against 2.500 - 0.525 = 1.975, +16.5%: it saved 0.200 ms. A what-if with no terms: predicted 0.500 from 1.000,
    the baseline 1.200, so 0.700 ms."""
    w = WhatIf(
        "run the ops on 2 threads", 1.5, 0.525, 25.9, "", "", step_ms=2.025, terms={"serial": 0.975, "parallel": 1.05}
    )
    median = _with_what_ifs(_python_bound_median(tmp_path), w)
    measured = {Side("cached"): Measured(2.5, False), Side("cached", threads=2): Measured(2.3, False)}
    *_, threads = what_if_checks(median, measured)
    assert threads.change == "cached -> 2 threads" and threads.error_pct == pytest.approx(100 * (2.3 / 1.975 - 1))
    expected = "the work that splits across threads (GEMM, attention): predicted to save 0.525 ms, measured 0.200 ms"
    assert threads.wrong_term == expected
    bare = WhatIf("make the shapes static", 0.5, 0.5, 50.0, "", "", step_ms=1.0)
    expected = "the step: predicted 0.700 ms (0.500 + the baseline's +0.200), measured 1.000 ms"
    assert wrong_term(bare, 1.2, 1.0) == expected


def test_a_baseline_under_the_saving_leaves_nothing_to_check(tmp_path):
    """cached measured 0.900 ms beside the change, under the 1.003 ms the compile was predicted to save: held fixed,
    the saving leaves no step, so the change is not checked (no error), and the line says why."""
    median = _with_what_ifs(_python_bound_median(tmp_path), COMPILE)
    (static, *_) = what_if_checks(median, {Side("cached"): Measured(0.9, False), Side("static"): Measured(0.5, False)})
    assert static.error_pct is None and not static.judged and static.wrong_term is None
    assert static.note == (
        "not checked: the change was predicted to save 1.003 ms of a 2.025 ms step, and the baseline measured "
        "0.900 ms: no step is left to predict"
    )


def test_a_report_json_from_before_the_rebase_reads_back_and_prints(tmp_path):
    """A report.json written before checks were rebased has no priced, rebased or baseline-error figures: it reads
    back with none, and its line prints the prediction as it was judged then."""
    old = {
        "change": "cached -> static", "what_if": "compile the forward (torch.compile)", "predicted_step_ms": 1.022,
        "measured_step_ms": 1.233, "error_pct": 20.6, "contended": False, "wrong_term": "the kept overhead",
        "note": "", "baseline_step_ms": 2.209,
    }  # fmt: skip
    (check,) = Report.from_json({"predictions": [], "what_if_checks": [old]}).what_if_checks
    assert (check.priced_step_ms, check.rebased_step_ms, check.baseline_error_pct) == (None, None, None)
    assert not check.baseline_departed
    expected = (
        "check: cached -> static (compile the forward (torch.compile)): predicted 1.022 ms; measured 1.233 ms "
        "(+20.6%; the kept overhead)"
    )
    assert terminal.check_line(check) == expected


def test_a_contended_what_if_check_is_not_judged(tmp_path):
    """Either side contended: the figures are kept, no term is named, and the note says why."""
    median = _python_bound_median(tmp_path)
    measured = {Side("cached"): Measured(0.1, False), Side("static"): Measured(0.3, True, 1.2)}
    (static, *batches) = what_if_checks(median, measured)
    assert static.contended and not static.judged and static.wrong_term is None
    assert static.note == "not judged: contended (1.20 cores of other work beside it)"
    measured[Side("cached")] = Measured(0.2, True, 1.4)  # +100% over the 0.1 priced, contended: said, not judged
    (static, *_) = what_if_checks(median, measured)
    assert static.baseline_error_pct == pytest.approx(100.0) and not static.baseline_departed
    assert "(+100.0%), so 0.188 ms" in terminal.check_line(static)
    assert all(c.note.startswith("not checked: batch sequences: not offered") for c in batches)  # nothing per seq


def test_what_if_checks_without_a_baseline_or_a_what_if_say_so(tmp_path):
    median = _python_bound_median(tmp_path)
    assert all(c.note == "no profiled baseline" for c in what_if_checks(None, {}))
    bare = dataclasses.replace(median, what_if=(), withheld=())
    assert all(c.note.startswith("not checked: the diagnosis offers no") for c in what_if_checks(bare, {}))


def test_what_if_checks_round_trip_and_print(tmp_path):
    median = _python_bound_median(tmp_path)
    checks = what_if_checks(median, {Side("cached"): Measured(0.1, False), Side("static"): Measured(0.1, False)})
    report = Report(None, [], [], what_if_checks=checks)
    doc = json.loads(json.dumps(report.to_json()))
    assert set(doc["what_if_checks"][0]) >= {
        "change", "predicted_step_ms", "measured_step_ms", "error_pct", "contended", "wrong_term",
    }  # fmt: skip
    assert Report.from_json(doc).what_if_checks == checks
    markdown = report_markdown(results(cell("cached", 16, 0.1)), report)
    row = (
        r"| cached \-\> static | capture the forward in a CUDA graph | 0.100 | 0.100 (+0.0%) | 0.087 | 0.087 | 0.100 "
        "| +14.3 | no | holds |"
    )
    assert row in markdown and "### What-ifs checked by making the change" in markdown


def _busy(c: Cell, cores: float = 1.5) -> Cell:
    return dataclasses.replace(c, contended=True, other_cpu_cores=cores)


def test_the_contention_rule_holds_in_every_judgment():
    """One rule everywhere (issue 32): a contended cell or floor is never judged. Part 1 with its static cell
    contended; batching with B=4 contended (B=1 clean); a prediction row on a contended cell, and every row on a
    contended floor; report.md says which and why, up front."""
    trio = [cell("naive", 16, 10.0), cell("cached", 16, 9.0), _busy(cell("static", 16, 3.0))]
    part1 = host_overhead_verdict(results(*trio))
    assert (
        part1.supported is None
        and part1.evidence == "not judged: static p16 ran contended (1.50 cores of other work beside it)"
    )
    machine = Machine(1.0, "test", 10e9, "test")
    flat = [cell("batched", 16, 2.0, batch=b) for b in (1, 2)] + [_busy(cell("batched", 16, 2.0, batch=4), 0.9)]
    batching = batching_verdict(results(*flat), TINY, machine)
    assert batching.supported is None and batching.evidence.startswith("not judged: batched p16 b4 ran contended (0.90")
    rows = predictions(results(cell("cached", 16, 1.0), _busy(cell("cached", 64, 1.0))), TINY, machine)
    assert not rows[0].points_at.startswith("not judged") and rows[1].points_at.startswith("not judged: cached p64")
    floor = dataclasses.replace(machine, contended=True, other_cpu_cores=1.1)
    rows = predictions(results(cell("cached", 16, 1.0)), TINY, floor)
    assert rows[0].points_at == "not judged: the floor ran contended (1.10 cores of other work beside it)"
    report = Report(floor, rows, [part1, batching])
    markdown = report_markdown(results(*trio, *flat), report)
    section = markdown[markdown.index("## Not judged: contended") : markdown.index("## Cells")].replace("\\", "")
    assert "- cell static p16 (1.50 cores of other work)" in section and "- the floor (1.10 cores" in section
    assert "verdict: removing per-step host overhead" in section and "prediction cached p16 B=1: not judged" in section


def test_report_md_marks_contended_cells_and_keeps_the_other_cpu_column():
    """Issue 36 §3: report.md dropped the terminal's "other CPU" column and never said its cells were contended."""
    calm = dataclasses.replace(cell("naive", 16, 4.0), other_cpu_cores=0.02, contended=False)
    busy = dataclasses.replace(cell("cached", 16, 2.0), other_cpu_cores=1.85, contended=True)
    md = report_markdown(results(calm, busy), Report(None, [], []))
    header, _, naive, cached = [line for line in md.splitlines() if line.startswith("|")][:4]
    assert "other CPU" in header
    assert "0.02 cores" in naive and "CONTENDED" not in naive and "1.85 cores CONTENDED" in cached
    assert "**Contended:** 1 of 2 cells ran while other processes used the CPU" in md.replace("\\", "")
    assert "other CPU" not in report_markdown(results(calm), Report(None, [], []))  # only when one was contended


def test_a_report_of_a_run_in_progress_says_what_is_missing_and_how_to_finish():
    report = Report(
        None,
        [],
        [],
        status="interrupted",
        missing=["the machine (floor, bandwidth): not measured, so no step is predicted"],
        resume="probe run --quick --out runs/x --resume",
    )
    assert Report.from_json(json.loads(json.dumps(report.to_json()))) == report
    md = report_markdown(results(cell("cached", 16, 2.0)), report)
    lines = md.splitlines()
    assert lines[4] == (
        "**Interrupted**. The answers below are what the 1 cells measured so far allow. To finish: "
        "`probe run --quick --out runs/x --resume`"
    )
    assert "- the machine \\(floor, bandwidth\\): not measured, so no step is predicted" in lines
    assert md.index("## The write-ups' predictions, checked here") < md.index("## Cells")  # the answer first
    assert "**Interrupted**" not in report_markdown(results(cell("cached", 16, 2.0)), Report(None, [], []))


def test_progress_in_a_log_says_cells_done_left_and_the_time_left_when_nothing_else_did():
    """Issue 36 §1: piped, `probe run` printed nothing for 5-15 minutes at a time. From the sweep's start (its first
    cell can take minutes on a busy machine) a quiet spell is told as the cells done and left."""
    stream = io.StringIO()
    lines = terminal.LogProgress(stream, "probe run", heartbeat_s=0.05)

    def beat(said: str) -> str:
        deadline = time.monotonic() + 30
        while said not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        return next(line for line in stream.getvalue().splitlines() if said in line)

    with lines:
        lines.phase("sweep: 4 cells of naive, cached")
        lines.sweep(4)
        first = beat("0 of 4 cells done")
        lines.cells(results(cell("naive", 16, 4.0)), 4)
        later = beat("1 of 4 cells done")
    assert re.fullmatch(
        r"probe run: sweep: 0 of 4 cells done, 4 left; time left: known after the first cell \(\+\d+ s\)", first
    )
    assert re.fullmatch(r"probe run: sweep: 1 of 4 cells done, 3 left, about \d+ s left \(\+\d+ s\)", later), later
    lines.since = 0.0  # the status itself: 1 cell in 30 s, 3 left: 90 s; 1 in 60 s, 3 left: 3 min
    assert lines.status(30.0) == "sweep: 1 of 4 cells done, 3 left, about 90 s left"
    assert lines.status(60.0) == "sweep: 1 of 4 cells done, 3 left, about 3 min left"
    lines.done = 0
    assert lines.status(40.0) == "sweep: 0 of 4 cells done, 4 left; time left: known after the first cell"


def test_progress_in_a_log_tells_each_cell_once_as_workers_finish_them_out_of_order():
    """On Ray, cells finish out of order and failures are listed apart from cells: each is told once, with its own
    label, and the last line counts all of them (it told one failure seven times before)."""
    stream = io.StringIO()
    lines = terminal.LogProgress(stream, "probe bench")
    lines.sweep(4)
    sweep = results(cell("naive", 16, 4.0))
    failed = FailedCell("raising", 16, 9, 1, "RuntimeError: out of memory")
    sweep.failed.append(failed)
    lines.cells(sweep, 4)
    sweep.cells.append(cell("naive", 8, 3.0))  # a cell after the failure
    lines.cells(sweep, 4)
    sweep.cells.insert(0, cell("cached", 8, 2.0))
    lines.cells(sweep, 4)
    told = [re.sub(r": [A-Z]*.*$", "", line.split(" done: ")[1]) for line in stream.getvalue().splitlines()]
    assert told == ["naive p16", "raising p16", "naive p8", "cached p8"]
    assert "cell 4 of 4 done: cached p8" in stream.getvalue().splitlines()[-1]


def test_a_sweep_tells_its_cell_count_before_its_first_cell(monkeypatch):
    """What lets the progress line count cells left before the first cell is done (probe.capture.pipeline.sweep)."""
    told = []
    monkeypatch.setattr(pipeline, "bench", lambda cfg, out, **kw: told.append("first cell") or results())
    watch = pipeline.Watch(cells=told.append)
    pipeline.sweep(BenchConfig(engines=("naive", "cached"), prompts=(8, 16, 32), device="cpu"), None, watch)
    assert told == [6, "first cell"]
