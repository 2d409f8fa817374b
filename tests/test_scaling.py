"""How the cost of each trace-reading path grows with the steps, measured so that load cannot fool it.

The same synthetic decode trace (benchmarks/synthetic_traces.py: the same events a step) at N and 8N steps, timed
in this one process, interleaved, best of 3 each: the time ratio must stay within twice the events ratio. A stage
that does whole-trace work once a step costs steps x events, and its ratio is about 64 here, however loaded the
machine; a linear one's is about 8. (Before the answer selected each step's ops from one pass over the trace, its
per-op roofline ran that pass once a step: `probe analyze` at 1000 steps took 24x its time at 20 steps.)

No wall-clock time is asserted, only how it grows.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.synthetic_traces import make_trace
from probe.analysis.diagnosis.answer import answer
from probe.analysis.ledger.build import analyze
from probe.analysis.ledger.steps import find_steps
from probe.analysis.regression.compare import compare
from probe.analysis.regression.samples import load_samples
from probe.analysis.trace import load_trace
from probe.cli import main
from probe.explorer.step_clock import step_clock
from tests.test_units import cpu_loop

STEPS = 40  # N; 8N = 320 steps of ~66 events: each side a fraction of a second once the cost is linear
GROWTH = 8
EVENTS_A_STEP = 66  # the generator's smallest step (a launch group a layer and a half, the ranges, the sync)
REPEAT = 3
MIN_TIMED_S = 0.1  # each timing at least this long: many calls of what is fast, one of what is not
SLACK = 2  # the time ratio may reach twice the events ratio: noise, and what is per step but cheap


def best_times(small: Callable[[], object], large: Callable[[], object], repeat: int = REPEAT) -> tuple[float, float]:
    """Each one's time a call, the best of `repeat` timings, interleaved (small, large, small, ...) so that both see
    the same load. A timing calls its function as often as makes MIN_TIMED_S (a call of a few ms alone swings 2-3x
    under load, and its ratio with it); one untimed call of each first (imports, caches). The objects alive before
    are frozen out of the garbage collector's passes: else a pass that a small call triggers walks both traces'
    tables, and charges the small call for what the large trace holds."""
    calls = [max(1, math.ceil(MIN_TIMED_S / _timed(fn, 1))) for fn in (small, large)]
    best = [math.inf, math.inf]
    gc.collect()
    gc.freeze()
    try:
        for _ in range(repeat):
            for i, fn in enumerate((small, large)):
                best[i] = min(best[i], _timed(fn, calls[i]) / calls[i])
    finally:
        gc.unfreeze()
    return best[0], best[1]


def _timed(fn: Callable[[], object], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return time.perf_counter() - t0


def assert_linear(what: str, small: Callable[[], object], large: Callable[[], object], events: float) -> None:
    a, b = best_times(small, large)
    assert b / a <= SLACK * events, (
        f"{what}: {b / a:.1f}x the time for {events:.1f}x the events ({a:.3f} s, {b:.3f} s): its cost grows faster "
        "than the trace"
    )


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[int, Path]:
    """The decode trace at N and 8N steps, with recorded shapes (so the per-op roofline models every op)."""
    folder = tmp_path_factory.mktemp("scaling")
    out = {}
    for n in (STEPS, GROWTH * STEPS):
        out[n] = folder / f"decode{n}.trace.json"
        out[n].write_bytes(make_trace(n, n * EVENTS_A_STEP, shapes=True))
    return out


@pytest.fixture(scope="module")
def loaded(traces):
    """Each trace's event table and ledger, and how many more events the large one has."""
    tables = {n: load_trace(p) for n, p in traces.items()}
    analyses = {n: analyze(t) for n, t in tables.items()}
    small, large = sorted(tables)
    return tables, analyses, len(tables[large]) / len(tables[small])


def _quiet(*args: str) -> Callable[[], object]:
    def run() -> object:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return main(list(args))

    return run


def test_probe_analyze_grows_with_the_trace_not_with_steps_times_events(traces, loaded):
    """The whole command, as a user runs it: read, ledger, the answer (every step's diagnosis and top ops), JSON."""
    small, large = sorted(traces)
    assert_linear(
        "probe analyze --json",
        _quiet("analyze", str(traces[small]), "--json"),
        _quiet("analyze", str(traces[large]), "--json"),
        loaded[2],
    )


def test_the_answer_and_its_per_op_roofline_grow_with_the_trace(loaded):
    """answer() alone, with a device so every step's ops are held against the roofline, as the explorer's Diagnosis
    and Op roofline views load it."""
    tables, analyses, events = loaded
    small, large = sorted(tables)
    found = answer(tables[large], analyses[large], device_name="H100-SXM")
    assert len(found.step_ops) == large and all(any(o.bound for o in ops) for ops in found.step_ops.values())
    assert_linear(
        "answer",
        lambda: answer(tables[small], analyses[small], device_name="H100-SXM"),
        lambda: answer(tables[large], analyses[large], device_name="H100-SXM"),
        events,
    )


