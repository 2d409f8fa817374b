"""Every trace in ../shared/traces, whole: `probe analyze --json` answers on each (or refuses it in one line), and
its figures hold together the way the answer says they do. A trace nobody tuned the rules to is the test: a rule
that breaks on a shape it was not written for shows here as a traceback or a sum that does not add up."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probe.cli import main
from tests.conftest import IN_CI, SHARED

TRACES = sorted(
    p.relative_to(SHARED).as_posix()
    for p in (SHARED.glob("*/*") if SHARED.is_dir() else ())
    if p.name.endswith((".json", ".json.gz", ".sqlite"))
)
US = 0.01  # the JSON's figures are rounded to the nanosecond, in microseconds: sums agree to well within this

# host work's parts (probe.analysis.diagnosis.evidence: they add up to it)
HOST_PARTS = (
    "setup_us",
    "data_us",
    "python_us",
    "dispatch_us",
    "launch_us",
    "other_threads_us",
    "profiler_recorded_us",
    "named_us",
    "unattributed_us",
)


def _problems(step: dict) -> list[str]:
    """What of one step's figures does not hold together: the partitions add up to the wall, host work is the wall
    less the sync wait and is its parts, no figure is negative, busy lies within the GPU window, and every offered
    what-if saves something, no more than the step."""
    out = []
    name = f"step {step['index']}"
    for partition in ("mechanism_us", "purpose_us"):
        total = sum(step[partition].values())
        if abs(total - step["wall_us"]) > US:
            out.append(f"{name}: {partition} add up to {total:.3f}, the wall is {step['wall_us']:.3f}")
    if step["gpu_busy_us"] > step["gpu_window_us"] + US:
        out.append(f"{name}: GPU busy {step['gpu_busy_us']:.3f} past its window {step['gpu_window_us']:.3f}")
    d = step.get("diagnosis")
    if not d:
        return out
    e = d["evidence"]
    parts = sum(e[k] for k in HOST_PARTS)
    if abs(parts - e["host_work_us"]) > US:
        out.append(f"{name}: host work {e['host_work_us']:.3f}, its parts {parts:.3f}")
    if abs(e["wall_us"] - e["sync_wait_us"] - e["host_work_us"]) > US:
        out.append(f"{name}: host work {e['host_work_us']:.3f} is not wall less sync wait")
    out += [f"{name}: {k} = {v}" for k, v in e.items() if isinstance(v, int | float) and v < 0]
    for w in d["what_if"]:
        if not 0 < w["saving_ms"] <= w["step_ms"] + US / 1e3 or w["predicted_step_ms"] < 0:
            out.append(f"{name}: {w['change']!r} saves {w['saving_ms']} of {w['step_ms']} ms")
    return out


@pytest.mark.parametrize("name", TRACES or ["(no shared traces here)"])
def test_every_shared_trace_answers_and_its_figures_add_up(name):
    if not TRACES:
        if IN_CI:
            pytest.fail(f"{SHARED} is not here: CI reads the shared traces beside the checkout")
        pytest.skip(f"{SHARED} is not here")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["analyze", str(SHARED / name), "--json"])
    if code:  # refused: one line that says why, never a traceback
        (line,) = [x for x in err.getvalue().splitlines() if x.startswith("probe: error:")]
        assert code == 2 and name in line
        return
    doc = json.loads(out.getvalue())
    assert doc["steps"], "an answer with no step"
    problems = [p for s in doc["steps"] for p in _problems(s)]
    assert not problems, "; ".join(problems[:5])


# --- any trace at all: random shapes, the same checks ------------------------------------------------------------

HOST_KINDS = [
    ("cpu_op", "aten::mm"),
    ("cpu_op", "aten::add"),
    ("cpu_op", "aten::item"),
    ("cpu_op", "record_param_comms"),
    ("cpu_op", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
    ("python_function", "model.py(5): forward"),
    ("python_function", "nn.Module: Linear_0"),
    ("user_annotation", "forward"),
    ("user_annotation", "ProfilerStep#1"),
    ("user_annotation", "ProfilerStep#2"),
    ("cuda_runtime", "cudaLaunchKernel"),
    ("cuda_runtime", "cudaMemcpyAsync"),
    ("cuda_runtime", "cudaDeviceSynchronize"),
    ("cuda_runtime", "cudaStreamSynchronize"),
    ("cuda_runtime", "cudaEventQuery"),
    ("cuda_runtime", "cudaGraphLaunch"),
    ("cuda_runtime", "cudaFree"),
]
GPU_KINDS = [
    ("kernel", "ampere_sgemm_128x64_nn"),
    ("kernel", "flash_fwd_kernel"),
    ("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)"),
    ("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)"),
    ("gpu_memset", "Memset (Device)"),
]
_SPAN = st.tuples(st.integers(0, 3000), st.integers(0, 900))  # start, length (us)
_HOST = st.lists(st.tuples(st.sampled_from(range(len(HOST_KINDS))), st.sampled_from([1, 2]), _SPAN), max_size=30)
_GPU = st.lists(st.tuples(st.sampled_from(range(len(GPU_KINDS))), st.sampled_from([7, 8]), _SPAN), max_size=12)
_OVERHEAD = st.lists(_SPAN, max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=_HOST, gpu=_GPU, overhead=_OVERHEAD, link=st.lists(st.integers(0, 40), max_size=12))
def test_any_trace_answers_and_its_figures_add_up(tmp_path, host, gpu, overhead, link):
    """Random traces of two host threads, two streams and the profiler's own events, with the shapes the rules read
    (steps, forwards, frames, launches a kernel joins by correlation or not, syncs, copies, collectives, graph
    launches, events that outlive their parents): every one answers, and its figures add up as on the real ones."""
    events = [
        {"ph": "X", "cat": HOST_KINDS[k][0], "name": HOST_KINDS[k][1], "pid": 1, "tid": tid, "ts": a, "dur": n,
         "args": {"correlation": i + 1}}
        for i, (k, tid, (a, n)) in enumerate(host)
    ]  # fmt: skip
    events += [
        {"ph": "X", "cat": GPU_KINDS[k][0], "name": GPU_KINDS[k][1], "pid": 0, "tid": s, "ts": a, "dur": n,
         "args": {"stream": s, "correlation": link[j] if j < len(link) else -1, "bytes": 4096}}
        for j, (k, s, (a, n)) in enumerate(gpu)
    ]  # fmt: skip
    events += [
        {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0, "ts": a, "dur": n}
        for a, n in overhead
    ]
    path = tmp_path / "any.json"
    path.write_text(json.dumps({"traceEvents": events}))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["analyze", str(path), "--json"])
    if code:
        assert code == 2 and err.getvalue().startswith("probe: error:"), err.getvalue()[-500:]
        return
    problems = [p for s in json.loads(out.getvalue())["steps"] for p in _problems(s)]
    assert not problems, "; ".join(problems[:5])