def test_the_one_step_layout_grows_with_the_trace(loaded):
    """The explorer's One step view: the middle step laid out on one clock."""
    tables, analyses, events = loaded
    small, large = sorted(tables)
    assert_linear(
        "step_clock",
        lambda: step_clock(tables[small], analyses[small], small // 2),
        lambda: step_clock(tables[large], analyses[large], large // 2),
        events,
    )


def test_probe_compare_grows_with_the_trace(traces, loaded):
    """probe compare of a trace against itself: both read, ledgers, samples, the statistics, the table."""
    small, large = sorted(traces)
    assert compare(load_samples(traces[large]), load_samples(traces[large])).rows
    assert_linear(
        "probe compare",
        _quiet("compare", str(traces[small]), str(traces[small])),
        _quiet("compare", str(traces[large]), str(traces[large])),
        loaded[2],
    )


def _nested_with_overhead(path: Path, depth: int) -> Path:
    """A step of `depth` Python frames nested one in the next, each ending a little after the one inside it, a
    launch at the bottom, and a CUPTI buffer request (kineto's `overhead`, on a thread of its own) from inside the
    innermost frame past every inner frame's end, still inside the outermost."""
    frames = [
        {"ph": "X", "cat": "python_function", "name": f"f.py({i}): f{i}", "pid": 1, "tid": 1, "ts": float(i),
         "dur": 10.0 * depth + 1000.0 - 2 * i, "args": {}}
        for i in range(depth)
    ]  # fmt: skip
    frames += [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0.0,
         "dur": 10.0 * depth + 1000.0, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": float(depth),
         "dur": 1.0, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": float(depth) + 2, "dur": 1.0,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0,
         "ts": float(depth) + 5, "dur": 9.0 * depth + 994.5, "args": {}},  # ends between frame 1's end and frame 0's
    ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": frames}))
    return path


def test_the_profilers_overhead_costs_what_the_nesting_does(tmp_path):
    """A buffer request that outlives every frame it started in: cut out of the self segments, it costs what the
    frames do. (Placed in the nesting, it was split at each frame's end in turn, one pass over the thread a level:
    depth x events, and the H100 vLLM V1 trace's two requests took a thread's split from 0.07 to 0.44 s.)"""
    small, large = (load_trace(_nested_with_overhead(tmp_path / f"d{d}.json", d)) for d in (STEPS * 5, STEPS * 40))
    assert analyze(large).steps[0].mechanism_ns["profiler"] > 0  # the request is inside the outermost frame: counted
    assert_linear(
        "analyze with a buffer request", lambda: analyze(small), lambda: analyze(large), len(large) / len(small)
    )


def test_the_steps_of_a_cpu_only_loop_grow_with_the_trace(tmp_path):
    """A CPU-only loop at N and 8N iterations: its top-level ops stand in for launches (units.unit_work) and the
    repeating cycle is searched over them; finding its steps grows with the trace, not with iterations x ops."""
    small, large = (load_trace(cpu_loop(n).write(tmp_path, f"cpu{n}.json")) for n in (STEPS, GROWTH * STEPS))
    assert len(find_steps(large)) == GROWTH * STEPS
    assert_linear(
        "the steps of a CPU-only loop", lambda: find_steps(small), lambda: find_steps(large), len(large) / len(small)
    )


def _ranged_loop(path: Path, steps: int) -> Path:
    """A loop of `steps` numbered ranges (`token_N_processing`, the numbered-ranges rule's steps), each holding four
    named ranges with no op in them (the named-time rule's), a launch and its kernel on one of two streams beside a
    collective on the other (the category-overlap figures), and a run of 24 event queries (the polling rule's)."""
    events = []
    for i in range(steps):
        t = 200.0 * i
        events.append({"ph": "X", "cat": "user_annotation", "name": f"token_{i}_processing", "pid": 1, "tid": 1,
                       "ts": t, "dur": 190.0})  # fmt: skip
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ensure_layer_{j}_weights", "pid": 1, "tid": 1,
             "ts": t + 1 + 10 * j, "dur": 8.0}
            for j in range(4)
        ]  # fmt: skip
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 45 + k,
             "dur": 0.5, "args": {"correlation": 2 * i + k + 1}}
            for k in (0, 1)
        ]  # fmt: skip
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventQuery", "pid": 1, "tid": 1, "ts": t + 50 + 2 * q,
             "dur": 1.0}
            for q in range(24)
        ]  # fmt: skip
        events += [
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": s, "ts": t + 47, "dur": 100.0 + 20 * k,
             "args": {"correlation": 2 * i + k + 1, "stream": s}}
            for k, (name, s) in enumerate((("gemm", 7), ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 8)))
        ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_numbered_ranges_named_time_polling_and_overlap_grow_with_the_trace(tmp_path):
    """The rules that read ranges, event queries and streams side by side, through the whole command: a loop's
    numbered ranges are its steps, and each step's named time, polling wait and categories alone are found in one
    pass over the trace, not one a step."""
    small, large = (_ranged_loop(tmp_path / f"r{n}.json", n) for n in (STEPS, GROWTH * STEPS))
    step = analyze(load_trace(large)).steps[1]
    assert (step.name, step.named_ns > 0, step.sync_wait_ns > 0) == ("token_1_processing", True, True)
    assert_linear(
        "probe analyze on numbered ranges", _quiet("analyze", str(small), "--json"),
        _quiet("analyze", str(large), "--json"), float(GROWTH),
    )  # fmt: skip
